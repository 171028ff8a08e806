"""``session_summary``: retrieval over session summaries (METHODS.md section 6, "session summaries").

Each observed session is one item: its summary, scored against the query with Okapi BM25
(tokenisation of :mod:`.bm25`). ``summaries: dataset`` reads the summaries a source ships (MSC,
Conversation Chronicles, LoCoMo's ``session_summary``, the synthetic data); ``summaries: llm`` has
a language model write one for every observed session through pipelines/llm (``summary_llm``;
:class:`pipelines.memory.writers.LLMSummariser`, batched over every session in ``prepare``, its
calls in the response cache), so data without summaries (LongMemEval, RealMem) gets the strategy
too. Sessions without a summary (or turns) are not indexed. Items carry session ids only, so the
strategy is scored at session granularity.

Forgetting: a summary is derived from all of its session's turns, so it is removed when its
session is selected, when any of its turns is selected (``turn_ids`` are resolved to their
session at observe time), or when it is about a selected speaker by the shared rule
(:meth:`~pipelines.memory.base.Selector.about`): the speaker took part in the session (the main
speaker, the partner or any speaker of its turns: the summary is about their conversation), or
the summary names them. A model-written summary's request leaves the writer's memo and the
response cache with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import ConfigError, DataError
from pipelines.llm.config import DEFAULT_CACHE_DIR as LLM_CACHE_DIR
from pipelines.memory.base import (MemoryStrategy, Retrieved, Selector, StrategyConfig, check_k,
                                   register_strategy, session_participants)
from pipelines.lexical import bm25_tokens
from pipelines.memory.bm25 import bm25_scores


@dataclass(frozen=True)
class SessionSummaryConfig(StrategyConfig):
    """Session-summary retrieval settings (BM25 over summaries)."""

    k1: float = 1.5                # BM25 term-frequency saturation
    b: float = 0.75                # BM25 length normalisation
    epsilon: float = 0.25          # BM25 floor for negative IDFs
    remove_stopwords: bool = True  # drop English stop words (as in bm25)
    summaries: Literal["dataset", "llm"] = "dataset"  # the source's Session.summary, or written by summary_llm
    summary_llm: dict[str, Any] | None = None  # "llm" only: LLM settings as llm.reader's ({backend, model, ...})
    # true: a system message asks an instruction model for the summary (pipelines.memory.writers.SUMMARY_INSTRUCTION);
    # false: the prompt of the small profile's G-Long summariser, for its adapter (pipelines/glong/summariser.py)
    summary_llm_instructed: bool = True
    llm_cache_dir: str | None = LLM_CACHE_DIR  # the LLM layer's response cache (and converted models) of summary_llm

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.b <= 1.0 or self.k1 < 0 or self.epsilon < 0:
            raise ConfigError(f"session_summary needs k1 >= 0, 0 <= b <= 1 and epsilon >= 0; "
                              f"got k1={self.k1}, b={self.b}, epsilon={self.epsilon}.")
        if self.summaries not in ("dataset", "llm"):
            raise ConfigError(f"session_summary.summaries must be 'dataset' or 'llm', got {self.summaries!r}.")
        from pipelines.memory.writers import check_writer_llm

        check_writer_llm("summariser", self.summary_llm, "session_summary.summary_llm", self.summaries == "llm",
                         why_wanted="session_summary.summaries is 'llm'",
                         why_unused="session_summary.summaries is 'dataset': the language model writes the summaries "
                                    "only with summaries: llm",
                         example="{backend: local, model: smollm2-135m-instruct}")
        if not isinstance(self.summary_llm_instructed, bool):
            raise ConfigError(f"session_summary.summary_llm_instructed must be true or false, got "
                              f"{self.summary_llm_instructed!r}.")


@dataclass(frozen=True)
class _SummaryItem:
    session_id: str
    text: str
    participants: frozenset[str]  # who took part in the session (main speaker, partner, turn speakers)
    turn_ids: frozenset[str]
    timestamp: object
    order: int
    request: str | None = None    # summaries llm: what the writer was asked (its answer leaves the cache on forget)


@register_strategy("session_summary")
class SessionSummary(MemoryStrategy):
    """BM25 over the summaries of the observed sessions."""

    config_class = SessionSummaryConfig
    granularities = ("session",)

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        """With ``summaries: dataset``, the data has no session summary (RealMem, LongMemEval): nothing would ever
        enter memory. A language model (``summaries: llm``) summarises any session with turns."""
        sessions = [s for e in episodes for s in e.sessions]
        if settings.get("summaries", SessionSummaryConfig.summaries) == "llm":
            if any(s.turns for s in sessions):
                return None
            return f"none of the {len(sessions)} sessions of the {len(episodes)} episodes has a turn to summarise"
        if any(s.summary and s.summary.strip() for s in sessions):
            return None
        return (f"the data has no session summaries (none of the {len(sessions)} sessions of the "
                f"{len(episodes)} episodes has one), and this strategy retrieves over them; set summaries: llm "
                f"and summary_llm to have a language model write them")

    def __init__(self, config=None, counter=None, summariser=None):
        super().__init__(config, counter)
        c: SessionSummaryConfig = self.config
        if summariser is None and c.summaries == "llm":
            from pipelines.memory.writers import shared_writer

            summariser = shared_writer("summariser", c.summary_llm, c.llm_cache_dir, role="session_summary.summary_llm",
                                       instructed=c.summary_llm_instructed)
        self.summariser = summariser   # sessions -> summaries (pipelines.memory.writers.LLMSummariser), or None
        self.reset()

    def prepare(self, episodes: Sequence[Episode]) -> None:
        """With ``summaries: llm``, summarise every session of ``episodes`` in one batched call (the writer memoises
        them for ``observe``) and log what its calls cost. Nothing enters memory."""
        if self.summariser is None:
            return
        self.summariser([s for e in episodes for s in e.sessions if s.turns])
        if hasattr(self.summariser, "log_report"):
            self.summariser.log_report()

    def _empty_scope(self) -> dict:
        return {"_items": [],     # the episode's summaries (_SummaryItem), in observation order
                "_docs": [],      # their BM25 tokens
                "_seen": set()}   # observed session ids

    def __len__(self) -> int:
        return len(self._items)

    def observe(self, episode: Episode, session: Session) -> None:
        self.enter(episode)
        if session.id in self._seen:
            raise DataError("session observed twice; each finished session enters memory once",
                            record=f"episode {episode.id}, session {session.id}", rule="observe_once")
        self._seen.add(session.id)
        summary, request = session.summary, None
        if self.summariser is not None:
            summary = self.summariser([session])[0] if session.turns else None
            request = self.summariser.request(session) if session.turns and hasattr(self.summariser, "request") \
                else None
        if not summary or not summary.strip():
            return
        self._items.append(_SummaryItem(session.id, summary, session_participants(episode, session),
                                        frozenset(t.id for t in session.turns), session.timestamp,
                                        session.index, request))
        self._docs.append(bm25_tokens(summary, self.config.remove_stopwords))

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        if not self._items:
            return []
        c = self.config
        scores = bm25_scores(self._docs, bm25_tokens(query.question, c.remove_stopwords), c.k1, c.b, c.epsilon)
        order = np.asarray([i.order for i in self._items])
        ranking = np.lexsort((-order, -scores))[:k]  # score desc, then newer first
        return [Retrieved(score=float(scores[j]), text=self._items[j].text, session_id=self._items[j].session_id,
                          timestamp=self._items[j].timestamp, order=self._items[j].order) for j in ranking]

    def forget(self, selector: Selector) -> int:
        keep = [not selector.matches(session_id=i.session_id, turns=i.turn_ids, participants=i.participants,
                                     text=i.text) for i in self._items]
        removed = keep.count(False)
        # a model-written summary's request (its session's dialogue) goes with the summary, or alone when it holds
        # something about a selected speaker that the kept summary does not repeat
        stale = {i.request for i, k in zip(self._items, keep)
                 if i.request is not None and (not k or selector.about(text=i.request))}
        if stale and hasattr(self.summariser, "forget"):
            self.summariser.forget(sorted(stale))
        self._items = [dataclasses.replace(i, request=None) if i.request in stale else i
                       for i, k in zip(self._items, keep) if k]
        self._docs = [d for d, k in zip(self._docs, keep) if k]
        self._seen -= set(selector.session_ids)
        return removed
