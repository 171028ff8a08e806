"""The openai backend against a real OpenAI-compatible server: ``transformers serve`` started here on a free
loopback port, serving the tiny random Llama folder (tests/llm/_tiny.py). The module starts two servers side by
side (their start-up is mostly imports): one for the tests, one that a test stops mid-run."""

from __future__ import annotations

import pytest

from pipelines.llm import CachedLLM, GenerationSettings, LLMConfig, LLMError, ResponseCache
from pipelines.llm import openai_backend
from pipelines.llm.local import LocalLLM
from pipelines.llm.openai_backend import OpenAILLM
from pipelines.llm.serve import TransformersServer

S = GenerationSettings(max_new_tokens=10)
TEXTS = ["Where did Alice move?", "Bob likes tea", "the quick brown fox", "tea", "Alice moved to Paris in May",
         "fox", "Bob likes cakes", "lazy dog"]


def convs(texts=TEXTS):
    return [[{"role": "user", "content": t}] for t in texts]


@pytest.fixture(scope="module")
def servers(tiny_llama, tmp_path_factory):
    logs = tmp_path_factory.mktemp("serve")
    started = [TransformersServer(tiny_llama, log=logs / f"{name}.log").start(wait=False)
               for name in ("main", "doomed")]
    try:
        yield [s.wait() for s in started]
    finally:
        for s in started:
            s.stop()


@pytest.fixture
def server(servers):
    return servers[0]


def client(server: TransformersServer, **kw) -> OpenAILLM:
    return OpenAILLM(LLMConfig(backend="openai", model=server.model, base_url=server.base_url, **kw))


def test_concurrent_answers_arrive_in_order_and_equal_the_local_greedy_ones(server, tiny_llama, tmp_path):
    out = client(server, concurrency=4).generate(convs(), S)
    local = LocalLLM(LLMConfig(model=str(tiny_llama), device="cpu"), tmp_path).generate(convs(), S)
    assert [c.text for c in out] == [c.text for c in local]
    assert [c.prompt_tokens for c in out] == [c.prompt_tokens for c in local]
    assert all(c.completion_tokens == 10 and c.finish_reason == "length" for c in out)


def test_a_wrong_model_id_fails_at_once_naming_the_server(server):
    llm = OpenAILLM(LLMConfig(backend="openai", model="not-served", base_url=server.base_url))
    with pytest.raises(LLMError, match=rf"server at {server.base_url} refused the request for model not-served: "
                                       "HTTP 400"):
        llm.generate(convs()[:1], S)


def test_a_server_stopped_mid_run_keeps_the_answers_received_and_a_rerun_asks_only_the_rest(
        servers, tmp_path, monkeypatch):
    """The batch's server is killed after two answers: an LLMError names its URL, the two answers stay in the
    cache; the rerun, against a server of the same model (the module's), asks only for the six others."""
    monkeypatch.setattr(openai_backend, "BACKOFF_BASE_S", 0.01)
    server, doomed = servers
    cache = ResponseCache(tmp_path / "responses")
    llm = CachedLLM(client(doomed, concurrency=1, max_retries=1), cache)
    received = []

    def progress(n):
        received.append(n)
        if len(received) == 2:
            doomed.stop(kill=True)

    with pytest.raises(LLMError, match=rf"cannot reach the OpenAI-compatible server at {doomed.base_url} "
                                       rf"\(model {doomed.model}\)"):
        llm.generate(convs(), S, progress=progress)
    assert llm.stats()["misses"] == 2 and len(cache) == 2
    rerun = CachedLLM(client(server, concurrency=4), cache)
    answers = rerun.generate(convs(), S)
    assert (rerun.stats()["hits"], rerun.stats()["misses"]) == (2, 6) and len(cache) == 8
    assert sum(c.cached for c in answers) == 2
    assert [c.text for c in answers] == [c.text for c in client(server).generate(convs(), S)]
