"""Word tokens for lexical scoring: the tokenisation of Okapi BM25 wherever the project scores text lexically (the
``bm25`` strategy, ``hybrid``, the fusion family, session summaries, and the re-ranker's first-stage hard negatives).

Lower-case, tokens are runs of word characters (``re.findall(r"\\w+", text.lower())``, so punctuation is dropped
and "it's" becomes "it", "s"), then English stop words are removed (scikit-learn's ``ENGLISH_STOP_WORDS``, 318 words)
unless ``remove_stopwords`` is off.
"""

from __future__ import annotations

import re
from functools import lru_cache

WORD = re.compile(r"\w+")


@lru_cache(maxsize=1)
def english_stopwords() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def bm25_tokens(text: str, remove_stopwords: bool = True) -> list[str]:
    """``"What does Wren like to READ?"`` -> ``["wren", "like", "read"]`` (stop words removed)."""
    tokens = WORD.findall(text.lower())
    if remove_stopwords:
        stop = english_stopwords()
        tokens = [t for t in tokens if t not in stop]
    return tokens
