import math

import pytest

from pipelines.evaluate.metrics import (context_tokens, dcg, mrr, ndcg_any_at_k, recall_all_at_k, recall_any_at_k,
                                        recall_at_k, retrieval_metrics)
from pipelines.memory.tokens import TokenCounter

RANKED = ["a", "b", "c", "d"]


@pytest.mark.parametrize("ranked, relevant, k, expected", [
    (RANKED, {"b", "d"}, 1, 0.0),
    (RANKED, {"b", "d"}, 2, 0.5),
    (RANKED, {"b", "d"}, 4, 1.0),
    (RANKED, {"b", "d"}, 10, 1.0),      # k beyond the ranking
    (["a"], {"a", "z"}, 1, 0.5),        # z was never retrieved
    ([], {"a"}, 3, 0.0),
])
def test_recall_at_k(ranked, relevant, k, expected):
    assert recall_at_k(ranked, relevant, k) == expected


@pytest.mark.parametrize("relevant, k, any_, all_", [
    ({"b", "d"}, 1, 0.0, 0.0),
    ({"b", "d"}, 2, 1.0, 0.0),
    ({"b", "d"}, 3, 1.0, 0.0),
    ({"b", "d"}, 4, 1.0, 1.0),
    ({"a"}, 1, 1.0, 1.0),
    ({"a", "z"}, 4, 1.0, 0.0),
    ({"z"}, 4, 0.0, 0.0),
])
def test_recall_any_and_all(relevant, k, any_, all_):
    assert recall_any_at_k(RANKED, relevant, k) == any_
    assert recall_all_at_k(RANKED, relevant, k) == all_


@pytest.mark.parametrize("relevances, k, expected", [
    ([], 3, 0.0),
    ([1, 1, 1, 1], 4, 1 + 1 + 1 / math.log2(3) + 1 / 2),  # ranks 1 and 2 both undiscounted
    ([0, 0, 1], 2, 0.0),
    ([0, 0, 1], 3, 1 / math.log2(3)),
])
def test_dcg_is_longmemevals(relevances, k, expected):
    assert dcg(relevances, k) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("relevant, k, expected", [
    ({"b", "d"}, 1, 0.0),
    ({"b", "d"}, 2, 0.5),                     # DCG 1 / IDCG 2
    ({"b", "d"}, 3, 0.5),
    ({"b", "d"}, 4, 0.75),                    # (1 + 1/log2 4) / 2
    ({"a"}, 3, 1.0),
    ({"b"}, 2, 1.0),                          # LongMemEval: rank 2 is not discounted
    ({"c"}, 3, 0.6309297535714575),           # 1 / log2 3
    ({"a", "c"}, 3, 0.8154648767857288),      # (1 + 1/log2 3) / 2
    ({"b", "z"}, 4, 0.5),                     # IDCG counts z: every evidence item is in the corpus
    ({"z"}, 3, 0.0),
])
def test_ndcg_any_at_k(relevant, k, expected):
    assert ndcg_any_at_k(RANKED, relevant, k) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("relevant, expected", [({"a"}, 1.0), ({"b", "d"}, 0.5), ({"c"}, 1 / 3), ({"z"}, 0.0)])
def test_mrr(relevant, expected):
    assert mrr(RANKED, relevant) == expected


@pytest.mark.parametrize("call", [
    lambda: recall_at_k(RANKED, set(), 1),
    lambda: ndcg_any_at_k(RANKED, [], 1),
    lambda: mrr(RANKED, set()),
    lambda: recall_any_at_k(["a", "a"], {"a"}, 1),
    lambda: recall_all_at_k(RANKED, {"a"}, 0),
])
def test_undefined_inputs_raise(call):
    with pytest.raises(ValueError):
        call()


def test_retrieval_metrics_is_flat_over_every_k():
    out = retrieval_metrics(RANKED, {"b", "d"}, (1, 4))
    assert out == {"recall@1": 0.0, "recall@4": 1.0, "recall_any@1": 0.0, "recall_any@4": 1.0,
                   "recall_all@1": 0.0, "recall_all@4": 1.0, "ndcg_any@1": 0.0, "ndcg_any@4": 0.75, "mrr": 0.5}


def test_context_tokens():
    assert context_tokens("Ana: red kite flies.") == 6
    assert context_tokens("") == 0
    assert context_tokens("a b", TokenCounter()) == 2
