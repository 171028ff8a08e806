"""The vectorised bank and retrieval against a straightforward reference on random graphs.

The reference follows section 3.4 step by step in plain Python over the bank's networkx graph:
anchors by a full float32 scan of the entity vectors (faiss ``IndexFlatIP``; equal scores: the
older entity), candidates by walking networkx adjacency, per-candidate Eq. (4) scores, one
representative per text (best fine score, then older tid), coarse top-N by similarity (then older
tid), fine re-ranking in tiers of N, last-accessed update of the kept top-k. Entities, texts and
queries get random Gaussian vectors, so no two similarities tie by chance; repeated texts,
self-loops, hub entities and deletions between queries are all part of the graphs.
"""

from __future__ import annotations

import math
import random

import faiss
import numpy as np
import pytest

from pipelines.data.schema import Triplet
from pipelines.glong.config import RetrievalConfig
from pipelines.glong.graph import GraphMemoryBank, NewFact
from pipelines.glong.retrieve import retrieve
from tests.glong.helpers import TableEmbedder

H = 3600.0
RELATIONS = ["likes", "owns", "visited", "fears", "friend_of"]


def ref_edges_within(graph, nodes, hops):
    reached, frontier = set(nodes), set(nodes)
    for _ in range(hops - 1):
        step = set()
        for n in frontier:
            step.update(graph.successors(n))
            step.update(graph.predecessors(n))
        frontier = step - reached
        reached |= frontier
    return sorted({k for n in reached for _, _, k in
                   list(graph.out_edges(n, keys=True)) + list(graph.in_edges(n, keys=True))})


def ref_anchors(bank, query, k):
    keys = list(bank.graph.nodes)
    vids = np.array([bank.graph.nodes[n]["vid"] for n in keys], dtype=np.int64)
    vecs = np.asarray(bank.embedder.embed([bank.graph.nodes[n]["name"] for n in keys]),
                      dtype=np.float32)
    flat = faiss.IndexFlatIP(vecs.shape[1])
    flat.add(vecs)
    scores, rows = flat.search(query.reshape(1, -1), len(keys))
    score = np.empty(len(keys), dtype=np.float32)
    score[rows[0]] = scores[0]
    order = sorted(range(len(keys)), key=lambda i: (-score[i], vids[i]))[:k]
    return [keys[i] for i in order]


def ref_retrieve(bank, accessed, utterance, now, cfg, depth):
    """Plain-Python section 3.4; ``accessed`` (tid -> last accessed) is updated like the bank."""
    q = np.asarray(bank.embedder.embed([utterance]), dtype=np.float32)[0]
    tids = ref_edges_within(bank.graph, ref_anchors(bank, q, cfg.k_anchor), cfg.hops)
    rows = []
    for tid in tids:
        f = bank.fact(tid)
        sim = float(np.dot(bank.embedder.embed([f.text])[0].astype(np.float64), q))
        recency = math.exp(-cfg.lam * max(now - accessed[tid], 0.0) / H)
        rows.append((tid, f.text, sim, cfg.a * sim + cfg.b * f.importance + cfg.c * recency))
    if cfg.dedupe:
        best = {}
        for row in sorted(rows, key=lambda r: (-r[3], r[0])):
            best.setdefault(row[1], row)
        rows = sorted(best.values())
    coarse = sorted(rows, key=lambda r: (-r[2], r[0]))[:max(cfg.coarse_n, depth)]
    n = cfg.coarse_n
    ranking = [r for i in range(0, len(coarse), n)
               for r in sorted(coarse[i:i + n], key=lambda r: -r[3])][:depth]
    if cfg.update_access:
        for tid, *_ in ranking[:cfg.final_k]:
            accessed[tid] = max(accessed[tid], now)
    return [r[0] for r in ranking]


def random_world(seed, n_entities=40, n_facts=300, dim=16):
    rng = random.Random(seed)
    names = [f"entity {i}" for i in range(n_entities)]
    hubs = names[:3]                                       # speakers: most facts touch them
    rows = []
    for i in range(n_facts):
        s = rng.choice(hubs) if rng.random() < 0.7 else rng.choice(names)
        o = s if rng.random() < 0.03 else rng.choice(names)     # a few self-loops
        r = rng.choice(RELATIONS)
        if rows and rng.random() < 0.1:                          # repeated mentions
            s, r, o = rows[rng.randrange(len(rows))][:3]
        rows.append((s, r, o, rng.uniform(0.0, 1.0), i // 10))
    texts = set(names) | {Triplet(subject=s, relation=r, object=o).serialise()
                          for s, r, o, *_ in rows}
    queries = [f"question {i}" for i in range(30)]
    vec_rng = np.random.default_rng(seed)
    table = {t: vec_rng.normal(size=dim) for t in sorted(texts | set(queries))}
    facts = [NewFact(Triplet(subject=s, relation=r, object=o), importance=imp,
                     time=session * 6 * H, turn_id=f"S{session}:T{i}", session_id=f"S{session}",
                     speaker=s) for i, (s, r, o, imp, session) in enumerate(rows)]
    return TableEmbedder(table), facts, queries


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("entity_index", ["flat", "hnsw"])
def test_incidence_index_follows_inserts_and_deletions(seed, entity_index):
    embedder, facts, _ = random_world(seed)
    bank = GraphMemoryBank(embedder, entity_index)
    rng = random.Random(seed)
    for start in range(0, len(facts), 25):
        bank.add(facts[start:start + 25])
        if rng.random() < 0.5:                               # delete a few triplets
            bank.remove_triplets(rng.sample(sorted(bank._ends), min(5, len(bank))))
        if rng.random() < 0.2:                               # and now and then an entity
            bank.remove_entity(rng.choice(list(bank.graph.nodes)))
        assert bank.integrity_errors() == []
        for key in rng.sample(list(bank.graph.nodes), min(8, bank.n_entities)):
            for hops in (1, 2, 3):
                assert bank.edges_within([key], hops).tolist() == \
                    ref_edges_within(bank.graph, [key], hops)
        several = rng.sample(list(bank.graph.nodes), min(4, bank.n_entities))
        assert bank.edges_within(several, 1).tolist() == ref_edges_within(bank.graph, several, 1)
    for tid in bank._ends:                                   # same-text flags
        text = bank.fact(tid).text
        assert bank.shares_text(np.array([tid]))[0] == \
            (sum(bank.fact(t).text == text for t in bank._ends) > 1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("cfg, depth", [
    (RetrievalConfig(), None),                                           # the defaults: 5 -> 3
    (RetrievalConfig(k_anchor=3, hops=2, coarse_n=4, final_k=2, lam=0.05), 11),   # tiers, h = 2
    (RetrievalConfig(k_anchor=8, coarse_n=6, final_k=6, dedupe=False, a=2.0, c=0.5), None),
])
def test_retrieve_equals_the_reference(seed, cfg, depth):
    embedder, facts, queries = random_world(seed)
    bank = GraphMemoryBank(embedder, "flat")
    half = len(facts) // 2
    bank.add(facts[:half])
    accessed = {f.tid: f.last_accessed for f in bank.facts()}
    now = 40 * 6 * H
    depth_ = cfg.final_k if depth is None else depth
    for i, q in enumerate(queries):
        if i == 10:                                          # more facts arrive
            tids = bank.add(facts[half:])
            accessed.update({t: bank.fact(t).last_accessed for t in tids})
        if i == 20:                                          # some are forgotten
            gone = bank.remove_triplets(sorted(bank._ends)[::7]) + \
                bank.remove_entity("entity 7")
            for tid in gone:
                accessed.pop(tid)
        now += H
        want = ref_retrieve(bank, accessed, q, now, cfg, depth_)
        got = retrieve(bank, q, now, cfg, depth=depth)
        assert [s.fact.tid for s in got] == want
        assert {f.tid: f.last_accessed for f in bank.facts()} == accessed
    assert bank.integrity_errors() == []
