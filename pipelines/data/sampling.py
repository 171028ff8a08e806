"""Subsets of examples that every stage draws the same way.

:func:`evenly_spaced` keeps at most ``n`` items spread evenly over the list, in their order: item
``floor(i * N / n)`` for ``i = 0 .. n-1``, so every part of the data (every session number, every dataset of a
concatenation) is represented in a capped evaluation, and the same cap always picks the same items.
:func:`seeded_sample` keeps a seeded random sample, in their order: a training subset, or questions scored where
a stage has always drawn them at random.
"""

from __future__ import annotations

import random
from typing import Sequence


def evenly_spaced(items: Sequence, n: int | None) -> list:
    """At most ``n`` of ``items``, evenly spaced, in their original order (all of them when ``n`` is None)."""
    if n is None or len(items) <= n:
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]


def seeded_sample(items: Sequence, n: int | None, seed: int | str) -> list:
    """At most ``n`` of ``items``, a sample seeded by ``seed``, in their original order (all of them when ``n`` is
    None)."""
    if n is None or len(items) <= n:
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]
