"""pipelines/data/loaders/msc.py: CC and MSC in the session-column layout, and ParlAI's MSC.

``cc/test.jsonl``: a 5-session record (relationship, time gaps, summaries, one session
with more utterances than speakers) and a 4-session record with an unreadable gap
("Later") and no relationship. ``msc/valid.txt``: ParlAI's layout with two previous
dialogs (time_num/time_unit, personas) and init_personas. ``msc/test.jsonl``: the
column layout without time_interval, with empty and null sessions.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from pipelines.data.loaders import get_loader
from pipelines.data.loaders.dates import EPOCH
from pipelines.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def cc():
    return get_loader("cc")(FIXTURES / "cc")


@pytest.fixture(scope="module")
def msc():
    return get_loader("msc")(FIXTURES / "msc")


def _counts(result):
    c = result.counts()
    return {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")}


def test_cc_counts(cc):
    assert _counts(cc) == {"episodes": 2, "sessions": 9, "turns": 19, "memories": 7, "queries": 0, "triplets": 0}
    assert dict(cc.dropped) == {"speaker_count_mismatch": 1, "timestamp_lost_after_unparsed_gap": 1,
                                "unparsed_date": 1}


def test_cc_columns(cc):
    ep, ep2 = cc.episodes
    assert (ep.id, ep.source, ep.split, ep.main_speaker) == ("episode-101", "cc", "test", "Classmates A")
    assert [(s.name, s.role) for s in ep.speakers] == [("Classmates A", "Classmates"), ("Classmates B", "Classmates")]
    assert [s.timestamp - EPOCH for s in ep.sessions] == [
        timedelta(0), timedelta(hours=3), timedelta(hours=3, days=2), timedelta(hours=3, days=23),
        timedelta(hours=3, days=753)]
    assert {s.partner for s in ep.sessions} == {"Classmates B"}
    assert [len(s.turns) for s in ep.sessions] == [2, 3, 2, 2, 2]
    assert [(t.id, t.speaker) for t in ep.sessions[3].turns] == [("s4:0", "Classmates B"), ("s4:1", "Classmates A")]
    assert ep.sessions[2].summary == "They planned a trip."
    assert [(m.id, m.owner, m.about, m.kind) for m in ep.sessions[0].memories] == [
        ("s1:summary", "Classmates A", "Classmates B", "session_summary")]
    assert [s.timestamp - EPOCH if s.timestamp else None for s in ep2.sessions] == [
        timedelta(0), timedelta(days=21), None, None]
    assert ep2.speakers[0].role is None
    assert ep2.sessions[0].summary is None and ep2.sessions[1].summary == "Co-workers discussed a deadline."


def test_msc_counts(msc):
    assert _counts(msc) == {"episodes": 2, "sessions": 5, "turns": 12, "memories": 4, "queries": 0, "triplets": 0}
    assert dict(msc.dropped) == {}


def test_msc_parlai_layout(msc):
    cols, parlai = msc.episodes  # test.jsonl before valid.txt
    assert (parlai.id, parlai.source, parlai.split, parlai.main_speaker) == \
        ("train:ordered_12", "msc", "valid", "Speaker 1")
    assert [(s.name, s.persona) for s in parlai.speakers] == [
        ("Speaker 1", ["i like to ski.", "i have a cat."]), ("Speaker 2", ["i am a teacher.", "i live by the sea."])]
    assert [s.timestamp - EPOCH for s in parlai.sessions] == [timedelta(0), timedelta(days=3),
                                                            timedelta(days=3, hours=2)]
    assert [(t.id, t.speaker) for t in parlai.sessions[1].turns] == [
        ("s2:0", "Speaker 1"), ("s2:1", "Speaker 2"), ("s2:2", "Speaker 1")]
    assert parlai.sessions[2].turns[1].text == "Great news, did you ski this week?"
    assert [(m.session_id, m.owner, m.about, m.text, m.kind) for m in parlai.memories()] == [
        ("s1", "Speaker 1", "Speaker 1", "I like to ski.", "persona_summary"),
        ("s1", "Speaker 2", "Speaker 2", "I am a teacher.", "persona_summary"),
        ("s2", "Speaker 1", "Speaker 1", "I have a cat named Tom.", "persona_summary"),
        ("s2", "Speaker 2", "Speaker 2", "I swim every morning.", "persona_summary"),
    ]
    assert (cols.id, cols.split, [s.id for s in cols.sessions]) == ("msc-7", "test", ["s1", "s2"])
    assert [s.timestamp for s in cols.sessions] == [None, None]


def test_column_layout_without_any_session_is_an_error(tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text(json.dumps({"dataID": "e1", "summary": []}) + "\n")
    with pytest.raises(DataError) as info:
        get_loader("cc")(bad)
    assert (info.value.record, info.value.field) == ("line 1 (e1)", "first_session_dialogue")


def test_json_array_export_reads_like_jsonl(tmp_path, cc):
    records = [json.loads(line) for line in (FIXTURES / "cc" / "test.jsonl").read_text().splitlines()]
    (tmp_path / "cc_test.json").write_text(json.dumps(records))
    again = get_loader("cc")(tmp_path / "cc_test.json")
    assert [e.model_dump() for e in again.episodes] == [e.model_dump() for e in cc.episodes]
    assert again.examples["unparsed_date"] == [f"{tmp_path / 'cc_test.json'} item 1 (episode-102) third session: "
                                               "time gap 'Later'"]
