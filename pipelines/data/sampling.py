"""Subsets of examples that every stage draws the same way.

:func:`evenly_spaced` keeps at most ``n`` items spread evenly over the list, in their order: item
``floor(i * N / n)`` for ``i = 0 .. n-1``, so every part of the data (every session number, every dataset of a
concatenation) is represented in a capped evaluation, and the same cap always picks the same items.
"""

from __future__ import annotations

from typing import Sequence


def evenly_spaced(items: Sequence, n: int | None) -> list:
    """At most ``n`` of ``items``, evenly spaced, in their original order (all of them when ``n`` is None)."""
    if n is None or len(items) <= n:
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]
