"""Benchmark: G-Long graph memory retrieval, this project's bank vs. a plain networkx + ChromaDB
implementation of the same steps (what the G-Long paper used, Appendix B "Retrieval Settings").

    .venv/bin/python benchmarks/graph_retrieval.py [--scales 1000 10000 100000] [--queries 200]
                                                   [--out reports/graph_retrieval.json]

For each scale (number of stored triplets) it builds both memories from the same synthetic
conversation (speakers as hub entities, Zipf-distributed objects, ~1.5 triplets per turn, 10 turns
per session), then asks the same queries in the same order at the same time and measures:

- retrieval latency p50 / p95 (ms) of section 3.4: anchors (top-k entities by cosine), 1-hop
  candidates, coarse top-N by triplet cosine, fine Eq. (4) re-ranking, last-accessed update;
  for the bank with its default entity index ("auto": exact up to 10,000 entities, HNSW beyond),
  with the exact index alone ("flat") and with hnswlib alone ("hnsw"), and for the baseline
  ("chroma");
- equal results: in a read-only pass (no last-accessed update), the share of queries whose final
  triplet ids equal those of exact search ("flat"); ChromaDB's and hnswlib's HNSW indexes are
  approximate and may miss or reorder anchors, so this is measured, not assumed;
- ingestion throughput in turns/s (entity + triplet indexing, graph insertion).

Embeddings are computed once before any timing (feature-hashing vectors of all-MiniLM-L6-v2's size,
384, so that 100k triplets embed in seconds, made tie-free as a neural encoder's are: see
:func:`tie_free_vectors`) and served from a table to both systems: neural
extraction and text encoding are excluded from every number, as they cost the same in both. With
``--minilm-reference`` the script also prints what encoding one query with the shipped MiniLM
costs on this machine, for scale.

The baseline needs ChromaDB, an optional extra: ``.venv/bin/pip install -e '.[bench]'``.
This is a benchmark, not a test: it prints a table and the speed-up ratios, and writes JSON with
``--out``. Target (issue 6): at least 10x lower latency at equal results.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pipelines.data.schema import Triplet  # noqa: E402
from pipelines.glong.config import RetrievalConfig  # noqa: E402
from pipelines.glong.embedding import HashingEmbedder  # noqa: E402
from pipelines.glong.graph import GraphMemoryBank, NewFact, entity_key  # noqa: E402
from pipelines.glong.retrieve import retrieve  # noqa: E402

H = 3600.0
OURS = ("auto", "flat", "hnsw")  # this project's bank with each entity index ("auto": the default)
RELATIONS = ["likes", "works_at", "lives_in", "has_pet", "plays", "collects", "visited",
             "saving_for", "afraid_of", "studies", "owns", "cooks", "reads", "wants", "grows",
             "volunteers_at", "drives", "friend_of", "sibling_of", "listens_to", "watches",
             "travels_to", "bakes", "repairs", "teaches", "practices", "supports", "dislikes",
             "recommends", "borrowed"]
ADJECTIVES = ["red", "old", "tiny", "noisy", "golden", "quiet", "spicy", "modern", "rusty",
              "wild", "silver", "frozen", "bright", "sour", "gentle", "heavy", "local", "rare",
              "broken", "shiny", "green", "wooden", "secret", "famous", "cheap", "lucky"]
NOUNS = ["kite", "guitar", "bakery", "harbor", "poodle", "garden", "novel", "bicycle", "museum",
         "teapot", "lantern", "violin", "market", "camera", "island", "recipe", "festival",
         "castle", "canoe", "telescope", "orchard", "library", "puzzle", "scooter", "painting",
         "stadium", "cactus", "kayak", "podcast", "sweater", "jacket", "temple", "piano"]
FIRST = ["Juno", "Wren", "Vivek", "Mia", "Omar", "Lena", "Kai", "Ines", "Tariq", "Noor", "Ravi",
         "Zoe", "Hugo", "Aiko", "Bram", "Cleo", "Dev", "Esme", "Femi", "Gus"]


def tie_free_vectors(texts: list[str], seed: int, jitter: float = 0.1) -> np.ndarray:
    """(N, 384) unit vectors: feature hashing plus a small per-text random direction.

    Feature-hashing vectors tie exactly whenever two texts differ only in words the other text
    lacks ("red kite 12" and "red kite 40" score the same against "the red kite"); the synthetic
    names produce dozens of such ties per query, so which of them an index returns first is
    arbitrary, and "equal to exact" would count tie order rather than missed entities. A neural
    encoder does not tie; a random component of norm ``jitter`` (relative to the unit hashing
    vector) gives the same: lexical overlap still decides the ranking, ties are gone.
    """
    vectors = HashingEmbedder(384).embed(texts)                                  # (N, 384)
    noise = np.random.default_rng(seed).normal(size=vectors.shape).astype(np.float32)
    noise *= jitter / np.linalg.norm(noise, axis=1, keepdims=True)
    vectors = vectors + noise
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class TableEmbedder:
    """Vectors computed before timing, served by text (identical for both systems)."""

    model_name = "hashing-384-table"

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])

    def forget(self, texts) -> int:
        return 0


# --- the synthetic conversation ------------------------------------------------------------------

def make_corpus(n_triplets: int, seed: int) -> tuple[list[list[NewFact]], int]:
    """Sessions of facts (10 turns each, 1-2 triplets per turn); returns (sessions, n_turns)."""
    rng = random.Random(seed)
    n_people = max(10, n_triplets // 200)
    people = [f"{FIRST[i % len(FIRST)]} {i // len(FIRST)}" if i >= len(FIRST) else FIRST[i]
              for i in range(n_people)]
    n_objects = max(50, n_triplets // 2)
    objects = [f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {i}" for i in range(n_objects)]
    weights = [1.0 / (i + 1) ** 0.8 for i in range(n_objects)]  # Zipf-like reuse of objects
    sessions, facts, turn, made = [], [], 0, 0
    while made < n_triplets:
        session = len(sessions)
        speaker = rng.choice(people)
        for _ in range(min(rng.choice((1, 2)), n_triplets - made)):
            relation = rng.choice(RELATIONS)
            obj = rng.choice(people) if relation in ("friend_of", "sibling_of") else \
                rng.choices(objects, weights)[0]
            facts.append(NewFact(Triplet(subject=speaker, relation=relation, object=obj),
                                 importance=rng.uniform(0.05, 1.0), time=session * 6 * H,
                                 turn_id=f"S{session}:T{turn}", session_id=f"S{session}",
                                 speaker=speaker))
            made += 1
        turn += 1
        if turn % 10 == 0 or made == n_triplets:
            sessions.append(facts)
            facts = []
    return sessions, turn


def make_queries(sessions: list[list[NewFact]], n: int, seed: int) -> list[str]:
    rng = random.Random(seed + 1)
    flat = [f for s in sessions for f in s]
    out = []
    for _ in range(n):
        f = rng.choice(flat)
        kind = rng.randrange(3)
        if kind == 0:
            out.append(f"What does {f.triplet.subject} {f.triplet.relation.replace('_', ' ')}?")
        elif kind == 1:
            out.append(f"Tell me about the {f.triplet.object.rsplit(' ', 1)[0]}")
        else:
            out.append(f"Do you remember {f.triplet.subject} and the {f.triplet.object}?")
    return out


# --- the baseline: networkx + ChromaDB, the paper's stack, written plainly ------------------------

class NxChromaMemory:
    """The same steps over a networkx MultiDiGraph and two ChromaDB collections."""

    def __init__(self, embedder, name: str):
        import chromadb
        import networkx as nx
        from chromadb.config import Settings

        self.embedder = embedder
        self.graph = nx.MultiDiGraph()
        client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
        cosine = {"hnsw": {"space": "cosine"}}
        self.entities = client.create_collection(f"entities-{name}", embedding_function=None,
                                                 configuration=cosine)
        self.triplets = client.create_collection(f"triplets-{name}", embedding_function=None,
                                                 configuration=cosine)
        self.next_tid = 0

    def add(self, facts: list[NewFact]) -> None:
        new_keys, new_names, tids, texts = [], [], [], []
        for f in facts:
            for name in (f.triplet.subject, f.triplet.object):
                key = entity_key(name)
                if key not in self.graph and key not in new_keys:
                    self.graph.add_node(key, name=name)
                    new_keys.append(key)
                    new_names.append(name)
            text = f.triplet.serialise()
            self.graph.add_edge(entity_key(f.triplet.subject), entity_key(f.triplet.object),
                                key=self.next_tid, relation=f.triplet.relation, text=text,
                                importance=f.importance, created=f.time, last_accessed=f.time,
                                turn_id=f.turn_id, session_id=f.session_id, speaker=f.speaker)
            tids.append(str(self.next_tid))
            texts.append(text)
            self.next_tid += 1
        if new_keys:
            self.entities.add(ids=new_keys, embeddings=self.embedder.embed(new_names))
        self.triplets.add(ids=tids, embeddings=self.embedder.embed(texts))

    def retrieve(self, utterance: str, now: float, cfg: RetrievalConfig) -> list[int]:
        q = self.embedder.embed([utterance])[0].astype(np.float64)
        k = min(cfg.k_anchor, self.entities.count())
        anchors = self.entities.query(query_embeddings=[q.astype(np.float32)], n_results=k)["ids"][0]
        reached, frontier = set(anchors), set(anchors)
        for _ in range(cfg.hops - 1):
            step = set()
            for n in frontier:
                step.update(self.graph.successors(n))
                step.update(self.graph.predecessors(n))
            frontier = step - reached
            reached |= frontier
        cands = {}
        for n in reached:
            for _, _, key, data in self.graph.out_edges(n, keys=True, data=True):
                cands[key] = data
            for _, _, key, data in self.graph.in_edges(n, keys=True, data=True):
                cands[key] = data
        if not cands:
            return []
        ids = sorted(cands)
        got = self.triplets.get(ids=[str(t) for t in ids], include=["embeddings"])
        vec = dict(zip(got["ids"], got["embeddings"]))
        rows = []
        for tid in ids:
            d = cands[tid]
            sim = float(np.dot(vec[str(tid)], q))
            recency = math.exp(-cfg.lam * max(now - d["last_accessed"], 0.0) / H)
            rows.append((tid, d["text"], sim, cfg.a * sim + cfg.b * d["importance"] + cfg.c * recency))
        if cfg.dedupe:
            best = {}
            for row in sorted(rows, key=lambda r: (-r[3], r[0])):
                best.setdefault(row[1], row)
            rows = sorted(best.values())
        coarse = sorted(rows, key=lambda r: (-r[2], r[0]))[:cfg.coarse_n]
        fine = sorted(coarse, key=lambda r: -r[3])[:cfg.final_k]
        if cfg.update_access:
            for tid, *_ in fine:
                d = cands[tid]
                d["last_accessed"] = max(d["last_accessed"], now)
        return [r[0] for r in fine]


# --- one scale -------------------------------------------------------------------------------------

def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def _ours(bank: GraphMemoryBank, cfg: RetrievalConfig):
    return lambda q, now: [s.fact.tid for s in retrieve(bank, q, now, cfg)]


def _askers(systems: dict, cfg: RetrievalConfig) -> dict:
    """name -> f(utterance, now) -> final tids, for every system under ``cfg``."""
    ask = {name: _ours(systems[name], cfg) for name in OURS}
    ask["chroma"] = lambda q, now: systems["chroma"].retrieve(q, now, cfg)
    return ask


def run_scale(n: int, n_queries: int, cfg: RetrievalConfig, seed: int) -> dict:
    sessions, n_turns = make_corpus(n, seed)
    queries = make_queries(sessions, n_queries, seed)
    texts = sorted({t for s in sessions for f in s for t in
                    (f.triplet.subject, f.triplet.object, f.triplet.serialise())} | set(queries))
    embedder = TableEmbedder(dict(zip(texts, tie_free_vectors(texts, seed))))
    now = (len(sessions) + 1) * 6 * H

    systems, ingest = {}, {}
    for name, make in (("auto", lambda: GraphMemoryBank(embedder, "auto")),
                       ("flat", lambda: GraphMemoryBank(embedder, "flat")),
                       ("hnsw", lambda: GraphMemoryBank(embedder, "hnsw")),
                       ("chroma", lambda tag="": NxChromaMemory(embedder, f"n{n}{tag}"))):
        warm = make(tag="-warm-up") if name == "chroma" else make()
        warm.add(sessions[0])      # first-use costs (imports, allocations) out of the timing
        memory = make()
        t0 = time.perf_counter()
        for facts in sessions:
            memory.add(facts)
        ingest[name] = n_turns / (time.perf_counter() - t0)
        systems[name] = memory

    # 1) equal results: a read-only pass (no last-accessed update), compared with exact search
    frozen = replace(cfg, update_access=False)
    ask = _askers(systems, frozen)
    answers = {name: [f(q, now) for q in queries] for name, f in ask.items()}
    agreement = {name: float(np.mean([a == b for a, b in zip(answers[name], answers["flat"])]))
                 for name in ("auto", "hnsw", "chroma")}
    bank = systems["flat"]
    candidates = [bank.edges_within([a for a, _ in bank.nearest_entities(bank.embed_query(q),
                                                                         cfg.k_anchor)],
                                    cfg.hops).size for q in queries]

    # 2) latency: the real path (last-accessed updated), the same queries in the same order, one
    # system at a time (interleaving them per query would make whichever runs first pay for the
    # caches the others evicted); each system was warmed by the read-only pass above
    ask = _askers(systems, cfg)
    ms = {name: [] for name in ask}
    for name, f in ask.items():
        for q in queries:
            t0 = time.perf_counter()
            f(q, now)
            ms[name].append((time.perf_counter() - t0) * 1e3)
    out = {"triplets": n, "entities": bank.n_entities, "turns": n_turns, "queries": n_queries,
           "mean_candidates": float(np.mean(candidates)),
           "auto_index_in_use": systems["auto"]._index.active}
    for name in ask:
        p50, p95 = percentiles(ms[name])
        out[f"{name}_p50_ms"], out[f"{name}_p95_ms"] = p50, p95
        out[f"{name}_ingest_turns_per_s"] = ingest[name]
    for name in OURS:
        out[f"{name}_speedup_p50"] = out["chroma_p50_ms"] / out[f"{name}_p50_ms"]
        out[f"{name}_speedup_p95"] = out["chroma_p95_ms"] / out[f"{name}_p95_ms"]
    for name, share in agreement.items():
        out[f"{name}_agreement_with_exact"] = share
    return out


def minilm_query_ms(repeats: int = 20) -> float:
    from pipelines.glong.embedding import minilm_embedder

    emb = minilm_embedder()
    emb.embed(["warm up the encoder"])
    t0 = time.perf_counter()
    for i in range(repeats):
        emb.embed([f"What does Juno collect, question {i}?"])
    return (time.perf_counter() - t0) * 1e3 / repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=2022)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--minilm-reference", action="store_true",
                        help="also time one MiniLM query encoding (excluded from the latencies)")
    args = parser.parse_args(argv)
    cfg = RetrievalConfig()  # the paper's pipeline with the project's defaults (k_anchor 5, 5 -> 3)
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    results = []
    for n in args.scales:
        console.print(f"[bold]{n} triplets[/bold]: building both memories and asking "
                      f"{args.queries} queries ...")
        results.append(run_scale(n, args.queries, cfg, args.seed))
    table = Table(title="G-Long retrieval latency (ms, p50 / p95) and ingestion (turns/s): ours "
                        "(default 'auto' | exact 'flat' | 'hnsw') vs networkx + ChromaDB")
    for col in ("triplets", "entities", "cands", "auto (in use)", "flat", "hnsw", "chroma",
                "speed-up auto", "speed-up flat", "speed-up hnsw",
                "equal to exact: auto / hnsw / chroma", "ingest auto / flat / hnsw / chroma"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            str(r["triplets"]), str(r["entities"]), f"{r['mean_candidates']:.0f}",
            f"{r['auto_p50_ms']:.2f} / {r['auto_p95_ms']:.2f} ({r['auto_index_in_use']})",
            *(f"{r[f'{k}_p50_ms']:.2f} / {r[f'{k}_p95_ms']:.2f}" for k in ("flat", "hnsw", "chroma")),
            *(f"{r[f'{k}_speedup_p50']:.1f}x / {r[f'{k}_speedup_p95']:.1f}x" for k in OURS),
            " / ".join(f"{100 * r[f'{k}_agreement_with_exact']:.0f}%" for k in ("auto", "hnsw", "chroma")),
            " / ".join(f"{r[f'{k}_ingest_turns_per_s']:.0f}" for k in (*OURS, "chroma")))
    console.print(table)
    extra = {}
    if args.minilm_reference:
        extra["minilm_query_encode_ms"] = minilm_query_ms()
        console.print(f"For scale: encoding one query with all-MiniLM-L6-v2 here takes "
                      f"{extra['minilm_query_encode_ms']:.1f} ms (the same in both systems).")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"config": cfg.to_dict(), "results": results, **extra},
                                       indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
