"""pipelines/validate/stream.py: the streaming validator gives validate()'s report, chunk by chunk.

Every broken-fixture case of the expectation and integrity tests applied at once (then those of the
MiSC tests), failures of several kinds in every episode, too many failures for the examples, an
empty dataset and the loss policy are validated both ways, mostly with chunks of one episode (the
hardest split); the outcomes (count, examples, metadata), the dataset counts and the load section
must be equal.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import timedelta

import pytest

from pipelines.data.loaders.base import LoadResult
from pipelines.data.schema import Episode, Query, Session, Turn
from pipelines.validate import StreamingValidator, validate
from tests.validate import test_expectations, test_integrity, test_misc

FILE = "misc/train.jsonl"
RECORDS = {"ep-a": "line 2", "ep-b": "line 3"}  # as in conftest
GENERIC = [case[1] for mod in (test_expectations, test_integrity) for case in mod.CASES]
MISC = [case[1] for case in test_misc.CASES]


def streamed(episodes, *, profile="generic", chunk_rows=1, load=None, records=RECORDS, share=0.05):
    validator = StreamingValidator(file=FILE, profile=profile, chunk_rows=chunk_rows, max_dropped_turn_share=share)
    for e in episodes:
        validator.add(e, records.get(e.id) if records else None)
    return validator.finish(load=load)


def same(a, b) -> None:
    """Two reports equal but for their creation time and duration."""
    assert [o.name for o in a.outcomes] == [o.name for o in b.outcomes]
    for x, y in zip(a.outcomes, b.outcomes):
        assert (x.name, x.passed, x.count, x.blocking, x.examples, x.metadata) == \
            (y.name, y.passed, y.count, y.blocking, y.examples, y.metadata), x.name
    assert (a.counts, a.load, a.file, a.profile, a.passed) == (b.counts, b.load, b.file, b.profile, b.passed)


def many_failures(episodes: list[Episode]) -> None:
    """Failures in both episodes of several rules, each kind of rule: GX, plain Python, whole-file, applies."""
    for e in episodes:
        e.sessions[0].turns[0].text = " "                       # turn_text_nonempty (GX, chunked)
        e.sessions[1].turns[1].text = "Hi Ana!"                 # short_utterances (Python, chunked)
        e.queries[0].evidence_turns.append(f"{e.id}:S9:T9")      # evidence_turns_resolve
        e.sessions[3].timestamp = e.sessions[2].timestamp - timedelta(hours=1)  # timestamps_non_decreasing
        for s in e.sessions:
            for m in s.memories:
                m.importance = None
    episodes[1].sessions[2].memories[0].importance = 7.0         # importance applies in the second chunk only
    episodes[0].queries[1].category = None                       # category: whole-file applies
    episodes.append(episodes[0].model_copy(deep=True))           # episode_ids_unique across chunks
    episodes.append(episodes[1].model_copy(deep=True, update={"split": "valid"}))  # splits_disjoint


@pytest.mark.parametrize("profile, cases", [("generic", GENERIC), ("misc", MISC)])
def test_every_broken_case_at_once_gives_the_same_report(episodes, profile, cases):
    """Every case of the rule tests applied to one dataset, one after the other (duplicated episodes included)."""
    for mutate in cases:
        with suppress(IndexError):  # a case whose record an earlier case removed
            mutate(episodes)
    listed = validate(episodes, file=FILE, profile=profile, records=RECORDS)
    assert len(listed.failed()) >= (12 if profile == "generic" else 6)
    same(streamed(episodes, profile=profile, chunk_rows=1), listed)


@pytest.mark.parametrize("profile, chunk_rows", [("generic", 1), ("generic", 30), ("misc", 1)])
def test_many_failures_across_chunks_give_the_same_report(episodes, profile, chunk_rows):
    many_failures(episodes)
    listed = validate(episodes, file=FILE, profile=profile, records=RECORDS)
    assert {"turn_text_nonempty", "short_utterances", "evidence_turns_resolve", "timestamps_non_decreasing",
            "memory_importance_in_range", "query_category_present", "episode_ids_unique",
            "splits_disjoint"} <= set(listed.failed()) or profile == "misc"
    same(streamed(episodes, profile=profile, chunk_rows=chunk_rows), listed)


def test_more_failures_than_examples_keep_the_first_in_file_order(episodes):
    for e in episodes:
        for s in e.sessions:
            s.turns[1].text = "Short."
    listed = validate(episodes, file=FILE, records=RECORDS)
    assert listed.outcome("short_utterances").count == 12
    same(streamed(episodes, chunk_rows=5), listed)


def test_empty_and_unlocated_datasets(episodes):
    same(streamed([]), validate([], file=FILE))
    episodes[1].sessions[0].turns[0].text = ""
    same(streamed(episodes, records=None), validate(episodes, file=FILE))


@pytest.mark.parametrize("dropped, share", [(3, 0.05), (3, 0.5)])
def test_the_loss_policy_weighs_the_same_totals(episodes, dropped, share):
    load = LoadResult()
    if dropped:
        load.drop("bad_turn", f"{FILE} line 2 turn 9: missing text", n=dropped)
    load.flag("sessions_sorted_by_date", f"{FILE} line 3: 2 sessions moved")
    listed = validate(episodes, file=FILE, records=RECORDS, load=load, max_dropped_turn_share=share)
    assert listed.passed is not (dropped and share < 0.1)
    same(streamed(episodes, chunk_rows=1, load=load, share=share), listed)


def test_a_load_that_lost_every_turn(episodes):
    bare = [Episode(id="x", source="longmemeval", main_speaker="user", sessions=[Session(id="s", index=0)],
                    queries=[Query(id="q", question="Why?")])]
    load = LoadResult()
    load.drop("blank_turn", "x item 0: turn s:0 blank", n=4)
    listed = validate(bare, file=FILE, load=load)
    assert listed.failed() == ["load_loss_within_limit"]
    same(streamed(bare, load=load, records=None), listed)


def test_one_episode_bigger_than_a_chunk_is_one_chunk(episodes):
    episodes[0].sessions[0].turns.extend(Turn(id=f"extra{k}", speaker="Ana", text="x") for k in range(50))
    same(streamed(episodes, chunk_rows=10), validate(episodes, file=FILE, records=RECORDS))


def test_misuse_is_refused():
    validator = StreamingValidator(file=FILE)
    validator.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        validator.add(Episode(id="e", source="x", main_speaker="A"))
    with pytest.raises(ValueError, match="chunk_rows"):
        StreamingValidator(file=FILE, chunk_rows=0)
