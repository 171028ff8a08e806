"""pipelines/lexical.py: BM25's tokens, and scikit-learn's stop words read without importing scikit-learn."""

from __future__ import annotations

import subprocess
import sys

from pipelines.lexical import bm25_tokens, english_stopwords


def test_the_stop_words_are_scikit_learns_and_reading_them_imports_no_scikit_learn():
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    assert english_stopwords() == ENGLISH_STOP_WORDS and len(english_stopwords()) == 318
    # In a fresh interpreter: tokenising loads the list, not the package (1.3-2.6 s of scipy and joblib a process).
    code = ("import sys; from pipelines.lexical import bm25_tokens; print(bm25_tokens('What does Wren like to READ?'));"
            "print(any(m == 'sklearn' or m.startswith('sklearn.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["['does', 'wren', 'like', 'read']", "False"]


def test_tokens_are_lower_case_word_runs_without_stop_words_unless_asked():
    assert bm25_tokens("It's Wren's BOOK, isn't it?") == ["s", "wren", "s", "book", "isn", "t"]
    assert bm25_tokens("It's the book", remove_stopwords=False) == ["it", "s", "the", "book"]
