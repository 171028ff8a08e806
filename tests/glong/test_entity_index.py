"""Tests of pipelines/glong/entity_index.py: exact (faiss) and HNSW (hnswlib) entity indexes."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.glong.entity_index import (FILE_NAMES, AutoEntityIndex, FlatEntityIndex,
                                          HNSWEntityIndex, load_index, make_index)

# Four orthonormal directions and a query at cosines 0.8, 0.6, 0, 0 with them.
VECS = np.eye(4, dtype=np.float32)
IDS = np.array([10, 20, 30, 40], dtype=np.int64)
QUERY = np.array([0.8, 0.6, 0.0, 0.0], dtype=np.float32)


def _unit_vectors(rng, n: int, d: int) -> np.ndarray:
    """(n, d) random float32 unit vectors."""
    vecs = rng.normal(size=(n, d)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


@pytest.fixture(params=["auto", "flat", "hnsw"])
def index(request):
    idx = make_index(request.param, 4)
    idx.add(IDS, VECS)
    return idx


def test_search_is_cosine_best_first(index):
    ids, scores = index.search(QUERY, 2)
    assert ids.tolist() == [10, 20]
    np.testing.assert_allclose(scores, [0.8, 0.6], atol=1e-6)
    ids, _ = index.search(QUERY, 10)                 # k larger than the index: everything
    assert sorted(ids.tolist()) == [10, 20, 30, 40]


def test_remove_deletes(index):
    index.remove(np.array([10]))
    assert len(index) == 3 and index.ids() == {20, 30, 40}
    ids, scores = index.search(QUERY, 1)
    assert ids.tolist() == [20]
    np.testing.assert_allclose(scores, [0.6], atol=1e-6)
    index.remove(np.array([20, 30, 40]))
    assert len(index) == 0 and index.search(QUERY, 3)[0].size == 0


def test_save_and_load(index, tmp_path):
    path = tmp_path / FILE_NAMES[index.kind]
    index.save(path)
    again = load_index(index.kind, path, 4)
    assert again.ids() == index.ids()
    for q in (QUERY, VECS[2], VECS[3] + VECS[0]):
        q = q / np.linalg.norm(q)
        a, b = index.search(q, 4), again.search(q, 4)
        assert a[0].tolist() == b[0].tolist()
        np.testing.assert_array_equal(a[1], b[1])


def test_hnsw_grows_and_rebuild_drops_deleted_vectors():
    idx = HNSWEntityIndex(8, capacity=2)
    rng = np.random.default_rng(0)
    vecs = _unit_vectors(rng, 50, 8)
    idx.add(np.arange(50), vecs)
    assert len(idx) == 50 and idx._index.get_max_elements() >= 50
    idx.remove(np.arange(0, 50, 2))
    assert idx.ids() == set(range(1, 50, 2))
    assert sorted(idx._index.get_ids_list()) == list(range(1, 50, 2))   # not merely marked
    ids, _ = idx.search(vecs[3], 1)
    assert ids.tolist() == [3]


def test_flat_is_exact_and_unknown_kind_raises():
    assert isinstance(make_index("flat", 3), FlatEntityIndex)
    with pytest.raises(ValueError, match="'auto', 'flat' or 'hnsw'"):
        make_index("annoy", 3)


# --- the exact index: a bf16 pre-filter, re-scored exactly ---------------------------------------

def _flat_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """float32 scores of a plain faiss IndexFlatIP scan of every vector (row order)."""
    import faiss

    plain = faiss.IndexFlatIP(vectors.shape[1])
    plain.add(vectors)
    scores, rows = plain.search(query.reshape(1, -1).astype(np.float32), len(vectors))
    out = np.empty(len(vectors), dtype=np.float32)
    out[rows[0]] = scores[0]
    return out


def _reference(vectors, ids, query, k):
    """Top-k by a full float32 scan; equal scores: smaller id first."""
    scores = _flat_scores(vectors, query)
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]


def _random_case(rng, trial):
    d, n = int(rng.integers(2, 40)), int(rng.integers(1, 300))
    vecs = rng.normal(size=(n, d)).astype(np.float32)
    if trial % 3 == 0:                                   # many exact duplicates: exact ties
        vecs = vecs[rng.integers(0, max(1, n // 10), n)]
    if trial % 5 == 0:                                   # sparse, integer-like: more ties
        vecs = np.round(vecs)
    if trial % 7 == 0:                                   # near-ties, closer than bf16 resolves
        vecs = vecs + (1e-4 * rng.normal(size=vecs.shape)).astype(np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(vecs, dtype=np.float32), rng.permutation(10 * n)[:n].astype(np.int64)


def test_flat_equals_a_full_float32_scan_on_random_data():
    """Inserts in batches, deletions, exact ties, near-ties, zero and unnormalised queries: the
    ids and the (bit-identical float32) scores of a full scan, ties to the smaller id."""
    rng = np.random.default_rng(7)
    for trial in range(150):
        vecs, ids = _random_case(rng, trial)
        index = FlatEntityIndex(vecs.shape[1])
        for part in np.array_split(np.arange(len(ids)), 3):
            index.add(ids[part], vecs[part])
        if trial % 2:
            gone = rng.choice(ids, len(ids) // 3, replace=False)
            index.remove(gone)
            keep = ~np.isin(ids, gone)
            vecs, ids = vecs[keep], ids[keep]
        assert len(index) == len(ids) and index.ids() == set(ids.tolist())
        for _ in range(4):
            if len(ids) and rng.random() < 0.5:
                query = vecs[rng.integers(0, len(ids))]
            else:
                query = rng.normal(size=vecs.shape[1]).astype(np.float32)
            if rng.random() < 0.1:
                query = np.zeros(vecs.shape[1], np.float32)
            k = int(rng.integers(1, 12))
            got_ids, got_scores = index.search(query, k)
            if not len(ids):
                assert got_ids.size == 0
                continue
            want_ids, want_scores = _reference(vecs, ids, query, k)
            assert got_ids.tolist() == want_ids.tolist()
            np.testing.assert_array_equal(got_scores, want_scores)


def test_flat_matches_faiss_flat_search_without_ties():
    """Where no two scores tie, the result is exactly a faiss IndexIDMap2(IndexFlatIP) search."""
    import faiss

    rng = np.random.default_rng(3)
    vecs = _unit_vectors(rng, 3000, 64)
    ids = np.arange(3000, dtype=np.int64) * 3
    index = FlatEntityIndex(64)
    index.add(ids, vecs)
    plain = faiss.IndexIDMap2(faiss.IndexFlatIP(64))
    plain.add_with_ids(vecs, ids)
    for i in range(50):
        query = vecs[i] + 0.5 * rng.normal(size=64).astype(np.float32) / 8
        want_scores, want_ids = plain.search(query.reshape(1, -1).astype(np.float32), 5)
        got_ids, got_scores = index.search(query, 5)
        assert got_ids.tolist() == want_ids[0].tolist()
        np.testing.assert_array_equal(got_scores, want_scores[0])


def test_flat_range_fallback_when_the_pool_is_too_small():
    """500 near-copies of one vector (closer than bf16 can tell apart) and k = 3: the first pool
    (k + 16 rows) cannot prove it holds the top-3, so the index widens it and is still exact."""
    rng = np.random.default_rng(5)
    base = rng.normal(size=32).astype(np.float32)
    vecs = base + (1e-5 * rng.normal(size=(500, 32))).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = np.arange(500, dtype=np.int64)
    index = FlatEntityIndex(32)
    index.add(ids, vecs)
    query = (base / np.linalg.norm(base)).astype(np.float32)
    got_ids, got_scores = index.search(query, 3)
    want_ids, want_scores = _reference(vecs, ids, query, 3)
    assert got_ids.tolist() == want_ids.tolist()
    np.testing.assert_array_equal(got_scores, want_scores)


def test_flat_removal_leaves_nothing_behind_and_keeps_the_bound_valid():
    rng = np.random.default_rng(11)
    vecs = _unit_vectors(rng, 40, 16)
    index = FlatEntityIndex(16)
    index.add(np.arange(40), vecs)
    index.remove(np.arange(0, 40, 2))
    n = len(index)
    assert n == 20 and index._codes.ntotal == 20
    assert not index._vec[n:].any() and not index._ids[n:].any()        # zeroed, not hidden
    np.testing.assert_array_equal(index._vec[:n], vecs[1::2])             # order kept
    decoded = index._codes.sa_decode(index._codes.sa_encode(index._vec[:n]))
    stored = index._codes.sa_decode(
        __import__("faiss").vector_to_array(index._codes.codes).reshape(n, -1))
    np.testing.assert_array_equal(stored, decoded)                       # pre-filter rows agree
    assert index._err_max >= np.linalg.norm(index._vec[:n] - decoded, axis=1).max()
    index.remove(np.arange(40))
    assert len(index) == 0 and index._err_max == 0.0
    assert index.search(vecs[0], 3)[0].size == 0


def test_flat_saves_a_plain_faiss_flat_index(tmp_path):
    """The file is still an IndexIDMap2 over IndexFlatIP (banks saved before load unchanged)."""
    import faiss

    index = make_index("flat", 4)
    index.add(IDS, VECS)
    index.remove(np.array([20]))
    index.save(tmp_path / "e.faiss")
    raw = faiss.read_index(str(tmp_path / "e.faiss"))
    assert raw.ntotal == 3 and sorted(faiss.vector_to_array(raw.id_map).tolist()) == [10, 30, 40]
    scores, ids = raw.search(QUERY.reshape(1, -1), 1)
    assert ids[0].tolist() == [10] and abs(scores[0][0] - 0.8) < 1e-6


@pytest.mark.parametrize("kind", ["auto", "flat", "hnsw"])
def test_top_ids_is_the_set_of_search(kind):
    """``top_ids`` (anchor selection) is the set of ``search``'s ids, with or without ties."""
    rng = np.random.default_rng(13)
    for trial in range(60):
        vecs, ids = _random_case(rng, trial)
        index = make_index(kind, vecs.shape[1])
        index.add(ids, vecs)
        for _ in range(4):
            query = rng.normal(size=vecs.shape[1]).astype(np.float32)
            k = int(rng.integers(1, 8))
            assert sorted(index.top_ids(query, k).tolist()) == \
                sorted(index.search(query, k)[0].tolist())


def test_auto_is_exact_while_small_then_hnsw_and_back(tmp_path):
    """Flat up to the threshold, rebuilt as HNSW above it (same entries, searchable), back to flat
    under half the threshold; saved and loaded as the kind in use."""
    rng = np.random.default_rng(5)
    vecs = _unit_vectors(rng, 40, 16)
    ids = np.arange(40, dtype=np.int64) * 2
    index = AutoEntityIndex(16, threshold=20)
    index.add(ids[:20], vecs[:20])
    assert index.active == "flat" and len(index) == 20
    want = FlatEntityIndex(16)
    want.add(ids[:20], vecs[:20])
    assert index.search(vecs[3], 4)[0].tolist() == want.search(vecs[3], 4)[0].tolist()
    index.add(ids[20:], vecs[20:])                                     # 40 > 20: HNSW
    assert index.active == "hnsw" and index.ids() == set(ids.tolist())
    got_ids, got_vecs = index.items()
    np.testing.assert_allclose(got_vecs[np.argsort(got_ids)], vecs, atol=1e-6)
    assert index.search(vecs[30], 1)[0].tolist() == [60]
    index.save(tmp_path / FILE_NAMES["auto"])
    again = load_index("auto", tmp_path / FILE_NAMES["auto"], 16)
    assert again.active == "hnsw" and again.threshold == 20 and again.ids() == index.ids()
    index.remove(ids[:35])                                             # 5 < 10: exact again
    assert index.active == "flat" and index.ids() == set(ids[35:].tolist())
    assert index.search(vecs[36], 1)[0].tolist() == [72]
    index.save(tmp_path / FILE_NAMES["auto"])                          # no stale HNSW file left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entities.auto", "entities.faiss"]


@pytest.mark.parametrize("content, match", [("{not json", "invalid JSON"),
                                            ('{"active": "annoy", "threshold": 5}', "expected"),
                                            ('{"active": "flat", "threshold": 5}', "does not exist")])
def test_auto_load_names_the_file_on_bad_input(tmp_path, content, match):
    from pipelines.errors import DataError

    path = tmp_path / FILE_NAMES["auto"]
    path.write_text(content)
    with pytest.raises(DataError, match=match) as err:
        load_index("auto", path, 4)
    assert "entities." in str(err.value)
