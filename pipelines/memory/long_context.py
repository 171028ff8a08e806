"""``long_context``: the full history in the generator's window (METHODS.md section 6).

The baseline of putting every earlier turn into the context: the history is cut to
``budget_tokens`` by keeping the most recent whole turns (the oldest fall out of the window
first), written in chronological order. Its retrieval ranking is the same recency order:
turns in reverse chronological order, score = -(number of newer turns), so the newest turn
scores 0, the one before -1, and so on. Whole turns only: a turn that does not fit whole ends
the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.data.schema import Query
from pipelines.memory.base import StrategyConfig, pack_context, register_strategy
from pipelines.memory.turn_store import TurnStrategy


@dataclass(frozen=True)
class LongContextConfig(StrategyConfig):
    """Long-context settings (``context_k`` is not used: the window holds as many turns as fit)."""


@register_strategy("long_context")
class LongContext(TurnStrategy):
    """All turns, newest first; the context is the most recent window that fits the budget."""

    config_class = LongContextConfig

    def _scores(self, query: Query) -> np.ndarray:
        order = np.asarray([i.order for i in self._items], dtype=np.float64)  # (N,)
        # newest turn: 0; each older turn one less (observation order is chronological)
        return -(np.argsort(np.argsort(-order)).astype(np.float64))

    def context(self, query: Query, budget_tokens: int) -> str:
        newest_first = sorted(self._items, key=lambda i: i.order, reverse=True)
        return pack_context([i.retrieved(0.0) for i in newest_first], budget_tokens, self.counter,
                            self.config.include_dates)
