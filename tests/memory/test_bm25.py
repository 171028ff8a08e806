import math

import pytest

from pipelines.errors import ConfigError
from pipelines.memory import Selector, build_strategy
from pipelines.lexical import bm25_tokens
from pipelines.memory.bm25 import BM25Config


@pytest.mark.parametrize("text, remove, tokens", [
    ("Who is learning the cello?", True, ["learning", "cello"]),
    ("Who is learning the cello?", False, ["who", "is", "learning", "the", "cello"]),
    ("Ana: I adopted a greyhound named Biscuit last week.", True,
     ["ana", "adopted", "greyhound", "named", "biscuit", "week"]),
    ("it's   5PM!", False, ["it", "s", "5pm"]),
])
def test_tokenisation(text, remove, tokens):
    assert bm25_tokens(text, remove) == tokens


def test_lexical_match_ranks_first_then_ties_newest_first(episode, fill, q):
    strategy = build_strategy("bm25")
    fill(strategy, episode)
    items = strategy.retrieve(q("Who is learning the cello?"), 9)
    assert [i.turn_id for i in items] == ["e1:S1:T2", "e1:S3:T2",  # both cello turns, "learning" first
                                          "e1:S3:T3", "e1:S3:T1", "e1:S2:T3", "e1:S2:T2", "e1:S2:T1",
                                          "e1:S1:T3", "e1:S1:T1"]    # score 0, newest first
    assert [i.score for i in items[2:]] == [0.0] * 7


def test_score_is_the_okapi_bm25_equation(episode, fill, q):
    strategy = build_strategy("bm25")
    fill(strategy, episode)
    docs = [bm25_tokens(f"{t.speaker}: {t.text}") for s in episode.sessions for t in s.turns]
    n, avgdl, k1, b = len(docs), sum(map(len, docs)) / len(docs), 1.5, 0.75
    doc = bm25_tokens("Ben: I am learning to play the cello.")  # e1:S1:T2
    assert doc == ["ben", "learning", "play", "cello"]
    expected = 0.0
    for term in ("learning", "cello"):
        df = sum(term in d for d in docs)  # learning: 1, cello: 2
        idf = math.log((n - df + 0.5) / (df + 0.5))
        expected += idf * (1 * (k1 + 1)) / (1 + k1 * (1 - b + b * len(doc) / avgdl))
    assert strategy.retrieve(q("Who is learning the cello?"), 1)[0].score == pytest.approx(expected, rel=1e-12)


def test_forget_removes_the_turn_from_the_index(episode, fill, q):
    strategy = build_strategy("bm25")
    fill(strategy, episode)
    assert strategy.forget(Selector.of(turns=["e1:S1:T2"])) == 1
    items = strategy.retrieve(q("Who is learning the cello?"), 9)
    assert len(items) == 8 and "e1:S1:T2" not in {i.turn_id for i in items}
    assert items[0].turn_id == "e1:S3:T2"
    assert strategy.forget(Selector.of(speakers=["Ben"])) == 5     # the rest of S1 and S3, sessions with Ben
    assert {i.session_id for i in strategy.retrieve(q("cello"), 9)} == {"e1:S2"}


def test_context_packs_the_top_items_chronologically(episode, fill, q):
    strategy = build_strategy("bm25", context_k=2)
    fill(strategy, episode)
    assert strategy.context(q("Who is learning the cello?"), 100) == (
        "[2023-01-05] Ben: I am learning to play the cello.\n[2023-03-01] Ben: The cello recital went well.")


def test_empty_memory_and_stopword_only_query(episode, fill, q):
    strategy = build_strategy("bm25")
    assert strategy.retrieve(q("cello"), 3) == [] and strategy.context(q("cello"), 50) == ""
    fill(strategy, episode)
    assert [i.score for i in strategy.retrieve(q("Who is it?"), 9)] == [0.0] * 9


@pytest.mark.parametrize("field, value", [("b", 1.5), ("k1", -1.0), ("epsilon", -0.1)])
def test_config_checks(field, value):
    with pytest.raises(ConfigError, match=field):
        BM25Config(**{field: value})


def test_scores_are_rank_bm25s_over_the_held_turns_after_forget(episode, fill, q):
    import numpy as np
    from rank_bm25 import BM25Okapi

    strategy = build_strategy("bm25")
    fill(strategy, episode)
    strategy.forget(Selector.of(turns=["e1:S2:T2"]))
    docs = [bm25_tokens(f"{i.speaker}: {i.text}") for i in strategy.items]
    for question in ("Who is learning the cello?", "Ana Biscuit shoes", "Ana Ana trip"):
        expected = BM25Okapi(docs).get_scores(bm25_tokens(question))
        assert np.allclose(strategy._scores(q(question)), expected, rtol=1e-12, atol=1e-12)
        items = strategy.retrieve(q(question), 8)
        order = np.lexsort((-np.arange(len(docs)), -expected))       # the turn store's rule: score, then newer
        assert [i.turn_id for i in items] == [strategy.items[j].turn_id for j in order]


def test_forget_leaves_no_forgotten_term_in_the_index(episode, fill, q):
    strategy = build_strategy("bm25")
    fill(strategy, episode)
    assert {"cello", "ben", "biscuit"} <= set(strategy._index.vocab)
    strategy.forget(Selector.of(speakers=["Ben"]))               # S1 and S3: every turn with "cello" or "biscuit"
    assert not {"cello", "ben", "biscuit", "greyhound"} & set(strategy._index.vocab)
    assert [i.score for i in strategy.retrieve(q("cello"), 3)] == [0.0] * 3
