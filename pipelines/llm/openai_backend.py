"""The openai backend: any OpenAI-compatible chat-completions server, through the official ``openai`` client.

vLLM, SGLang, Ollama, llama.cpp's server, ``transformers serve`` and OpenAI itself answer
``POST <base_url>/chat/completions``; LongMemEval and G-Long run their readers on vLLM's. One request per
conversation (``model``, ``messages``, ``max_tokens``, ``temperature``, ``top_p``, ``seed`` and up to four
``stop`` strings, which are also cut on this side, and ``extra_body``'s fields when configured: vLLM's
``chat_template_kwargs``), ``concurrency`` of them in flight at once (a thread pool):
a server that batches on its side (vLLM, ``transformers serve --continuous-batching``) answers them together.

Retries are this module's own loop (the client's ``max_retries`` is 0), so that the back-off, the log lines and
the final error are ours: a request failing with HTTP 408, 409, 429 or 5xx, a time-out or a connection error is
retried up to ``max_retries`` times after ``min(30, 0.5 * 2**attempt)`` seconds scaled by a random factor in
[0.5, 1] (jitter: concurrent requests do not retry in step), or the server's ``Retry-After`` when it sends one.
After the last try the call raises :class:`LLMError` "cannot reach the OpenAI-compatible server at <URL>
(model <m>) ..."; another 4xx (a wrong model id, a refused key) fails at once naming the URL and the status; a 400
saying the prompt does not fit the model's window (OpenAI's ``context_length_exceeded``, vLLM's "maximum context
length") is :class:`~pipelines.llm.base.ContextWindowExceeded`.
After a failure the requests not yet sent are cancelled and those in flight finish (their answers still reach
``on_result``, so the response cache keeps everything received).

The API key is read from the environment variable named by ``api_key_env`` when the client is made; a local
server needs none (``EMPTY`` is sent when the variable is unset). ``repr``, ``identity()``, logs and error
messages name the variable, never the key (a server that echoes the key back has it replaced by
``$<VARIABLE>``). Token counts come from the response's ``usage``; a server that sends none gets an estimate
(4 characters a token, ``extra["estimated_tokens"]``).

A prompt's tokens (:meth:`OpenAILLM.count_prompt_tokens`, which a memory product's writer checks against the window
before asking) are the server's own count when the server lists the model's window: vLLM's ``POST /tokenize``
(at the server's root, beside ``/v1``; ``python -m pipelines serve-llm`` answers it too) with the conversation,
rendered by the model's chat template as a chat request is. A server without it (a 404, or no window listed) gets
the estimate; that server's own refusal of a prompt over its window is still read (ContextWindowExceeded).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, as_completed
from typing import Any, Callable, Sequence

from pipelines.llm.base import (LLM, Completion, ContextWindowExceeded, GenerationSettings, LLMError, Messages,
                                check_messages)
from pipelines.llm.config import LLMConfig
from pipelines.llm.local import cut_at_stop

KEY_PLACEHOLDER = "EMPTY"          # sent when the key's variable is unset (local servers ignore it)
MAX_STOP = 4                       # OpenAI's limit on stop strings; more are cut on this side only
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
RETRY_STATUS = (408, 409, 429)     # and every 5xx

log = logging.getLogger("mnemos")


def _context_exceeded(err: Any) -> bool:
    """Whether an HTTP 400 says the prompt does not fit the model's window (OpenAI's and vLLM's wording)."""
    return getattr(err, "code", None) == "context_length_exceeded" or "maximum context length" in str(err)


class _Stopped(Exception):
    """A request given up because another one of its batch failed."""


class OpenAILLM(LLM):
    """A model behind an OpenAI-compatible server (see the module docstring)."""

    backend = "openai"

    def __init__(self, config: LLMConfig):
        self.config = config
        self.base_url = str(config.base_url).rstrip("/")
        self._client: Any = None
        self._window: tuple[int | None] | None = None
        self._tokenizes: bool | None = None   # whether the server answers /tokenize (None: not asked yet)
        self._http: Any = None                # the httpx client of /tokenize (one connection pool)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"OpenAILLM(model={self.config.model!r}, base_url={self.base_url!r}, "
                f"api_key_env={self.config.api_key_env!r})")

    @property
    def model(self) -> str:
        return self.config.model

    def identity(self) -> dict[str, Any]:
        """Backend and model id (and the extra request fields when set, which may change the answer: Qwen3's
        thinking switch): the URL is not part of it (the same model served elsewhere answers alike)."""
        out: dict[str, Any] = {"backend": self.backend, "model": self.config.model}
        if self.config.extra_body:
            out["extra_body"] = self.config.extra_body
        return out

    def _key(self) -> str:
        return os.environ.get(self.config.api_key_env) or KEY_PLACEHOLDER

    def scrub(self, text: str) -> str:
        """``text`` with the key (should a server echo it) replaced by the name of its variable."""
        key = os.environ.get(self.config.api_key_env) or ""
        return text.replace(key, f"${self.config.api_key_env}") if len(key) >= 4 else text

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(base_url=self.base_url, api_key=self._key(), max_retries=0,
                                             timeout=self.config.timeout_s)
            return self._client

    @property
    def context_window(self) -> int | None:
        """The server's ``max_model_len`` for the model when it lists one (vLLM does); None otherwise."""
        if self._window is None:
            window = None
            try:
                for entry in self.client.models.list().data:
                    if entry.id == self.config.model:
                        value = (entry.model_extra or {}).get("max_model_len")
                        window = int(value) if value else None
            except Exception as err:   # noqa: BLE001 - any failure only means "unknown"
                log.debug("%s: no model list at %s (%s)", self.label, self.base_url, self.scrub(str(err)))
            self._window = (window,)
        return self._window[0]

    @property
    def tokenize_url(self) -> str:
        """vLLM's tokenizer endpoint: ``/tokenize`` at the server's root (``base_url`` without its ``/v1``)."""
        return f"{self.base_url.removesuffix('/v1')}/tokenize"

    def count_prompt_tokens(self, messages: Messages) -> int:
        """The server's count of the prompt's tokens (its ``/tokenize``) when it lists the model's window and
        answers it; otherwise the estimate (see the module docstring)."""
        if self._tokenizes is not False and self.context_window is not None:
            count = self._server_count(messages)
            if count is not None:
                return count
        return super().count_prompt_tokens(messages)

    def _server_count(self, messages: Messages) -> int | None:
        """``count`` of the server's ``POST /tokenize`` of ``messages``; None when it cannot say (remembered when
        the server has no such endpoint)."""
        import httpx

        body = {"model": self.config.model, "messages": [dict(m) for m in messages], "add_generation_prompt": True}
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(timeout=min(self.config.timeout_s, 60.0),
                                          headers={"Authorization": f"Bearer {self._key()}"})
            http = self._http
        try:
            response = http.post(self.tokenize_url, json=body)
        except httpx.HTTPError as err:
            log.debug("%s: no token count from %s (%s)", self.label, self.tokenize_url, self.scrub(str(err)))
            return None
        if response.status_code in (404, 405, 501):
            self._tokenizes = False
            log.info("%s: the server at %s has no /tokenize: prompt tokens are estimated (4 characters a token) "
                     "for the window check; the server's own refusals still count", self.label, self.base_url)
            return None
        try:
            response.raise_for_status()
            count = int(response.json()["count"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
            log.debug("%s: no token count from %s (%s)", self.label, self.tokenize_url, self.scrub(str(err)))
            return None
        self._tokenizes = True
        return count

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._http is not None:
                self._http.close()
                self._http = None

    def generate(self, batch: Sequence[Messages], settings: GenerationSettings,
                 progress: Callable[[int], None] | None = None,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """One request per conversation, ``concurrency`` at a time; ``on_result(i, completion)`` as each
        response arrives (in the calling thread), ``progress(1)`` after it."""
        check_messages(batch)
        results: list[Completion | None] = [None] * len(batch)
        if not batch:
            return []
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(batch)),
                                  thread_name_prefix="openai-llm")
        error: BaseException | None = None
        try:
            futures: dict[Future, int] = {pool.submit(self._ask, m, settings, stop): i for i, m in enumerate(batch)}
            for future in as_completed(futures):
                try:
                    completion = future.result()
                except (CancelledError, _Stopped):
                    continue
                except Exception as err:           # noqa: BLE001 - the first failure ends the batch
                    if error is None:
                        error = err
                        stop.set()
                        for other in futures:
                            other.cancel()
                    continue
                i = futures[future]
                results[i] = completion
                if on_result is not None:
                    on_result(i, completion)
                if progress is not None:
                    progress(1)
        except BaseException:                      # KeyboardInterrupt, a failing hook: stop at once
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if error is not None:
            if isinstance(error, LLMError):
                raise error
            raise LLMError(f"the OpenAI-compatible server at {self.base_url} (model {self.config.model}): "
                           f"{type(error).__name__}: {self.scrub(str(error))}") from None
        return results  # type: ignore[return-value]

    def _request(self, messages: Messages, settings: GenerationSettings) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.config.model, "messages": [dict(m) for m in messages],
                                  "max_tokens": settings.max_new_tokens, "temperature": float(settings.temperature),
                                  "top_p": float(settings.top_p), "seed": settings.seed}
        if settings.stop:
            params["stop"] = list(settings.stop[:MAX_STOP])
        if self.config.extra_body:
            params["extra_body"] = dict(self.config.extra_body)
        return params

    def _ask(self, messages: Messages, settings: GenerationSettings, stop: threading.Event) -> Completion:
        import openai

        params = self._request(messages, settings)
        tries = self.config.max_retries + 1
        last: Exception = LLMError("no try made")
        for attempt in range(tries):
            if stop.is_set():
                raise _Stopped()
            began = time.perf_counter()
            try:
                response = self.client.chat.completions.create(**params)
            except openai.APIStatusError as err:
                if err.status_code == 400 and _context_exceeded(err):
                    raise ContextWindowExceeded(f"the OpenAI-compatible server at {self.base_url} (model "
                                                f"{self.config.model}) refused a prompt longer than the model's "
                                                f"window: {self.scrub(str(err))}") from None
                if err.status_code not in RETRY_STATUS and err.status_code < 500:
                    hint = (f" (the key is read from the environment variable {self.config.api_key_env})"
                            if err.status_code in (401, 403) else "")
                    raise LLMError(f"the OpenAI-compatible server at {self.base_url} refused the request for model "
                                   f"{self.config.model}: HTTP {err.status_code}: {self.scrub(str(err))}{hint}"
                                   ) from None
                last = err
            except (openai.APIConnectionError, openai.APITimeoutError) as err:
                last = err
            else:
                return self._completion(response, messages, settings, time.perf_counter() - began)
            if attempt + 1 < tries:
                delay = self._delay(attempt, last)
                log.warning("%s at %s: %s; retry %d of %d in %.1f s", self.label, self.base_url,
                            self.scrub(str(last)) or type(last).__name__, attempt + 1, tries - 1, delay)
                if stop.wait(delay):
                    raise _Stopped()
        raise LLMError(f"cannot reach the OpenAI-compatible server at {self.base_url} (model {self.config.model}) "
                       f"after {tries} tries: {type(last).__name__}: {self.scrub(str(last))}")

    @staticmethod
    def _delay(attempt: int, err: Exception) -> float:
        response = getattr(err, "response", None)
        after = response.headers.get("retry-after") if response is not None else None
        try:
            if after is not None:
                return min(max(float(after), 0.0), 60.0)
        except ValueError:
            pass   # an HTTP date: use the back-off
        return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** attempt) * random.uniform(0.5, 1.0)

    def _completion(self, response: Any, messages: Messages, settings: GenerationSettings,
                    latency: float) -> Completion:
        if not response.choices:
            raise LLMError(f"the OpenAI-compatible server at {self.base_url} (model {self.config.model}) "
                           "answered with no choices.")
        choice = response.choices[0]
        text, stopped = cut_at_stop(choice.message.content or "", settings.stop)
        usage, extra = response.usage, {}
        if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
            prompt, completion = int(usage.prompt_tokens), int(usage.completion_tokens)
        else:
            prompt = sum(self.count_tokens(m["content"]) for m in messages)
            completion, extra = self.count_tokens(choice.message.content or ""), {"estimated_tokens": True}
        return Completion(text=text, prompt_tokens=prompt, completion_tokens=completion, latency_s=latency,
                          finish_reason="stop" if stopped else choice.finish_reason, extra=extra)
