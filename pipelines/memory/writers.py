"""Memory writers through the LLM layer (pipelines/llm): G-Long's triplet extractor, EMMA's summarise-and-link
dialogue module and a session summariser as calls to any configured language model (a local model, with the LoRA
adapter it was fine-tuned with, or a served one: vLLM, SGLang, ``transformers serve``...), with the prompts the
trained modules read.

- :class:`LLMExtractor` (``graph``, ``extraction: llm``): one conversation per utterance with the paper's prompt
  (seed 003, Appendix B: :data:`~pipelines.glong.extractor.SYSTEM_INSTRUCTION` and
  :func:`~pipelines.glong.extractor.user_message`), greedy unless configured otherwise; each answer parsed by
  :func:`~pipelines.glong.extractor.parse_triplets` and counted in a :class:`~pipelines.glong.extractor.ParseStats`.
  Called with (speaker, utterance) pairs it is the ``Extractor`` the graph strategy takes.
- :class:`LLMDialogue` (``egocentric``, ``memory_source`` / ``link_source: llm``): EMMA's summarise and link inputs
  (pipelines/emma/formats.py) as the user message. A model fine-tuned on those formats reads them bare
  (``dialogue_llm_instructed: false``); an instruction model prompted zero-shot (the default) gets a short system
  message saying what the task and the answer form are (:data:`DIALOGUE_INSTRUCTIONS`), and the lines of its
  summary are read as separate memories (a list's markers dropped). The strategy parses the outputs as the trained
  module's (``parse_summary``, ``parse_link``): it is the strategy's ``Seq2Seq``.
- :class:`LLMSummariser` (``session_summary``, ``summaries: llm``): a session's dialogue -> its summary; instructed
  (:data:`SUMMARY_INSTRUCTION` as the system message; the session's date and one ``Speaker: text`` line per turn),
  or bare: the prompt of the small profile's G-Long summariser (pipelines/glong/summariser.py: one user message,
  its instruction, a blank line and the lines), for that model fine-tuned (its adapter).

Every call goes through the layer's response cache (:func:`~pipelines.llm.config.build_llm` under the strategy's
``llm_cache_dir``, the benchmark's ``--llm-cache-dir``): a rerun asks nothing again and a killed run resumes. A fresh
strategy serves each episode, so a writer is shared by the process (:func:`shared_writer`, one per kind, LLM config,
cache folder and options): one model load, one memo of the answers (a distinct request is asked once per run) and
one tally, which :meth:`Writer.report` gives (the cache's calls, hits, misses, tokens and seconds, prompts cut to
the window; the extractor's utterances, triplets and parse counts) and the strategies log after their batched
``prepare``; :func:`writer_reports` lists every writer of the process.

Reasoning models may open their answer with ``<think>...</think>`` (Qwen3 on vLLM without ``--reasoning-parser``):
the block is cut before parsing (cheaper: turn thinking off, ``extra_body: {chat_template_kwargs:
{enable_thinking: false}}``). A prompt longer than the model's window (when it tells one) is cut at its end to fit
and counted (``truncated``).

Forgetting: ``forget(...)`` drops the memo's answers and the cached responses of requests that hold forgotten
turns, so no copy stays with the writer or in the response cache.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pipelines.data.schema import Session, Triplet
from pipelines.emma.formats import NONE, SEP
from pipelines.errors import ConfigError, ModelNotTrained
from pipelines.glong.extractor import SYSTEM_INSTRUCTION, ParseStats, parse_triplets, user_message
from pipelines.llm import LLM, ContextWindowExceeded, GenerationSettings, LLMConfig, Messages, build_llm
from pipelines.llm.local import ADAPTER_CONFIG

log = logging.getLogger("mnemos")

# Defaults of a writer's LLM settings under the ones configured: a JSON list of triplets or a summary needs more
# than the layer's 64 new tokens.
WRITER_DEFAULTS: dict[str, dict[str, Any]] = {"extractor": {"max_new_tokens": 128}, "dialogue": {},
                                              "summariser": {"max_new_tokens": 160},
                                              "chat": {"max_new_tokens": 512}}   # a product's JSON answer
DIALOGUE_INSTRUCTIONS = {
    "summarize": (
        "You write the long-term memory of a dialogue agent. The input is 'summarize [ABOUT_X]:' followed by a "
        "finished conversation session: the speakers' names in brackets (each followed by their job when known), "
        "[NOW] and the session's number, then every turn after its speaker's [name]. Write the facts this session "
        "tells about X (their life, plans, preferences, events), each as one short sentence in the third person "
        "naming X, separated by ' [SEP] '. If the session tells nothing about X, answer [NONE]. Answer with the "
        "sentences only."),
    "link": (
        "You link the long-term memories of a dialogue agent. The input gives two memory sentences, an earlier one "
        "(memory sentence 1) and a newer one (memory sentence 2). Answer positive if the newer memory refers to or "
        "updates the earlier one (the same fact or topic about the same person), else negative. Answer with one "
        "word: positive or negative."),
}
TASK_PREFIXES = {"summarize [ABOUT_": "summarize", "memory sentence 1:": "link", "generation:": "generation"}
SUMMARY_INSTRUCTION = (
    "You summarise one session of a long conversation for a memory that will answer questions about it later. The "
    "input gives the session's date, when known, and its turns, one 'Speaker: text' line each. Write one short "
    "paragraph stating the facts, events, plans and preferences each speaker mentions, naming the speakers and "
    "keeping names, places, dates and numbers. Answer with the summary only.")
THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
LIST_MARKER = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
PROGRESS_FROM = 64          # a batch of at least this many requests shows a progress bar


def answer_text(text: str) -> str:
    """The answer of a completion: a ``<think>...</think>`` block cut (an unclosed one, cut off by the token limit,
    leaves no answer), surrounding blanks stripped."""
    text = THINK.sub("", text)
    return text.split("<think>", 1)[0].strip()


def writer_config(kind: str, llm: Mapping[str, Any] | LLMConfig, where: str) -> LLMConfig:
    """The LLMConfig of a writer: ``llm`` (a params.yaml mapping, checked naming ``where``) over the writer's
    :data:`WRITER_DEFAULTS`."""
    if isinstance(llm, LLMConfig):
        return llm
    if not isinstance(llm, Mapping):
        raise ConfigError(f"{where} must be a mapping of language-model settings (backend, model, ...; see "
                          f"llm.reader in params.yaml), got {llm!r}.")
    return LLMConfig.from_dict({**WRITER_DEFAULTS.get(kind, {}), **llm}, where)


def check_writer_llm(kind: str, llm: Any, where: str, wanted: bool, why_wanted: str, why_unused: str,
                     example: str) -> None:
    """A strategy's writer setting (``where``, e.g. ``graph.extractor_llm``) checked as its config reads it: required
    when the strategy writes with a language model (``wanted``, because ``why_wanted``), then checked by
    :func:`writer_config`; refused when set but unused (``why_unused``), so that no setting is silently ignored."""
    if wanted:
        if llm is None:
            raise ConfigError(f"{why_wanted} but {where} is not set: give the language model's settings, e.g. "
                              f"{example}.")
        writer_config(kind, llm, where)   # its own checks, named
    elif llm is not None:
        raise ConfigError(f"{where} is set but {why_unused}.")


class Writer:
    """A memory writer calling one LLM: batched, memoised calls through the response cache, and their tally."""

    kind = ""
    cuts = True   # prompts over the window are cut to fit (:meth:`fit`); False: the writer refuses them itself

    def __init__(self, llm: LLM, config: LLMConfig, role: str):
        self.llm, self.config, self.role = llm, config, role
        self.truncated = 0          # prompts cut to fit the model's window
        self._lock = threading.Lock()

    def fit(self, messages: Messages, max_new_tokens: int) -> Messages:
        """``messages`` with the end of the last one cut until the prompt and ``max_new_tokens`` fit the model's
        window (unchanged when they fit or the window is unknown)."""
        window = self.llm.context_window
        if window is None or not self.cuts:
            return messages
        budget = window - max_new_tokens
        count = self.llm.count_prompt_tokens(messages)
        if count <= budget:
            return messages
        *head, last = messages
        content = last["content"]
        while count > budget and content:
            content = content[:int(len(content) * budget / count * 0.95)]
            count = self.llm.count_prompt_tokens([*head, {**last, "content": content}])
        return [*head, {**last, "content": content}]

    def settings(self, max_new_tokens: int | None = None) -> GenerationSettings:
        return self.config.settings(**({} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}))

    def complete(self, conversations: Sequence[Messages], settings: GenerationSettings) -> list[str]:
        """The answers (:func:`answer_text`) to ``conversations``, each fitted to the window, in one batched call."""
        if not conversations:
            return []
        fitted = [self.fit(m, settings.max_new_tokens) for m in conversations]
        self.truncated += sum(f is not m for f, m in zip(fitted, conversations))
        bar = None
        if len(fitted) >= PROGRESS_FROM:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(fitted), desc=f"{self.role} ({self.llm.label})", unit="request")
        try:
            completions = self.llm.generate(fitted, settings, progress=bar.update if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()
        return [answer_text(c.text) for c in completions]

    def forget_requests(self, conversations: Iterable[Messages], settings: GenerationSettings) -> int:
        """Remove the cached responses of ``conversations`` (as :meth:`complete` asked them); how many went."""
        forget = getattr(self.llm, "forget", None)      # a CachedLLM; an uncached one keeps nothing
        if forget is None:
            return 0
        return forget([self.fit(m, settings.max_new_tokens) for m in conversations], settings)

    def report(self) -> dict[str, Any]:
        """What the writer's calls cost: role, model, the response cache's stats (calls, hits, misses, tokens,
        cost, seconds), the prompts cut to the window, and the writer's own counts (:meth:`extra_report`)."""
        stats = self.llm.stats() if hasattr(self.llm, "stats") else {}
        return {"role": self.role, "model": self.llm.label, **stats, "truncated": self.truncated,
                **self.extra_report()}

    def log_report(self) -> None:
        r = self.report()
        if "calls" in r:
            log.info("%s (%s): %d requests, %d from the response cache, %d asked (%d prompt + %d completion tokens, "
                     "%.1f s)%s%s", r["role"], r["model"], r["calls"], r["hits"], r["misses"], r["prompt_tokens"],
                     r["completion_tokens"], r["seconds"], f", {r['truncated']} prompts cut to the window"
                     if r["truncated"] else "", "".join(f"; {k}: {v}" for k, v in self.extra_report().items()))

    def extra_report(self) -> dict[str, Any]:
        """What a writer adds to its report (the extractor: utterances, triplets, parse counts)."""
        return {}

    def reset_peaks(self) -> None:
        """Start the report's :data:`PEAKS` afresh (the benchmark does at each episode: a peak is the episode's)."""


class LLMExtractor(Writer):
    """G-Long's triplet extraction by an LLM: (speaker, utterance) pairs -> one triplet list per pair."""

    kind = "extractor"

    def __init__(self, llm: LLM, config: LLMConfig, role: str = "graph.extractor_llm"):
        super().__init__(llm, config, role)
        self.stats = ParseStats()
        self.memo: dict[tuple[str, str], list[Triplet]] = {}
        self.triplets = 0           # triplets written, over the distinct utterances asked

    @staticmethod
    def messages(speaker: str, text: str) -> Messages:
        """The paper's prompt (Appendix B): its system instruction, then the utterance."""
        return [{"role": "system", "content": SYSTEM_INSTRUCTION},
                {"role": "user", "content": user_message(speaker, text)}]

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[list[Triplet]]:
        pairs = [(str(s), str(t)) for s, t in pairs]
        with self._lock:
            todo = list(dict.fromkeys(p for p in pairs if p not in self.memo))
            for pair, text in zip(todo, self.complete([self.messages(*p) for p in todo], self.settings())):
                parsed = parse_triplets(text)
                self.stats.add(parsed.status, parsed.items_dropped)
                self.memo[pair] = parsed.triplets
                self.triplets += len(parsed.triplets)
            return [list(self.memo[p]) for p in pairs]

    def forget(self, pairs: Iterable[tuple[str, str]]) -> int:
        """Drop the answers to ``pairs`` from the memo and the response cache."""
        pairs = list(dict.fromkeys(pairs))
        with self._lock:
            for pair in pairs:
                self.memo.pop(pair, None)
        return self.forget_requests([self.messages(*p) for p in pairs], self.settings())

    def extra_report(self) -> dict[str, Any]:
        return {"utterances": self.stats.total, "triplets": self.triplets, "parse": self.stats.to_dict()}


def task_of(source: str) -> str | None:
    """Which of EMMA's tasks an input sequence asks (by its prefix), or None."""
    return next((task for prefix, task in TASK_PREFIXES.items() if source.startswith(prefix)), None)


def as_memories(text: str) -> str:
    """An instructed model's summary in the trained module's answer form: its lines (a list's markers dropped)
    joined by `` [SEP] `` unless it already uses ``[SEP]`` or answers ``[NONE]``."""
    if SEP in text or NONE in text:
        return text
    lines = [LIST_MARKER.sub("", line).strip() for line in text.splitlines()]
    return f" {SEP} ".join(line for line in lines if line) or NONE


class LLMDialogue(Writer):
    """EMMA's dialogue module by an LLM: (input sequences, max new tokens) -> output sequences."""

    kind = "dialogue"

    def __init__(self, llm: LLM, config: LLMConfig, role: str = "egocentric.dialogue_llm", instructed: bool = True):
        super().__init__(llm, config, role)
        self.instructed = instructed

    def messages(self, source: str) -> Messages:
        system = DIALOGUE_INSTRUCTIONS.get(task_of(source) or "") if self.instructed else None
        return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": source}]

    def __call__(self, sources: Sequence[str], max_new_tokens: int) -> list[str]:
        outputs = self.complete([self.messages(s) for s in sources], self.settings(max_new_tokens))
        if not self.instructed:
            return outputs
        return [as_memories(out) if task_of(src) == "summarize" else out for src, out in zip(sources, outputs)]

    def forget(self, keys: Iterable[tuple[str, int]]) -> int:
        """Drop the cached responses of (source, max new tokens) requests (the memo's keys)."""
        by_length: dict[int, list[str]] = {}
        for source, max_new_tokens in keys:
            by_length.setdefault(max_new_tokens, []).append(source)
        return sum(self.forget_requests([self.messages(s) for s in sources], self.settings(n))
                   for n, sources in by_length.items())


def dialogue_lines(session: Session) -> str:
    """A session's turns as ``Speaker: text`` lines, as G-Long's summariser reads a dialogue
    (pipelines.glong.tasks.session_summary_pairs)."""
    return "\n".join(f"{t.speaker}: {t.text}" for t in session.turns)


class LLMSummariser(Writer):
    """Session summaries by an LLM: sessions -> one summary each."""

    kind = "summariser"

    def __init__(self, llm: LLM, config: LLMConfig, role: str = "session_summary.summary_llm",
                 instructed: bool = True):
        super().__init__(llm, config, role)
        self.instructed = instructed
        self.memo: dict[str, str] = {}

    def request(self, session: Session) -> str:
        """The user message of ``session``: its date and lines (instructed), or the small profile's G-Long
        summariser's (its instruction, a blank line, the lines)."""
        if not self.instructed:
            from pipelines.glong.prompts import DIALOGUE_INSTRUCTION

            return f"{DIALOGUE_INSTRUCTION}\n\n{dialogue_lines(session)}"
        date = f"Session date: {session.timestamp.date().isoformat()}\n" if session.timestamp is not None else ""
        return date + dialogue_lines(session)

    def messages(self, request: str) -> Messages:
        system = [{"role": "system", "content": SUMMARY_INSTRUCTION}] if self.instructed else []
        return system + [{"role": "user", "content": request}]

    def __call__(self, sessions: Sequence[Session]) -> list[str]:
        requests = [self.request(s) for s in sessions]
        with self._lock:
            todo = list(dict.fromkeys(r for r in requests if r not in self.memo))
            self.memo.update(zip(todo, self.complete([self.messages(r) for r in todo], self.settings())))
            return [self.memo[r] for r in requests]

    def forget(self, requests: Iterable[str]) -> int:
        """Drop the summaries of ``requests`` (:meth:`request`) from the memo and the response cache."""
        requests = list(dict.fromkeys(requests))
        with self._lock:
            for r in requests:
                self.memo.pop(r, None)
        return self.forget_requests([self.messages(r) for r in requests], self.settings())


PEAKS = frozenset({"longest_prompt"})
"""Report fields that are a maximum, not a count: since :meth:`Writer.reset_peaks`, combined by max, never summed or
subtracted (pipelines/evaluate/protocol.py, shards.py)."""


class PromptTooLong(Exception):
    """A product's prompt that does not fit its model's window: refused, never cut (a cut prompt is another
    product)."""


class LLMChat(Writer):
    """A memory product's own language-model calls (pipelines/memory/peers): each conversation the product asks, as
    it asks it, answered through the layer (response cache, token counts, seconds). Never cut to the window: a
    prompt that does not fit beside ``max_new_tokens`` raises :class:`PromptTooLong` and is counted
    (``refused_too_long``); the product's outcome of each answer is counted by its adapter (:meth:`outcome`)."""

    kind = "chat"
    cuts = False   # __call__ counts the prompt once and refuses it when it does not fit

    def __init__(self, llm: LLM, config: LLMConfig, role: str = "peer.llm"):
        super().__init__(llm, config, role)
        self.refused_too_long = 0
        self.longest_prompt = 0             # tokens of the longest prompt asked or refused since reset_peaks
        self.outcomes: dict[str, int] = {}  # the adapter's tally of what the product made of the answers

    def __call__(self, messages: Messages) -> str:
        """The answer to one conversation (:func:`answer_text`); PromptTooLong when it cannot fit the window."""
        settings = self.settings()
        window = self.llm.context_window
        tokens = self.llm.count_prompt_tokens(messages)
        with self._lock:
            self.longest_prompt = max(self.longest_prompt, tokens)
            if window is not None and tokens + settings.max_new_tokens > window:
                self.refused_too_long += 1
                raise PromptTooLong(f"{self.role}: a prompt of {tokens} tokens and {settings.max_new_tokens} new "
                                    f"ones does not fit {self.llm.label}'s window of {window} tokens")
        try:
            return self.complete([messages], settings)[0]
        except ContextWindowExceeded as e:   # a server's window, unknown on this side: refused there
            with self._lock:
                self.refused_too_long += 1
            raise PromptTooLong(f"{self.role}: {e}") from None

    def outcome(self, name: str, n: int = 1) -> None:
        """Count ``n`` of an outcome (e.g. ``unreadable``: an answer the product could not read)."""
        with self._lock:
            self.outcomes[name] = self.outcomes.get(name, 0) + n

    def forget(self, conversations: Iterable[Messages]) -> int:
        """Remove the cached responses of ``conversations`` (as asked); how many went."""
        return self.forget_requests(list(conversations), self.settings())

    def reset_peaks(self) -> None:
        with self._lock:
            self.longest_prompt = 0

    def extra_report(self) -> dict[str, Any]:
        return {"refused_too_long": self.refused_too_long, "longest_prompt": self.longest_prompt,
                **dict(sorted(self.outcomes.items()))}


WRITERS: dict[str, type[Writer]] = {"extractor": LLMExtractor, "dialogue": LLMDialogue,
                                    "summariser": LLMSummariser, "chat": LLMChat}
_SHARED: dict[tuple, Writer] = {}
_SHARED_LOCK = threading.Lock()


def shared_writer(kind: str, llm: Mapping[str, Any] | LLMConfig, cache_dir: str | Path | None, *, role: str,
                  **options: Any) -> Writer:
    """The process's writer of ``kind`` for the LLM settings ``llm`` (checked as ``role``) and the response cache
    under ``cache_dir`` (default ``.cache/llm``), built on first use (nothing loads before its first call).

    A local adapter folder that holds no adapter (not trained yet) is a :class:`ModelNotTrained`: the benchmark lists
    the strategy as missing, with the folder, as it does for a trained module that is not there."""
    if kind not in WRITERS:
        raise ConfigError(f"unknown memory writer {kind!r}; known: {', '.join(WRITERS)}.")
    config = writer_config(kind, llm, role)
    if config.backend == "local" and config.adapter is not None and \
            not (Path(config.adapter) / ADAPTER_CONFIG).is_file():
        raise ModelNotTrained(f"{role}.adapter = {config.adapter!r} holds no LoRA adapter ({ADAPTER_CONFIG})",
                              path=config.adapter)
    folder = str(Path(cache_dir).resolve()) if cache_dir is not None else None
    key = (kind, json.dumps(config.as_params(), sort_keys=True, default=str), folder, role,
           tuple(sorted(options.items())))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = WRITERS[kind](build_llm(config, cache_dir), config, role=role, **options)
        return _SHARED[key]


def reset_peaks() -> None:
    """:meth:`Writer.reset_peaks` of every writer built in this process."""
    with _SHARED_LOCK:
        writers = list(_SHARED.values())
    for w in writers:
        w.reset_peaks()


def writer_reports() -> list[dict[str, Any]]:
    """:meth:`Writer.report` of every writer built in this process."""
    with _SHARED_LOCK:
        writers = list(_SHARED.values())
    return [w.report() for w in writers]
