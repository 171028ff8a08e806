"""``python -m pipelines serve-llm``: the local backend behind an OpenAI-compatible server that batches the requests
in flight, for clients in other processes that each ask one request at a time.

Who needs it: a memory product (pipelines/memory/peers) calls its language model one request at a time, each a
long prompt answered at length, so one benchmark process keeps a local model at batch 1. The episodes of a suite
are independent: run as shards in parallel processes (``benchmark --shards N --shard I``, or Dagster's
multiprocess executor over the ``benchmark_shard`` partitions), each product's requests arrive together at one
server, which answers them with one padded batch (:meth:`pipelines.llm.local.LocalLLM.generate`). Measured on 2
CPU cores with SmolLM2-135M-Instruct over 8 of LangMem's extraction requests (1.3k-2.5k prompt tokens, 435-512
generated; ``/work/notes`` of session 41): about 35 s a request one at a time, 17.5 s a request in one float32
batch (the same 8 texts as one at a time), 11.6 s in bfloat16; ``transformers serve --continuous-batching`` (paged
attention) took 28.5 s a request.

Batching (:class:`Batcher`): each request waits in a queue; one worker thread takes the oldest and the other waiting
requests with the same generation settings, those closest to the oldest in length first, up to ``batch_size`` of
them and only while the batch's longest prompt is at most ``max_pad_ratio`` times its shortest (a prompt under
:data:`PAD_FLOOR` characters counts as that long), and generates them together; the others, and requests that arrive
meanwhile, make the next batches. Every row of a batch is padded to its longest prompt: on 2 CPU cores, nine of
LangMem's requests of 755 to 1,236 tokens batched with one of Graphiti's of 6,801 took 445 s, and a LangMem request
of 862 tokens went in a batch of nine of Graphiti's of 6,971 to 7,650 (session 43's notes). Before it takes a batch,
the worker waits (``gather_s`` at most) until as many requests wait as its last batch held: the clients a batch
answered get their answers together and ask again a moment later, each after its own work on the answer. Taken at
once, the next batch would hold the one or two that came back first, and a request alone costs about three times its
share of a full batch: on 2 CPU cores a LangMem request of about 1,000 prompt tokens took 13 s alone, 4.3 s each in
a batch of 10 (session 44's notes). A client asking one request at a time waits for no one (its last batch held
one); the first batch waits for a full one. Each batch is one log line: its size, its prompts' lengths in
characters, its seconds. The oldest request always goes first: none starves. A padded row's logits differ from its
unpadded ones in the last float bits, and a greedy answer can follow them: identical on the requests above, but of
two LangMem requests generated alone in bfloat16, one differed from its answer in a batch (session 44); the response
cache keeps a rerun's answers the same. Sampled answers depend on their batch, as
:meth:`~pipelines.llm.local.LocalLLM.generate` says. When a batch fails, each of its requests is asked again alone,
so only the failing one gets the error. A request whose client closed its connection while it waited (a shard
killed, to be resumed later) is dropped when the worker takes it, never generated.

HTTP (the stdlib's ``ThreadingHTTPServer``: one thread per connection): ``GET /health``; ``GET /v1/models`` (the
served id, and ``max_model_len``, the model's window, as vLLM sends it); ``POST /v1/chat/completions`` with
``model`` (the served id: :func:`served_name`, which names the dtype when it is not float32, so the response cache
of a client never mixes two precisions), ``messages``, ``max_tokens`` (or ``max_completion_tokens``),
``temperature``, ``top_p``, ``stop``, ``seed``; not ``stream`` nor ``n`` > 1 (400). A prompt that does not fit the
window beside ``max_tokens`` is a 400 with code ``context_length_exceeded``, as OpenAI and vLLM answer it (the
openai backend raises :class:`~pipelines.llm.base.ContextWindowExceeded`: a product's writer counts it as refused).
The answer is OpenAI's chat completion with ``usage``. ``POST /tokenize`` (vLLM's, at the root) with ``messages``
(rendered as a chat request renders them: what the window check counts) or a ``prompt`` string answers ``count``,
``max_model_len`` and, for messages, the ``tokens``: the openai backend asks it for a product's window check, so a
prompt is refused on its real count, not on an estimate.

There is no response cache here: the clients keep theirs (the openai backend behind
:class:`~pipelines.llm.cache.CachedLLM`).
"""

from __future__ import annotations

import itertools
import json
import logging
import select
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from pipelines.errors import ConfigError
from pipelines.llm.base import LLM, Completion, GenerationSettings, LLMError, Messages, check_messages

log = logging.getLogger("mnemos")

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"   # OpenAI's error code (vLLM says "maximum context length")


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` with OpenAI's error body."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code


class ClientGone(Exception):
    """The client of a request closed its connection before the request was generated: it is dropped."""


@dataclass
class _Job:
    messages: Messages
    settings: GenerationSettings
    future: Future = field(default_factory=Future)
    alive: Callable[[], bool] | None = None   # whether the client still waits (its connection is open)


PAD_FLOOR = 512   # characters (about 128 tokens, a chat template's own included): padding a row to that costs little


def _size(job: _Job) -> int:
    """A request's length in characters: what pads a batch, without the tokenizer (used by the worker alone)."""
    return sum(len(m["content"]) for m in job.messages)


def _padded(job: _Job) -> int:
    """The length :attr:`Batcher.max_pad_ratio` compares: :func:`_size`, at least :data:`PAD_FLOOR`."""
    return max(PAD_FLOOR, _size(job))


class Batcher:
    """Requests from many threads answered in batches by one worker (see the module docstring)."""

    def __init__(self, llm: LLM, batch_size: int = 8, gather_s: float = 2.0,
                 check: Callable[[Messages, GenerationSettings], None] | None = None, max_pad_ratio: float = 2.0):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}.")
        if not max_pad_ratio >= 1.0:
            raise ConfigError(f"max_pad_ratio must be at least 1 (the longest prompt of a batch over its shortest), "
                              f"got {max_pad_ratio!r}.")
        self.llm, self.batch_size, self.gather_s = llm, batch_size, gather_s
        self.max_pad_ratio = max_pad_ratio
        self.check = check                    # refuses a request (raises) before it is generated, on the worker
        self.batches: list[int] = []          # the size of every batch generated, in order
        self._queue: list[_Job] = []
        self._expected = batch_size           # requests a batch waits for: the last batch's size (the first: full)
        self._cond = threading.Condition()
        self._closed = False
        self._worker: threading.Thread | None = None

    def start(self) -> "Batcher":
        self._worker = threading.Thread(target=self._loop, name="llm-batcher", daemon=True)
        self._worker.start()
        return self

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join()

    def submit(self, messages: Messages, settings: GenerationSettings,
               alive: Callable[[], bool] | None = None) -> Future:
        """The future answer to one conversation; ``alive()`` says whether its client still waits (a request whose
        client went away is dropped before it is generated, its future failing with :class:`ClientGone`)."""
        job = _Job(messages, settings, alive=alive)
        with self._cond:
            if self._closed:
                raise LLMError("the batching server is shutting down")
            self._queue.append(job)
            self._cond.notify_all()
        return job.future

    def _take(self) -> list[_Job] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = time.monotonic() + self.gather_s   # the last batch's clients ask again: wait for them
            while (len(self._queue) < self._expected and not self._closed
                   and (left := deadline - time.monotonic()) > 0):
                self._cond.wait(left)
            self._queue = [j for j in self._queue if self._waited_for(j)]
            if not self._queue:
                return []
            first = self._queue[0]
            jobs = self._close_in_length(first, [j for j in self._queue[1:] if j.settings == first.settings])
            taken = set(map(id, jobs))
            self._queue = [j for j in self._queue if id(j) not in taken]
            self._expected = len(jobs)
            return jobs

    def _close_in_length(self, first: _Job, others: list[_Job]) -> list[_Job]:
        """The oldest request and those closest to it in length, up to ``batch_size``, while the longest prompt is
        at most ``max_pad_ratio`` times the shortest (every row is padded to the longest); in the order they came."""
        jobs, low, high = [first], _padded(first), _padded(first)
        for job in sorted(others, key=lambda j: abs(_size(j) - _size(first))):
            if len(jobs) == self.batch_size:
                break
            size = _padded(job)
            if max(high, size) <= self.max_pad_ratio * min(low, size):
                jobs.append(job)
                low, high = min(low, size), max(high, size)
        chosen = set(map(id, jobs))
        return [first, *(j for j in others if id(j) in chosen)]   # in the order they came

    @staticmethod
    def _waited_for(job: _Job) -> bool:
        """False (and the job's future failed) when its client went away: a killed shard's requests are not
        generated for nobody."""
        if job.alive is None or job.alive():
            return True
        job.future.set_exception(ClientGone("the client closed its connection before the request was generated"))
        log.info("serve-llm: dropped a request whose client went away")
        return False

    def _loop(self) -> None:
        while (jobs := self._take()) is not None:
            if self.check is not None:
                jobs = [j for j in jobs if self._passes(j)]
            if jobs:
                self.batches.append(len(jobs))
                self._run(jobs)

    def _passes(self, job: _Job) -> bool:
        try:
            self.check(job.messages, job.settings)  # type: ignore[misc]
        except Exception as e:                # noqa: BLE001 - handed to the waiting request
            job.future.set_exception(e)
            return False
        return True

    def _run(self, jobs: list[_Job]) -> None:
        began = time.perf_counter()
        try:
            answers = self.llm.generate([j.messages for j in jobs], jobs[0].settings)
            sizes = sorted(map(_size, jobs))
            with self._cond:
                waiting = len(self._queue)
            log.info("serve-llm: a batch of %d (prompts of %d to %d characters) in %.1f s; %d waiting", len(jobs),
                     sizes[0], sizes[-1], time.perf_counter() - began, waiting)
        except Exception as e:                # noqa: BLE001 - handed to the waiting request(s)
            if len(jobs) == 1:
                jobs[0].future.set_exception(e)
                return
            for job in jobs:                  # only the failing request gets the error
                self._run([job])
            return
        for job, answer in zip(jobs, answers):
            job.future.set_result(answer)


def served_name(model: str, dtype: str) -> str:
    """The model id the server answers to: the model's name (a folder's or file's stem), with ``@<dtype>`` unless
    float32 (two precisions answer differently: a client's response cache keys on this id)."""
    name = Path(model).name if ("/" in model or model.endswith(".gguf")) else model
    name = name.removesuffix(".gguf")
    return name if dtype == "float32" else f"{name}@{dtype}"


def _settings(body: dict[str, Any], defaults: GenerationSettings) -> GenerationSettings:
    if body.get("stream"):
        raise RequestError(400, "stream is not supported by this server; ask without it.")
    if body.get("n", 1) != 1:
        raise RequestError(400, f"n must be 1, got {body.get('n')!r}.")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)

    def given(key: str, default: Any) -> Any:
        return default if body.get(key) is None else body[key]

    try:
        return GenerationSettings(max_new_tokens=given("max_completion_tokens", given("max_tokens",
                                                                                      defaults.max_new_tokens)),
                                  temperature=given("temperature", defaults.temperature),
                                  top_p=given("top_p", defaults.top_p), stop=stop, seed=given("seed", defaults.seed))
    except ConfigError as e:
        raise RequestError(400, str(e)) from None


class BatchingServer:
    """The HTTP side (see the module docstring); a context manager (started on enter, stopped on exit)."""

    def __init__(self, llm: LLM, name: str, *, host: str = "127.0.0.1", port: int = 8000, batch_size: int = 8,
                 gather_s: float = 2.0, defaults: GenerationSettings | None = None, max_pad_ratio: float = 2.0):
        self.llm, self.name, self.host = llm, name, host
        self.defaults = defaults or GenerationSettings()
        self.batcher = Batcher(llm, batch_size, gather_s, check=self.check_window, max_pad_ratio=max_pad_ratio)
        if llm.context_window is not None:
            # /tokenize encodes on the HTTP threads while the worker generates: the tokenizer's first encode, which
            # sets its truncation and padding (a write), is made here; later ones only read it
            llm.count_prompt_tokens([{"role": "user", "content": "a"}])
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> "BatchingServer":
        self.batcher.start()
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="llm-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.batcher.start()
        try:
            self._httpd.serve_forever()
        finally:
            self.batcher.close()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self.batcher.close()

    def __enter__(self) -> "BatchingServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "owned_by": "mnemos",
                                            "max_model_len": self.llm.context_window}]}

    def check_window(self, messages: Messages, settings: GenerationSettings) -> None:
        """RequestError (400, ``context_length_exceeded``) when the prompt and ``max_tokens`` exceed the window."""
        window = self.llm.context_window
        if window is None:
            return
        prompt = self.llm.count_prompt_tokens(messages)
        if prompt + settings.max_new_tokens > window:
            raise RequestError(400, f"This model's maximum context length is {window} tokens. However, you requested "
                                    f"{prompt + settings.max_new_tokens} tokens ({prompt} in the messages, "
                                    f"{settings.max_new_tokens} in the completion).", CONTEXT_LENGTH_EXCEEDED)

    def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize``: ``{"count", "max_model_len"[, "tokens"]}`` of ``messages`` (the prompt a chat request
        makes of them) or of a ``prompt`` string (RequestError when it names another model or gives neither)."""
        if body.get("model") not in (None, self.name):
            raise RequestError(404, f"the model {body.get('model')!r} is not served here; this server serves "
                                    f"{self.name!r}.", "model_not_found")
        out: dict[str, Any] = {"max_model_len": self.llm.context_window}
        if "messages" in body:
            messages = body["messages"]
            try:
                check_messages([messages])
            except ConfigError as e:
                raise RequestError(400, str(e)) from None
            encode = getattr(self.llm, "encode", None)   # the local backend's token ids; others only count
            if encode is None:
                out["count"] = self.llm.count_prompt_tokens(messages)
            else:
                out["tokens"] = list(encode(messages))
                out["count"] = len(out["tokens"])
        elif isinstance(body.get("prompt"), str):
            out["count"] = self.llm.count_tokens(body["prompt"])
        else:
            raise RequestError(400, "a /tokenize request gives messages (a chat) or prompt (a string).")
        return out

    def complete(self, body: dict[str, Any], alive: Callable[[], bool] | None = None) -> dict[str, Any]:
        """The chat completion answering one request body (RequestError when refused; ClientGone when ``alive()``
        says its client went away before it was generated)."""
        if body.get("model") != self.name:
            raise RequestError(404, f"the model {body.get('model')!r} is not served here; this server serves "
                                    f"{self.name!r}.", "model_not_found")
        messages = body.get("messages")
        try:
            check_messages([messages])   # type: ignore[list-item]
        except ConfigError as e:
            raise RequestError(400, str(e)) from None
        settings = _settings(body, self.defaults)
        answer: Completion = self.batcher.submit(messages, settings, alive).result()  # type: ignore[arg-type]
        return {"id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion", "created": int(time.time()),
                "model": self.name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                             "finish_reason": answer.finish_reason or "stop"}],
                "usage": {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                          "total_tokens": answer.prompt_tokens + answer.completion_tokens}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - the stdlib's signature
                log.debug("serve-llm: " + format, *args)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _alive(self) -> bool:
                """Whether the client still holds its connection open (no end of stream waits to be read)."""
                try:
                    readable, _, _ = select.select([self.connection], [], [], 0)
                    return not readable or self.connection.recv(1, socket.MSG_PEEK) != b""
                except OSError:
                    return False

            def _error(self, status: int, message: str, code: str | None = None) -> None:
                kind = "invalid_request_error" if status < 500 else "server_error"
                self._send(status, {"error": {"message": message, "type": kind, "code": code}})

            def do_GET(self) -> None:   # noqa: N802 - the stdlib's name
                if self.path == "/health":
                    self._send(200, {"status": "ok"})
                elif self.path.rstrip("/") == "/v1/models":
                    self._send(200, server.models())
                else:
                    self._error(404, f"no such path: {self.path}")

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                answer = {"/v1/chat/completions": lambda body: server.complete(body, self._alive),
                          "/tokenize": server.tokenize, "/v1/tokenize": server.tokenize}.get(self.path.rstrip("/"))
                if answer is None:
                    self._error(404, f"no such path: {self.path}")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict):
                        raise RequestError(400, "the request body must be a JSON object.")
                    self._send(200, answer(body))
                except json.JSONDecodeError as e:
                    self._error(400, f"the request body is not JSON: {e}")
                except RequestError as e:
                    self._error(e.status, str(e), e.code)
                except (ClientGone, BrokenPipeError, ConnectionResetError):
                    log.info("serve-llm: a client went away before its answer")
                except Exception as e:  # noqa: BLE001 - the model failed: the client retries or reports it
                    log.warning("serve-llm: a request failed: %s: %s", type(e).__name__, e)
                    self._error(500, f"{type(e).__name__}: {e}")

        return Handler
