"""A content-addressed cache of model responses on disk: a rerun costs nothing, a killed run resumes.

The key of a request is the sha256 of the canonical JSON (sorted keys, no spaces) of the backend's
``identity()`` (backend, model, weights, dtype...), the conversation and ``GenerationSettings.as_dict()``;
each response is one small JSON file ``<folder>/<key[:2]>/<key>.json`` holding the request beside the answer
(readable for audits), written atomically (:mod:`pipelines.atomic`) as soon as the backend hands it over:
the local backend after each chunk of ``batch_size``, the openai backend after each response (both take an
``on_result(index, completion)`` hook that :class:`CachedLLM` passes). A run killed at any moment keeps every
answer received; the next run asks only for the others. Two processes may share a folder: a file is replaced
whole, and two writers of one key write the same request.

A folder that cannot be written (a path under a regular file, a read-only folder, a full disk) does not stop a
run: the answers are computed already and no figure depends on the cache, so the process goes on without storing
answers in it, after one warning naming the folder and the cause (:meth:`ResponseCache.put`); what it holds is
still read.

:class:`CachedLLM` wraps any :class:`~pipelines.llm.base.LLM`: it splits a batch into hits and misses, asks
the wrapped backend for the misses only (each distinct request once), and returns every completion in order,
the hits with ``cached=True``. It never loads a model itself, so a run served wholly from the cache never loads
one. ``forget(batch, settings)`` removes the stored answers to given requests (a memory writer forgetting a
turn). ``stats()`` counts, per instance: ``calls`` (conversations asked), ``hits``, ``misses``, the tokens the
backend spent on the misses (``prompt_tokens``, ``completion_tokens``), their cost when a price is configured, the
seconds spent in the backend, and the tokens of every call, hits included (``request_prompt_tokens``,
``request_completion_tokens``, a hit's as its stored answer counted them): what the requests themselves hold, the
same whichever run asked them first, so a run resumed or repeated from the cache reports the same figures.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from pipelines.atomic import write_json
from pipelines.errors import os_cause
from pipelines.llm.base import LLM, Completion, GenerationSettings, Messages, check_messages

log = logging.getLogger("mnemos")


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(identity: dict[str, Any], messages: Messages, settings: GenerationSettings) -> str:
    """sha256 (hex) of the canonical JSON of (model identity, conversation, settings)."""
    request = {"identity": identity, "messages": [dict(m) for m in messages], "settings": settings.as_dict()}
    return hashlib.sha256(canonical(request).encode("utf-8")).hexdigest()


_UNWRITABLE: set[Path] = set()   # the cache folders this process could not write to: stores no more answers there
_UNWRITABLE_LOCK = threading.Lock()


class ResponseCache:
    """One JSON file per response under ``folder``, addressed by :func:`request_key`."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Completion | None:
        """The stored completion (``cached=True``), or None; an unreadable file counts as a miss."""
        path = self.path(key)
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))["completion"]
            return Completion(text=stored["text"], prompt_tokens=int(stored["prompt_tokens"]),
                              completion_tokens=int(stored["completion_tokens"]), cached=True,
                              latency_s=float(stored.get("latency_s", 0.0)),
                              finish_reason=stored.get("finish_reason"), extra=dict(stored.get("extra") or {}))
        except (FileNotFoundError, NotADirectoryError):   # not stored, or the folder cannot exist (under a file)
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("response cache: ignoring the unreadable entry %s (%s); it will be asked again", path, err)
            return None

    def put(self, key: str, identity: dict[str, Any], messages: Messages, settings: GenerationSettings,
            completion: Completion) -> bool:
        """Store ``completion`` as the answer to the request ``key``; whether it was stored.

        A folder that cannot be written (an OSError: a path under a regular file, a read-only folder, ENOSPC) logs one
        warning naming the folder and the cause, the first time in this process, which stores no more answers there.
        It does not stop the run: the answer is in hand, and the cache only saves a rerun's work; a run stopped here
        would throw away what it computed for want of it, while without it the run's figures are the same (a rerun
        asks again what was not stored: the warning says so)."""
        folder = self.folder.absolute()
        if folder in _UNWRITABLE:
            return False
        try:
            write_json(self.path(key), {
                "key": key, "identity": identity, "messages": list(messages), "settings": settings.as_dict(),
                "completion": {"text": completion.text, "prompt_tokens": completion.prompt_tokens,
                               "completion_tokens": completion.completion_tokens, "latency_s": completion.latency_s,
                               "finish_reason": completion.finish_reason, "extra": completion.extra},
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}, indent=None)
            return True
        except OSError as exc:
            with _UNWRITABLE_LOCK:
                first = folder not in _UNWRITABLE
                _UNWRITABLE.add(folder)
            if first:
                log.warning("response cache %s cannot be written: %s; going on without storing answers there "
                            "(what it holds is still read; a rerun asks again what this run does not store)",
                            self.folder, os_cause(exc))
            return False

    def delete(self, key: str) -> bool:
        """Remove the stored response of ``key``; whether there was one."""
        try:
            self.path(key).unlink()
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def __len__(self) -> int:
        return sum(1 for _ in self.folder.glob("??/*.json")) if self.folder.is_dir() else 0


def streams_results(llm: LLM) -> bool:
    """Whether ``llm.generate`` takes the ``on_result(index, completion)`` hook (both project backends do)."""
    try:
        return "on_result" in inspect.signature(llm.generate).parameters
    except (TypeError, ValueError):
        return False


class CachedLLM(LLM):
    """``llm`` behind a :class:`ResponseCache` (see the module docstring)."""

    def __init__(self, llm: LLM, cache: ResponseCache, *, price_prompt_per_1m: float | None = None,
                 price_completion_per_1m: float | None = None):
        self.llm, self.cache = llm, cache
        self.backend = llm.backend
        self.prices = (price_prompt_per_1m, price_completion_per_1m)
        self._stats = {"calls": 0, "hits": 0, "misses": 0, "prompt_tokens": 0, "completion_tokens": 0,
                       "seconds": 0.0, "request_prompt_tokens": 0, "request_completion_tokens": 0}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachedLLM({self.llm!r}, cache={str(self.cache.folder)!r})"

    @property
    def model(self) -> str:
        return self.llm.model

    def identity(self) -> dict[str, Any]:
        return self.llm.identity()

    @property
    def context_window(self) -> int | None:
        return self.llm.context_window

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)

    def count_prompt_tokens(self, messages: Messages) -> int:
        return self.llm.count_prompt_tokens(messages)

    @property
    def label(self) -> str:
        return self.llm.label

    def close(self) -> None:
        self.llm.close()

    def generate(self, batch: Sequence[Messages], settings: GenerationSettings,
                 progress: Callable[[int], None] | None = None) -> list[Completion]:
        check_messages(batch)
        identity = self.llm.identity()
        keys = [request_key(identity, m, settings) for m in batch]
        results: list[Completion | None] = [self.cache.get(k) for k in keys]
        first: dict[str, int] = {}                       # a missing request -> its first index (asked once)
        for i, key in enumerate(keys):
            if results[i] is None:
                first.setdefault(key, i)
        asked = list(first)
        misses = [batch[first[k]] for k in asked]
        received: dict[str, Completion] = {}

        def store(j: int, completion: Completion) -> None:
            self.cache.put(asked[j], identity, misses[j], settings, completion)
            with self._lock:
                received[asked[j]] = completion
                self._stats["misses"] += 1
                self._stats["prompt_tokens"] += completion.prompt_tokens
                self._stats["completion_tokens"] += completion.completion_tokens

        with self._lock:
            self._stats["calls"] += len(batch)
            self._stats["hits"] += len(batch) - len(asked)
        if progress is not None and len(batch) > len(asked):
            progress(len(batch) - len(asked))
        if misses:
            log.info("%s: %d of %d answers from the response cache, asking %d", self.label,
                     len(batch) - len(asked), len(batch), len(misses))
            began = time.perf_counter()
            try:
                hook = {"on_result": store} if streams_results(self.llm) else {}
                for j, completion in enumerate(self.llm.generate(misses, settings, progress, **hook)):
                    if asked[j] not in received:       # a backend without the hook: stored at the end
                        store(j, completion)
            finally:
                with self._lock:
                    self._stats["seconds"] += time.perf_counter() - began
        for i, key in enumerate(keys):
            if results[i] is None:       # a repeat of a request asked in this batch is served as a cache hit
                results[i] = received[key] if first[key] == i else dataclasses.replace(received[key], cached=True)
        with self._lock:                 # every call's tokens, hits included
            self._stats["request_prompt_tokens"] += sum(c.prompt_tokens for c in results)  # type: ignore[union-attr]
            self._stats["request_completion_tokens"] += sum(c.completion_tokens for c in results)  # type: ignore
        return results  # type: ignore[return-value]

    def forget(self, batch: Sequence[Messages], settings: GenerationSettings) -> int:
        """Remove the stored answers to the conversations of ``batch`` (asked with ``settings``): a memory that
        forgets what a conversation holds leaves no copy of it in the cache. Returns how many were stored."""
        identity = self.llm.identity()
        return sum(self.cache.delete(request_key(identity, m, settings)) for m in batch)

    def stats(self) -> dict[str, Any]:
        """calls, hits, misses, prompt_tokens and completion_tokens spent on the misses, cost_usd (None without
        a price), seconds in the backend; request_prompt_tokens and request_completion_tokens of every call."""
        with self._lock:
            out: dict[str, Any] = dict(self._stats)
        pp, pc = self.prices
        out["cost_usd"] = None if pp is None and pc is None else (
            out["prompt_tokens"] * (pp or 0.0) + out["completion_tokens"] * (pc or 0.0)) / 1e6
        return out
