"""LoCoMo's answer scoring without a model: its normalisation, token F1 and per-category rules.

Reproduces ``task_eval/evaluation.py`` of snap-research/locomo (commit 92286325, functions
``normalize_answer``, ``exact_match_score``, ``f1_score``, ``f1`` and ``eval_question_answering``), the
token F1 per category that the LoCoMo paper reports, quirks included:

- normalisation (:func:`normalize_answer`): every "," is deleted first (so "3,000" becomes "3000"),
  then lower case, then every ASCII punctuation character is deleted (so "don't" becomes "dont" and
  "4:30" becomes "430"), then the words "a", "an", "the" AND "and" are removed (LoCoMo added "and" to
  SQuAD's list), then whitespace is collapsed. The official code uses the ``regex`` package for the
  word pattern; ``re`` matches the same words for this pattern.
- :func:`f1_score` stems every token with nltk's ``PorterStemmer()`` (its default NLTK_EXTENSIONS mode,
  as the official module-level ``ps``) and counts common tokens as a multiset; no common token gives 0
  (an empty answer or an empty reference scores 0, never 1).
- :func:`exact_match_score` compares the normalised token SETS (order and repetition ignored).
- per category (:func:`locomo_qa_score`; LoCoMo's integer categories, kept as strings by the loader,
  :data:`pipelines.data.loaders.locomo.CATEGORY_NAMES`):
  1 (multi-hop): the answer and the reference are both split on ","; the score is the mean over
  reference parts of the best F1 of any answer part (:func:`f1_multi`, the official ``f1``);
  2 (temporal), 4 (single-hop): :func:`f1_score`;
  3 (open-domain): only the reference's text before its first ";" counts, then :func:`f1_score`;
  5 (adversarial): 1 when the lower-cased answer contains "no information available" or
  "not mentioned", else 0 (the reference is not read) (:func:`adversarial_correct`).
  Any other category raises, as the official code does.

nltk comes with rouge-score (a dependency of the project), which stems with the same class.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

CATEGORY_MULTI_HOP, CATEGORY_TEMPORAL, CATEGORY_OPEN_DOMAIN, CATEGORY_SINGLE_HOP, CATEGORY_ADVERSARIAL = (
    "1", "2", "3", "4", "5")
LOCOMO_CATEGORIES = (CATEGORY_MULTI_HOP, CATEGORY_TEMPORAL, CATEGORY_OPEN_DOMAIN, CATEGORY_SINGLE_HOP,
                     CATEGORY_ADVERSARIAL)
ADVERSARIAL_PHRASES = ("no information available", "not mentioned")

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def normalize_answer(text: str) -> str:
    """LoCoMo's ``normalize_answer``: drop ",", lower case, drop punctuation, drop a/an/the/and, collapse spaces."""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def stemmed_tokens(text: str) -> list[str]:
    """The Porter-stemmed tokens of the normalised ``text`` (what :func:`f1_score` compares)."""
    stem = _stemmer().stem
    return [stem(w) for w in normalize_answer(text).split()]


def exact_match_score(prediction: str, reference: str) -> bool:
    """LoCoMo's ``exact_match_score``: the normalised token sets are equal (no stemming)."""
    return set(normalize_answer(prediction).split()) == set(normalize_answer(reference).split())


def f1_score(prediction: str, reference: str) -> float:
    """LoCoMo's ``f1_score``: token F1 of the stemmed, normalised texts (0 when no token is shared)."""
    pred, ref = stemmed_tokens(prediction), stemmed_tokens(reference)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1_multi(prediction: str, reference: str) -> float:
    """LoCoMo's ``f1`` (category 1, multi-hop): mean over the ","-separated reference parts of the best
    :func:`f1_score` against any ","-separated part of the prediction."""
    predictions = [p.strip() for p in prediction.split(",")]
    references = [r.strip() for r in reference.split(",")]
    return sum(max(f1_score(p, r) for p in predictions) for r in references) / len(references)


def adversarial_correct(prediction: str) -> bool:
    """Category 5: the answer says the information is not there ("no information available" / "not mentioned")."""
    lowered = prediction.lower()
    return any(phrase in lowered for phrase in ADVERSARIAL_PHRASES)


def locomo_qa_score(prediction: str, reference: str, category: str | int) -> float:
    """The score ``eval_question_answering`` gives one answer of a LoCoMo question of ``category`` (1-5)."""
    category = str(category)
    if category == CATEGORY_ADVERSARIAL:
        return 1.0 if adversarial_correct(prediction) else 0.0
    if category == CATEGORY_MULTI_HOP:
        return f1_multi(prediction, reference)
    if category == CATEGORY_OPEN_DOMAIN:
        reference = reference.split(";")[0].strip()
    if category in (CATEGORY_TEMPORAL, CATEGORY_OPEN_DOMAIN, CATEGORY_SINGLE_HOP):
        return f1_score(prediction, reference)
    raise ValueError(f"LoCoMo category must be one of {', '.join(LOCOMO_CATEGORIES)}, got {category!r}.")
