"""The response cache: content addressing, hits and misses, stats, and a killed run that resumes."""

from __future__ import annotations

import json

import pytest

from pipelines.llm import CachedLLM, Completion, GenerationSettings, LLMConfig, LLMError, ResponseCache, build_llm
from pipelines.llm.base import LLM
from pipelines.llm.cache import request_key
from pipelines.llm.local import LocalLLM


class Echo(LLM):
    """Answers each conversation with its last message upper-cased; records what it was asked; with ``fail_after``
    it raises after that many answers (as a server that dies mid-run), having handed them over one by one."""

    backend = "fake"

    def __init__(self, name="echo", fail_after=None):
        self.name, self.fail_after, self.asked = name, fail_after, []

    @property
    def model(self):
        return self.name

    def identity(self):
        return {"backend": "fake", "model": self.name}

    def generate(self, batch, settings, progress=None, on_result=None):
        out = []
        for i, messages in enumerate(batch):
            if self.fail_after is not None and len(out) == self.fail_after:
                raise LLMError("the fake server died")
            self.asked.append(messages[-1]["content"])
            text = messages[-1]["content"].upper()
            out.append(Completion(text=text, prompt_tokens=len(text), completion_tokens=2, latency_s=0.5))
            if on_result is not None:
                on_result(i, out[-1])
            if progress is not None:
                progress(1)
        return out


class EchoWithoutHook(Echo):
    def generate(self, batch, settings, progress=None):
        return super().generate(batch, settings, progress)


def convs(*texts):
    return [[{"role": "user", "content": t}] for t in texts]


S = GenerationSettings(max_new_tokens=8)


def test_a_rerun_is_served_from_the_cache_with_stats(tmp_path):
    llm = CachedLLM(Echo(), ResponseCache(tmp_path), price_prompt_per_1m=2.0, price_completion_per_1m=10.0)
    first = llm.generate(convs("a", "bb", "a"), S)                  # "a" twice: asked once
    assert [c.text for c in first] == ["A", "BB", "A"] and [c.cached for c in first] == [False, False, True]
    assert llm.llm.asked == ["a", "bb"]
    again = CachedLLM(Echo(), ResponseCache(tmp_path))
    second = again.generate(convs("a", "bb", "c"), S)
    assert again.llm.asked == ["c"] and [c.cached for c in second] == [True, True, False]
    assert second[0] == Completion(text="A", prompt_tokens=1, completion_tokens=2, cached=True, latency_s=0.5)
    stats = llm.stats()
    assert {k: stats[k] for k in ("calls", "hits", "misses", "prompt_tokens", "completion_tokens")} == {
        "calls": 3, "hits": 1, "misses": 2, "prompt_tokens": 3, "completion_tokens": 4}
    assert stats["cost_usd"] == pytest.approx((3 * 2.0 + 4 * 10.0) / 1e6) and stats["seconds"] >= 0
    assert again.stats()["cost_usd"] is None and (again.stats()["hits"], again.stats()["misses"]) == (2, 1)
    # every call's tokens, hits included: a is 1 + 2, bb 2 + 2, c 1 + 2, as counted when each was asked
    assert (stats["request_prompt_tokens"], stats["request_completion_tokens"]) == (4, 6)
    assert (again.stats()["request_prompt_tokens"], again.stats()["request_completion_tokens"]) == (4, 6)
    assert (again.stats()["prompt_tokens"], again.stats()["completion_tokens"]) == (1, 2)   # spent: c alone


@pytest.mark.parametrize("change", ["settings", "model", "messages", "role"])
def test_the_key_changes_with_settings_model_and_messages(change):
    base = dict(identity={"backend": "fake", "model": "m"}, messages=[{"role": "user", "content": "hi"}], settings=S)
    other = dict(base)
    if change == "settings":
        other["settings"] = GenerationSettings(max_new_tokens=8, stop=("\n",))
    elif change == "model":
        other["identity"] = {"backend": "fake", "model": "m2"}
    elif change == "messages":
        other["messages"] = [{"role": "user", "content": "hi!"}]
    else:
        other["messages"] = [{"role": "system", "content": "hi"}]
    assert request_key(**base) == request_key(**dict(base))
    assert request_key(**base) != request_key(**other)


def test_each_answer_is_one_readable_file_named_by_its_key(tmp_path):
    llm = CachedLLM(Echo(), ResponseCache(tmp_path))
    llm.generate(convs("hello"), S)
    key = request_key(llm.identity(), convs("hello")[0], S)
    stored = json.loads((tmp_path / key[:2] / f"{key}.json").read_text())
    assert stored["messages"] == convs("hello")[0] and stored["completion"]["text"] == "HELLO"
    assert stored["identity"] == {"backend": "fake", "model": "echo"} and stored["settings"]["max_new_tokens"] == 8
    assert len(llm.cache) == 1


@pytest.mark.parametrize("backend", [Echo, EchoWithoutHook])
def test_a_killed_run_keeps_what_arrived_and_the_rerun_asks_only_the_rest(tmp_path, backend):
    dying = CachedLLM(backend(fail_after=2), ResponseCache(tmp_path))
    with pytest.raises(LLMError, match="died"):
        dying.generate(convs("a", "b", "c", "d"), S)
    kept = 2 if backend is Echo else 0               # a backend without on_result hands over nothing before the end
    assert dying.stats()["misses"] == kept and len(dying.cache) == kept
    rerun = CachedLLM(Echo(), ResponseCache(tmp_path))
    assert [c.text for c in rerun.generate(convs("a", "b", "c", "d"), S)] == ["A", "B", "C", "D"]
    assert rerun.llm.asked == ["a", "b", "c", "d"][kept:]


def test_an_unreadable_entry_is_asked_again(tmp_path):
    llm = CachedLLM(Echo(), ResponseCache(tmp_path))
    llm.generate(convs("a"), S)
    key = request_key(llm.identity(), convs("a")[0], S)
    llm.cache.path(key).write_text("{not json")
    rerun = CachedLLM(Echo(), ResponseCache(tmp_path))
    assert rerun.generate(convs("a"), S)[0].text == "A" and rerun.llm.asked == ["a"]


def test_a_run_answered_from_the_cache_never_loads_the_local_model(tiny_llama, tmp_path, monkeypatch):
    cfg = {"model": str(tiny_llama), "device": "cpu", "batch_size": 2}
    first = build_llm(cfg, tmp_path)
    answers = first.generate(convs("Alice", "Bob", "tea"), S)
    assert first.stats()["misses"] == 3
    monkeypatch.setattr(LocalLLM, "loaded_model", lambda self: pytest.fail("the model was loaded"))
    second = build_llm(LLMConfig(**cfg), tmp_path)
    assert [c.text for c in second.generate(convs("Alice", "Bob", "tea"), S)] == [c.text for c in answers]
    assert second.stats()["hits"] == 3 and second.stats()["misses"] == 0
