"""The batching server (pipelines/llm/batch_server.py) over the tiny random Llama: requests waiting together are
answered in one batch with the answers one-at-a-time calls give, a failing request fails alone, and the openai
backend talks to it as to any OpenAI-compatible server (its window refusals and vLLM's /tokenize included);
`serve-llm` starts it."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest

from pipelines.llm import ContextWindowExceeded, GenerationSettings, LLMConfig, LLMError
from pipelines.llm.base import LLM, Completion
from pipelines.llm.batch_server import Batcher, BatchingServer, ClientGone, RequestError, served_name
from pipelines.llm.local import LocalLLM
from pipelines.llm.openai_backend import OpenAILLM
from pipelines.llm.serve import BatchingServerProcess
from pipelines.memory.writers import LLMChat, PromptTooLong

S = GenerationSettings(max_new_tokens=8)
TEXTS = ["Where did Alice move?", "Bob likes tea", "the quick brown fox", "Alice moved to Paris in May"]


def conv(text):
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def local(tiny_llama, tmp_path_factory):
    return LocalLLM(LLMConfig(model=str(tiny_llama), device="cpu"), tmp_path_factory.mktemp("models"))


class Recording(LLM):
    """An LLM that records each batch it is asked and fails any batch holding a "boom"."""

    backend = "recording"

    def __init__(self):
        self.asked: list[list[str]] = []

    @property
    def model(self):
        return "recording"

    def identity(self):
        return {"backend": self.backend}

    def generate(self, batch, settings, progress=None):
        texts = [m[-1]["content"] for m in batch]
        self.asked.append(texts)
        if "boom" in texts:
            raise RuntimeError("the model failed on boom")
        return [Completion(text=t.upper(), prompt_tokens=1, completion_tokens=1) for t in texts]


def test_requests_waiting_together_are_one_batch_with_the_one_at_a_time_answers(local):
    batcher = Batcher(local, batch_size=8, gather_s=0)
    futures = [batcher.submit(conv(t), S) for t in TEXTS]   # all waiting before the worker starts
    batcher.start()
    try:
        answers = [f.result(timeout=60) for f in futures]
    finally:
        batcher.close()
    assert batcher.batches == [4]
    alone = [local.generate([conv(t)], S)[0] for t in TEXTS]
    assert [a.text for a in answers] == [a.text for a in alone]
    assert [a.prompt_tokens for a in answers] == [a.prompt_tokens for a in alone]


def test_batches_hold_one_setting_and_at_most_batch_size_requests_oldest_first():
    llm = Recording()
    batcher = Batcher(llm, batch_size=2, gather_s=0)
    other = GenerationSettings(max_new_tokens=3)
    futures = [batcher.submit(conv(t), s) for t, s in [("a", S), ("b", other), ("c", S), ("d", S)]]
    batcher.start()
    try:
        assert [f.result(timeout=10).text for f in futures] == ["A", "B", "C", "D"]
    finally:
        batcher.close()
    assert llm.asked == [["a", "c"], ["b"], ["d"]]


def test_a_full_batch_takes_the_oldest_and_the_requests_closest_to_it_in_length():
    llm = Recording()
    batcher = Batcher(llm, batch_size=2, gather_s=0)
    texts = ["short", "a much longer request", "shorts", "another long request!"]
    futures = [batcher.submit(conv(t), S) for t in texts]
    batcher.start()
    try:
        assert [f.result(timeout=10).text for f in futures] == [t.upper() for t in texts]
    finally:
        batcher.close()
    assert llm.asked == [["short", "shorts"], ["a much longer request", "another long request!"]]


def test_a_batch_pads_no_prompt_beyond_max_pad_ratio_times_its_shortest(caplog):
    """A long request waiting with short ones goes alone (padding the short ones to its length would multiply their
    work); the short ones make the next batch, up to batch_size, the oldest first."""
    llm = Recording()
    batcher = Batcher(llm, batch_size=3, gather_s=0, max_pad_ratio=2.0)
    texts = ["a" * 2000, "b" * 600, "c" * 700, "d" * 1100, "e" * 800, "g" * 900, "h" * 3, "i" * 500]
    futures = [batcher.submit(conv(t), S) for t in texts]
    with caplog.at_level("INFO", logger="mnemos"):
        batcher.start()
        try:
            assert [f.result(timeout=10).text for f in futures] == [t.upper() for t in texts]
        finally:
            batcher.close()
    # 2,000 takes 1,100 (within 2x), not 800 (2.5x) nor shorter; then 600 (the oldest left) with the closest, 700
    # and 500 (under PAD_FLOOR: counted as 512); then 800 with 900 and 3 (counted as 512). Each in arrival order.
    assert [[len(t) for t in batch] for batch in llm.asked] == [[2000, 1100], [600, 700, 500], [800, 900, 3]]
    assert "serve-llm: a batch of 3 (prompts of 500 to 700 characters) in " in caplog.text


def test_max_pad_ratio_below_one_is_refused():
    with pytest.raises(ValueError, match="max_pad_ratio must be at least 1"):
        Batcher(Recording(), max_pad_ratio=0.5)


def test_a_failing_request_fails_alone_and_the_rest_of_its_batch_is_answered():
    llm = Recording()
    batcher = Batcher(llm, gather_s=0)
    futures = [batcher.submit(conv(t), S) for t in ["x", "boom", "y"]]
    batcher.start()
    try:
        assert futures[0].result(timeout=10).text == "X" and futures[2].result(timeout=10).text == "Y"
        with pytest.raises(RuntimeError, match="failed on boom"):
            futures[1].result(timeout=10)
    finally:
        batcher.close()
    assert llm.asked == [["x", "boom", "y"], ["x"], ["boom"], ["y"]]


def test_a_request_whose_client_went_away_is_dropped_not_generated():
    llm = Recording()
    batcher = Batcher(llm, gather_s=0)
    futures = [batcher.submit(conv(t), S, alive=lambda gone=(t == "gone"): not gone) for t in ["x", "gone", "y"]]
    batcher.start()
    try:
        assert [futures[0].result(timeout=10).text, futures[2].result(timeout=10).text] == ["X", "Y"]
        with pytest.raises(ClientGone):
            futures[1].result(timeout=10)
    finally:
        batcher.close()
    assert llm.asked == [["x", "y"]]


class Gated(Recording):
    """Recording, but each batch waits for ``gate`` (the worker is busy while requests queue up)."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()

    def generate(self, batch, settings, progress=None):
        self.gate.wait(10)
        return super().generate(batch, settings, progress)


def test_the_server_drops_the_request_of_a_client_that_closed_its_connection():
    llm = Gated()
    with BatchingServer(llm, "rec", port=0, batch_size=1, gather_s=0) as server:
        first = threading.Thread(target=post, args=(f"{server.base_url}/chat/completions",
                                                    {"model": "rec", "messages": conv("first")}))
        first.start()                                    # the worker takes it and waits at the gate
        wait_until(lambda: llm.asked == [] and not server.batcher._queue and server.batcher.batches == [1])
        body = json.dumps({"model": "rec", "messages": conv("killed")}).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as killed:   # a shard killed while it waits
            killed.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            wait_until(lambda: len(server.batcher._queue) == 1)
        answers = []
        later = threading.Thread(target=lambda: answers.append(post(f"{server.base_url}/chat/completions",
                                                                    {"model": "rec", "messages": conv("later")})))
        later.start()
        wait_until(lambda: len(server.batcher._queue) == 2)
        llm.gate.set()
        first.join(10)
        later.join(10)
        assert answers[0]["choices"][0]["message"]["content"] == "LATER"
    assert llm.asked == [["first"], ["later"]]           # "killed" was never generated


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_first_batch_waits_the_gather_time_for_requests_arriving_together():
    llm = Recording()
    batcher = Batcher(llm, gather_s=0.5).start()
    try:
        futures = []
        for t in "abc":
            futures.append(batcher.submit(conv(t), S))
            time.sleep(0.05)
        assert [f.result(timeout=10).text for f in futures] == ["A", "B", "C"]
    finally:
        batcher.close()
    assert batcher.batches == [3]


def test_a_batch_waits_for_the_clients_the_last_one_answered_and_no_longer():
    """Three clients answered together ask again one after another (each after its own work on the answer): the next
    batch waits until all three wait, not only the first to come back; a batch of one client waits for no one."""
    llm = Recording()
    batcher = Batcher(llm, batch_size=3, gather_s=30)
    first = [batcher.submit(conv(t), S) for t in "abc"]
    second: dict[str, str] = {}

    def client(i, future):
        text = future.result(timeout=10).text
        time.sleep(0.2 * (i + 1))             # the client's own work on its answer
        second[text] = batcher.submit(conv(text * 2), S).result(timeout=10).text

    threads = [threading.Thread(target=client, args=(i, f)) for i, f in enumerate(first)]
    for t in threads:
        t.start()
    batcher.start()
    try:
        for t in threads:
            t.join(timeout=20)
        assert second == {"A": "AA", "B": "BB", "C": "CC"}
        assert batcher.batches == [3, 3]
        batcher.gather_s = 0.5                # the other two clients are done: "d" waits for them 0.5 s, then goes
        assert batcher.submit(conv("d"), S).result(timeout=10).text == "D"
        batcher.gather_s = 30                 # one client asking one request at a time waits for no one
        assert [batcher.submit(conv(t), S).result(timeout=10).text for t in "ef"] == ["E", "F"]
    finally:
        batcher.close()
    assert batcher.batches == [3, 3, 1, 1, 1]


def test_served_name_names_the_precision_unless_float32():
    assert served_name("smollm2-135m-instruct", "float32") == "smollm2-135m-instruct"
    assert served_name("smollm2-135m-instruct", "bfloat16") == "smollm2-135m-instruct@bfloat16"
    assert served_name("/models/my-model/", "float32") == "my-model"
    assert served_name("/models/x.Q4_1.gguf", "float16") == "x.Q4_1@float16"


@pytest.fixture(scope="module")
def server(local):
    with BatchingServer(local, "tiny", port=0, batch_size=4, gather_s=0.2) as s:
        yield s


def client(server, **kw):
    return OpenAILLM(LLMConfig(backend="openai", model="tiny", base_url=server.base_url, **kw))


def test_concurrent_clients_get_the_local_answers_in_order_through_batches(server, local):
    before = len(server.batcher.batches)
    out = client(server, concurrency=4).generate([conv(t) for t in TEXTS * 2], S)
    assert [c.text for c in out] == [c.text for c in local.generate([conv(t) for t in TEXTS * 2], S)]
    assert all(c.completion_tokens == 8 and c.finish_reason == "length" for c in out)
    assert max(server.batcher.batches[before:]) > 1          # some requests were answered together
    with urllib.request.urlopen(f"{server.base_url}/models") as r:
        assert json.load(r)["data"] == [{"id": "tiny", "object": "model", "owned_by": "mnemos",
                                         "max_model_len": 1024}]


def test_refusals_are_openai_errors_the_backend_reads(server):
    with pytest.raises(LLMError, match="refused the request for model other: HTTP 404.*serves 'tiny'"):
        OpenAILLM(LLMConfig(backend="openai", model="other", base_url=server.base_url)).generate([conv("a")], S)
    with pytest.raises(ContextWindowExceeded, match="maximum context length is 1024 tokens"):
        client(server).generate([conv("fox " * 1100)], S)
    request = urllib.request.Request(f"{server.base_url}/chat/completions", method="POST",
                                     data=json.dumps({"model": "tiny", "messages": [conv("a")[0]],
                                                      "stream": True}).encode())
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request)
    assert err.value.code == 400 and "stream is not supported" in err.value.read().decode()


def post(url, body):
    request = urllib.request.Request(url, method="POST", data=json.dumps(body).encode())
    with urllib.request.urlopen(request) as r:
        return json.load(r)


def test_tokenize_counts_as_the_window_check_does_and_the_backend_asks_it(server, local):
    root = server.base_url.removesuffix("/v1")
    answer = post(f"{root}/tokenize", {"model": "tiny", "messages": conv("Alice moved to Paris")})
    assert answer == {"max_model_len": 1024, "tokens": local.encode(conv("Alice moved to Paris")),
                      "count": local.count_prompt_tokens(conv("Alice moved to Paris"))}
    assert post(f"{root}/tokenize", {"prompt": "Bob likes tea"}) == {"max_model_len": 1024,
                                                                     "count": local.count_tokens("Bob likes tea")}
    for body, code in (({"model": "other", "prompt": "a"}, 404), ({"model": "tiny"}, 400)):
        with pytest.raises(urllib.error.HTTPError) as err:
            post(f"{root}/tokenize", body)
        assert err.value.code == code
    backend = client(server)
    assert backend.tokenize_url == f"{root}/tokenize"
    for text in ("Alice" * 900, "\u0436" * 1200, "the quick brown fox " * 10):
        assert backend.count_prompt_tokens(conv(text)) == local.count_prompt_tokens(conv(text))


def test_a_products_writer_checks_the_window_on_the_servers_count(server):
    """4,500 characters of "Alice" are 903 tokens of the tiny tokenizer (estimated 1,125: over the window of 1024);
    1,200 of a letter outside its vocabulary are 2,403 (estimated 300)."""
    config = LLMConfig(backend="openai", model="tiny", base_url=server.base_url, max_new_tokens=8)
    chat = LLMChat(OpenAILLM(config), config, role="peer.llm")
    assert chat(conv("Alice" * 900)) == OpenAILLM(config).generate([conv("Alice" * 900)], S)[0].text.strip()
    with pytest.raises(PromptTooLong, match="window of 1024 tokens"):
        chat(conv("\u0436" * 1200))
    assert chat.refused_too_long == 1


class NoTokenize(BatchingServer):
    """A server without /tokenize (as transformers serve, or a vLLM behind a proxy that only passes /v1)."""

    def tokenize(self, body):
        raise RequestError(404, "no such path: /tokenize")


def test_without_tokenize_the_writer_estimates_and_counts_the_servers_refusal(local):
    """The writer's own check estimates 4 characters a token (300 here, under the window of 1024); the server counts
    the real tokens and refuses: counted as refused."""
    with NoTokenize(local, "tiny", port=0, batch_size=4, gather_s=0.05) as server:
        config = LLMConfig(backend="openai", model="tiny", base_url=server.base_url, max_new_tokens=8)
        backend = OpenAILLM(config)
        assert backend.count_prompt_tokens(conv("a" * 400)) == 100 + 8 and backend._tokenizes is False
        chat = LLMChat(backend, config, role="peer.llm")
        with pytest.raises(PromptTooLong, match="maximum context length"):
            chat(conv("\u0436" * 1200))
        assert chat.refused_too_long == 1
        assert chat(conv("Bob likes tea")) == OpenAILLM(config).generate([conv("Bob likes tea")], S)[0].text.strip()


def test_serve_llm_command_serves_a_model_folder(tiny_llama, tmp_path):
    log = tmp_path / "serve.log"
    with BatchingServerProcess(str(tiny_llama), name="tiny-served", device="cpu", batch_size=4,
                               llm_cache_dir=tmp_path, log=log) as process:
        out = OpenAILLM(LLMConfig(backend="openai", model="tiny-served", base_url=process.base_url)).generate(
            [conv("tea"), conv("fox")], S)
        assert [c.completion_tokens for c in out] == [8, 8]
    assert f"serving tiny-served (float32, cpu, batches of up to 4) at {process.base_url}" in log.read_text()


def test_a_serve_llm_that_cannot_load_its_model_is_an_error_naming_it(tmp_path):
    with pytest.raises(LLMError, match=r"serve-llm .*no-such-model exited \(code [1-9]\d*\) before answering"):
        BatchingServerProcess(str(tmp_path / "no-such-model"), device="cpu", llm_cache_dir=tmp_path).start()
