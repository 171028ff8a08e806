"""First-stage indexes of the turn strategies: sparse Okapi BM25, dense vectors with an optional HNSW graph.

Issue #18 (point 4): a query against 100k held turns answers its first stage in under 2 ms on one
CPU core. Three parts:

- :class:`BM25Index`: Okapi BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance
  Framework: BM25 and Beyond") as rank_bm25 0.2.2's ``BM25Okapi`` computes it, for a
  query q of terms t (a repeated query term counts each time) and a doc d of |d| tokens:

      score(q, d) = sum_{t in q} w(t, d)                                                    (1)
      w(t, d)     = IDF(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl))  (2)
      IDF(t)      = log(N - n(t) + 0.5) - log(n(t) + 0.5),                                   (3)
                    and eps * mean_t IDF(t) where (3) is negative (mean over the corpus's terms)

  with f(t, d) the count of t in d, n(t) the number of docs holding t, N the number of docs
  (empty ones included) and avgdl their mean length. ``w`` depends on the corpus only, so it is
  precomputed into a sparse term x doc matrix W (V, N); a query's scores are the sum of its terms'
  rows, O(postings) instead of rank_bm25's O(N) Python per term. The values are rank_bm25's, by
  the same float operations in the same order (tests/memory/test_index.py compares them), with
  one difference: where rank_bm25 divides 0 by 0 (``k1 = 0``, or ``b = 1`` with an empty doc)
  for a term a doc does not hold, it yields NaN; here such a doc gets 0 for that term.
- :class:`DenseIndex`: the held vectors (N, D) in store order in a buffer that grows by doubling,
  scored exactly (E q), or, with ``kind="hnsw"`` and at least ``ann_min_items`` held, through an
  HNSW graph (Malkov & Yashunin 2018, hnswlib; see the class docstring for why hnswlib).
- :func:`top_k`: the k best of (N,) scores in the turn stores' order (score desc, equal scores to
  the later row = the newer turn) in O(N) numpy instead of an O(N log N) sort, exactly.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse


def _ranked(rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``rows`` ordered by score desc, then row desc (the newer turn first)."""
    return rows[np.lexsort((-rows, -scores[rows]))]


def top_k(scores: np.ndarray, k: int, background: float | None = None) -> np.ndarray:
    """Rows of the ``k`` best ``scores`` (N,), best first, equal scores to the later row: exactly
    ``np.lexsort((-np.arange(N), -scores))[:k]``, without sorting all N.

    ``background``: a value most rows hold (BM25: 0 for the turns sharing no query term; an
    approximate search: -inf for the rows it did not return), a hint that makes the selection a
    pass over the rows above it. Any value gives the same result.
    """
    n = scores.shape[0]
    if k >= n or np.isnan(scores).any():
        return _ranked(np.arange(n), scores)[:k]
    rows = np.arange(n) if background is None else np.flatnonzero(scores > background)   # (R,)
    if background is not None and rows.size < k:   # all of them, then the background, newest first
        at = np.flatnonzero(scores == background)[::-1]
        need = k - rows.size
        rest = at[:need] if at.size >= need else np.concatenate(
            [at, _ranked(np.flatnonzero(scores < background), scores)[:need - at.size]])
        return np.concatenate([_ranked(rows, scores), rest])
    sub = scores[rows]                                                                   # (R,)
    kth = sub[np.argpartition(sub, sub.size - k)[sub.size - k]]                          # k-th best value
    over, tied = rows[sub > kth], rows[sub == kth]
    return _ranked(np.concatenate([over, tied[tied.size - (k - over.size):]]), scores)


class BM25Index:
    """Okapi BM25 scores, eqs. (1)-(3), from a sparse (V, N) matrix of precomputed term weights.

    Docs are added and removed in store order; the matrix is built lazily, at the first query
    after a change (IDF and avgdl depend on every doc, so no exact incremental update exists), by
    vectorised numpy / scipy over all tokens. Term ids are given when a doc is added (one pass over
    its tokens), so a build touches no Python string.
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25):
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self.vocab: dict[str, int] = {}            # term -> row of W, for every term of the held docs
        self._terms: list[str] = []                # row of W -> term
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (term ids (T_i,), doc lengths (N_i,)) per add
        self._weights: sparse.csr_array | None = None           # W (V, N); None: to build

    def __len__(self) -> int:
        return sum(lengths.size for _, lengths in self._chunks)

    def add(self, docs: list[list[str]]) -> None:
        """Append tokenised docs (after the docs already held)."""
        if not docs:
            return
        vocab, terms = self.vocab, self._terms
        for t in (t for doc in docs for t in doc if t not in vocab):   # new terms, in order of first appearance
            vocab[t] = len(terms)
            terms.append(t)
        ids = np.fromiter((vocab[t] for doc in docs for t in doc), dtype=np.int32)                   # (T,)
        self._chunks.append((ids, np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))))
        self._weights = None

    def _flat(self) -> tuple[np.ndarray, np.ndarray]:
        """(term ids (T,), doc lengths (N,)) of every held doc, in order, as one chunk."""
        if len(self._chunks) != 1:
            ids = np.concatenate([c[0] for c in self._chunks]) if self._chunks else np.zeros(0, np.int32)
            lengths = np.concatenate([c[1] for c in self._chunks]) if self._chunks else np.zeros(0, np.int64)
            self._chunks = [(ids, lengths)]
        return self._chunks[0]

    def keep(self, mask: np.ndarray) -> None:
        """Keep the docs where ``mask`` (N,) is true, in order; the others are forgotten, and so are the
        terms only they held (the vocabulary is renumbered in order of first appearance in the docs left)."""
        ids, lengths = self._flat()
        mask = np.asarray(mask, dtype=bool)
        ids, lengths = ids[np.repeat(mask, lengths)], lengths[mask]           # (T',), (N',)
        old, first, inverse = np.unique(ids, return_index=True, return_inverse=True)  # (V',) held term ids
        order = np.argsort(first, kind="stable")                              # new id -> index into old
        new_id = np.empty_like(order)
        new_id[order] = np.arange(order.size)                                 # index into old -> new id
        self._terms = [self._terms[i] for i in old[order]]
        self.vocab = {t: i for i, t in enumerate(self._terms)}
        self._chunks = [(new_id[inverse].astype(np.int32), lengths)]
        self._weights = None

    @property
    def weights(self) -> sparse.csr_array:
        """W (V, N): w(t, d) of eq. (2), one row per term (its postings), built if stale."""
        if self._weights is None:
            self._weights = self._build()
        return self._weights

    def _build(self) -> sparse.csr_array:
        ids, lengths = self._flat()                                       # (T,), (N,)
        n, v = lengths.size, len(self.vocab)
        if ids.size == 0:                                                 # no doc has a token: every score 0
            return sparse.csr_array((v, n), dtype=np.float64)
        docs = np.repeat(np.arange(n, dtype=np.int32), lengths)          # (T,) doc of each token
        counts = sparse.coo_array((np.ones(ids.size), (ids, docs)), shape=(v, n)).tocsr()  # f(t, d) (V, N)
        counts.sum_duplicates()
        df = np.diff(counts.indptr)                                      # (V,) n(t) >= 1: every term is held
        idf = np.log(n - df + 0.5) - np.log(df + 0.5)                    # (V,) eq. (3)
        # the mean summed left to right in order of first appearance, as rank_bm25 sums it (the order of the ids)
        eps = self.epsilon * (np.cumsum(idf)[-1] / v)
        idf[idf < 0] = eps
        avgdl = int(lengths.sum()) / n
        norm = self.k1 * (1 - self.b + self.b * lengths / avgdl)         # (N,) the length normaliser
        tf = counts.data                                                 # (nnz,) f(t, d)
        rows = np.repeat(np.arange(v), df)                               # (nnz,) term of each entry
        counts.data = idf[rows] * (tf * (self.k1 + 1) / (tf + norm[counts.indices]))  # eq. (2)
        return counts

    def term_ids(self, query: list[str]) -> list[int]:
        """Rows of W of the query's terms, repeats kept; terms no doc ever held are left out (they score 0)."""
        return [self.vocab[t] for t in query if t in self.vocab]

    def scores(self, query: list[str]) -> np.ndarray:
        """Eq. (1) for every held doc (N,) float64: the sum of the query terms' rows of W."""
        w = self.weights
        out = np.zeros(w.shape[1])                                       # (N,)
        for t in self.term_ids(query):
            start, end = w.indptr[t], w.indptr[t + 1]
            out[w.indices[start:end]] += w.data[start:end]               # a row's doc ids are unique
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the built matrix W (data, column ids, row pointers)."""
        w = self.weights
        return w.data.nbytes + w.indices.nbytes + w.indptr.nbytes


class DenseIndex:
    """Unit vectors of the held items in store order; inner-product (= cosine) search.

    ``kind="exact"``: ``E q`` over every row, O(N D). ``kind="hnsw"``: below ``ann_min_items`` rows
    the same; from there a query for ``k`` items (``k`` up to ``max(ef_search, N // 100)``: a deeper
    ranking costs an HNSW search more than an exact scan) goes to an HNSW graph over the rows, built
    lazily at the first such query. Rows the graph returns score their cosine, computed from the
    held vectors (not hnswlib's 1 - distance; equal to the exact search's up to float32 rounding),
    the others -inf. New rows are added to the graph at the next query (HNSW grows in place);
    forgetting drops the graph, rebuilt lazily from the rows kept, so no forgotten vector stays in
    it (hnswlib itself can only mark an item deleted).

    Why hnswlib, not faiss's ``IndexHNSWFlat``: on 20k x 384 unit vectors with the same M and
    ef_construction both build in about 7 s and answer a top-100 query in 0.4-0.5 ms on one core
    (measured here, hnswlib slightly faster); hnswlib is the HNSW the project already wraps
    (:class:`pipelines.glong.entity_index.HNSWEntityIndex`, ChromaDB's index and defaults: M = 16,
    ef_construction = 100, ef_search = 100), it grows in place (``resize_index``) and takes our
    row numbers as labels, and its single-query search runs on one thread without OpenMP.
    """

    def __init__(self, kind: str = "exact", ann_min_items: int = 20_000, m: int = 16,
                 ef_construction: int = 100, ef_search: int = 100):
        if kind not in ("exact", "hnsw"):
            raise ValueError(f"dense index kind must be 'exact' or 'hnsw', got {kind!r}")
        self.kind, self.ann_min_items = kind, ann_min_items
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search
        self._buffer = np.zeros((0, 0), dtype=np.float32)  # (capacity, D); rows 0.._n-1 held
        self._n = 0
        self.ann = None          # HNSWEntityIndex over rows 0..ann rows-1 (labels = rows), or None

    def __len__(self) -> int:
        return self._n

    @property
    def vectors(self) -> np.ndarray:
        """The held vectors (N, D), a view of the buffer."""
        return self._buffer[:self._n]

    def add(self, vectors: np.ndarray) -> None:
        """Append rows (M, D) float32, L2-normalised."""
        vectors = np.asarray(vectors, dtype=np.float32)
        m = vectors.shape[0]
        if m == 0:
            return
        if self._buffer.shape[1] != vectors.shape[1]:
            if self._n:
                raise ValueError(f"vectors of dimension {vectors.shape[1]} added to an index of dimension "
                                 f"{self._buffer.shape[1]}")
            self._buffer = np.zeros((0, vectors.shape[1]), dtype=np.float32)
        if self._n + m > self._buffer.shape[0]:
            grown = np.zeros((max(self._n + m, 2 * self._buffer.shape[0], 64), vectors.shape[1]), np.float32)
            grown[:self._n] = self.vectors
            self._buffer = grown
        self._buffer[self._n:self._n + m] = vectors
        self._n += m

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where ``mask`` (N,) is true, in order; the graph goes (rebuilt lazily)."""
        kept = self.vectors[np.asarray(mask, dtype=bool)]
        self._buffer[:kept.shape[0]] = kept
        self._buffer[kept.shape[0]:self._n] = 0                  # no forgotten vector stays in memory
        self._n = kept.shape[0]
        self.ann = None

    def uses_ann(self, k: int) -> bool:
        """Whether a query for ``k`` items goes through the HNSW graph."""
        return (self.kind == "hnsw" and self._n >= self.ann_min_items and k < self._n
                and k <= max(self.ef_search, self._n // 100))

    def _graph(self):
        from pipelines.glong.entity_index import HNSWEntityIndex

        if self.ann is None:
            self.ann = HNSWEntityIndex(self._buffer.shape[1], self.m, self.ef_construction, self.ef_search,
                                       capacity=self._n)
        start = len(self.ann)
        if start < self._n:                                      # rows added since the last query
            self.ann.add(np.arange(start, self._n, dtype=np.int64), self.vectors[start:])
        return self.ann

    def search(self, query: np.ndarray, k: int) -> np.ndarray | None:
        """Rows (k,) the graph returns for ``query`` (D,) when a query for ``k`` items goes through it
        (:meth:`uses_ann`); None when it does not (answer exactly), or when hnswlib finds fewer than
        ``k`` items (a sparse graph)."""
        if not self.uses_ann(k):
            return None
        try:
            rows, _ = self._graph().search(query, k)                             # (k,), approximate cosines
        except RuntimeError:
            return None
        return np.asarray(rows, dtype=np.int64)

    def scores(self, query: np.ndarray, k: int | None = None) -> np.ndarray:
        """Cosines (N,) float32 of ``query`` (D,) with every row, or, when a query for ``k`` items
        goes through the graph (:meth:`search`), with the rows it returns and -inf elsewhere."""
        vectors = self.vectors                                                   # (N, D)
        rows = None if k is None else self.search(query, k)
        if rows is None:
            return vectors @ query                                               # (N,)
        out = np.full(self._n, -np.inf, dtype=np.float32)                        # (N,)
        out[rows] = vectors[rows] @ query
        return out
