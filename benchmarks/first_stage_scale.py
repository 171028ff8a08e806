"""First-stage retrieval over a large turn store: BM25, dense exact, dense HNSW and their fusion, on the CPU.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_stage_scale.py [--n 100000] [--queries 200] [--k 100]
        [--path EPISODES [--source canonical]] [--vectors random|hashing] [--embed] [--ann-min-items 20000]
        [--ef-search 100] [--repeat 3] [--out report.json]

Issue #18, point 4: a query against 100k memories stays under 2 ms p50 for the first stage on the CPU.

Memories: ``--n`` turns (sessions of 10, two speakers each) of one episode: synthetic English-like
sentences (a fixed vocabulary: stop words, the synthetic lexicon's entity words and pronounceable
made-up words, content words drawn Zipf-like, seeded), or the turns of ``--path`` (read by the
``--source`` loader, canonical episodes by default) repeated until there are ``--n``. Vectors,
all-MiniLM-L6-v2's size (384): ``--vectors random`` (default), a random unit vector per distinct
text; ``--vectors hashing``, the project's feature-hashing embedder of the words
(:class:`pipelines.glong.embedding.HashingEmbedder`) plus a random 10 % jitter, so that texts
sharing words are neighbours, as with a neural encoder; or ``--embed``, the texts embedded by the
shipped MiniLM (slow: minutes at 100k). Each query is made from a held turn: two or three of its
content words plus a random one ("what about ...?"); its vector is at cosine about 0.7 to the
turn's (random), or the query text's (hashing, MiniLM). Vectors are computed before any timing
and served from a table: encoding a query is not part of the first stage.

Contenders, each the project's strategy answering ``retrieve(query, k)`` (tokenisation, index, top-k
selection, the returned items), one contender at a time over the same queries after one untimed
query (which builds the lazy index), in ``--repeat`` interleaved passes (pass 1 of every contender, then
pass 2 of every contender, ...):

- ``bm25``: :class:`~pipelines.memory.bm25.BM25` (the sparse :class:`~pipelines.memory.index.BM25Index`);
- ``dense exact``: :class:`~pipelines.memory.dense.Dense`, ``index: exact`` (E q over every turn);
- ``dense hnsw``: the same with ``index: hnsw`` (hnswlib, from ``--ann-min-items`` turns);
- ``rrf bm25+exact``, ``rrf bm25+hnsw``: :class:`~pipelines.memory.hybrid.Hybrid` (Reciprocal Rank
  Fusion) over the two rankers above, each cut at the top ``k`` (``depth: k``,
  ``lexical_matches_only: false``);
- ``fusion_time exact``, ``fusion_time hnsw``: :class:`~pipelines.memory.fusion.FusionTime`, the first
  stage of ``rerank`` (calibrated fusion, session scoring with the session BM25 key and prior, time
  awareness), scoring every held turn (``index: exact``), or, from ``--ann-min-items`` turns, the union
  of BM25's and the graph's top ``k`` (its default, ``index: hnsw``, ``candidate_depth: k``). Each holds
  its own rankers (its build includes BM25's tokens, the graph and the session keys).

Build: seconds to observe every session (tokens, vectors) plus the untimed first query (the lazy
build: BM25's matrix, the HNSW graph). Size: BM25's weight matrix, the dense vectors, the HNSW graph
as hnswlib saves it (links and its own copy of the vectors; the strategy keeps its rows besides).
``target@k``: share of the queries whose source turn is in the top-k (with ``--path`` a repeated
turn's copies tie, and the newest win). ``recall@k``: share of the exact top-k (dense exact, or the
fusion with it) that the HNSW contender's top-k holds. On random 384-dim vectors every turn but the
source lies at cosine ~0 +- 0.05 to the query: the rest of the exact top-k is noise, and the graph
has no neighbourhoods to follow (HNSW's worst case: at ef_search 100 it misses even the source
turn for about a quarter of the queries at 100k); ``--vectors hashing`` gives the vectors
neighbourhoods, as a neural encoder's have. Latencies: a query's latency is the best of its ``--repeat`` runs (on a machine shared with other work,
interference only adds time; the passes are interleaved, so a query's runs are hundreds of queries apart), then
p50 / p95 / mean ms over the queries; ``single p50``: the median of every run, the raw figure. Prints a table,
then one JSON line (and ``--out``). No test depends on these figures (tests/benchmarks runs a tiny smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pipelines.data.schema import Episode, Query, Session, Turn  # noqa: E402
from pipelines.data.synthetic_lexicon import NAMES, RELATIONS  # noqa: E402
from pipelines.lexical import bm25_tokens, english_stopwords  # noqa: E402
from pipelines.memory.bm25 import BM25, BM25Config  # noqa: E402
from pipelines.memory.dense import Dense, DenseConfig  # noqa: E402
from pipelines.memory.fusion import FusionTime, FusionTimeConfig  # noqa: E402
from pipelines.memory.hybrid import Hybrid, HybridConfig  # noqa: E402

DIM = 384
TURNS_PER_SESSION = 10
FUNCTION_WORDS = ("i the a to and my was with at in of it we you that for on is have so but this be about "
                  "our me they there had when after before from he she her his not all can will").split()
SYLLABLES = ("ba be bi bo bu da de di do ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu "
             "pa pe pi po ra re ri ro ru sa se si so ta te ti to tu va ve vi vo za zo").split()


# --- the memories --------------------------------------------------------------------------------

def vocabulary(size: int, seed: int) -> list[str]:
    """``size`` content words: the synthetic lexicon's entity words, then made-up ones (no stop word)."""
    stop = english_stopwords()
    words = dict.fromkeys(w for r in RELATIONS for v in r.values for w in bm25_tokens(v) if w not in stop)
    rng = random.Random(seed)
    while len(words) < size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in stop:
            words[word] = None
    return list(words)[:size]


class Sentences:
    """Seeded English-like sentences: 6-24 words, ~45 % function words, content words Zipf-like."""

    def __init__(self, vocab_size: int, seed: int):
        self.words = vocabulary(vocab_size, seed)
        ranks = np.arange(1, len(self.words) + 1)
        self.weights = np.cumsum(1.0 / (ranks + 2.7))          # Zipf-Mandelbrot, exponent 1
        self.rng = np.random.default_rng(seed)

    def content(self, n: int) -> list[str]:
        draws = np.searchsorted(self.weights, self.rng.random(n) * self.weights[-1])
        return [self.words[i] for i in draws]

    def sentence(self) -> str:
        n = int(self.rng.integers(6, 25))
        function = self.rng.random(n) < 0.45
        content = iter(self.content(int((~function).sum())))
        fw = self.rng.integers(0, len(FUNCTION_WORDS), n)
        words = [FUNCTION_WORDS[fw[i]] if function[i] else next(content) for i in range(n)]
        return " ".join(words).capitalize() + "."


def synthetic_turns(n: int, vocab_size: int, seed: int) -> list[tuple[str, str]]:
    gen = Sentences(vocab_size, seed)
    return [(NAMES[1 + (i // TURNS_PER_SESSION) % 40 if i % 2 else 0], gen.sentence()) for i in range(n)]


def file_turns(path: str, source: str, n: int) -> list[tuple[str, str]]:
    """The (speaker, text) of every turn of the file, repeated until there are ``n``."""
    from pipelines.data.loaders import get_loader

    turns = [(t.speaker, t.text) for e in get_loader(source)(path).episodes for _, t in e.turns()]
    if not turns:
        raise SystemExit(f"{path} holds no turn")
    return [turns[i % len(turns)] for i in range(n)]


def episode_of(turns: list[tuple[str, str]]) -> Episode:
    sessions = []
    for index, start in enumerate(range(0, len(turns), TURNS_PER_SESSION)):
        part = turns[start:start + TURNS_PER_SESSION]
        sessions.append(Session(id=f"s{index}", index=index, partner=part[-1][0], turns=[
            Turn(id=f"s{index}:t{j}", speaker=who, text=text) for j, (who, text) in enumerate(part)]))
    return Episode(id="scale", source="benchmark", main_speaker=turns[0][0], sessions=sessions)


def make_queries(turns: list[tuple[str, str]], n: int, seed: int) -> list[tuple[str, int]]:
    """(question, row of the turn it was made from): 2-3 of the turn's content words and a random one."""
    rng = random.Random(seed + 1)
    words = vocabulary(2000, seed)
    out = []
    for _ in range(n):
        row = rng.randrange(len(turns))
        own = bm25_tokens(turns[row][1]) or [rng.choice(words)]
        picked = rng.sample(own, min(len(own), rng.randint(2, 3))) + [rng.choice(words)]
        out.append((f"What about {' '.join(picked)}?", row))
    return out


class TableEmbedder:
    """Vectors computed before timing, served by text (what :class:`~pipelines.memory.dense.Dense` needs)."""

    cache = None

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])                          # (n, D)

    def forget(self, texts) -> int:
        return 0


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def embed_table(texts: list[str], queries: list[tuple[str, int]], vectors: str, seed: int) -> dict[str, np.ndarray]:
    """text -> unit vector for every turn text ("speaker: text", as Dense indexes it) and question."""
    distinct = list(dict.fromkeys(texts))
    questions = [q for q, _ in queries]
    rng = np.random.default_rng(seed)
    if vectors == "minilm":
        from pipelines.models.embeddings import Embedder, load_encoder

        return dict(zip(distinct + questions, Embedder(load_encoder(), cache=None).embed(distinct + questions)))
    if vectors == "hashing":
        from pipelines.glong.embedding import HashingEmbedder

        hashed = HashingEmbedder(DIM).embed(distinct + questions)                  # (T, D)
        return dict(zip(distinct + questions, unit(hashed + 0.1 * unit(rng.standard_normal(hashed.shape)))))
    table = dict(zip(distinct, unit(rng.standard_normal((len(distinct), DIM)))))
    for q, row in queries:              # a paraphrase of its turn: cosine ~0.7 (noise of the same norm)
        table[q] = unit(table[texts[row]] + unit(rng.standard_normal(DIM)))
    return table


# --- the measurements ----------------------------------------------------------------------------

def rrf(bm25: BM25, dense: Dense, k: int, embedder) -> Hybrid:
    """The hybrid strategy (RRF of the two top-k lists) over rankers that already hold the memories."""
    fused = Hybrid(HybridConfig(depth=k, lexical_matches_only=False, cache_dir=None), embedder=embedder)
    fused.bm25, fused.dense, fused._rankers = bm25, dense, (bm25, dense)
    return fused


def hnsw_nbytes(dense: Dense) -> int:
    graph = dense._index.ann
    if graph is None:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        graph.save(Path(tmp) / "graph.hnsw")
        return (Path(tmp) / "graph.hnsw").stat().st_size


def timed(ask, queries: list[Query], k: int) -> tuple[list[float], list[list[str]]]:
    """One pass: (ms per query, each query's top-k turn ids)."""
    ms, tops = [], []
    for q in queries:
        t0 = time.perf_counter()
        items = ask(q, k)
        ms.append((time.perf_counter() - t0) * 1e3)
        tops.append([i.turn_id for i in items])
    return ms, tops


def run(n: int, n_queries: int, k: int, ann_min_items: int, path: str | None, source: str, vectors: str,
        vocab: int, seed: int, ef_search: int = 100, repeat: int = 3, log=print) -> dict:
    log(f"building {n} turns ...")
    turns = file_turns(path, source, n) if path else synthetic_turns(n, vocab, seed)
    episode = episode_of(turns)
    questions = make_queries(turns, n_queries + 1, seed)
    table = embed_table([f"{who}: {text}" for who, text in turns], questions, vectors, seed)
    embedder = TableEmbedder(table)
    queries = [Query(id=f"q{i}", question=q) for i, (q, _) in enumerate(questions)]
    warm, queries = queries[0], queries[1:]
    targets = [episode.sessions[row // TURNS_PER_SESSION].turns[row % TURNS_PER_SESSION].id
               for _, row in questions[1:]]

    strategies = {"bm25": BM25(BM25Config()),
                  "dense exact": Dense(DenseConfig(cache_dir=None), embedder=embedder),
                  "dense hnsw": Dense(DenseConfig(cache_dir=None, index="hnsw", ann_min_items=ann_min_items,
                                                  hnsw_ef_search=ef_search), embedder=embedder),
                  "fusion_time exact": FusionTime(FusionTimeConfig(cache_dir=None, index="exact"),
                                                  embedder=embedder),
                  "fusion_time hnsw": FusionTime(FusionTimeConfig(cache_dir=None, ann_min_items=ann_min_items,
                                                                  hnsw_ef_search=ef_search, candidate_depth=k),
                                                 embedder=embedder)}
    rows: dict[str, dict] = {}
    for name, strategy in strategies.items():
        log(f"{name}: observing {len(episode.sessions)} sessions and building the index ...")
        t0 = time.perf_counter()
        for session in episode.sessions:
            strategy.observe(episode, session)
        observed = time.perf_counter() - t0
        strategy.retrieve(warm, k)                              # the lazy build
        rows[name] = {"observe_s": observed, "build_s": time.perf_counter() - t0 - observed}
    bm25, exact, hnsw = (strategies[name] for name in ("bm25", "dense exact", "dense hnsw"))
    rows["bm25"]["size_mb"] = bm25._index.nbytes / 2**20
    rows["dense exact"]["size_mb"] = exact._index.vectors.nbytes / 2**20
    rows["dense hnsw"]["size_mb"] = hnsw_nbytes(hnsw) / 2**20 or rows["dense exact"]["size_mb"]
    rows["dense hnsw"]["graph"] = hnsw._index.uses_ann(k)
    for name in ("fusion_time exact", "fusion_time hnsw"):
        fusion = strategies[name]
        rows[name]["size_mb"] = (fusion.index_bytes() + hnsw_nbytes(fusion.dense)) / 2**20
    rows["fusion_time hnsw"]["graph"] = strategies["fusion_time hnsw"].dense._index.uses_ann(k)  # union fused
    contenders = {**{name: s.retrieve for name, s in strategies.items()},
                  "rrf bm25+exact": rrf(bm25, exact, k, embedder).retrieve,
                  "rrf bm25+hnsw": rrf(bm25, hnsw, k, embedder).retrieve}
    tops, runs = {}, {name: [] for name in contenders}            # runs: name -> [(Q,) ms per pass]
    for ask in contenders.values():
        ask(warm, k)
    for rep in range(repeat):
        for name, ask in contenders.items():
            log(f"{name}: {len(queries)} queries (pass {rep + 1} of {repeat}) ...")
            ms, top = timed(ask, queries, k)
            runs[name].append(ms)
            if tops.setdefault(name, top) != top:
                raise RuntimeError(f"{name} answered a query differently in pass {rep + 1}")
    for name, passes in runs.items():
        ms = np.min(passes, axis=0)                                 # (Q,) each query's best run
        rows.setdefault(name, {}).update(p50_ms=float(np.percentile(ms, 50)), p95_ms=float(np.percentile(ms, 95)),
                                         mean_ms=float(np.mean(ms)), single_p50_ms=float(np.median(passes)),
                                         target_at_k=float(np.mean([t in top for t, top in zip(targets, tops[name])])))
    references = {"dense hnsw": "dense exact", "rrf bm25+hnsw": "rrf bm25+exact",
                  "fusion_time hnsw": "fusion_time exact"}
    for name, reference in references.items():
        reference = tops[reference]
        rows[name]["recall@k"] = float(np.mean([len(set(a) & set(b)) / max(len(b), 1)
                                                for a, b in zip(tops[name], reference)]))
    return {"n": n, "queries": len(queries), "k": k, "ann_min_items": ann_min_items, "hnsw_ef_search": ef_search,
            "repeat": repeat,
            "data": path or "synthetic", "vectors": vectors if vectors != "random" else f"random unit {DIM}-dim",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "rows": rows}


def print_table(report: dict) -> None:
    print(f"\nfirst stage, {report['n']} turns, top-{report['k']}, {report['queries']} queries, "
          f"vectors: {report['vectors']}, hnsw ef_search {report['hnsw_ef_search']}, "
          f"OMP_NUM_THREADS={report['omp_num_threads']}, a query's best of {report['repeat']} runs")
    head = (f"{'contender':<19}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}{'single p50':>11}{'build s':>9}{'size MB':>9}"
            f"{'target@k':>10}{'recall@k':>10}")
    print(head)
    print("-" * len(head))
    for name, r in report["rows"].items():
        build = f"{r['observe_s'] + r['build_s']:.1f}" if "build_s" in r else "-"
        size = f"{r['size_mb']:.1f}" if "size_mb" in r else "-"
        recall = f"{r['recall@k']:.3f}" if "recall@k" in r else "-"
        print(f"{name:<19}{r['p50_ms']:>9.3f}{r['p95_ms']:>9.3f}{r['mean_ms']:>9.3f}{r['single_p50_ms']:>11.3f}"
              f"{build:>9}{size:>9}"
              f"{r['target_at_k']:>10.3f}{recall:>10}")
    for name in ("bm25", "dense hnsw", "fusion_time hnsw"):
        r = report["rows"][name]
        print(f"{name}: observe {r['observe_s']:.1f} s + lazy build (first query) {r['build_s']:.1f} s")
    for name in ("dense hnsw", "fusion_time hnsw"):
        if not report["rows"][name].get("graph"):
            print(f"{name}: below ann_min_items, the graph is not in use (exact search)")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="turns held")
    parser.add_argument("--queries", type=int, default=200, help="timed queries")
    parser.add_argument("--k", type=int, default=100, help="candidates each first stage returns")
    parser.add_argument("--ann-min-items", type=int, default=20_000, help="dense hnsw: held turns from which the "
                        "graph answers")
    parser.add_argument("--ef-search", type=int, default=100, help="dense hnsw: candidate list while searching")
    parser.add_argument("--path", help="episodes file whose turns are repeated to --n (default: synthetic)")
    parser.add_argument("--source", default="canonical", help="loader of --path (pipelines.data.loaders)")
    parser.add_argument("--vectors", choices=("random", "hashing"), default="random",
                        help="random unit vectors, or feature hashing of the words plus jitter")
    parser.add_argument("--embed", action="store_true", help="embed the texts with the shipped MiniLM (slow)")
    parser.add_argument("--vocab", type=int, default=20_000, help="content words of the synthetic sentences")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved passes over the queries; a query's "
                        "latency is its best run")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    vectors = "minilm" if args.embed else args.vectors
    report = run(args.n, args.queries, args.k, args.ann_min_items, args.path, args.source, vectors, args.vocab,
                 args.seed, args.ef_search, args.repeat, log=lambda m: print(m, file=sys.stderr, flush=True))
    print_table(report)
    print(json.dumps(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
