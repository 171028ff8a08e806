"""Vector indexes of entity embeddings for the graph memory bank (G-Long, seed 003, section 3.3).

Both hold L2-normalised vectors under integer ids and answer top-k by inner product (= cosine):

- ``flat``: faiss ``IndexIDMap2`` over ``IndexFlatIP``: exact search, O(N d) per query; removal
  deletes the vectors at once. The default: a conversation memory holds hundreds to thousands of
  entities, where an exact scan takes well under a millisecond.
- ``hnsw``: hnswlib's HNSW graph (Malkov & Yashunin 2018; the index ChromaDB uses, with ChromaDB's
  defaults M = 16, ef_construction = 100, ef_search = 100): approximate, O(log N) per query, for
  very large memories. hnswlib only *marks* deleted items, which would leave their vectors in
  memory and in saved files, so removal rebuilds the index from the remaining vectors: a deleted
  entity is gone from the index, not hidden (rebuilding costs O(N log N); deletions are rare).

Single queries run on one thread: thread start-up costs more than it saves for one vector.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np

IndexKind = Literal["flat", "hnsw"]
FILE_NAMES = {"flat": "entities.faiss", "hnsw": "entities.hnsw"}


class FlatEntityIndex:
    """Exact inner-product search (faiss)."""

    kind = "flat"

    def __init__(self, dim: int, index=None):
        import faiss

        self.dim = dim
        self._index = index if index is not None else faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def __len__(self) -> int:
        return self._index.ntotal

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """ids (M,) int64, vectors (M, D) float32, normalised."""
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32),
                                 np.asarray(ids, dtype=np.int64))

    def remove(self, ids: np.ndarray) -> None:
        self._index.remove_ids(np.asarray(ids, dtype=np.int64))

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids (k,), cosines (k,)) for query (D,), best first."""
        import faiss

        k = min(k, len(self))
        if k == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            scores, ids = self._index.search(query.reshape(1, -1).astype(np.float32), k)  # (1, k)
        finally:
            faiss.omp_set_num_threads(threads)
        keep = ids[0] >= 0
        return ids[0][keep], scores[0][keep]

    def ids(self) -> set[int]:
        import faiss

        return set(faiss.vector_to_array(self._index.id_map).tolist())

    def save(self, path: Path) -> None:
        import faiss

        faiss.write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path, dim: int) -> "FlatEntityIndex":
        import faiss

        return cls(dim, faiss.read_index(str(path)))


class HNSWEntityIndex:
    """Approximate inner-product search (hnswlib), rebuilt on removal so nothing deleted stays."""

    kind = "hnsw"

    def __init__(self, dim: int, m: int = 16, ef_construction: int = 100, ef_search: int = 100,
                 capacity: int = 1024):
        self.dim, self.m, self.ef_construction, self.ef_search = dim, m, ef_construction, ef_search
        self._index = self._new(capacity)

    def _new(self, capacity: int):
        import hnswlib

        index = hnswlib.Index(space="ip", dim=self.dim)
        index.init_index(max_elements=max(capacity, 1), ef_construction=self.ef_construction,
                         M=self.m, random_seed=100)
        index.set_ef(self.ef_search)
        index.set_num_threads(1)
        return index

    def __len__(self) -> int:
        return self._index.get_current_count()

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        needed = len(self) + len(ids)
        if needed > self._index.get_max_elements():
            self._index.resize_index(max(needed, 2 * self._index.get_max_elements()))
        self._index.add_items(np.asarray(vectors, dtype=np.float32),
                              np.asarray(ids, dtype=np.int64), num_threads=1)

    def remove(self, ids: np.ndarray) -> None:
        gone = set(np.asarray(ids).tolist())
        keep = sorted(i for i in self._index.get_ids_list() if i not in gone)
        vectors = np.asarray(self._index.get_items(keep), dtype=np.float32) if keep else None
        self._index = self._new(self._index.get_max_elements())
        if keep:
            self.add(np.asarray(keep, dtype=np.int64), vectors)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self))
        if k == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        labels, distances = self._index.knn_query(query.reshape(1, -1).astype(np.float32), k=k,
                                                  num_threads=1)   # (1, k); ip distance = 1 - cos
        return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    def ids(self) -> set[int]:
        return set(int(i) for i in self._index.get_ids_list())

    def save(self, path: Path) -> None:
        self._index.save_index(str(path))

    @classmethod
    def load(cls, path: Path, dim: int) -> "HNSWEntityIndex":
        import hnswlib

        out = cls.__new__(cls)
        index = hnswlib.Index(space="ip", dim=dim)
        index.load_index(str(path))
        out.dim, out.m, out.ef_construction, out.ef_search = dim, index.M, index.ef_construction, 100
        index.set_ef(out.ef_search)
        index.set_num_threads(1)
        out._index = index
        return out


def make_index(kind: IndexKind, dim: int):
    if kind == "flat":
        return FlatEntityIndex(dim)
    if kind == "hnsw":
        return HNSWEntityIndex(dim)
    raise ValueError(f"entity index must be 'flat' or 'hnsw', got {kind!r}")


def load_index(kind: IndexKind, path: Path, dim: int):
    return (FlatEntityIndex if kind == "flat" else HNSWEntityIndex).load(path, dim)
