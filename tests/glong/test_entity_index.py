"""Tests of pipelines/glong/entity_index.py: exact (faiss) and HNSW (hnswlib) entity indexes."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.glong.entity_index import (FILE_NAMES, FlatEntityIndex, HNSWEntityIndex,
                                          load_index, make_index)

# Four orthonormal directions and a query at cosines 0.8, 0.6, 0, 0 with them.
VECS = np.eye(4, dtype=np.float32)
IDS = np.array([10, 20, 30, 40], dtype=np.int64)
QUERY = np.array([0.8, 0.6, 0.0, 0.0], dtype=np.float32)


@pytest.fixture(params=["flat", "hnsw"])
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
    vecs = rng.normal(size=(50, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    idx.add(np.arange(50), vecs)
    assert len(idx) == 50 and idx._index.get_max_elements() >= 50
    idx.remove(np.arange(0, 50, 2))
    assert idx.ids() == set(range(1, 50, 2))
    assert sorted(idx._index.get_ids_list()) == list(range(1, 50, 2))   # not merely marked
    ids, _ = idx.search(vecs[3], 1)
    assert ids.tolist() == [3]


def test_flat_is_exact_and_unknown_kind_raises():
    assert isinstance(make_index("flat", 3), FlatEntityIndex)
    with pytest.raises(ValueError, match="'flat' or 'hnsw'"):
        make_index("annoy", 3)
