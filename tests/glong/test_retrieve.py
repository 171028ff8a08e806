"""Tests of pipelines/glong/retrieve.py (G-Long section 3.4, Eq. 4) on hand-set embeddings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.data.schema import Triplet
from pipelines.errors import ConfigError
from pipelines.glong.config import RetrievalConfig
from pipelines.glong.graph import GraphMemoryBank, NewFact
from pipelines.glong.retrieve import format_memory, hybrid_scores, memory_block, retrieve
from tests.glong.helpers import TableEmbedder

H = 3600.0
NOW = 1000 * H


def unit(c: float) -> list[float]:
    """A vector whose cosine with the query [1, 0, 0, 0] is exactly c."""
    return [c, math.sqrt(1 - c * c), 0.0, 0.0]


# The query points along axis 0. "Juno" is the only entity along it (cosine 1), "stamps" is at 0.6,
# everything else is orthogonal. Triplet-text cosines to the query are set by unit(c).
TABLE = {
    "what about juno": [1, 0, 0, 0],
    "Juno": [1, 0, 0, 0], "stamps": unit(0.6), "a bakery": [0, 0, 1, 0], "a piano": [0, 0, 0, 1],
    "spiders": [0, 0, 1, 1], "Wren": [0, 1, 1, 0], "a brewery": [0, 1, 0, 1],
    "Juno collects stamps": unit(0.9),
    "Juno works at a bakery": unit(0.8),
    "Juno saving for a piano": unit(0.7),
    "Juno afraid of spiders": unit(0.1),
    "Wren works at a brewery": unit(0.95),
}


def fact(s, r, o, importance, hours_ago=0.0, turn="T", session="S1", speaker="Juno"):
    return NewFact(Triplet(subject=s, relation=r, object=o), importance=importance,
                   time=NOW - hours_ago * H, turn_id=turn, session_id=session, speaker=speaker)


@pytest.fixture
def bank():
    b = GraphMemoryBank(TableEmbedder(TABLE))
    b.add([fact("Juno", "collects", "stamps", 0.1, turn="T0"),          # tid 0, sim .9
           fact("Juno", "works_at", "a bakery", 1.0, turn="T1"),         # tid 1, sim .8
           fact("Juno", "saving_for", "a piano", 0.5, turn="T2"),        # tid 2, sim .7
           fact("Wren", "works_at", "a brewery", 1.0, turn="T3", speaker="Wren"),  # tid 3, .95
           fact("Juno", "afraid_of", "spiders", 1.0, turn="T4")])        # tid 4, sim .1
    return b


def tids(items):
    return [i.fact.tid for i in items]


def test_hybrid_scores_exact():
    cfg = RetrievalConfig(a=1.0, b=1.0, c=1.0, lam=math.log(2) / 10)  # half-life of 10 hours
    score, recency = hybrid_scores(np.array([0.5, 0.25]), np.array([1.0, 0.5]),
                                   np.array([NOW - 10 * H, NOW]), NOW, cfg)
    assert recency.tolist() == pytest.approx([0.5, 1.0], abs=1e-12)
    assert score.tolist() == pytest.approx([2.0, 1.75], abs=1e-12)
    weighted = RetrievalConfig(a=2.0, b=0.5, c=0.0, lam=1.0)
    score, _ = hybrid_scores(np.array([0.5]), np.array([1.0]), np.array([NOW]), NOW, weighted)
    assert score.tolist() == [1.5]


def test_future_access_counts_as_age_zero():
    score, recency = hybrid_scores(np.array([0.0]), np.array([0.0]), np.array([NOW + H]), NOW,
                                   RetrievalConfig(a=1, b=0, c=1))
    assert recency.tolist() == [1.0]


def test_coarse_then_fine(bank):
    """Anchor Juno; 1-hop candidates exclude Wren's fact; coarse keeps the 3 most similar
    (tids 0, 1, 2), fine re-ranks them by sim + importance: 1.8 (tid 1) > 1.2 (tid 2) > 1.0."""
    cfg = RetrievalConfig(k_anchor=1, hops=1, coarse_n=3, final_k=2, a=1, b=1, c=0)
    got = retrieve(bank, "what about juno", NOW, cfg)
    assert tids(got) == [1, 2]
    assert [g.score for g in got] == pytest.approx([1.8, 1.2], abs=1e-6)
    assert [g.sim for g in got] == pytest.approx([0.8, 0.7], abs=1e-6)
    # tid 4 (importance 1.0, sim 0.1 -> 1.1) would beat tid 0 but never passed the coarse stage
    all3 = retrieve(bank, "what about juno", NOW, RetrievalConfig(k_anchor=1, coarse_n=3,
                                                                   final_k=3, c=0))
    assert tids(all3) == [1, 2, 0]


def test_wider_coarse_pool_lets_importance_win(bank):
    cfg = RetrievalConfig(k_anchor=1, hops=1, coarse_n=4, final_k=4, a=1, b=1, c=0)
    assert tids(retrieve(bank, "what about juno", NOW, cfg)) == [1, 2, 4, 0]


def test_recency_term(bank):
    """Same sim and importance weights off: only exp(-lambda * age) separates the facts."""
    b = GraphMemoryBank(TableEmbedder(TABLE))
    b.add([fact("Juno", "collects", "stamps", 1.0, hours_ago=48),
           fact("Juno", "works_at", "a bakery", 1.0, hours_ago=1)])
    cfg = RetrievalConfig(k_anchor=1, coarse_n=2, final_k=2, a=0, b=0, c=1, lam=math.log(2))
    got = retrieve(b, "what about juno", NOW, cfg)
    assert tids(got) == [1, 0]
    assert [g.recency for g in got] == pytest.approx([0.5, 2.0 ** -48], rel=1e-9)


def test_last_accessed_updated_only_for_kept(bank):
    cfg = RetrievalConfig(k_anchor=1, coarse_n=3, final_k=2, c=0)
    later = NOW + 5 * H
    got = retrieve(bank, "what about juno", later, cfg)
    assert got[0].fact.last_accessed == NOW          # the item shows the time before this access
    assert [bank.fact(t).last_accessed for t in range(5)] == [NOW, later, later, NOW, NOW]
    assert bank._acc[[0, 1, 2]].tolist() == [NOW, later, later]
    retrieve(bank, "what about juno", NOW + 9 * H,
             RetrievalConfig(k_anchor=1, coarse_n=3, final_k=2, c=0, update_access=False))
    assert bank.fact(1).last_accessed == later


def test_deeper_rankings_repeat_coarse_then_fine_in_tiers(bank):
    """N = 2: similarity order 0, 1, 2, 4 is cut into tiers [0, 1] and [2, 4], each re-ranked by
    sim + importance (1.0, 1.8 | 1.2, 1.1); only the first final_k = 1 counts as accessed."""
    cfg = RetrievalConfig(k_anchor=1, coarse_n=2, final_k=1, a=1, b=1, c=0)
    later = NOW + H
    got = retrieve(bank, "what about juno", later, cfg, depth=4)
    assert tids(got) == [1, 0, 2, 4]
    assert [bank.fact(t).last_accessed for t in (0, 1, 2, 4)] == [NOW, later, NOW, NOW]
    assert tids(retrieve(bank, "what about juno", later, cfg)) == [1]     # depth = final_k
    assert tids(retrieve(bank, "what about juno", later, cfg, depth=9)) == [1, 0, 2, 4]
    with pytest.raises(ValueError, match="depth"):
        retrieve(bank, "what about juno", later, cfg, depth=0)


def test_hops_two_reaches_through_neighbours():
    table = {"q": [1, 0, 0], "A": [1, 0, 0], "B": [0, 1, 0], "C": [0, 0, 1], "D": [0, 1, 1],
             "A r B": [1, 1, 0], "B r C": [1, 0, 1], "C r D": [0, 1, 1]}
    b = GraphMemoryBank(TableEmbedder(table))
    b.add([NewFact(Triplet(subject=s, relation="r", object=o)) for s, o in
           [("A", "B"), ("B", "C"), ("C", "D")]])
    assert b.edges_within(["a"], 1).tolist() == [0]
    assert b.edges_within(["a"], 2).tolist() == [0, 1]
    assert b.edges_within(["a"], 3).tolist() == [0, 1, 2]
    assert tids(retrieve(b, "q", 0.0, RetrievalConfig(k_anchor=1, hops=1))) == [0]
    assert tids(retrieve(b, "q", 0.0, RetrievalConfig(k_anchor=1, hops=2))) == [0, 1]


def test_dedupe_keeps_one_mention():
    b = GraphMemoryBank(TableEmbedder(TABLE))
    b.add([fact("Juno", "collects", "stamps", 0.3, turn="S1:T1"),
           fact("Juno", "collects", "stamps", 0.9, turn="S2:T1"),
           fact("Juno", "works_at", "a bakery", 0.2, turn="S2:T3")])
    got = retrieve(b, "what about juno", NOW, RetrievalConfig(k_anchor=1, coarse_n=3, final_k=3))
    assert tids(got) == [1, 2]
    assert got[0].fact.turn_id == "S2:T1"
    raw = retrieve(b, "what about juno", NOW,
                   RetrievalConfig(k_anchor=1, coarse_n=3, final_k=3, dedupe=False))
    assert tids(raw) == [1, 0, 2]


def test_empty_bank_and_memory_block(bank):
    assert retrieve(GraphMemoryBank(TableEmbedder(TABLE)), "what about juno", NOW) == []
    got = retrieve(bank, "what about juno", NOW,
                   RetrievalConfig(k_anchor=1, coarse_n=3, final_k=2, c=0))
    assert format_memory(got) == "MEMORY:\nJuno works at a bakery\nJuno saving for a piano"
    assert format_memory([]) == ""
    assert memory_block(["x y z"], header="[MEMORY]") == "[MEMORY]\nx y z"


@pytest.mark.parametrize("bad, message", [
    (dict(final_k=6, coarse_n=5), "cannot exceed coarse_n"),
    (dict(a=0, b=0, c=0), "all 0"),
    (dict(hops=0), "hops must be a positive integer"),
    (dict(lam=-1.0), "lam must be a finite number >= 0"),
    (dict(k_anchor=True), "k_anchor must be a positive integer"),
])
def test_config_checks(bad, message):
    with pytest.raises(ConfigError, match=message):
        RetrievalConfig(**bad)


def test_config_defaults_and_unknown_keys():
    cfg = RetrievalConfig()
    assert (cfg.hops, cfg.coarse_n, cfg.final_k, cfg.a, cfg.b, cfg.c) == (1, 5, 3, 1.0, 1.0, 1.0)
    assert math.exp(-cfg.lam) == pytest.approx(0.995, abs=1e-15)
    assert RetrievalConfig.from_dict({"final_k": 2}).final_k == 2
    with pytest.raises(ConfigError, match="unknown key"):
        RetrievalConfig.from_dict({"top_k": 2})
