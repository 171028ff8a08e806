"""``session_summary``: retrieval over session summaries (METHODS.md section 6, "session summaries").

Where a source ships a summary per session (MSC, Conversation Chronicles, LoCoMo's
``session_summary``, the synthetic data), each observed session is one item: its summary,
scored against the query with Okapi BM25 (tokenisation of :mod:`.bm25`). Sessions without a
summary are not indexed. Items carry session ids only, so the strategy is scored at session
granularity. Generating summaries with a model is a later strategy; this one reads the
published ones.

Forgetting: a summary is derived from all of its session's turns, so it is removed when its
session is selected, when any of its turns is selected (``turn_ids`` are resolved to their
session at observe time), or when it is about a selected speaker by the shared rule
(:meth:`~pipelines.memory.base.Selector.about`): the speaker took part in the session (the main
speaker, the partner or any speaker of its turns: the summary is about their conversation), or
the summary names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import ConfigError, DataError
from pipelines.memory.base import (MemoryStrategy, Retrieved, Selector, StrategyConfig, check_k,
                                   register_strategy, session_participants)
from pipelines.memory.bm25 import bm25_scores, bm25_tokens


@dataclass(frozen=True)
class SessionSummaryConfig(StrategyConfig):
    """Session-summary retrieval settings (BM25 over summaries)."""

    k1: float = 1.5                # BM25 term-frequency saturation
    b: float = 0.75                # BM25 length normalisation
    epsilon: float = 0.25          # BM25 floor for negative IDFs
    remove_stopwords: bool = True  # drop English stop words (as in bm25)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.b <= 1.0 or self.k1 < 0 or self.epsilon < 0:
            raise ConfigError(f"session_summary needs k1 >= 0, 0 <= b <= 1 and epsilon >= 0; "
                              f"got k1={self.k1}, b={self.b}, epsilon={self.epsilon}.")


@dataclass(frozen=True)
class _SummaryItem:
    session_id: str
    text: str
    participants: frozenset[str]  # who took part in the session (main speaker, partner, turn speakers)
    turn_ids: frozenset[str]
    timestamp: object
    order: int


@register_strategy("session_summary")
class SessionSummary(MemoryStrategy):
    """BM25 over the summaries of the observed sessions."""

    config_class = SessionSummaryConfig
    granularities = ("session",)

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        """The data has no session summary (RealMem, LongMemEval): nothing would ever enter memory."""
        sessions = [s for e in episodes for s in e.sessions]
        if any(s.summary and s.summary.strip() for s in sessions):
            return None
        return (f"the data has no session summaries (none of the {len(sessions)} sessions of the "
                f"{len(episodes)} episodes has one), and this strategy retrieves over them")

    def __init__(self, config=None, counter=None):
        super().__init__(config, counter)
        self.reset()

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
        if not session.summary or not session.summary.strip():
            return
        self._items.append(_SummaryItem(session.id, session.summary, session_participants(episode, session),
                                        frozenset(t.id for t in session.turns), session.timestamp,
                                        session.index))
        self._docs.append(bm25_tokens(session.summary, self.config.remove_stopwords))

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
        self._items = [i for i, k in zip(self._items, keep) if k]
        self._docs = [d for d, k in zip(self._docs, keep) if k]
        self._seen -= set(selector.session_ids)
        return removed
