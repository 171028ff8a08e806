"""LoCoMo's lexical scoring (task_eval/evaluation.py) against hand-computed examples, one per rule and quirk."""

from __future__ import annotations

import pytest

from pipelines.evaluate.answers import lexical


@pytest.mark.parametrize("text, expected", [
    ("The cat, and a dog!", "cat dog"),           # "and" is an article for LoCoMo; "," and "!" go
    ("3,000 don't 4:30", "3000 dont 430"),        # "," deleted first (no space left), punctuation deleted
    ("  An   Apple  ", "apple"),
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert lexical.normalize_answer(text) == expected


@pytest.mark.parametrize("prediction, reference, expected", [
    ("running dogs", "the dog runs", 1.0),        # Porter stems: run dog == dog run
    ("a red car", "red truck", 0.5),              # 1 common of 2 / 2
    ("red red", "red", 2 * 0.5 * 1.0 / 1.5),      # multiset: one "red" in common, precision 1/2, recall 1
    ("salt and pepper", "salt pepper", 1.0),      # "and" removed
    ("", "anything", 0.0),
    ("the", "the", 0.0),                          # both empty after normalisation: 0, never 1
])
def test_f1_score(prediction, reference, expected):
    assert lexical.f1_score(prediction, reference) == pytest.approx(expected)


def test_exact_match_compares_token_sets():
    assert lexical.exact_match_score("the cat sat", "Sat, cat!")
    assert lexical.exact_match_score("cat cat sat", "sat cat")
    assert not lexical.exact_match_score("cats sat", "cat sat")      # no stemming in exact match


def test_category_1_multi_hop_splits_on_commas():
    # reference parts London (best 1), Berlin (0), Paris (1): mean 2/3
    assert lexical.locomo_qa_score("Paris, London", "London, Berlin, Paris", "1") == pytest.approx(2 / 3)
    # the same strings as one answer (category 4): 2 common tokens, precision 1, recall 2/3 -> 0.8
    assert lexical.locomo_qa_score("Paris, London", "London, Berlin, Paris", "4") == pytest.approx(0.8)


def test_category_3_reads_the_reference_before_its_semicolon():
    # category 3: reference "Psychology" only -> 1.0; category 4 reads all three stems -> 2 * 1 * 1/3 / (4/3)
    assert lexical.locomo_qa_score("psychology", "Psychology; counseling certification", "3") == 1.0
    assert lexical.locomo_qa_score("psychology", "Psychology; counseling certification", "4") == pytest.approx(0.5)


def test_category_2_temporal_is_plain_f1():
    assert lexical.locomo_qa_score("7 May 2023", "May 7, 2023", "2") == 1.0
    assert lexical.locomo_qa_score("in May", "7 May 2023", "2") == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))


@pytest.mark.parametrize("prediction, expected", [
    ("Not mentioned in the conversation", 1.0),
    ("No information available.", 1.0),
    ("It is not mentioned anywhere", 1.0),
    ("self-care is important", 0.0),               # the trap answer
    ("There is no info", 0.0),
])
def test_category_5_adversarial_check_ignores_the_reference(prediction, expected):
    assert lexical.locomo_qa_score(prediction, "whatever the reference says", "5") == expected
    assert lexical.locomo_qa_score(prediction, "", 5) == expected       # the published int works too


def test_unknown_category_raises():
    with pytest.raises(ValueError, match="category"):
        lexical.locomo_qa_score("a", "b", "6")
