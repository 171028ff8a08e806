"""The openai backend against a small HTTP stub (http.server in a thread): retries with back-off on 429 and 5xx,
no retry on other 4xx, bounded concurrency, input order, usage or its estimate, and the key never shown."""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipelines.llm import GenerationSettings, LLMConfig, LLMError
from pipelines.llm import openai_backend
from pipelines.llm.openai_backend import OpenAILLM
from pipelines.llm.serve import free_port

KEY_ENV, KEY = "MNEMOS_TEST_LLM_KEY", "sk-test-very-secret-0123456789"
S = GenerationSettings(max_new_tokens=8)


class Stub:
    """A chat-completions endpoint whose answers are scripted: ``script`` is a list of HTTP statuses taken one
    per request (200 once it is empty); a 200 answers the last user message reversed."""

    def __init__(self, script=(), delay=0.0, usage=True, echo_key=False):
        self.script, self.delay, self.usage, self.echo_key = list(script), delay, usage, echo_key
        self.requests, self.in_flight, self.max_in_flight = [], 0, 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.requests.append({"body": body, "auth": self.headers.get("Authorization")})
                    status = stub.script.pop(0) if stub.script else 200
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                time.sleep(stub.delay * random.random())
                with stub.lock:
                    stub.in_flight -= 1
                if status != 200:
                    message = f"Incorrect API key provided: {self.headers.get('Authorization')}" if stub.echo_key \
                        else f"scripted {status}"
                    payload = json.dumps({"error": {"message": message, "type": "x", "code": status}}).encode()
                    self.send_response(status)
                    if status == 429:
                        self.send_header("Retry-After", "0")
                else:
                    text = body["messages"][-1]["content"][::-1]
                    answer = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": text}}]}
                    if stub.usage:
                        answer["usage"] = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
                    payload = json.dumps(answer).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_factory():
    made = []

    def make(**kw):
        made.append(Stub(**kw))
        return made[-1]

    yield make
    for stub in made:
        stub.close()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(openai_backend, "BACKOFF_BASE_S", 0.01)
    monkeypatch.setenv(KEY_ENV, KEY)


def backend(url, **kw):
    return OpenAILLM(LLMConfig(backend="openai", model="stub-model", base_url=url, api_key_env=KEY_ENV, **kw))


def convs(*texts):
    return [[{"role": "user", "content": t}] for t in texts]


def test_429_and_5xx_are_retried_then_the_answer_arrives(stub_factory, caplog):
    stub = stub_factory(script=[429, 500, 503])
    c = backend(stub.url, max_retries=3).generate(convs("abc"), S)[0]
    assert c.text == "cba" and (c.prompt_tokens, c.completion_tokens, c.finish_reason) == (11, 3, "stop")
    assert len(stub.requests) == 4 and stub.requests[0]["auth"] == f"Bearer {KEY}"   # the key is sent...
    body = stub.requests[-1]["body"]
    assert (body["model"], body["max_tokens"], body["temperature"], body["seed"]) == ("stub-model", 8, 0.0, 2022)
    assert "retry 3 of 3" in caplog.text and KEY not in caplog.text                   # ...never logged


def test_after_its_retries_the_error_names_the_url_and_model(stub_factory):
    stub = stub_factory(script=[500] * 10)
    with pytest.raises(LLMError, match=rf"cannot reach the OpenAI-compatible server at {stub.url} \(model "
                                       r"stub-model\) after 3 tries"):
        backend(stub.url, max_retries=2).generate(convs("a"), S)
    assert len(stub.requests) == 3


def test_an_unreachable_server_is_an_error_naming_its_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMError, match=rf"cannot reach the OpenAI-compatible server at {url}.*APIConnectionError"):
        backend(url, max_retries=1).generate(convs("a"), S)


def test_a_refused_key_fails_at_once_naming_the_variable_never_the_key(stub_factory):
    stub = stub_factory(script=[401], echo_key=True)
    llm = backend(stub.url, max_retries=5)
    with pytest.raises(LLMError, match=rf"HTTP 401.*environment variable {KEY_ENV}") as err:
        llm.generate(convs("a"), S)
    assert len(stub.requests) == 1 and f"${KEY_ENV}" in str(err.value)            # the echoed key was replaced
    for shown in (str(err.value), repr(llm), json.dumps(llm.identity()), llm.label):
        assert KEY not in shown
    assert KEY_ENV in repr(llm)


def test_concurrency_is_bounded_and_answers_keep_input_order(stub_factory):
    stub = stub_factory(delay=0.05)
    texts = [f"question {i}" for i in range(24)]
    arrived = []
    out = backend(stub.url, concurrency=4).generate(convs(*texts), S, on_result=lambda i, c: arrived.append(i))
    assert [c.text for c in out] == [t[::-1] for t in texts]
    assert stub.max_in_flight == 4 and sorted(arrived) == list(range(24))


def test_missing_usage_is_estimated_and_stop_strings_are_cut_here_too(stub_factory):
    stub = stub_factory(usage=False)
    c = backend(stub.url).generate(convs("xx, world"), GenerationSettings(max_new_tokens=8, stop=(",",)))[0]
    assert c.text == "dlrow " and c.finish_reason == "stop"                        # "dlrow ,xx" cut at ","
    assert c.extra == {"estimated_tokens": True} and c.prompt_tokens == 2
    assert stub.requests[0]["body"]["stop"] == [","]


def test_the_key_is_in_no_cached_file_and_no_config_param(stub_factory, tmp_path):
    from pipelines.llm import build_llm

    stub = stub_factory()
    cfg = LLMConfig(backend="openai", model="stub-model", base_url=stub.url, api_key_env=KEY_ENV)
    llm = build_llm(cfg, tmp_path)
    assert llm.generate(convs("abc"), S)[0].text == "cba" and stub.requests[0]["auth"] == f"Bearer {KEY}"
    stored = [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(stored) == 1 and KEY not in stored[0]
    assert KEY not in json.dumps(cfg.as_params()) and cfg.as_params()["api_key_env"] == KEY_ENV
