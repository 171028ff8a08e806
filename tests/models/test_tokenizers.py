"""Byte-level BPE trained here: deterministic, lossless, with the project's special tokens."""

from __future__ import annotations

import pytest

from pipelines.errors import ConfigError, DataError
from pipelines.models.tokenizers import load_tokenizer, train_bpe_tokenizer

TEXTS = [
    "I adopted a dog named Rex last spring.",
    "Rex loves the beach; we go there every Sunday!",
    "My sister moved to Lyon and works at a café – she says it's lovely.",
    "東京 was fun, but I missed Rex the whole week.",
] * 10


def test_training_is_deterministic(tmp_path):
    train_bpe_tokenizer(TEXTS, 320, tmp_path / "a")
    train_bpe_tokenizer(TEXTS, 320, tmp_path / "b")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("text", [
    "Rex loves the beach; we go there every Sunday!",
    "  leading spaces, tabs\tand\nnewlines  ",
    "unseen words: quixotic zephyr 🐕 ñandú 東京",
    "",
])
def test_round_trip(tmp_path, text):
    tok = train_bpe_tokenizer(TEXTS, 320)
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert all(0 <= i < len(tok) for i in ids)


def test_specials_vocabulary_and_merges(tmp_path):
    tok = train_bpe_tokenizer(TEXTS, 320, tmp_path / "tok", special_tokens=["[MEMORY]", "[LINK]"])
    assert len(tok) == 320
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<|endoftext|>", "<|pad|>", "[MEMORY]", "[LINK]"]
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|endoftext|>", "<|endoftext|>", "<|pad|>")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 0, 1)
    ids = tok("[MEMORY] Rex [LINK]")["input_ids"]
    assert ids[0] == 2 and ids[-1] == 3                       # specials are never split
    assert len(tok("Rex loves the beach")["input_ids"]) < len("Rex loves the beach".encode())  # merges learnt
    batch = tok(["Rex", "Rex loves the beach"], padding=True)
    assert batch["input_ids"][0][-1] == 1 and batch["attention_mask"][0][-1] == 0


def test_saved_tokenizer_loads_back_identically(tmp_path):
    tok = train_bpe_tokenizer(TEXTS, 300, tmp_path / "tok", special_tokens=["[NOW]"])
    again = load_tokenizer(tmp_path / "tok")
    sample = "[NOW] my sister moved to Lyon 東京"
    assert again(sample)["input_ids"] == tok(sample)["input_ids"]
    assert again.pad_token_id == tok.pad_token_id and len(again) == len(tok)


def test_shipped_minilm_tokenizer():
    tok = load_tokenizer("minilm")
    assert len(tok) == 30522 and tok.cls_token == "[CLS]"
    assert tok.convert_ids_to_tokens(tok("Rex loves the beach")["input_ids"]) == [
        "[CLS]", "rex", "loves", "the", "beach", "[SEP]"]


def test_bad_inputs():
    with pytest.raises(ConfigError, match="vocab_size 200 is too small"):
        train_bpe_tokenizer(TEXTS, 200)
    with pytest.raises(DataError, match=r"file dialogues.jsonl, record 1, field 'text'"):
        train_bpe_tokenizer(["fine", None, "x"], 300, source="dialogues.jsonl")
    with pytest.raises(DataError, match="rule 'non_empty_training_text'"):
        train_bpe_tokenizer([], 300, source="empty.txt")
    with pytest.raises(ConfigError, match="cannot load tokenizer"):
        load_tokenizer("/nonexistent/tokenizer-dir")
