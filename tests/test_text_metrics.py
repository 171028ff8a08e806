import math

import pytest

from pipelines.text_metrics import bleu, distinct, generation_metrics, ngrams, rouge_l


def test_distinct_hand_computed():
    # tokens: a b a | a b  -> unigrams a,b,a,a,b: 2 distinct / 5 ; bigrams ab,ba,ab: 2 distinct / 3
    assert distinct(["a b a", "a b"], 1) == pytest.approx(2 / 5)
    assert distinct(["a b a", "a b"], 2) == pytest.approx(2 / 3)
    assert distinct(["x"], 2) == 0.0
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]


def test_bleu1_is_clipped_unigram_precision_times_brevity_penalty():
    # hyp "the cat sat" vs ref "the cat sat on the mat": precision 3/3, BP = exp(1 - 6/3)
    assert bleu(["the cat sat"], ["the cat sat on the mat"], 1) == pytest.approx(100 * math.exp(1 - 2), rel=1e-6)
    assert bleu(["the cat sat on the mat"], ["the cat sat on the mat"], 4) == pytest.approx(100.0)


def test_rouge_l_hand_computed():
    # LCS("a b c d", "a c d e") = "a c d" = 3 -> P = 3/4, R = 3/4, F = 0.75
    assert rouge_l(["a b c d"], ["a c d e"]) == pytest.approx(75.0)


def test_generation_metrics_keys_and_s_dist():
    out = generation_metrics(["a b", "a a"], ["a b", "b b"], samples=[["a b", "a b"], ["c d", "e f"]])
    assert out["s_dist-1"] == pytest.approx((2 / 4 + 4 / 4) / 2)
    assert out["c_dist-1"] == pytest.approx((1.0 + 0.5) / 2)
    assert out["responses"] == 2
    assert {"bleu-1", "bleu-2", "bleu-3", "bleu-4", "rouge-l", "dist-1", "dist-2"} <= set(out)
