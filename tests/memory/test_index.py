"""First-stage indexes: the sparse BM25 index against rank_bm25, the top-k selection against a full sort,
the dense index exact and through HNSW."""

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from pipelines.memory.bm25 import bm25_scores
from pipelines.memory.index import BM25Index, DenseIndex, top_k


def random_docs(n: int, seed: int, vocab: int = 60) -> list[list[str]]:
    """Zipf-like words, lengths 0-12 (a few empty docs), some words in more than half the docs
    (negative IDFs, floored)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    words = [f"w{i}" for i in range(vocab)]
    return [[words[j] for j in rng.choice(vocab, size=rng.integers(0, 13), p=p)] for _ in range(n)]


QUERIES = [["w0"], ["w1", "w5", "w30"], ["w2", "w2", "w7"], ["w59", "nowhere"], ["nowhere"], []]


def okapi(docs, query, k1, b, epsilon):
    return BM25Okapi(docs, k1=k1, b=b, epsilon=epsilon).get_scores(query)


@pytest.mark.parametrize("k1, b, epsilon", [(1.5, 0.75, 0.25), (1.2, 0.0, 0.0), (0.9, 0.5, 1.0), (2.0, 0.3, 0.25)])
@pytest.mark.parametrize("seed", [0, 1])
def test_scores_equal_rank_bm25(k1, b, epsilon, seed):
    docs = random_docs(300, seed)
    index = BM25Index(k1, b, epsilon)
    index.add(docs[:120])
    index.add(docs[120:])                                          # added in two parts: one corpus
    for query in QUERIES:
        expected = okapi(docs, query, k1, b, epsilon)
        assert np.allclose(index.scores(query), expected, rtol=1e-12, atol=1e-12)
        assert np.allclose(bm25_scores(docs, query, k1, b, epsilon), expected, rtol=1e-12, atol=1e-12)
    reference = BM25Okapi(docs, k1=k1, b=b, epsilon=epsilon)
    assert reference.idf["w0"] == epsilon * reference.average_idf          # the floor was exercised


def test_the_negative_idf_floor_is_epsilon_times_the_mean_idf():
    docs = [["common", "a"], ["common", "b"], ["common"], ["rare"]]   # "common" in 3 of 4 docs: IDF < 0
    index = BM25Index(epsilon=0.5)
    index.add(docs)
    reference = BM25Okapi(docs, epsilon=0.5)
    assert reference.idf["common"] == pytest.approx(0.5 * reference.average_idf) and reference.average_idf > 0
    np.testing.assert_allclose(index.scores(["common"]), reference.get_scores(["common"]), rtol=1e-12)


def test_keep_then_add_scores_the_remaining_corpus():
    docs = random_docs(250, 3)
    index = BM25Index()
    index.add(docs[:200])
    mask = np.random.default_rng(0).random(200) < 0.6
    index.keep(mask)
    index.add(docs[200:])
    remaining = [d for d, k in zip(docs[:200], mask) if k] + docs[200:]
    assert len(index) == len(remaining)
    for query in QUERIES:
        np.testing.assert_allclose(index.scores(query), okapi(remaining, query, 1.5, 0.75, 0.25), rtol=1e-12,
                                   atol=1e-12)


def test_a_term_only_forgotten_docs_had_scores_nothing_and_leaves_the_mean_idf():
    index = BM25Index()
    index.add([["gone", "x"], ["y"], ["x", "z"]])
    index.keep(np.array([False, True, True]))
    docs = [["y"], ["x", "z"]]
    np.testing.assert_allclose(index.scores(["gone", "x"]), okapi(docs, ["gone", "x"], 1.5, 0.75, 0.25), rtol=1e-12)


def test_k1_zero_scores_zero_where_rank_bm25_divides_zero_by_zero():
    docs = [["a", "b"], ["b"], ["c", "c"]]
    index = BM25Index(k1=0.0)
    index.add(docs)
    with np.errstate(invalid="ignore"):
        expected = okapi(docs, ["a"], 0.0, 0.75, 0.25)           # [idf(a), nan, nan]
    assert np.isnan(expected[1:]).all()
    np.testing.assert_allclose(index.scores(["a"]), [expected[0], 0.0, 0.0], rtol=1e-12)


@pytest.mark.parametrize("docs", [[], [[]], [[], []]])
def test_no_token_anywhere_scores_zeros(docs):
    index = BM25Index()
    index.add(docs)
    assert index.scores(["a"]).tolist() == [0.0] * len(docs) and bm25_scores(docs, ["a"], 1.5, 0.75, 0.25).tolist() \
        == [0.0] * len(docs)


def test_the_build_is_lazy_and_invalidated_by_changes():
    index = BM25Index()
    index.add([["a"], ["b"]])
    w = index.weights
    assert index.weights is w                                    # built once
    index.add([["a", "c"]])
    assert index.weights is not w and index.weights.shape == (3, 3)
    assert index.nbytes > 0


# --- top_k: the turn stores' order (score desc, ties to the later row) ---------------------------

def lexsort_top(scores, k):
    return np.lexsort((-np.arange(len(scores)), -scores))[:k]


SCORE_CASES = {
    "distinct": np.random.default_rng(0).normal(size=50),
    "ties": np.random.default_rng(1).integers(0, 4, 50).astype(float),
    "sparse bm25": np.where(np.random.default_rng(2).random(50) < 0.2, np.random.default_rng(3).random(50), 0.0),
    "few matches": np.where(np.arange(50) % 17 == 3, 2.0, 0.0),
    "negative and zero": np.where(np.arange(50) % 5 == 0, -1.0, np.where(np.arange(50) % 7 == 0, 3.0, 0.0)),
    "ann": np.where(np.arange(50) % 9 == 0, np.random.default_rng(4).normal(size=50), -np.inf),
    "all background": np.zeros(50),
    "nan": np.where(np.arange(50) == 7, np.nan, np.random.default_rng(5).integers(0, 3, 50).astype(float)),
}


@pytest.mark.parametrize("case", list(SCORE_CASES))
@pytest.mark.parametrize("k", [1, 3, 10, 49, 50, 60])
@pytest.mark.parametrize("background", [None, 0.0, -np.inf, 1.0])
def test_top_k_is_the_full_sort_cut_at_k(case, k, background):
    scores = SCORE_CASES[case]
    assert top_k(scores, k, background).tolist() == lexsort_top(scores, k).tolist()


def test_top_k_on_float32_cosines():
    scores = np.random.default_rng(6).normal(size=1000).astype(np.float32)
    scores[::10] = scores[5]                                     # ties
    assert top_k(scores, 25).tolist() == lexsort_top(scores, 25).tolist()


# --- the dense index -----------------------------------------------------------------------------

def clustered(n_clusters: int, per: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors in well-separated clusters (N, D), and the cluster centres (C, D)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = np.repeat(centres, per, axis=0) + 0.05 * rng.normal(size=(n_clusters * per, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), centres.astype(np.float32)


def test_exact_scores_are_the_product_and_the_buffer_grows_and_shrinks():
    x, _ = clustered(4, 50, 16, 0)
    index = DenseIndex()
    for start in range(0, 200, 30):
        index.add(x[start:start + 30])
    assert len(index) == 200 and index.vectors.shape == (200, 16)
    np.testing.assert_array_equal(index.vectors, x)
    q = x[3]
    np.testing.assert_allclose(index.scores(q, 5), x @ q, rtol=1e-6)
    mask = np.arange(200) % 3 != 0
    index.keep(mask)
    np.testing.assert_array_equal(index.vectors, x[mask])
    assert not index._buffer[len(index):].any()                 # no forgotten vector left behind


def test_hnsw_top_k_agrees_with_exact_on_separated_data():
    x, centres = clustered(20, 30, 32, 1)                       # 600 rows
    exact, ann = DenseIndex(), DenseIndex("hnsw", ann_min_items=100)
    exact.add(x[:400])
    ann.add(x[:400])
    ann.add(x[400:])                                            # in two parts
    exact.add(x[400:])
    for q in centres[:5]:
        assert ann.uses_ann(10) and not exact.uses_ann(10)
        approx, full = ann.scores(q, 10), exact.scores(q, 10)
        returned = np.isfinite(approx)
        assert returned.sum() == 10 and np.isneginf(approx[~returned]).all()
        np.testing.assert_allclose(approx[returned], full[returned], rtol=1e-6)   # exact cosines
        assert set(top_k(approx, 10, -np.inf)) == set(top_k(full, 10))
    assert len(ann.ann) == 600


def test_hnsw_rules_and_rebuild_after_keep():
    x, centres = clustered(10, 30, 16, 2)                       # 300 rows
    index = DenseIndex("hnsw", ann_min_items=200, ef_search=20)
    index.add(x[:150])
    assert not index.uses_ann(5) and index.ann is None          # below ann_min_items: exact
    index.scores(centres[0], 5)
    assert index.ann is None
    index.add(x[150:])
    assert index.uses_ann(20) and not index.uses_ann(21) and not index.uses_ann(300)
    index.scores(centres[0], 5)
    assert len(index.ann) == 300
    mask = np.arange(300) >= 30                                 # forget the first cluster
    index.keep(mask)
    assert index.ann is None                                    # rebuilt lazily
    approx = index.scores(centres[0], 5)
    assert len(index.ann) == 270 and approx.shape == (270,)
    exact = index.vectors @ centres[0]
    assert set(top_k(approx, 5, -np.inf)) == set(top_k(exact, 5))
    index.keep(np.arange(270) < 100)                            # below ann_min_items again: exact
    np.testing.assert_allclose(index.scores(centres[0], 5), x[30:130] @ centres[0], rtol=1e-6)


def test_dense_index_kind_is_checked():
    with pytest.raises(ValueError, match="exact"):
        DenseIndex("flat")


def test_keep_forgets_the_terms_only_forgotten_docs_held():
    index = BM25Index()
    index.add([["wren", "violin"], ["juno", "stamps"], ["violin", "kyoto"]])
    index.keep(np.array([False, True, True]))
    assert sorted(index.vocab) == ["juno", "kyoto", "stamps", "violin"] and "wren" not in index._terms
    assert index.vocab == {"juno": 0, "stamps": 1, "violin": 2, "kyoto": 3}   # renumbered by first appearance
    assert index.weights.shape == (4, 2)
    docs = [["juno", "stamps"], ["violin", "kyoto"]]
    np.testing.assert_allclose(index.scores(["violin", "wren"]), okapi(docs, ["violin", "wren"], 1.5, 0.75, 0.25))
