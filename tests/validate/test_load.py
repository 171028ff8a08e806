"""pipelines/validate/load.py: the loss policy (rule ``load_loss_within_limit``) over a LoadResult.

The loaders' own fixtures reach it through ``pipelines.data.ingest`` (tests/data/test_ingest.py); here the
LoadResult is built by hand so that each finding is checked alone: no episode, episodes without turns, a
whole kind of record lost, the share of turns dropped at and over the limit.
"""

from __future__ import annotations

import pytest

from pipelines.data.loaders.base import LoadResult
from pipelines.data.schema import Episode, Memory, Session, Turn
from pipelines.validate import validate

FILE = "data.json"


def _load(turns: int = 19, memories: int = 0, sessions: int = 1) -> LoadResult:
    """One episode: ``sessions`` sessions, the first holding ``turns`` turns and ``memories`` memories."""
    shells = [Session(id=f"s{k}", index=k) for k in range(sessions)]
    if shells:
        shells[0].turns = [Turn(id=f"t{j}", speaker="A", text=f"utterance number {j}") for j in range(turns)]
        shells[0].memories = [Memory(id=f"m{j}", owner="A", about="A", text="a memory", session_id="s0")
                              for j in range(memories)]
    return LoadResult(episodes=[Episode(id="e1", source="x", main_speaker="A", sessions=shells)])


def _loss(load: LoadResult, share: float = 0.05):
    report = validate(load.episodes, file=FILE, load=load, max_dropped_turn_share=share)
    return report, report.outcome("load_loss_within_limit")


def test_a_clean_load_passes_and_the_rule_reports_its_limit():
    report, loss = _loss(_load())
    assert loss.passed and loss.metadata["applied"] is True and loss.metadata["max_dropped_turn_share"] == 0.05
    assert report.load == {"dropped": {}, "flagged": {}, "lost": {}, "examples": {}}


def test_without_the_load_result_the_rule_does_not_apply():
    report = validate(_load().episodes, file=FILE)
    loss = report.outcome("load_loss_within_limit")
    assert (loss.passed, loss.metadata["applied"]) == (True, False) and report.load == {}


@pytest.mark.parametrize("dropped, passed", [(1, True), (2, False)])
def test_share_of_turns_at_and_over_the_limit(dropped, passed):
    """19 kept: 1 dropped is 5.0% (at the limit, passes), 2 dropped are 9.5% (over it, fails)."""
    load = _load(turns=19)
    load.drop("bad_turn", "data.json item 0 turn 3: missing text", n=dropped)
    report, loss = _loss(load)
    assert loss.passed is passed and report.passed is passed
    if not passed:
        assert loss.examples == [
            "data.json whole file: 2 of the 21 turns read (9.5%) were left out, more than "
            "ingest.max_dropped_turn_share = 0.05: bad_turn: 2 (first: data.json item 0 turn 3: missing text)"]


def test_reasons_of_a_kind_are_listed_most_frequent_first():
    load = _load(turns=10)
    load.drop("blank_turn", "b1", n=2)
    load.drop("bad_turn", "t1", n=3)
    load.drop("unparsed_date", "d1")  # a date, not a turn: not weighed
    _, loss = _loss(load)
    assert loss.metadata["messages"] == ["5 of the 15 turns read (33.3%) were left out, more than "
                                         "ingest.max_dropped_turn_share = 0.05: bad_turn: 3 (first: t1); "
                                         "blank_turn: 2 (first: b1)"]


def test_a_whole_kind_lost():
    load = _load(memories=0)
    load.drop("bad_memory", "m: no content", n=4)
    _, loss = _loss(load)
    assert loss.metadata["messages"] == ["every one of the 4 memories read was left out: bad_memory: 4 "
                                         "(first: m: no content)"]


def test_a_question_source_without_queries():
    load = _load()
    _, loss = _loss(load)
    assert loss.passed  # source "x" publishes no questions (a dialogue dataset)
    load.episodes[0].source = "longmemeval"
    _, loss = _loss(load)
    assert loss.metadata["messages"] == ["no query was loaded, but longmemeval publishes questions"]


def test_no_episode_and_no_turn():
    empty = LoadResult()
    empty.drop("empty_episode", "item 0: no session has a turn")
    _, loss = _loss(empty)
    assert loss.metadata["messages"] == ["no episode was loaded; left out: empty_episode: 1 "
                                         "(first: item 0: no session has a turn)"]
    _, loss = _loss(_load(turns=0, sessions=2))
    assert loss.metadata["messages"] == ["no turn was loaded (1 episode(s) without a turn)"]
