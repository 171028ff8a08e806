"""Test helpers of the G-Long tests: an embedder with hand-set vectors, and one that records."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class TableEmbedder:
    """Returns hand-set vectors (normalised) for known texts; fails on any other text."""

    model_name = "table"

    def __init__(self, table: dict[str, Sequence[float]]):
        self.table = {t: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for t, v in table.items()}
        self.forgotten: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.table]
        if missing:
            raise KeyError(f"no vector for {missing}")
        return np.stack([self.table[t] for t in texts])

    def forget(self, texts) -> int:
        self.forgotten.extend(texts)
        return len(texts)


class RecordingEmbedder:
    """Wraps an embedder and records every text it was asked to forget."""

    def __init__(self, inner):
        self.inner = inner
        self.model_name = inner.model_name
        self.forgotten: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def forget(self, texts) -> int:
        self.forgotten.extend(texts)
        return self.inner.forget(texts)
