"""Word tokens for lexical scoring: the tokenisation of Okapi BM25 wherever the project scores text lexically (the
``bm25`` strategy, ``hybrid``, the fusion family, session summaries, and the re-ranker's first-stage hard negatives).

Lower-case, tokens are runs of word characters (``re.findall(r"\\w+", text.lower())``, so punctuation is dropped
and "it's" becomes "it", "s"), then English stop words are removed (scikit-learn's ``ENGLISH_STOP_WORDS``, 318 words)
unless ``remove_stopwords`` is off.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

WORD = re.compile(r"\w+")


@lru_cache(maxsize=1)
def english_stopwords() -> frozenset[str]:
    """scikit-learn's ``ENGLISH_STOP_WORDS``, read from the one module of the installed scikit-learn that holds it,
    without importing the package: ``import sklearn`` (scipy, joblib) costs 1.3-2.6 s in every process that
    tokenises, for a list of 318 words. The module is one assignment; should a scikit-learn release move or change
    it, the package's own import is the fallback."""
    spec = importlib.util.find_spec("sklearn")                          # finds the package, runs none of it
    path = Path(spec.origin).parent / "feature_extraction" / "_stop_words.py" if spec and spec.origin else None
    if path is not None and path.is_file():
        module_spec = importlib.util.spec_from_file_location("_mnemos_sklearn_stop_words", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        words = getattr(module, "ENGLISH_STOP_WORDS", None)
        if isinstance(words, frozenset) and words:
            return words
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def bm25_tokens(text: str, remove_stopwords: bool = True) -> list[str]:
    """``"What does Wren like to READ?"`` -> ``["does", "wren", "like", "read"]`` (stop words removed)."""
    tokens = WORD.findall(text.lower())
    if remove_stopwords:
        stop = english_stopwords()
        tokens = [t for t in tokens if t not in stop]
    return tokens
