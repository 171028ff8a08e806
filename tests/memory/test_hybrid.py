"""Hybrid retrieval: BM25 + dense (the shipped all-MiniLM-L6-v2) fused by Reciprocal Rank Fusion."""

from datetime import datetime

import pytest

from pipelines.data.schema import Episode, Session, Turn
from pipelines.errors import ConfigError
from pipelines.memory import STRATEGIES, Selector, build_strategy
from pipelines.lexical import bm25_tokens
from pipelines.models.embeddings import load_encoder
from pipelines.memory.hybrid import Hybrid, HybridConfig

# A fourth session of three near-identical parcel codes: one exact token tells them apart.
PARCELS = [("Cleo", "Parcel ZK48W1 was left with a neighbour."),
           ("Ana", "Parcel ZK48W7 is waiting at the post office."),
           ("Cleo", "Parcel ZK84W7 went back to the sender.")]


@pytest.fixture(scope="module")
def minilm():
    return load_encoder()  # cached per process: every strategy below shares it


@pytest.fixture
def parcels(episode) -> Episode:
    s4 = Session(id="e1:S4", index=3, timestamp=datetime(2023, 4, 2), partner="Cleo", summary=None,
                 turns=[Turn(id=f"e1:S4:T{n}", speaker=who, text=text) for n, (who, text) in enumerate(PARCELS, 1)])
    return Episode(id="e1", source="test", main_speaker="Ana", sessions=[*episode.sessions, s4])


@pytest.fixture
def hybrid(minilm, tmp_path):
    """``hybrid(**settings)`` -> a hybrid strategy with its embedding cache under tmp_path."""
    return lambda **settings: build_strategy("hybrid", cache_dir=str(tmp_path / "cache"), **settings)


def ids(items):
    return [i.turn_id for i in items]


def test_registered_with_turn_and_session_granularity():
    assert STRATEGIES["hybrid"] is Hybrid and Hybrid.granularities == ("turn", "session")


def test_rrf_by_hand_first_by_bm25_third_by_dense(hybrid, parcels, fill, q):
    strategy = hybrid()
    fill(strategy, parcels)
    query = q("ZK48W7")
    # only e1:S4:T2 holds the token; the encoder puts it 3rd behind the look-alike codes
    assert ids(strategy.dense.retrieve(query, 3)) == ["e1:S4:T3", "e1:S4:T1", "e1:S4:T2"]
    items = strategy.retrieve(query, 3)
    assert ids(items) == ["e1:S4:T2", "e1:S4:T3", "e1:S4:T1"]
    assert [i.score for i in items] == pytest.approx([1 / 61 + 1 / 63, 1 / 61, 1 / 62], rel=1e-12)
    top = items[0]  # text, ids, speaker, time and order come from the turn
    assert (top.text, top.session_id, top.speaker, top.timestamp, top.order) == (
        "Parcel ZK48W7 is waiting at the post office.", "e1:S4", "Ana", datetime(2023, 4, 2), 10)


def test_every_score_is_the_rrf_sum_of_the_two_rankings(hybrid, episode, fill, q):
    strategy = hybrid(rrf_k=10)
    fill(strategy, episode)
    query = q("cello and kitchen")
    words = set(bm25_tokens(query.question))
    lexical = [i.turn_id for i in strategy.bm25.retrieve(query, 9)
               if words & set(bm25_tokens(f"{i.speaker}: {i.text}"))]  # turns sharing a query token
    dense = ids(strategy.dense.retrieve(query, 9))
    assert lexical == ["e1:S2:T2", "e1:S3:T2", "e1:S1:T2"]
    expected = {t: (1 / (10 + lexical.index(t) + 1) if t in lexical else 0.0) + 1 / (10 + dense.index(t) + 1)
                for t in dense}
    items = strategy.retrieve(query, 9)
    assert len(items) == 9
    assert {i.turn_id: i.score for i in items} == pytest.approx(expected, rel=1e-12)
    assert [i.score for i in items] == sorted((i.score for i in items), reverse=True)


def test_ties_go_to_the_better_best_rank_then_to_the_newer_turn(hybrid, episode, fill, q):
    # rrf_k = 0, depth 2: BM25 [S2:T2, S3:T2], dense [S1:T2, S3:T2] -> every fused score is 1 exactly
    strategy = hybrid(rrf_k=0, depth=2)
    fill(strategy, episode)
    assert ids(strategy.dense.retrieve(q("cello and kitchen"), 2)) == ["e1:S1:T2", "e1:S3:T2"]
    items = strategy.retrieve(q("cello and kitchen"), 9)
    assert [(i.turn_id, i.score) for i in items] == [("e1:S2:T2", 1.0),   # best rank 1, newer
                                                     ("e1:S1:T2", 1.0),   # best rank 1, older
                                                     ("e1:S3:T2", 1.0)]   # best rank 2 (2nd in both)


def test_finds_the_exact_token_only_bm25_finds(hybrid, parcels, fill, q):
    strategy = hybrid()
    fill(strategy, parcels)
    query = q("Where is ZK48W7?")
    assert strategy.dense.retrieve(query, 1)[0].turn_id == "e1:S4:T1"  # dense confuses ZK48W1 / ZK48W7
    assert strategy.bm25.retrieve(query, 1)[0].turn_id == "e1:S4:T2"
    assert strategy.retrieve(query, 1)[0].turn_id == "e1:S4:T2"


def test_finds_the_paraphrase_only_dense_finds(hybrid, episode, fill, q):
    strategy = hybrid()
    fill(strategy, episode)
    query = q("What kind of dog does she own?")  # no content word shared with any turn
    assert [i.score for i in strategy.bm25.retrieve(query, 9)] == [0.0] * 9
    assert strategy.bm25.retrieve(query, 9)[-1].turn_id == "e1:S1:T1"  # BM25 alone: last (oldest of the ties)
    items = strategy.retrieve(query, 3)
    assert items[0].turn_id == "e1:S1:T1"  # "I adopted a greyhound named Biscuit last week."
    # no turn matches lexically, so the score-0 BM25 ties cast no (recency) vote: dense order, 1/(60+r)
    assert ids(items) == ids(strategy.dense.retrieve(query, 3))
    assert [i.score for i in items] == pytest.approx([1 / 61, 1 / 62, 1 / 63], rel=1e-12)


def test_lexical_matches_only_off_fuses_bm25s_full_ranking(hybrid, episode, fill, q):
    strategy = hybrid(lexical_matches_only=False, dense_weight=0.0)
    fill(strategy, episode)
    query = q("What kind of dog does she own?")
    assert ids(strategy.retrieve(query, 9)) == ids(strategy.bm25.retrieve(query, 9))  # the score-0 ties by recency


def test_weights(hybrid, episode, fill, q):
    query = q("cello and kitchen")
    bm25_only = hybrid(dense_weight=0.0)
    fill(bm25_only, episode)
    items = bm25_only.retrieve(query, 9)  # BM25's order of the turns sharing a token with the query
    assert ids(items) == ids(bm25_only.bm25.retrieve(query, 3)) == ["e1:S2:T2", "e1:S3:T2", "e1:S1:T2"]
    assert [i.score for i in items] == pytest.approx([1 / 61, 1 / 62, 1 / 63], rel=1e-12)

    dense_only = hybrid(bm25_weight=0.0)
    fill(dense_only, episode)
    assert ids(dense_only.retrieve(query, 9)) == ids(dense_only.dense.retrieve(query, 9))

    heavy = hybrid(bm25_weight=3.0, dense_weight=0.5)
    fill(heavy, episode)
    top = heavy.retrieve(query, 1)[0]  # 1st by BM25, 3rd by dense
    assert (top.turn_id, top.score) == ("e1:S2:T2", pytest.approx(3.0 / 61 + 0.5 / 63, rel=1e-12))


def test_depth_fuses_only_the_top_of_each_list(hybrid, episode, fill, q):
    strategy = hybrid(depth=1)
    fill(strategy, episode)
    items = strategy.retrieve(q("cello and kitchen"), 9)  # BM25's and dense's 1st: two turns, 1/61 each
    assert [(i.turn_id, i.score) for i in items] == [("e1:S2:T2", pytest.approx(1 / 61)),
                                                     ("e1:S1:T2", pytest.approx(1 / 61))]


def test_forget_removes_from_both_indexes(hybrid, parcels, fill, q):
    strategy = hybrid()
    fill(strategy, parcels)
    assert len(strategy.dense.embedder.cache) == 12
    assert strategy.forget(Selector.of(turns=["e1:S4:T2"])) == 1
    assert len(strategy) == len(strategy.bm25) == len(strategy.dense) == 11
    assert len(strategy.dense.embedder.cache) == 11  # its vector left the on-disk cache too
    items = strategy.retrieve(q("Where is ZK48W7?"), 12)
    assert len(items) == 11 and "e1:S4:T2" not in ids(items)
    assert strategy.forget(Selector.of(speakers=["Ben"])) == 6     # S1 and S3: sessions with Ben
    assert len(strategy.bm25) == len(strategy.dense) == 5
    assert len(strategy.dense.embedder.cache) == 5 + 1                # the held turns and the question asked
    assert all(i.speaker != "Ben" for i in strategy.retrieve(q("Who is learning the cello?"), 12))


def test_reset_and_observe_again(hybrid, episode, fill, q):
    strategy = hybrid()
    fill(strategy, episode)
    before = [(i.turn_id, i.score) for i in strategy.retrieve(q("Where does Ana's sister live?"), 9)]
    strategy.reset()
    assert len(strategy) == len(strategy.bm25) == len(strategy.dense) == 0
    assert strategy.retrieve(q("sister"), 3) == [] and strategy.context(q("sister"), 100) == ""
    fill(strategy, episode)  # the same sessions again: nothing of the old memory is left
    assert [(i.turn_id, i.score) for i in strategy.retrieve(q("Where does Ana's sister live?"), 9)] == before


def test_no_temporal_leak(hybrid, parcels, fill, q):
    strategy = hybrid()
    strategy.prepare([parcels])  # warms the embedding cache only
    assert len(strategy) == 0 and strategy.retrieve(q("Where is ZK48W7?"), 5) == []
    strategy.observe(parcels, parcels.sessions[0])
    for question in ("Where is ZK48W7?", "How did the cello recital go?"):  # answers lie in later sessions
        items = strategy.retrieve(q(question), 12)
        assert len(items) == 3 and {i.session_id for i in items} == {"e1:S1"}


def test_context_packs_the_fused_top_chronologically(hybrid, episode, fill, q):
    strategy = hybrid(context_k=2)
    fill(strategy, episode)
    assert strategy.context(q("Who is learning the cello?"), 100) == (
        "[2023-01-05] Ben: I am learning to play the cello.\n[2023-03-01] Ben: The cello recital went well.")


def test_settings_are_forwarded_to_both_rankers(minilm, tmp_path):
    strategy = build_strategy("hybrid", cache_dir=str(tmp_path), k1=1.2, b=0.5, remove_stopwords=False,
                              batch_size=16, include_speaker=False, forget_cached=False)
    assert (strategy.bm25.config.k1, strategy.bm25.config.b, strategy.bm25.config.remove_stopwords) == (1.2, 0.5, False)
    assert strategy.bm25.config.include_speaker is False and strategy.dense.config.include_speaker is False
    assert strategy.dense.embedder.encoder is minilm and strategy.dense.embedder.batch_size == 16
    assert strategy.dense.embedder.cache.path == tmp_path / "embeddings.sqlite3"
    assert strategy.dense.config.forget_cached is False
    large = build_strategy("hybrid", cache_dir=str(tmp_path), index="hnsw", ann_min_items=50, hnsw_m=8,
                           hnsw_ef_construction=40, hnsw_ef_search=20)
    c = large.dense.config
    assert (c.index, c.ann_min_items, c.hnsw_m, c.hnsw_ef_construction, c.hnsw_ef_search) == ("hnsw", 50, 8, 40, 20)


def test_unknown_setting():
    with pytest.raises(ConfigError, match="no setting.*'top_n'"):
        build_strategy("hybrid", top_n=5)


@pytest.mark.parametrize("settings, match", [
    ({"rrf_k": -1}, "rrf_k"), ({"rrf_k": 1.5}, "rrf_k"), ({"rrf_k": True}, "rrf_k"),
    ({"bm25_weight": -0.5}, "bm25_weight"), ({"dense_weight": float("nan")}, "dense_weight"),
    ({"dense_weight": float("inf")}, "dense_weight"),
    ({"bm25_weight": 0.0, "dense_weight": 0}, "both 0"),
    ({"depth": 0}, "depth"), ({"depth": 2.0}, "depth"),
    ({"context_k": 0}, "context_k"),
    ({"k1": -1.0}, "k1"), ({"b": 1.5}, "b"), ({"epsilon": -0.1}, "epsilon"),     # BM25's own checks
    ({"batch_size": 0}, "batch_size"), ({"model_name": " "}, "model_name"),     # dense's own checks
])
def test_config_checks(settings, match):
    with pytest.raises(ConfigError, match=match):
        HybridConfig(**settings)
