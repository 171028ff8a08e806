"""Calibrated score fusion (``fusion``), its session scoring (``fusion_sessions``) and time awareness
(``fusion_time``), with the shipped all-MiniLM-L6-v2 as the dense ranker."""

from datetime import datetime

import numpy as np
import pytest

from pipelines.data.schema import Episode, Query, Session, Turn
from pipelines.errors import ConfigError
from pipelines.memory import STRATEGIES, Selector, build_strategy
from pipelines.models.embeddings import load_encoder
from pipelines.memory.fusion import Fusion, FusionSessions, FusionTime, calibrate, pool_sessions
from pipelines.memory.index import top_k


@pytest.fixture(scope="module")
def minilm():
    return load_encoder()  # cached per process


@pytest.fixture
def fusion(minilm, tmp_path):
    """``fusion(name="fusion", **settings)`` -> a fusion strategy with its embedding cache under tmp_path."""
    return lambda name="fusion", **settings: build_strategy(name, cache_dir=str(tmp_path / "cache"), **settings)


def ids(items):
    return [i.turn_id for i in items]


# --- the pure parts -------------------------------------------------------------------------------------------

def test_calibrate_minmax_and_zscore_by_hand():
    scores = np.array([2.0, 4.0, 6.0, 0.0])
    assert calibrate(scores, "minmax") == pytest.approx([1 / 3, 2 / 3, 1.0, 0.0])
    z = calibrate(scores, "zscore")
    assert z == pytest.approx((scores - 3.0) / np.std(scores))
    assert calibrate(np.array([5.0, 5.0]), "minmax").tolist() == [0.0, 0.0]  # constant: no evidence either way
    assert calibrate(np.array([5.0, 5.0]), "zscore").tolist() == [0.0, 0.0]
    with pytest.raises(ConfigError, match="calibration"):
        calibrate(scores, "rank")


def test_pool_sessions_max_and_sum_of_the_top_m_by_hand():
    turn = np.array([0.9, 0.1, 0.5, 0.4, 0.3, 0.8])
    session_of = np.array([0, 0, 1, 1, 1, 2])
    assert pool_sessions(turn, session_of, 3, "max", 2).tolist() == pytest.approx([0.9, 0.5, 0.8])
    # sum_top m=2: best + second / 2
    assert pool_sessions(turn, session_of, 3, "sum_top", 2).tolist() == pytest.approx(
        [0.9 + 0.1 / 2, 0.5 + 0.4 / 2, 0.8])
    # a session holding no turn scores -inf (it cannot rank)
    assert pool_sessions(turn, session_of, 4, "sum_top", 2)[3] == -np.inf


def test_pool_sessions_counts_the_turns_not_given_as_the_floor():
    # the candidates of a large store: 3 given turns, sessions holding 4, 1 and 2 turns; the others count 0.1
    turn, session_of, sizes = np.array([0.9, 0.5, 0.2]), np.array([0, 0, 2]), np.array([4, 1, 2])
    summed = pool_sessions(turn, session_of, 3, "sum_top", 3, sizes=sizes, floor=0.1)
    assert summed.tolist() == pytest.approx([0.9 + 0.5 / 2 + 0.1 / 3,   # its 3rd best turn is a floor turn
                                             0.1,                       # no candidate: its one turn at the floor
                                             0.2 + 0.1 / 2])
    assert pool_sessions(turn, session_of, 3, "max", 3, sizes=sizes, floor=0.1).tolist() == pytest.approx(
        [0.9, 0.1, 0.2])
    assert pool_sessions(turn, session_of, 3, "max", 3)[1] == -np.inf   # without sizes: no turn, no score
    # every turn given: the same as without sizes
    full = np.array([0, 0, 1, 2])
    assert pool_sessions(np.array([0.9, 0.5, 0.3, 0.2]), full, 3, "sum_top", 3, sizes=np.array([2, 1, 1]),
                         floor=-5.0).tolist() == pytest.approx([0.9 + 0.5 / 2, 0.3, 0.2])


def test_presets_are_registered_with_their_ingredients():
    assert STRATEGIES["fusion"] is Fusion and STRATEGIES["fusion_sessions"] is FusionSessions
    assert STRATEGIES["fusion_time"] is FusionTime
    sessions, timed = FusionSessions.config_class(), FusionTime.config_class()
    assert (sessions.session_pool, sessions.session_key_weight, sessions.session_prior, sessions.time) == (
        "sum_top", 1.0, 1.0, "none")
    assert timed.time == "rules" and timed.session_pool == "sum_top"
    assert all(cls.ingredient for cls in (Fusion, FusionSessions, FusionTime))


@pytest.mark.parametrize("settings, match", [
    ({"calibration": "rank"}, "calibration"),
    ({"session_pool": "mean"}, "session_pool"),
    ({"session_top": 0}, "session_top"),
    ({"bm25_weight": 0, "dense_weight": 0}, "both 0"),
    ({"session_prior": -1}, "session_prior"),
    ({"time": "llm"}, "time_llm"),
    ({"time_llm": {"backend": "local"}}, "time is 'none'"),
    ({"time_mode": "drop"}, "time_mode"),
    ({"k1": -1}, "bm25.k1"),
])
def test_bad_settings_name_the_setting(settings, match):
    with pytest.raises(ConfigError, match=match):
        build_strategy("fusion", **settings)


# --- retrieval --------------------------------------------------------------------------------------------------

def test_turn_scores_are_the_weighted_sum_of_each_rankers_minmax_scores(fusion, episode, fill, q):
    strategy = fusion(bm25_weight=2.0, dense_weight=0.5)
    fill(strategy, episode)
    query = q("What did Biscuit chew?")
    expected = (2.0 * calibrate(strategy.bm25._scores(query), "minmax")
                + 0.5 * calibrate(strategy.dense._scores(query), "minmax"))
    items = strategy.retrieve(query, len(strategy))
    by_turn = {i.turn_id: i.score for i in items}
    assert [by_turn[i.turn_id] for i in strategy.bm25.items] == pytest.approx(expected.tolist())
    assert ids(items)[0] == "e1:S3:T1"
    assert [i.score for i in items] == sorted((i.score for i in items), reverse=True)
    assert strategy.session_ranking(query) is None  # max pooling, no key: the protocol reads sessions off turns


def test_a_ranker_of_weight_zero_leaves_the_other_ranking(fusion, episode, fill, q):
    strategy = fusion(dense_weight=0.0)
    fill(strategy, episode)
    query = q("cello recital")
    bm25_only = [i.turn_id for i in strategy.bm25.retrieve(query, 3)]
    assert ids(strategy.retrieve(query, 3))[:1] == bm25_only[:1] == ["e1:S3:T2"]


def _episode_of(sessions: dict[str, list[str]], dates: dict[str, datetime] | None = None) -> Episode:
    return Episode(id="e9", source="test", main_speaker="Ana", sessions=[
        Session(id=sid, index=n, timestamp=(dates or {}).get(sid), partner="Ben",
                turns=[Turn(id=f"{sid}:T{j}", speaker="Ana" if j % 2 else "Ben", text=t) for j, t in enumerate(texts)])
        for n, (sid, texts) in enumerate(sessions.items())])


def test_sum_top_ranks_the_session_with_several_relevant_turns_first(fusion, fill, q):
    # A: one turn about the violin; B: three turns about it (each a little weaker than A's)
    episode = _episode_of({
        "A": ["My violin lesson is on Friday.", "The weather is nice.", "I bought bread."],
        "B": ["I practise violin scales.", "The violin teacher is strict.", "My violin needs new strings."],
        "C": ["We watched a film.", "The film was long.", "Popcorn was cold."]})
    query = q("violin lesson teacher strings")
    best_turn = fusion("fusion")
    fill(best_turn, episode)
    summed = fusion("fusion", session_pool="sum_top", session_top=3)
    fill(summed, episode)
    ranking = summed.session_ranking(summed_query := query)
    assert ranking[0] == "B" and ranking[-1] == "C"
    scores, sessions, pooled = summed._scores(summed_query)
    turn = dict(zip([i.turn_id for i in summed.bm25.items], scores))
    for sid in sessions:   # S = sum_j f_(j) / j over the 3 best turns of the session
        top = sorted((v for t, v in turn.items() if t.startswith(f"{sid}:")), reverse=True)[:3]
        assert pooled[sessions.index(sid)] == pytest.approx(sum(v / (j + 1) for j, v in enumerate(top)))


def test_session_key_and_prior_move_sessions_and_turns(fusion, episode, fill, q):
    plain = fusion("fusion", session_pool="sum_top")
    keyed = fusion("fusion", session_pool="sum_top", session_key_weight=5.0, session_prior=2.0)
    for s in (plain, keyed):
        fill(s, episode)
    query = q("Ana pharmacist job kitchen")
    _, sessions, pooled_plain = plain._scores(query)
    _, _, pooled_keyed = keyed._scores(query)
    # the key adds w_k * minmax(BM25 of each session's whole text): S2 holds every query word
    assert np.argmax(pooled_keyed - pooled_plain) == sessions.index("e1:S2")
    assert keyed.session_ranking(query)[0] == "e1:S2"
    # the prior lifts every turn of the best session: S2's weather turn outranks a turn it did not before
    top = ids(keyed.retrieve(query, 3))
    assert set(top) == {"e1:S2:T1", "e1:S2:T2", "e1:S2:T3"}


def test_fusion_time_boosts_the_sessions_of_the_named_month(fusion, fill, q):
    dates = {"jan": datetime(2023, 1, 10), "mar": datetime(2023, 3, 12), "may": datetime(2023, 5, 2)}
    texts = {sid: ["I went hiking with my brother.", "It rained a lot."] for sid in dates}
    texts["may"] = ["Where did we go hiking? Hiking with my brother again.", "It rained a lot."]  # May's matches best
    episode = _episode_of(texts, dates)
    asked = Query(id="q1", question="Where did I go hiking in March?", timestamp=datetime(2023, 6, 1))
    timeless = fusion("fusion_sessions")
    timed = fusion("fusion_time", time_boost=4.0)
    for s in (timeless, timed):
        fill(s, episode)
    assert timeless.session_ranking(asked)[0] == "may"
    assert timed.session_ranking(asked)[0] == "mar"
    assert ids(timed.retrieve(asked, 1)) == ["mar:T0"]
    _, sessions, plain = timeless._scores(asked)
    _, _, boosted = timed._scores(asked)
    gain = dict(zip(sessions, boosted - plain))   # + time_boost inside March (2-day slack), a decayed bit outside
    assert gain["mar"] == pytest.approx(4.0) and 0 < gain["may"] < gain["mar"] and 0 < gain["jan"] < gain["mar"]
    filtered = fusion("fusion_time", time_mode="filter")
    fill(filtered, episode)
    assert filtered.session_ranking(asked) == ["mar"]    # every other dated session is dropped
    assert {i.session_id for i in filtered.retrieve(asked, 10)} == {"mar"}
    # no date on the question: a relative expression cannot be resolved, nothing moves
    undated = Query(id="q2", question="Where did I go hiking last week?")
    assert timed.session_ranking(undated) == timeless.session_ranking(undated)


def test_time_llm_reads_the_range_through_the_given_reader(fusion, fill, q):
    from pipelines.memory.temporal import TimeRange

    dates = {"jan": datetime(2023, 1, 10), "mar": datetime(2023, 3, 12)}
    episode = _episode_of({sid: ["I moved flat.", "Boxes everywhere."] for sid in dates}, dates)
    asked = []

    def reader(query):
        asked.append(query.question)
        return TimeRange(datetime(2023, 1, 1), datetime(2023, 1, 31), "before I moved")

    strategy = Fusion(FusionSessions.config_class(cache_dir=None), time_reader=reader)
    fill(strategy, episode)
    query = Query(id="q", question="What did I do before I moved?", timestamp=datetime(2023, 6, 1))
    assert strategy.session_ranking(query)[0] == "jan" and asked == [query.question]


def test_forget_removes_turns_and_session_keys(fusion, episode, fill, q):
    strategy = fusion("fusion_sessions")
    fill(strategy, episode)
    assert strategy.forget(Selector.of(sessions=["e1:S2"])) == 3
    query = q("pharmacist kitchen job")
    assert "e1:S2" not in strategy.session_ranking(query)
    assert all(i.session_id != "e1:S2" for i in strategy.retrieve(query, 10))
    assert set(strategy._session_docs) == {"e1:S1", "e1:S3"}
    strategy.forget(Selector.of(turns=["e1:S3:T2"]))  # the cello recital leaves S3's key too
    assert "cello" not in strategy._session_docs["e1:S3"] and "recital" not in strategy._session_docs["e1:S3"]
    assert len(strategy) == 5


def test_episodes_keep_their_own_memory(fusion, episode, fill, q):
    strategy = fusion("fusion_sessions")
    fill(strategy, episode)
    other = _episode_of({"X": ["I repair clocks.", "Clocks tick."]})
    strategy.observe(other, other.sessions[0])
    assert strategy.session_ranking(q("clocks")) == ["X"]
    strategy.enter(episode)
    assert "X" not in strategy.session_ranking(q("clocks")) and len(strategy) == 9


def test_index_bytes_count_the_weights_the_vectors_and_the_session_keys(fusion, episode, fill):
    plain, keyed = fusion("fusion"), fusion("fusion_sessions")
    for s in (plain, keyed):
        fill(s, episode)
    assert plain.index_bytes() == plain.bm25.index_bytes() + plain.dense.index_bytes() > 0
    assert plain.dense.index_bytes() == 9 * 384 * 4                      # 9 turns of MiniLM's 384 float32
    keys = sum(len(t) for t in keyed._session_docs.values())
    weights = keyed._layout().keys.weights                               # the session keys' BM25 matrix
    assert weights.shape[1] == len(episode.sessions)
    key_bytes = weights.data.nbytes + weights.indices.nbytes + weights.indptr.nbytes
    assert keyed.index_bytes() == keyed.bm25.index_bytes() + keyed.dense.index_bytes() + 8 * keys + key_bytes


# --- key expansion --------------------------------------------------------------------------------------------

class Expander:
    """A stand-in for the LLM summariser: each session's "summary" names a word its turns never say."""

    WORDS = {"e1:S1": "veterinary", "e1:S2": "pharmacology", "e1:S3": "orchestra"}

    def __init__(self):
        self.batches, self.forgotten = [], []

    def request(self, session):
        return session.id

    def __call__(self, sessions):
        self.batches.append([s.id for s in sessions])
        return [f"Ana talked about {self.WORDS[s.id]}." for s in sessions]

    def forget(self, requests):
        self.forgotten += list(requests)
        return len(requests)


def _keys(tmp_path, expander, **settings):
    from pipelines.memory.fusion import FusionKeys, FusionKeysConfig

    config = FusionKeysConfig(cache_dir=str(tmp_path / "cache"), expansion_llm={"backend": "local"}, **settings)
    return FusionKeys(config, expander=expander)


def test_fusion_keys_needs_its_model_and_a_session_key():
    with pytest.raises(ConfigError, match="fusion.expansion_llm is not set"):
        build_strategy("fusion_keys")
    with pytest.raises(ConfigError, match="session_key_weight is 0"):
        build_strategy("fusion_keys", session_key_weight=0.0, expansion_llm={"backend": "local"})
    with pytest.raises(ConfigError, match="expansion_llm is set but"):
        build_strategy("fusion", expansion_llm={"backend": "local"})


def test_a_session_s_expansion_joins_its_key(minilm, tmp_path, episode, fill, q):
    expander = Expander()
    strategy = _keys(tmp_path, expander)
    strategy.prepare([episode])
    assert expander.batches[0] == ["e1:S1", "e1:S2", "e1:S3"]          # one batched call before the run
    fill(strategy, episode)
    assert "pharmacology" in strategy._session_docs["e1:S2"]
    query = q("Who studied pharmacology?")
    assert strategy.session_ranking(query)[0] == "e1:S2"              # only the expansion holds the word
    plain = build_strategy("fusion_time", cache_dir=str(tmp_path / "cache"))
    fill(plain, episode)
    _, sessions, with_keys = strategy._scores(query)
    _, _, without = plain._scores(query)
    assert np.argmax(with_keys - without) == sessions.index("e1:S2")
    # the index size counts the three expansions' vectors (S x 384 float32) beside the keys' BM25 weights
    keys = strategy._layout().keys
    assert strategy._layout().expansions.shape == (3, 384)
    assert strategy.index_bytes() == (strategy.bm25.index_bytes() + strategy.dense.index_bytes() + keys.nbytes
                                      + 8 * sum(len(t) for t in strategy._session_docs.values()) + 3 * 384 * 4)


def test_forgetting_a_turn_drops_its_session_s_expansion_and_the_model_s_answer(minilm, tmp_path, episode, fill, q):
    expander = Expander()
    strategy = _keys(tmp_path, expander)
    fill(strategy, episode)
    strategy.forget(Selector.of(turns=["e1:S2:T2"]))       # the model wrote S2's summary from every turn of S2
    assert expander.forgotten == ["e1:S2"]
    assert "e1:S2" not in strategy._expansions and "pharmacology" not in strategy._session_docs["e1:S2"]
    assert set(strategy._expansions) == {"e1:S1", "e1:S3"}
    strategy.forget(Selector.of(speakers=["Ana"]))         # every summary names Ana
    assert strategy._expansions == {} and sorted(expander.forgotten) == ["e1:S1", "e1:S2", "e1:S3"]


# --- a large store: the union of each ranker's top turns ------------------------------------------------------

def test_from_ann_min_items_only_the_union_of_each_rankers_top_turns_is_fused(fusion, episode, fill, q):
    exact = fusion(index="exact")
    large = fusion(ann_min_items=5, candidate_depth=2)   # 9 held turns: "large" from 5, the graph answers
    for s in (exact, large):
        fill(s, episode)
    assert large.dense.config.index == "hnsw" and large.dense._index.uses_ann(2)
    query = q("Biscuit chewed my shoes")
    lexical = large.bm25._scores(query)                                            # (9,)
    cos = large.dense._index.vectors @ large.dense.embedder.embed([query.question])[0]   # (9,)
    lexical_top = [j for j in top_k(lexical, 2, background=0.0) if lexical[j] > 0]
    union = sorted(set(lexical_top) | set(np.argsort(-cos)[:2].tolist()))
    scores, sessions, _ = large._scores(query, 2)
    assert np.flatnonzero(np.isfinite(scores)).tolist() == union                   # the others are not scored
    expected = calibrate(lexical[union], "minmax") + calibrate(cos[union], "minmax")   # over the union only
    assert scores[union] == pytest.approx(expected)
    top = ids(large.retrieve(query, 2))
    assert top == [large.bm25.items[j].turn_id for j in np.asarray(union)[np.argsort(-expected)[:2]]]
    assert top[0] == ids(exact.retrieve(query, 2))[0] == "e1:S3:T1"
    # a ranking deeper than the graph serves scores every held turn, as the exact store does
    assert ids(large.retrieve(query, len(large))) == ids(exact.retrieve(query, len(exact)))


def test_a_large_store_still_ranks_every_session(fusion, episode, fill, q):
    large = fusion("fusion_time", ann_min_items=5, candidate_depth=1)
    fill(large, episode)
    query = q("pharmacist")
    scores, sessions, pooled = large._scores(query, 1)
    scored_sessions = {large.bm25.items[j].session_id for j in np.flatnonzero(np.isfinite(scores))}
    assert scored_sessions < set(sessions)                         # some session has no candidate turn ...
    assert np.isfinite(pooled).all()                               # ... yet scores (its turns at the floor)
    large.retrieve(query, 1)
    ranking = large.session_ranking(query)
    assert sorted(ranking) == sorted(sessions) and ranking[0] == "e1:S2"


def test_bad_candidate_depth_names_the_setting():
    with pytest.raises(ConfigError, match="candidate_depth"):
        build_strategy("fusion", candidate_depth=0)
