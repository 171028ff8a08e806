"""``hybrid``: BM25 and dense retrieval over turns, fused by Reciprocal Rank Fusion.

Cormack, Clarke & Buettcher (SIGIR 2009), "Reciprocal Rank Fusion outperforms Condorcet and
individual rank learning methods": each ranker r (here :mod:`.bm25` and :mod:`.dense`) ranks the
held turns, and a turn d scores

    RRF(d) = sum_r w_r / (rrf_k + rank_r(d))      rank_r 1-based, rrf_k = 60, w_r = 1 by default

over the rankers whose top ``depth`` list (default: every held turn) contains d. Only ranks are
fused, so BM25's unbounded scores and dense cosines need no normalisation. Each ranker's list is
its own ranking (score desc, ties to the newer turn, :mod:`.turn_store`), except that the BM25
list holds only the turns sharing a token with the query (``lexical_matches_only``, as a lexical
engine returns only matching documents): the others all tie at score 0, and ranking them by
recency would add a recency vote as strong as a dense one. Fused ties go to the better best
rank, then to the newer turn. A ranker of weight 0 is not queried.

The strategy holds one :class:`~.bm25.BM25` and one :class:`~.dense.Dense` built from its
settings and sends observe / forget / reset / prepare / enter to both, so they hold the same turns
in the same episode scope; ``forget`` also drops the forgotten turns' cached query-matching tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import ConfigError
from pipelines.memory.base import (MemoryStrategy, Retrieved, Selector, StrategyConfig, check_k, check_weights,
                                   register_strategy)
from pipelines.lexical import bm25_tokens
from pipelines.memory.bm25 import BM25, BM25Config
from pipelines.memory.dense import Dense, DenseConfig
from pipelines.models.embeddings import DEFAULT_CACHE_DIR, Embedder


@dataclass(frozen=True)
class RankersConfig(StrategyConfig):
    """The settings forwarded to a BM25 and a dense ranker, shared by the strategies that fuse them
    (``hybrid``, :mod:`.fusion`)."""

    # forwarded to bm25 (BM25Config)
    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25
    remove_stopwords: bool = True
    # forwarded to dense (DenseConfig)
    model_path: str | None = None
    model_name: str | None = None
    cache_dir: str | None = DEFAULT_CACHE_DIR
    batch_size: int | None = None    # texts per encoder pass; None: 32 on the CPU, 256 on a GPU
    device: str = "auto"             # auto | cpu | cuda | cuda:N
    backend: str = "auto"            # auto (torch on a GPU, else openvino) | torch | onnx | openvino
    quantization: str = "auto"       # auto = none (fp32) | none | int8 | int8_<preset> | int8_weights (DenseConfig)
    export_dir: str | None = None    # exported onnx/openvino encoders; None: ~/.cache/mnemos/encoders
    precision: str = "auto"
    forget_cached: bool = True
    index: str = "exact"             # exact | hnsw: the dense ranker's index (an HNSW graph for large stores)
    ann_min_items: int = 20_000      # hnsw: held turns from which the graph answers (exact below)
    hnsw_m: int = 16
    hnsw_ef_construction: int = 100
    hnsw_ef_search: int = 100
    # forwarded to both
    include_speaker: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _ = (self.bm25_config, self.dense_config)  # the rankers' own checks (ConfigError "bm25.k1 ...")

    @property
    def bm25_config(self) -> BM25Config:
        return BM25Config(context_k=self.context_k, include_dates=self.include_dates, k1=self.k1, b=self.b,
                          epsilon=self.epsilon, remove_stopwords=self.remove_stopwords,
                          include_speaker=self.include_speaker)

    @property
    def dense_config(self) -> DenseConfig:
        return DenseConfig(context_k=self.context_k, include_dates=self.include_dates, model_path=self.model_path,
                           model_name=self.model_name, cache_dir=self.cache_dir, batch_size=self.batch_size,
                           device=self.device, backend=self.backend, quantization=self.quantization,
                           export_dir=self.export_dir, precision=self.precision, include_speaker=self.include_speaker,
                           forget_cached=self.forget_cached, index=self.index, ann_min_items=self.ann_min_items,
                           hnsw_m=self.hnsw_m, hnsw_ef_construction=self.hnsw_ef_construction,
                           hnsw_ef_search=self.hnsw_ef_search)


@dataclass(frozen=True)
class HybridConfig(RankersConfig):
    """RRF settings plus the settings forwarded to the BM25 and dense rankers."""

    rrf_k: int = 60                  # RRF constant: damps the weight of the top ranks
    bm25_weight: float = 1.0         # w of the BM25 ranking (0: not used)
    dense_weight: float = 1.0        # w of the dense ranking (0: not used)
    depth: int | None = None         # fuse each ranker's top `depth` turns; None: every held turn
    lexical_matches_only: bool = True  # BM25 ranks only turns sharing a token with the query

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.rrf_k, int) or isinstance(self.rrf_k, bool) or self.rrf_k < 0:
            raise ConfigError(f"hybrid.rrf_k must be an integer >= 0 (RRF constant), got {self.rrf_k!r}.")
        check_weights(self, "hybrid", ("bm25_weight", "dense_weight"))
        if self.bm25_weight == 0 and self.dense_weight == 0:
            raise ConfigError("hybrid.bm25_weight and hybrid.dense_weight are both 0; at least one ranker "
                              "must count.")
        if self.depth is not None and (not isinstance(self.depth, int) or isinstance(self.depth, bool)
                                       or self.depth < 1):
            raise ConfigError(f"hybrid.depth must be a positive integer or null (every held turn), "
                              f"got {self.depth!r}.")


class RankerPair(MemoryStrategy):
    """A BM25 and a dense ranker built from a :class:`RankersConfig`, holding the same turns in the same episode
    scope: observe / forget / reset / prepare / enter go to both. The base of the strategies that fuse them."""

    granularities = ("turn", "session")

    def __init__(self, config=None, counter=None, embedder: Embedder | None = None):
        super().__init__(config, counter)
        self.bm25 = BM25(self.config.bm25_config, counter=self.counter)
        self.dense = Dense(self.config.dense_config, counter=self.counter, embedder=embedder)
        self._rankers = (self.bm25, self.dense)

    def __len__(self) -> int:
        return len(self.bm25)

    def index_bytes(self) -> int:
        return self.bm25.index_bytes() + self.dense.index_bytes()

    def enter(self, episode: Episode) -> None:
        super().enter(episode)
        for r in self._rankers:
            r.enter(episode)

    def observe(self, episode: Episode, session: Session) -> None:
        self.enter(episode)
        for r in self._rankers:
            r.observe(episode, session)

    def forget(self, selector: Selector) -> int:
        removed = self.bm25.forget(selector)
        self.dense.forget(selector)  # the same turns: both observed the same sessions
        return removed

    def reset(self) -> None:
        super().reset()
        for r in getattr(self, "_rankers", ()):
            r.reset()

    def prepare(self, episodes: Sequence[Episode]) -> None:
        for r in self._rankers:
            r.prepare(episodes)


@register_strategy("hybrid")
class Hybrid(RankerPair):
    """Reciprocal Rank Fusion of BM25 and dense rankings over the held turns."""

    config_class = HybridConfig
    ingredient = "BM25 + dense, rank fusion (RRF)"

    def __init__(self, config=None, counter=None, embedder: Embedder | None = None):
        super().__init__(config, counter, embedder)
        self._tokens: dict[int, frozenset[str]] = {}  # turn order -> its BM25 tokens (lexical_matches_only)

    def forget(self, selector: Selector) -> int:
        before = {i.order for i in self.bm25.items}
        removed = super().forget(selector)
        for order in before - {i.order for i in self.bm25.items}:
            self._tokens.pop(order, None)
        return removed

    def reset(self) -> None:
        super().reset()
        self._tokens = {}

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        if not len(self):
            return []
        c = self.config
        depth = min(c.depth or len(self), len(self))
        fused: dict[int, float] = {}        # turn order -> RRF score
        best: dict[int, int] = {}           # turn order -> best rank over the rankers
        items: dict[int, Retrieved] = {}
        for ranker, weight in ((self.bm25, c.bm25_weight), (self.dense, c.dense_weight)):
            if weight == 0:
                continue
            if ranker is self.bm25 and c.lexical_matches_only:
                ranked = self._lexical_matches(query)[:depth]
            else:
                ranked = ranker.retrieve(query, depth)
            for rank, item in enumerate(ranked, start=1):
                fused[item.order] = fused.get(item.order, 0.0) + weight / (c.rrf_k + rank)
                best[item.order] = min(best.get(item.order, rank), rank)
                items.setdefault(item.order, item)
        ranking = sorted(fused, key=lambda o: (-fused[o], best[o], -o))[:k]  # score, best rank, newer
        return [replace(items[o], score=fused[o]) for o in ranking]

    def _lexical_matches(self, query: Query) -> list[Retrieved]:
        """BM25's full ranking, keeping only the turns that share a token with the query."""
        c = self.config
        wanted = set(bm25_tokens(query.question, c.remove_stopwords))
        if not wanted:
            return []
        for item in self.bm25.items:
            if item.order not in self._tokens:
                self._tokens[item.order] = frozenset(bm25_tokens(item.indexed_text(c.include_speaker),
                                                                 c.remove_stopwords))
        return [i for i in self.bm25.retrieve(query, len(self)) if not wanted.isdisjoint(self._tokens[i.order])]
