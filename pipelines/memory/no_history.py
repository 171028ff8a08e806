"""``no_history``: the baseline without memory (METHODS.md section 6, "no history").

It observes sessions and keeps nothing: every retrieval is empty and the context is the empty
string, so its retrieval metrics are 0 and its context costs 0 tokens. It marks the floor every
other strategy must clear.
"""

from __future__ import annotations

from pipelines.data.schema import Episode, Query, Session
from pipelines.memory.base import MemoryStrategy, Retrieved, Selector, check_k, register_strategy


@register_strategy("no_history")
class NoHistory(MemoryStrategy):
    """Remembers nothing."""

    def observe(self, episode: Episode, session: Session) -> None:
        self.enter(episode)

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        return []

    def context(self, query: Query, budget_tokens: int) -> str:
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}.")
        return ""

    def forget(self, selector: Selector) -> int:
        return 0

    def __len__(self) -> int:
        return 0
