"""pipelines/data/loaders/longmemeval.py on a hand-written fixture in the S file's shape.

Quirks: sessions recurring across questions (sA in q001 and q003, sB in q001 and q002)
with question-specific has_answer flags, an integer answer, an ``_abs`` question, a
turn without content, an unparseable date, a session repeated inside one haystack, and
an answer_session_id missing from the haystack.
Ordinary turns pad the fixture so that its deliberate drops stay under the default loss limit (5% of the
turns read, ``pipelines.validate.load``), as in the published files.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from pipelines.data.loaders import get_loader
from pipelines.errors import DataError

FIXTURE = Path(__file__).parent / "fixtures" / "longmemeval_s_fixture.json"


@pytest.fixture(scope="module")
def result():
    return get_loader("longmemeval")(FIXTURE)


def test_counts_and_drops(result):
    c = result.counts()
    assert {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")} == \
        {"episodes": 3, "sessions": 6, "turns": 21, "memories": 0, "queries": 3, "triplets": 0}
    assert dict(result.dropped) == {"bad_turn": 1, "duplicate_session_in_haystack": 1,
                                    "unparsed_date": 1, "unresolved_evidence": 1}
    assert dict(result.flagged) == {}
    assert result.examples["unresolved_evidence"] == [
        f"{FIXTURE} item 2 (q003): answer session sZ not in the haystack"]


def test_episode_and_query_fields(result):
    q1, q2, q3 = result.episodes
    assert (q1.id, q1.source, q1.split, q1.main_speaker) == ("q001", "longmemeval", "test", "user")
    assert [s.id for s in q1.sessions] == ["sA", "sB"]
    assert q1.sessions[0].timestamp == datetime(2023, 5, 20, 2, 21)
    assert [(t.id, t.speaker) for t in q1.sessions[0].turns] == [("sA:0", "user"), ("sA:1", "assistant")]
    query = q1.queries[0]
    assert (query.evidence_turns, query.evidence_sessions, query.category, query.abstention) == \
        (["sA:1"], ["sA"], "single-session-user", False)
    assert query.timestamp == datetime(2023, 6, 1, 9, 0)
    abs_query = q2.queries[0]
    assert (abs_query.answer, abs_query.abstention, abs_query.evidence_sessions) == ("3", True, [])
    assert [s.timestamp for s in q2.sessions] == [datetime(2023, 5, 21, 10, 0), None]
    assert [t.id for t in q2.sessions[1].turns] == ["sC:0"]  # sC:1 had no content
    assert [s.id for s in q3.sessions] == ["sA", "sD"]
    assert [s.index for s in q3.sessions] == [0, 1]
    assert q3.queries[0].evidence_turns == ["sA:0", "sD:0"]  # q003's own has_answer flags
    assert q3.queries[0].evidence_sessions == ["sD"]


def test_sessions_are_shared_not_copied(result):
    q1, q2, q3 = result.episodes
    assert q1.sessions[0].turns[0] is q3.sessions[0].turns[0]  # sA built once
    assert q1.sessions[1].turns[1] is q2.sessions[0].turns[1]  # sB built once
    assert q1.sessions[0] is not q3.sessions[0]                 # each episode has its own shell
    assert not any(t.has_answer for e in result.episodes for _, t in e.turns())


def test_same_id_other_content_keeps_own_copy(tmp_path):
    data = json.loads(FIXTURE.read_text())
    data[1]["haystack_sessions"][0][0]["content"] = "A different first turn."
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps(data))
    r = get_loader("longmemeval")(path)
    assert dict(r.flagged) == {"session_id_reused_with_other_content": 1}
    assert r.episodes[1].sessions[0].turns[0].text == "A different first turn."
    assert r.episodes[0].sessions[1].turns[0].text == "Can you suggest a pasta recipe?"


@pytest.mark.parametrize("mutate, record, field", [
    (lambda d: d[1].pop("haystack_sessions"), "item 1 (q002_abs)", "haystack_sessions"),
    (lambda d: d[0].update(question_id=5), "item 0", "question_id"),
    (lambda d: d[2]["haystack_session_ids"].pop(), "item 2 (q003)", "haystack_session_ids"),
    (lambda d: d[0].update(answer=["Paris"]), "item 0 (q001)", "answer"),
])
def test_skeleton_errors(tmp_path, mutate, record, field):
    data = json.loads(FIXTURE.read_text())
    mutate(data)
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataError) as info:
        get_loader("longmemeval")(path)
    assert (info.value.file, info.value.record, info.value.field) == (str(path), record, field)


def test_stream_errors_name_item_and_byte(tmp_path):
    raw = FIXTURE.read_bytes()
    second = raw.index(b'{"question_id": "q002_abs"')
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: second + 40])
    with pytest.raises(DataError, match="truncated JSON") as info:
        get_loader("longmemeval")(cut)
    assert info.value.record.startswith("item 1 (near byte ")
    bad = tmp_path / "bad.json"
    bad.write_bytes(raw[: second + 40] + b"\xc3\x28" + raw[second + 40:])
    with pytest.raises(DataError, match="not UTF-8") as info:
        get_loader("longmemeval")(bad)
    assert info.value.record == f"byte {second + 40} (line 1)"
    obj = tmp_path / "obj.json"
    obj.write_text('{"question_id": "q1"}')
    with pytest.raises(DataError, match="expected a JSON array"):
        get_loader("longmemeval")(obj)


# --- the published S file's quirks (FORMATS.md): dates out of order, blank turns -------------------------

QUIRKS = Path(__file__).parent / "fixtures" / "longmemeval_s_quirks.json"


@pytest.fixture(scope="module")
def quirks():
    return get_loader("longmemeval")(QUIRKS)


def test_sessions_are_put_in_date_order_stably(quirks):
    garden, trip, cat = quirks.episodes
    # listed sB (05-22), sA (05-20), sD (05-22), sC (05-21), sF (05-19): sB and sD share a date, keep their order
    assert [s.id for s in garden.sessions] == ["sF", "sA", "sC", "sB", "sD"]
    assert [s.index for s in garden.sessions] == [0, 1, 2, 3, 4]
    assert [s.id for s in trip.sessions] == ["sF", "sC", "sB", "sE"]  # already in order: untouched
    assert [s.id for s in cat.sessions] == ["sF", "sA", "sD"]
    assert all(a.timestamp <= b.timestamp for e in quirks.episodes for a, b in zip(e.sessions, e.sessions[1:]))
    assert dict(quirks.flagged) == {"sessions_sorted_by_date": 2}  # the questions reordered, named below
    assert quirks.examples["sessions_sorted_by_date"] == [
        f"{QUIRKS} item 0 (qs_garden): 4 of 5 haystack sessions moved into date order (first: session sF from "
        "position 4 to 0)",
        f"{QUIRKS} item 2 (qs_cat_abs): 2 of 3 haystack sessions moved into date order (first: session sF from "
        "position 2 to 0)"]


def test_sorting_keeps_shared_turns_and_the_evidence_mapping(quirks):
    garden, trip, cat = quirks.episodes
    by_id = {e.id: {s.id: s for s in e.sessions} for e in quirks.episodes}
    assert by_id["qs_garden"]["sA"].turns[0] is by_id["qs_cat_abs"]["sA"].turns[0]  # one Turn, two questions
    assert by_id["qs_garden"]["sA"] is not by_id["qs_cat_abs"]["sA"]                # own shells, own index
    assert (by_id["qs_garden"]["sC"].index, by_id["qs_trip"]["sC"].index) == (2, 1)
    # has_answer is per question: sA:0 for qs_garden, sC:0 (the same trip session) for qs_trip, none for the cat
    turns = {e.id: {t.id: t for _, t in e.turns()} for e in quirks.episodes}
    assert garden.queries[0].evidence_turns == ["sA:0"] and garden.queries[0].evidence_sessions == ["sA"]
    assert turns["qs_garden"]["sA:0"].text == "I planted tomatoes in the garden last week."
    assert trip.queries[0].evidence_turns == ["sC:0"]
    assert turns["qs_trip"]["sC:0"].text == "We booked a trip to Lisbon for June."
    assert (cat.queries[0].evidence_turns, cat.queries[0].abstention) == ([], True)


def test_blank_turns_are_dropped_and_named(quirks):
    trip = quirks.episodes[1]
    sessions = {s.id: s for s in trip.sessions}
    assert [t.id for t in sessions["sB"].turns] == ["sB:0", "sB:2", "sB:3"]  # the others keep their ids
    assert [t.id for t in sessions["sE"].turns] == ["sE:1"]
    assert dict(quirks.dropped) == {"blank_turn": 3}  # sB:1 in two questions, sE:0 in one
    assert quirks.examples["blank_turn"][-1] == (
        f"{QUIRKS} item 1 (qs_trip) haystack_sessions[3] turn 0: turn sE:0 has a blank content ''")
    assert all(t.text.strip() for e in quirks.episodes for _, t in e.turns())


def test_undated_session_keeps_its_place(tmp_path):
    data = json.loads(QUIRKS.read_text())
    data[0]["haystack_dates"][2] = None  # sD, third in the file
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps(data))
    garden = get_loader("longmemeval")(path).episodes[0]
    assert [s.id for s in garden.sessions] == ["sF", "sA", "sD", "sC", "sB"]  # sD stays third, the dated fill the rest


def test_quirky_file_passes_validation_that_failed_before():
    """The issue: turn_text_nonempty ('sharegpt_ADHo6Ob_0:8' ... blank text) and timestamps_non_decreasing
    blocked the published S file."""
    from pipelines.data.ingest import load_and_validate

    report = load_and_validate("longmemeval", QUIRKS).report
    assert report.passed, report.blocking_failures()
    assert report.outcome("timestamps_non_decreasing").metadata["applied"] is True
    assert report.load["dropped"] == {"blank_turn": 3} and report.load["flagged"] == {"sessions_sorted_by_date": 2}
