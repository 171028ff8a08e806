"""``rerank``: fusion_time's top turns re-scored by the reranker stage's cross-encoder, never on a seen conversation."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from pipelines.data.schema import Query
from pipelines.errors import ConfigError
from pipelines.memory import STRATEGIES, build_strategy, missing_models
from pipelines.data.folds import write_trained_on
from tests.emma.conftest import mia_episode
from tests.rerank._tiny_reranker import save_tiny_cross_encoder

QUESTION = Query(id="q1", question="Where is Leo moving?", evidence_turns=["E1:S1:T2"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_cross_encoder(tmp_path_factory.mktemp("reranker"))


def _saved(tmp_path, tiny, trained_on=(), name="reranker"):
    out = tmp_path / name
    shutil.copytree(tiny, out)
    write_trained_on(out, [mia_episode().model_copy(update={"id": e}) for e in trained_on], [])
    return out


class Oracle:
    """A cross-encoder stand-in: 1 for the texts it is told are relevant, 0 for the others; counts the pairs."""

    def __init__(self, good):
        self.good, self.pairs = set(good), 0

    def score(self, question, texts, batch_size=64):
        self.pairs += len(texts)
        return np.asarray([1.0 if t in self.good else 0.0 for t in texts], dtype=np.float32)


def _observed(strategy, episode=None):
    episode = episode or mia_episode()
    for session in episode.sessions:
        strategy.observe(episode, session)
    return episode


def _with_oracle(strategy, path, good):
    oracle = Oracle(good)
    strategy._loaded[path] = oracle
    return oracle


def test_the_cross_encoder_reorders_the_first_stages_top_turns(tmp_path, tiny):
    path = _saved(tmp_path, tiny)
    first = build_strategy("fusion_threads")   # the first stage
    _observed(first)
    before = [r.turn_id for r in first.retrieve(QUESTION, 20)]
    strategy = build_strategy("rerank", reranker_path=str(path), depth=4, rerank_weight=100.0)
    _observed(strategy)
    target = next(t for t in before[1:4])                    # a candidate the first stage did not put first
    text = next(f"{i.speaker}: {i.text}" for i in strategy.bm25.items if i.turn_id == target)
    oracle = _with_oracle(strategy, path, {text})
    after = [r.turn_id for r in strategy.retrieve(QUESTION, 20)]
    assert after[0] == target and set(after[:4]) == set(before[:4])     # the candidates, re-ordered
    assert after[4:] == before[4:]                                      # the rest keep the first stage's order
    assert oracle.pairs == 4 and len(strategy.rerank_ms) == 1
    strategy.retrieve(QUESTION, 3)
    assert oracle.pairs == 4                                            # each (question, turn) scored once
    scores = [r.score for r in strategy.retrieve(QUESTION, 20)]
    assert scores == sorted(scores, reverse=True)
    # its session leads the session ranking
    session = next(i.session_id for i in strategy.bm25.items if i.turn_id == target)
    assert strategy.session_ranking(QUESTION)[0] == session


def test_weight_zero_is_the_first_stage(tmp_path, tiny):
    path = _saved(tmp_path, tiny)
    first = build_strategy("fusion_threads")   # the first stage
    _observed(first)
    strategy = build_strategy("rerank", reranker_path=str(path), rerank_weight=0.0)
    _observed(strategy)
    _with_oracle(strategy, path, {"Mia: Lisbon sounds lovely, I will miss you."})
    assert [r.turn_id for r in strategy.retrieve(QUESTION, 20)] == [r.turn_id for r in first.retrieve(QUESTION, 20)]


def test_session_weight_zero_keeps_the_first_stages_sessions_while_turns_are_re_ranked(tmp_path, tiny):
    path = _saved(tmp_path, tiny)
    first = build_strategy("fusion_threads")   # the first stage
    _observed(first)
    before = [r.turn_id for r in first.retrieve(QUESTION, 20)]
    sessions = first.session_ranking(QUESTION)
    strategy = build_strategy("rerank", reranker_path=str(path), depth=4, rerank_weight=100.0, session_weight=0.0)
    _observed(strategy)
    target = before[3]
    _with_oracle(strategy, path, {next(f"{i.speaker}: {i.text}" for i in strategy.bm25.items if i.turn_id == target)})
    assert strategy.retrieve(QUESTION, 20)[0].turn_id == target          # turns: w_c re-ranks them
    assert strategy.session_ranking(QUESTION) == sessions                 # sessions: w_s = 0, the first stage's
    with pytest.raises(ConfigError, match="rerank.session_weight"):
        build_strategy("rerank", reranker_path=str(path), session_weight=-1.0)


def test_the_real_saved_model_scores_the_candidates(tmp_path, tiny):
    path = _saved(tmp_path, tiny)
    strategy = build_strategy("rerank", reranker_path=str(path), depth=3)
    _observed(strategy)
    got = strategy.retrieve(QUESTION, 5)
    assert len(got) == 5 and strategy.model_for("E1") == path
    assert len(strategy._memo) == 3


def test_a_conversation_is_never_scored_by_a_model_that_trained_on_it(tmp_path, tiny):
    main = _saved(tmp_path, tiny, trained_on=["E1", "E2"])
    settings = {"reranker_path": str(main)}
    assert "every model trained on episode 'E1'" in STRATEGIES["rerank"].unavailable([mia_episode()], settings)
    with pytest.raises(ConfigError, match="rerank.folds"):
        _observed(build_strategy("rerank", **settings))
    folds = main / "folds"
    for i, held in enumerate((["E1"], ["E2"])):
        shutil.copytree(tiny, folds / f"fold-{i}")
        write_trained_on(folds / f"fold-{i}", [mia_episode().model_copy(update={"id": e}) for e in ("E2", "E1")
                                               if e not in held], [])
    (folds / "folds.json").write_text(json.dumps({"k": 2, "folds": [
        {"fold": 0, "path": "fold-0", "held_out": ["E1"]}, {"fold": 1, "path": "fold-1", "held_out": ["E2"]}]}))
    assert STRATEGIES["rerank"].unavailable([mia_episode()], settings) is None
    strategy = build_strategy("rerank", **settings)
    _observed(strategy)
    assert strategy.model_for("E1") == folds / "fold-0"


def test_missing_and_unset_models_are_reported(tmp_path):
    assert [m.stage for m in missing_models("rerank", {"reranker_path": str(tmp_path / "none")})] == ["reranker"]
    with pytest.raises(ConfigError, match="rerank.reranker_path is not set"):
        build_strategy("rerank")
    with pytest.raises(ConfigError, match="not a saved model of the reranker stage"):
        build_strategy("rerank", reranker_path=str(tmp_path))
    with pytest.raises(ConfigError, match="rerank.depth"):
        build_strategy("rerank", reranker_path=str(tmp_path), depth=0)


def test_on_a_large_store_the_cross_encoder_reads_the_top_of_the_first_stages_union(tmp_path, tiny):
    path = _saved(tmp_path, tiny)
    strategy = build_strategy("rerank", reranker_path=str(path), depth=3, ann_min_items=5, candidate_depth=3)
    episode = _observed(strategy)
    oracle = _with_oracle(strategy, path, set())
    fused, sessions, _ = strategy._scores(QUESTION, 3)
    union = set(np.flatnonzero(np.isfinite(fused)).tolist())       # BM25's and the graph's top 3
    assert 3 <= len(union) < len(strategy)
    rows = {i.turn_id: j for j, i in enumerate(strategy.bm25.items)}
    items = strategy.retrieve(QUESTION, 3)
    assert oracle.pairs == 3 and {rows[i.turn_id] for i in items} <= union
    assert sorted(strategy.session_ranking(QUESTION)) == sorted(s.id for s in episode.sessions if s.turns)


def test_the_thread_the_conversation_continues_stays_lifted_over_the_cross_encoder(tmp_path, tiny):
    from pipelines.data.schema import Turn
    from pipelines.memory.conformance import thread_episode

    path, episode = _saved(tmp_path, tiny), thread_episode()
    opening = [Turn(id="c0", speaker="User", text="I'm back about my Japan journey.")]
    asked = Query(id="q", session_id="new", turn_id="new:1", question="What was the budget again?").model_copy(
        update={"preceding": opening})                       # a new session that continues the trip (1, 3, 5)
    after_last = asked.model_copy(update={"session_id": None, "turn_id": None})
    strategy = build_strategy("rerank", reranker_path=str(path), query_link_weight=1.0)
    _observed(strategy, episode)
    sheet = episode.sessions[3]                              # the monthly budget sheet, of no thread
    _with_oracle(strategy, path, {f"User: {sheet.turns[0].text}"})   # the cross-encoder reads the question alone
    ids = [s.id for s in episode.sessions]
    assert strategy.session_ranking(after_last)[0] == sheet.id
    assert strategy.session_ranking(asked)[:4] == [ids[2], ids[4], ids[0], sheet.id]
