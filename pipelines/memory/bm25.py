"""``bm25``: lexical retrieval over turns with Okapi BM25 (the scores of rank_bm25.BM25Okapi).

Robertson & Zaragoza (2009), as implemented by ``rank_bm25``: for a query q with terms t and a
turn d of length |d| (average length avgdl over the held turns),

    score(q, d) = sum_t IDF(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl))
    IDF(t) = log((N - n(t) + 0.5) / (n(t) + 0.5)),  negative IDFs floored at epsilon * mean IDF

Tokenisation (:func:`pipelines.lexical.bm25_tokens`), the same for turns and queries: lower-case, tokens are runs
of word characters (``re.findall(r"\\w+", text.lower())``, so punctuation is dropped and
"it's" becomes "it", "s"), then English stop words are removed (scikit-learn's
``ENGLISH_STOP_WORDS``, 318 words) unless ``remove_stopwords`` is off. A turn is indexed as
``"speaker: text"`` (``include_speaker``) so that questions naming a person match that
person's turns. LongMemEval's BM25 baseline splits on spaces only; ours is the documented
default above, configurable.

Scoring goes through :class:`~pipelines.memory.index.BM25Index`, a sparse term x doc matrix of
precomputed term weights that gives rank_bm25 0.2.2's scores (the same equation, the same float
operations) in O(postings) per query; its matrix is rebuilt lazily, vectorised, after the held
turns change (observe or forget): BM25's IDF and avgdl depend on the whole corpus, so there is
no exact incremental update. The turn store's ``retrieve`` ranks the scores (score desc, ties to the newer turn) with
:func:`~pipelines.memory.index.top_k`, told that most turns score 0, without sorting every turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.data.schema import Query
from pipelines.errors import ConfigError
from pipelines.lexical import bm25_tokens
from pipelines.memory.base import StrategyConfig, register_strategy
from pipelines.memory.index import BM25Index
from pipelines.memory.turn_store import TurnItem, TurnStrategy

@dataclass(frozen=True)
class BM25Config(StrategyConfig):
    """Okapi BM25 settings (rank_bm25 defaults)."""

    k1: float = 1.5                # term-frequency saturation
    b: float = 0.75                # length normalisation (0: none, 1: full)
    epsilon: float = 0.25          # floor for negative IDFs, as a fraction of the mean IDF
    remove_stopwords: bool = True  # drop scikit-learn's English stop words from turns and queries
    include_speaker: bool = True   # index "speaker: text" instead of the bare text

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k1 < 0:
            raise ConfigError(f"bm25.k1 must be >= 0, got {self.k1}.")
        if not 0.0 <= self.b <= 1.0:
            raise ConfigError(f"bm25.b must lie in [0, 1] (share of length normalisation), got {self.b}.")
        if self.epsilon < 0:
            raise ConfigError(f"bm25.epsilon must be >= 0, got {self.epsilon}.")


def bm25_scores(docs: list[list[str]], query: list[str], k1: float, b: float, epsilon: float) -> np.ndarray:
    """BM25Okapi scores of ``query`` against each tokenised doc (N,); zeros if no doc has a token."""
    index = BM25Index(k1=k1, b=b, epsilon=epsilon)
    index.add(docs)
    return index.scores(query)


@register_strategy("bm25")
class BM25(TurnStrategy):
    """Okapi BM25 over the held turns."""

    config_class = BM25Config
    ingredient = "lexical: Okapi BM25 over turns"

    def index_bytes(self) -> int:
        """The sparse matrix of BM25 weights of the held turns."""
        return self._index.nbytes if len(self._index) else 0

    def _empty_scope(self) -> dict:
        c = self.config
        return {**super()._empty_scope(),
                "_index": BM25Index(c.k1, c.b, c.epsilon)}  # the held turns' tokens, in store order

    def _tokens(self, text: str) -> list[str]:
        return bm25_tokens(text, self.config.remove_stopwords)

    def _on_add(self, new: list[TurnItem]) -> None:
        self._index.add([self._tokens(i.indexed_text(self.config.include_speaker)) for i in new])

    def _on_remove(self, removed: list[TurnItem], keep: np.ndarray) -> None:
        self._index.keep(keep)

    def _scores(self, query: Query) -> np.ndarray:
        return self._index.scores(self._tokens(query.question))  # (N,)

    def _ranked_scores(self, query: Query, k: int) -> tuple[np.ndarray, float]:
        return self._scores(query), 0.0                          # (N,) 0 where no query term occurs
