"""Turn-granularity memory: the store shared by strategies that index every observed turn.

A subclass says how to score the held turns against a query (``_scores``) and may keep an index
in step with the store through ``_on_add`` / ``_on_remove``, its per-episode part declared in
``_empty_scope`` (:mod:`.base`: one store per episode). Ranking is by score, highest first; ties go
to the more recent turn (a deterministic order that favours the newest value of a fact when nothing
else separates two turns).

Forgetting applies the shared rule of :meth:`~pipelines.memory.base.Selector.about`: a turn goes
when it was said by a selected speaker, said in a session that speaker took part in (what was said
to them), or names them; the participants of each observed session are kept for that.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

import numpy as np

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import DataError
from pipelines.memory.base import MemoryStrategy, Retrieved, Selector, check_k, session_participants
from pipelines.memory.index import top_k


@dataclass(frozen=True)
class TurnItem:
    """One observed turn with the ids and time it came from."""

    turn_id: str
    session_id: str
    session_index: int
    speaker: str
    text: str
    timestamp: datetime | None
    order: int  # 0, 1, 2, ... in observation order (chronological under the temporal protocol)

    def indexed_text(self, include_speaker: bool) -> str:
        """What an index reads: ``"Wren: I collect old maps."`` or the bare text."""
        return f"{self.speaker}: {self.text}" if include_speaker else self.text

    def retrieved(self, score: float) -> Retrieved:
        return Retrieved.built(float(score), self.text, self.session_id, self.turn_id, None, self.speaker,
                               self.timestamp, self.order)


def retrieved_turns(items: Sequence[TurnItem], rows: np.ndarray, scores: np.ndarray) -> list[Retrieved]:
    """The turns at ``rows`` (k,) of the store with their ``scores`` (k,), in that order."""
    return [items[j].retrieved(v) for j, v in zip(rows.tolist(), scores.tolist())]


class TurnStrategy(MemoryStrategy):
    """Base of the turn-level strategies: holds the turns, handles observe / forget / reset."""

    granularities = ("turn", "session")

    def __init__(self, config=None, counter=None):
        super().__init__(config, counter)
        self.reset()

    def _empty_scope(self) -> dict:
        return {"_items": [],           # the held turns of the episode, in observation order
                "_sessions": {}}        # observed session id -> its participants

    def __len__(self) -> int:
        return len(self._items)

    @property
    def items(self) -> tuple[TurnItem, ...]:
        return tuple(self._items)

    def observe(self, episode: Episode, session: Session) -> None:
        self.enter(episode)
        if session.id in self._sessions:
            raise DataError("session observed twice; each finished session enters memory once",
                            record=f"episode {episode.id}, session {session.id}", rule="observe_once")
        self._sessions[session.id] = session_participants(episode, session)
        new = []
        for turn in session.turns:
            new.append(TurnItem(turn.id, session.id, session.index, turn.speaker, turn.text,
                                session.timestamp, self._next_order))
            self._next_order += 1
        self._items.extend(new)
        self._on_add(new)

    def forget(self, selector: Selector) -> int:
        keep = [not selector.matches(turn_id=i.turn_id, session_id=i.session_id, speakers=(i.speaker,),
                                     participants=self._sessions.get(i.session_id, ()), text=i.text)
                for i in self._items]
        removed = [i for i, k in zip(self._items, keep) if not k]
        if removed:
            self._items = [i for i, k in zip(self._items, keep) if k]
            self._on_remove(removed, np.asarray(keep, dtype=bool))
        for sid in selector.session_ids:
            self._sessions.pop(sid, None)
        if selector.speakers:  # their names leave the record of who took part, as everything said to them did
            self._sessions = {sid: selector.scrub(names) for sid, names in self._sessions.items()}
        return len(removed)

    def reset(self) -> None:
        super().reset()
        self._next_order = 0  # over every episode: an item's order is unique in the strategy

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        """The ``k`` best held turns: score desc, then newer first, selected in O(N) (:func:`~.index.top_k`)."""
        check_k(k)
        if not self._items:
            return []
        scores, background = self._ranked_scores(query, k)          # (N,)
        # rows ascend in observation order (observe appends, forget keeps the order): a later row is a newer turn
        ranking = top_k(scores, k, background)
        return retrieved_turns(self._items, ranking, scores[ranking])

    # --- hooks ------------------------------------------------------------------
    @abstractmethod
    def _scores(self, query: Query) -> np.ndarray:
        """One score per held turn (N,), in store order; higher is better."""

    def _ranked_scores(self, query: Query, k: int) -> tuple[np.ndarray, float | None]:
        """What :meth:`retrieve` ranks for ``k`` items: the scores (N,) and the value most of them hold, if one
        does (a hint that speeds the selection; BM25: 0, an approximate search: -inf). Default: ``_scores``."""
        return np.asarray(self._scores(query), dtype=np.float64), None

    def _on_add(self, new: list[TurnItem]) -> None:
        """New turns were appended to the store."""

    def _on_remove(self, removed: list[TurnItem], keep: np.ndarray) -> None:
        """``removed`` left the store; ``keep`` (N_before,) is the mask of the rows that stayed."""

    def held_texts(self, text_of) -> set[str]:
        """``text_of(item)`` of every turn still held, in every episode's store (a cached vector of a
        forgotten text is deleted only when no held turn has the same text)."""
        return {text_of(i) for state in self.held_scopes() for i in state["_items"]}
