import pytest

from pipelines.errors import ConfigError
from pipelines.models.embeddings import default_model_path
from pipelines.memory.tokens import TokenCounter


@pytest.mark.parametrize("text, tokens", [
    ("", []),
    ("Hi, Ana!", ["Hi", ",", "Ana", "!"]),
    ("it's 5pm.", ["it", "'", "s", "5pm", "."]),
    ("[2023-01-05] Ana: hi", ["[", "2023", "-", "01", "-", "05", "]", "Ana", ":", "hi"]),
    ("a\nb   c", ["a", "b", "c"]),
])
def test_regex_tokens(text, tokens):
    counter = TokenCounter()
    assert counter.tokens(text) == tokens
    assert counter.count(text) == len(tokens)
    assert counter.name == "regex"


def test_joined_lines_count_as_the_sum_of_lines():
    counter = TokenCounter()
    lines = ["Ana: I booked a trip to Oslo.", "Ben: The cello recital went well."]
    assert counter.count("\n".join(lines)) == 9 + 8


def test_hf_tokenizer_from_a_local_directory():
    counter = TokenCounter.from_config(default_model_path())  # MiniLM's BERT WordPiece, lower-cased
    assert counter.tokens("Hello, world!") == ["hello", ",", "world", "!"]
    assert counter.tokens("Biscuit the greyhound") == ["bis", "##cuit", "the", "greyhound"]
    assert counter.count("Biscuit the greyhound") == 4
    assert counter.count("") == 0


def test_tokenizer_that_is_not_a_local_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not a local directory"):
        TokenCounter.from_config(tmp_path / "nowhere")
