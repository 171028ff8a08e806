"""Vector indexes of entity embeddings for the graph memory bank (G-Long, seed 003, section 3.3).

Each holds L2-normalised vectors under integer ids and answers top-k by inner product (= cosine):

- ``flat``: exact search, O(N d) per query; removal deletes the vectors at once.
  A faiss scan of a bfloat16 copy of the vectors (half the memory traffic of float32; the scan
  is memory-bound) picks a pool that provably holds the exact top-k, and the pool is re-scored
  exactly: the same results as a float32 scan of every vector (see :class:`FlatEntityIndex`),
  about twice as fast for tens of thousands of entities. Saved as faiss ``IndexIDMap2`` over
  ``IndexFlatIP``.
- ``hnsw``: hnswlib's HNSW graph (Malkov & Yashunin 2018; the index ChromaDB uses, with ChromaDB's
  defaults M = 16, ef_construction = 100, ef_search = 100): approximate, O(log N) per query, for
  very large memories. hnswlib only *marks* deleted items, which would leave their vectors in
  memory and in saved files, so removal rebuilds the index from the remaining vectors: a deleted
  entity is gone from the index, not hidden (rebuilding costs O(N log N); deletions are rare).
- ``auto`` (the default): ``flat`` up to 10,000 entities, ``hnsw`` beyond (:class:`AutoEntityIndex`).

Single queries run on one thread: thread start-up costs more than it saves for one vector.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import numpy as np

IndexKind = Literal["auto", "flat", "hnsw"]
FILE_NAMES = {"flat": "entities.faiss", "hnsw": "entities.hnsw", "auto": "entities.auto"}


class FlatEntityIndex:
    """Exact inner-product search: a bf16 pre-filter scan (faiss) with exact re-scoring.

    The float32 vectors are kept as given (rows in insertion order, ``_vec``); faiss scans a
    bfloat16 copy (``IndexScalarQuantizer`` QT_bf16: half the bytes of a float32 scan, which is
    memory-bound) for a small pool, and only the pool is scored exactly, by faiss's float32
    kernel: the scores are bit for bit those of ``IndexFlatIP`` (a float32 scan of every vector).
    The pool provably holds the exact top-k: each row's bf16 error ||x - bf16(x)|| is measured
    when it is added; with E the largest (over every row added since the index was last empty,
    an upper bound for the rows left after removals), and g = 2 d 2^-24 (||bf16(x)|| + ||x||) a bound on the
    float32 rounding of either scan, every scanned score lies within s = ||q|| (E + g) of the
    float32 score. With a_k the k-th best scanned score, the k-th best float32 score is
    >= a_k - s, so every member of the top-k (ties included) scans at >= a_k - 2s; the pool is
    every row above that line (a range search when the first pool may have cut it short).

    Ranking: float32 score, best first; equal scores go to the smaller id (with the bank's ids,
    the older entity). (A faiss flat search breaks exact ties by the order of its heap
    operations instead; the hashing embedder produces such ties, a neural encoder hardly ever.)
    Saved as before: a faiss ``IndexIDMap2`` over ``IndexFlatIP``.
    """

    kind = "flat"
    POOL = 16          # first pool: k + POOL rows (at least 2k) of the pre-filter scan

    def __init__(self, dim: int):
        import faiss

        self.dim = dim
        self._codes = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_bf16,
                                                 faiss.METRIC_INNER_PRODUCT)  # row order = _vec
        self._n = 0
        self._vec = np.zeros((0, dim), dtype=np.float32)   # (cap, D) the vectors, rows 0.._n-1
        self._ids = np.zeros(0, dtype=np.int64)            # (cap,) id of each row
        # the largest ||x - bf16(x)|| and ||bf16(x)|| of any row added since the index was last
        # empty: removals leave them as they are (still upper bounds, so the pool stays exact)
        self._err_max = self._bnorm_max = 0.0
        self._fp = 2.0 * dim * 2.0 ** -24                  # float32 rounding of a d-term sum

    def __len__(self) -> int:
        return self._n

    def _reserve(self, needed: int) -> None:
        cap = self._ids.shape[0]
        if needed <= cap:
            return
        new = max(needed, 2 * cap, 64)
        for name in ("_vec", "_ids"):
            old = getattr(self, name)
            grown = np.zeros((new, *old.shape[1:]), dtype=old.dtype)
            grown[:self._n] = old[:self._n]
            setattr(self, name, grown)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """ids (M,) int64, new (not in the index), vectors (M, D) float32, normalised."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(ids), self.dim)
        if ids.size == 0:
            return
        codes = self._codes.sa_encode(vectors)                                   # (M, 2D) bytes
        approx = self._codes.sa_decode(codes)                                    # (M, D) float32
        diff = vectors - approx     # exact in float32: bf16(x) lies within a factor 2 of x
        # norms in float32, then rounded up by more than their rounding error
        up = 1.0 + 2.0 * self._fp + 1e-6                                          # (d+1) 2^-24 < fp
        err = np.sqrt(np.einsum("ij,ij->i", diff, diff)) * up                   # (M,)
        bnorm = np.sqrt(np.einsum("ij,ij->i", approx, approx)) * up             # (M,)
        self._codes.add_sa_codes(codes)
        n, m = self._n, len(ids)
        self._reserve(n + m)
        self._vec[n:n + m], self._ids[n:n + m] = vectors, ids
        self._n = n + m
        self._err_max = max(self._err_max, float(err.max()))
        self._bnorm_max = max(self._bnorm_max, float(bnorm.max()))

    def remove(self, ids: np.ndarray) -> None:
        import faiss

        n = self._n
        gone = np.isin(self._ids[:n], np.asarray(ids, dtype=np.int64))
        if not gone.any():
            return
        self._codes.remove_ids(faiss.IDSelectorBatch(np.flatnonzero(gone).astype(np.int64)))
        keep = ~gone
        m = int(keep.sum())
        for name in ("_vec", "_ids"):
            arr = getattr(self, name)
            arr[:m] = arr[:n][keep]
            arr[m:n] = 0                      # no removed vector stays behind in memory
        self._n = m
        if m == 0:
            self._err_max = self._bnorm_max = 0.0

    def _exact(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """float32 inner products (R,) of ``query`` (1, D) with the given rows, by the routine an
        ``IndexFlatIP`` search runs (``faiss.knn_inner_product``) over just those rows: bit for
        bit the scores of a float32 scan of every vector (tested for d = 1..39, 64, 128, 384)."""
        import faiss

        r = rows.size
        block = self._vec[rows]                                                  # (R, D) copy
        scores, where = np.empty(r, dtype=np.float32), np.empty(r, dtype=np.int64)
        faiss.knn_inner_product(faiss.swig_ptr(query), faiss.swig_ptr(block), self.dim, 1, r, r,
                                faiss.swig_ptr(scores), faiss.swig_ptr(where))
        out = np.empty(r, dtype=np.float32)
        out[where] = scores
        return out

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids (k,), cosines (k,)) for query (D,), best first (ties: smaller id)."""
        return self._search(query, k, ranked=True)

    def top_ids(self, query: np.ndarray, k: int) -> np.ndarray:
        """The ids of :meth:`search`'s top-k, in no particular order (what anchor selection
        needs). When the pre-filter scan alone separates the k best from the rest by more than
        its error bound, nothing is re-scored."""
        return self._search(query, k, ranked=False)

    def _search(self, query: np.ndarray, k: int, ranked: bool):
        import faiss

        n = self._n
        k = min(k, n)
        if k <= 0:
            empty = np.zeros(0, np.int64)
            return (empty, np.zeros(0, np.float32)) if ranked else empty
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self.dim)   # (1, D)
        q_norm = math.sqrt(float(np.dot(q[0], q[0]))) * (1.0 + 1e-6)  # an upper bound of ||q||
        if q_norm == 0.0:                     # every score is 0: the k smallest ids
            ids = np.sort(self._ids[:n])[:k]
            return (ids, np.zeros(k, np.float32)) if ranked else ids
        slack = q_norm * (self._err_max + self._fp * (2.0 * self._bnorm_max + self._err_max)) \
            + 1e-9
        pool = min(n, max(2 * k, k + self.POOL))
        scan = np.empty(pool, dtype=np.float32)                                 # (P,)
        rows = np.empty(pool, dtype=np.int64)                                   # (P,)
        threads = faiss.omp_get_max_threads()  # one query: one thread (see the module notes)
        faiss.omp_set_num_threads(1)
        try:
            self._codes.search_c(1, faiss.swig_ptr(q), pool, faiss.swig_ptr(scan),
                                 faiss.swig_ptr(rows))
            kth = float(scan[k - 1])
            if not ranked and (k == n or kth - float(scan[k]) > 2.0 * slack):
                return self._ids[rows[:k]]    # the k best beat every other row for certain
            # every exact top-k row scans at or above the line (float32, rounded down)
            line = np.float32(kth - 2.0 * slack)
            if line > kth - 2.0 * slack:
                line = np.nextafter(line, np.float32(-np.inf))
            if pool < n and scan[pool - 1] >= line:  # the pool may have cut the line short
                below = np.nextafter(line, np.float32(-np.inf))   # range search keeps > radius
                _, scan, rows = self._codes.range_search(q, float(below))
            rows = rows[scan >= line]
            exact = self._exact(rows, q)                                         # (R,)
        finally:
            faiss.omp_set_num_threads(threads)
        ids = self._ids[rows]
        order = np.lexsort((ids, -exact))[:k]
        return (ids[order], exact[order]) if ranked else ids[order]

    def ids(self) -> set[int]:
        return set(self._ids[:self._n].tolist())

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids (N,) int64, vectors (N, D) float32) of every entry, in insertion order."""
        return self._ids[:self._n].copy(), self._vec[:self._n].copy()

    def save(self, path: Path) -> None:
        import faiss

        index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        index.add_with_ids(self._vec[:self._n], self._ids[:self._n])
        faiss.write_index(index, str(path))

    @classmethod
    def load(cls, path: Path, dim: int) -> "FlatEntityIndex":
        import faiss

        index = faiss.read_index(str(path))                  # IndexIDMap2 over IndexFlatIP
        out = cls(dim)
        inner = faiss.downcast_index(index.index)
        out.add(faiss.vector_to_array(index.id_map).astype(np.int64),
                inner.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, dim)))
        return out


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

    def top_ids(self, query: np.ndarray, k: int) -> np.ndarray:
        return self.search(query, k)[0]

    def ids(self) -> set[int]:
        return set(int(i) for i in self._index.get_ids_list())

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids (N,) int64 ascending, vectors (N, D) float32) of every entry."""
        ids = sorted(self._index.get_ids_list())
        if not ids:
            return np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32)
        return np.asarray(ids, dtype=np.int64), np.asarray(self._index.get_items(ids), np.float32)

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


class AutoEntityIndex:
    """Exact while small, HNSW when large: a :class:`FlatEntityIndex` up to ``threshold`` entries,
    rebuilt as an :class:`HNSWEntityIndex` from its vectors once it holds more, and back to exact
    when deletions bring it under ``threshold // 2`` (the gap keeps a memory near the threshold
    from rebuilding at every turn).

    Why: the exact scan is linear in the number of entities; up to 10,000 of them it answers in
    about half a millisecond on one core (benchmarks/graph_retrieval.py), beyond that HNSW's
    logarithmic search, with ChromaDB's parameters, costs less at the same agreement with exact
    search as ChromaDB itself. A conversation memory (hundreds to a few thousand entities) thus
    stays exact. Saved as ``entities.auto`` (JSON: the kind in use and the threshold) beside the
    inner index's own file.
    """

    kind = "auto"
    THRESHOLD = 10_000

    def __init__(self, dim: int, threshold: int = THRESHOLD, inner=None):
        if threshold < 2:
            raise ValueError(f"threshold must be at least 2, got {threshold!r}")
        self.dim, self.threshold = dim, threshold
        self._inner = inner if inner is not None else FlatEntityIndex(dim)

    @property
    def active(self) -> str:
        """The kind answering queries now: "flat" or "hnsw"."""
        return self._inner.kind

    def __len__(self) -> int:
        return len(self._inner)

    def _rebuild(self, kind: str) -> None:
        ids, vectors = self._inner.items()
        self._inner = make_index(kind, self.dim)
        if ids.size:
            self._inner.add(ids, vectors)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._inner.add(ids, vectors)
        if self.active == "flat" and len(self) > self.threshold:
            self._rebuild("hnsw")

    def remove(self, ids: np.ndarray) -> None:
        self._inner.remove(ids)
        if self.active == "hnsw" and len(self) < self.threshold // 2:
            self._rebuild("flat")

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self._inner.search(query, k)

    def top_ids(self, query: np.ndarray, k: int) -> np.ndarray:
        return self._inner.top_ids(query, k)

    def ids(self) -> set[int]:
        return self._inner.ids()

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        return self._inner.items()

    def save(self, path: Path) -> None:
        path = Path(path)
        self._inner.save(path.parent / FILE_NAMES[self.active])
        other = "hnsw" if self.active == "flat" else "flat"
        (path.parent / FILE_NAMES[other]).unlink(missing_ok=True)  # a stale file of the other kind
        path.write_text(json.dumps({"active": self.active, "threshold": self.threshold}),
                        encoding="utf-8")

    @classmethod
    def load(cls, path: Path, dim: int) -> "AutoEntityIndex":
        from pipelines.data.loaders.base import load_json
        from pipelines.errors import DataError

        path = Path(path)
        if not path.exists():
            raise DataError("file does not exist", file=str(path))
        meta = load_json(path)
        active = meta.get("active") if isinstance(meta, dict) else None
        threshold = meta.get("threshold") if isinstance(meta, dict) else None
        if active not in ("flat", "hnsw") or not isinstance(threshold, int) or threshold < 2:
            raise DataError(f"expected {{'active': 'flat' | 'hnsw', 'threshold': int >= 2}}, got {meta!r}",
                            file=str(path), rule="entity_index_meta")
        inner_path = path.parent / FILE_NAMES[active]
        if not inner_path.exists():
            raise DataError("file does not exist", file=str(inner_path))
        return cls(dim, threshold, load_index(active, inner_path, dim))


def _index_class(kind: str):
    classes = {"flat": FlatEntityIndex, "hnsw": HNSWEntityIndex, "auto": AutoEntityIndex}
    if kind not in classes:
        raise ValueError(f"entity index must be 'auto', 'flat' or 'hnsw', got {kind!r}")
    return classes[kind]


def make_index(kind: IndexKind, dim: int, exact_up_to: int = AutoEntityIndex.THRESHOLD):
    """A new index of ``kind``; ``exact_up_to`` is the threshold of ``auto``."""
    cls = _index_class(kind)
    return cls(dim, exact_up_to) if cls is AutoEntityIndex else cls(dim)


def load_index(kind: IndexKind, path: Path, dim: int):
    return _index_class(kind).load(path, dim)
