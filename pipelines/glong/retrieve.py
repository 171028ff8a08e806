"""Associative memory retrieval of G-Long (seed 003, section 3.4) and the MEMORY prompt block
(section 3.5).

Given the current utterance u and the graph memory bank:

1. Anchor nodes: the ``k_anchor`` entities v maximising cos(E(u), E(v)) in the entity index.
2. Candidate expansion: every triplet within ``hops`` hops of an anchor (paper: h = 1).
3. Coarse ranking: the top ``coarse_n`` candidates by cos(E(u), E(serialise(triplet))).
4. Fine ranking, Eq. (4):
       score(e) = a * sim(u, e) + b * I_e + c * exp(-lambda * (t_now - t_access(e)))
   with I_e the importance of Eq. (3) and the age in hours; the top ``final_k`` are kept and
   their last-accessed time is set to t_now.
5. Prompt: each kept triplet serialised as "subject relation object", one per line, in a single
   block headed "MEMORY:".

Project choices where the paper is silent (all configurable in :class:`RetrievalConfig`):
repeated mentions of the same fact (identical serialised text) count once (``dedupe``; the
mention with the best b*I + c*recency represents it); ties keep the older triplet first.
A ranking deeper than the coarse pool (``depth`` > N, e.g. for Recall@10) repeats the two stages
on what is left: candidates in similarity order are cut into tiers of N, each tier re-ranked by
Eq. (4); so its first ``final_k`` items are exactly the paper's, and only those count as accessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pipelines.glong.config import RetrievalConfig
from pipelines.glong.graph import GraphMemoryBank, StoredFact

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class ScoredFact:
    """A retrieved triplet with the terms of its Eq. (4) score."""

    fact: StoredFact       # the stored edge (last_accessed as it was before this retrieval)
    score: float           # a*sim + b*importance + c*recency
    sim: float             # cosine of the serialised triplet to the utterance
    recency: float         # exp(-lambda * age in hours since last access)

    @property
    def text(self) -> str:
        return self.fact.text


def hybrid_scores(sim: np.ndarray, importance: np.ndarray, last_accessed: np.ndarray, now: float,
                  config: RetrievalConfig) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (4) for C candidates: returns (score (C,), recency (C,)). Times in seconds."""
    age_hours = np.maximum(now - last_accessed, 0.0) / SECONDS_PER_HOUR      # (C,)
    recency = np.exp(-config.lam * age_hours)                                 # (C,)
    return config.a * sim + config.b * importance + config.c * recency, recency


def _top(values: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n largest values, best first; ties keep the earlier position."""
    if values.shape[0] > 4 * n:  # partial selection first, then an exact stable sort of the few
        kth = np.partition(-values, n - 1)[n - 1]
        pool = np.flatnonzero(-values <= kth)
        return pool[np.argsort(-values[pool], kind="stable")][:n]
    return np.argsort(-values, kind="stable")[:n]


def retrieve(bank: GraphMemoryBank, utterance: str, now: float,
             config: RetrievalConfig | None = None, depth: int | None = None) -> list[ScoredFact]:
    """The best triplets for ``utterance`` at time ``now`` (POSIX seconds), best first.

    Returns ``depth`` items (default: ``final_k``); the first ``final_k`` are the kept triplets
    whose last-accessed time is updated.
    """
    config = config or RetrievalConfig()
    depth = config.final_k if depth is None else depth
    if depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    if len(bank) == 0:
        return []
    query = bank.embed_query(utterance)                                      # (D,)
    anchors = bank.nearest_vids(query, config.k_anchor)                      # (k,) step 1
    tids = bank.tids_within(anchors, config.hops)                            # (C,) step 2
    if tids.size == 0:
        return []
    vectors, importance, accessed, keys, shared = bank.gather(tids)          # (C, D), (C,) x 4
    sim = vectors @ query                                                    # (C,) cosines
    score, recency = hybrid_scores(sim, importance, accessed, now, config)   # (C,), (C,)
    if config.dedupe:  # one representative per text: the best fine score (ties: older tid)
        if shared.any():   # texts stored more than once; the rest are unique and stay as they are
            rows = np.flatnonzero(shared)
            order = rows[np.lexsort((tids[rows], -score[rows]))]
            _, first = np.unique(keys[order], return_index=True)
            keep = np.sort(np.concatenate([np.flatnonzero(~shared), order[first]]))  # tid order
            tids, sim, score, recency = tids[keep], sim[keep], score[keep], recency[keep]
    n = config.coarse_n
    by_sim = _top(sim, max(n, depth))                                        # step 3 (coarse)
    ranking = np.concatenate([tier[np.argsort(-score[tier], kind="stable")]  # step 4 (fine)
                              for tier in np.split(by_sim, range(n, by_sim.size, n))])[:depth]
    kept = [ScoredFact(bank.fact(int(tids[j])), float(score[j]), float(sim[j]), float(recency[j]))
            for j in ranking]
    if config.update_access:
        bank.touch([s.fact.tid for s in kept[:config.final_k]], now)
    return kept


def memory_block(lines: Sequence[str], header: str = "MEMORY:") -> str:
    """The prompt block of section 3.5: ``header`` then one "subject relation object" per line."""
    return "\n".join([header, *lines]) if lines else ""


def format_memory(items: Sequence[ScoredFact], header: str = "MEMORY:") -> str:
    """Serialise retrieved triplets into one MEMORY block (empty string when nothing came back)."""
    return memory_block([item.text for item in items], header)
