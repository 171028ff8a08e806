"""pipelines/data/loaders/locomo.py on a hand-written fixture in the published shape.

The fixture has LoCoMo's quirks: non-contiguous session numbers (1 and 3, with a
session_2_date_time but no session_2), an image turn, a turn without text, packed
evidence ("D1:3; D3:2", "D3:1 D1:2 D1:1"), a malformed id ("D"), an id naming no turn
("D9:9"), a question without evidence, an integer answer, a category 5 question with
only adversarial_answer, a question without its question, an unparseable date, and an
observation whose dia_id is a list.
Ordinary turns pad the fixture so that its deliberate drops stay under the default loss limit (5% of the
turns read, ``pipelines.validate.load``), as in the published files.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from pipelines.data.loaders import get_loader
from pipelines.data.loaders.locomo import ADVERSARIAL_ANSWER, CATEGORY_NAMES
from pipelines.errors import DataError

FIXTURE = Path(__file__).parent / "fixtures" / "locomo10_fixture.json"


@pytest.fixture(scope="module")
def result():
    return get_loader("locomo")(FIXTURE)


def test_counts_and_drops(result):
    c = result.counts()
    assert {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")} == \
        {"episodes": 2, "sessions": 3, "turns": 21, "memories": 5, "queries": 6, "triplets": 0}
    assert dict(result.dropped) == {"bad_qa": 1, "bad_turn": 1, "date_without_session": 1,
                                    "malformed_evidence": 1, "unparsed_date": 1, "unresolved_evidence": 1}
    assert dict(result.flagged) == {"qa_without_evidence": 1}
    assert result.examples["unresolved_evidence"] == [
        f"{FIXTURE} item 0 (conv-1) qa[3]: D9:9 names no turn"]
    assert result.examples["bad_turn"][0].startswith(f"file {FIXTURE}, record item 0 (conv-1) session_3 turn 2")
    assert "field 'text'" in result.examples["bad_turn"][0]


def test_sessions_turns_and_dates(result):
    ep = result.episodes[0]
    assert (ep.id, ep.source, ep.split, ep.main_speaker) == ("conv-1", "locomo", "test", "Ana")
    assert [s.name for s in ep.speakers] == ["Ana", "Ben"]
    assert [(s.id, s.index, s.partner) for s in ep.sessions] == [("session_1", 0, "Ben"), ("session_3", 1, "Ben")]
    assert ep.sessions[0].timestamp == datetime(2023, 5, 8, 13, 56)
    assert ep.sessions[1].timestamp == datetime(2023, 6, 27, 10, 37)
    assert [t.id for _, t in ep.turns()] == ["D1:1", "D1:2", "D1:3", "D3:1", "D3:2"]
    assert ep.sessions[0].turns[1].text == "Nice! Look at my new puppy. and shared a photo of a dog on a sofa"
    assert result.episodes[1].sessions[0].timestamp is None  # "sometime in spring"


def test_queries(result):
    q = {x.id: x for x in result.episodes[0].queries}
    assert list(q) == ["conv-1:q0", "conv-1:q1", "conv-1:q2", "conv-1:q3", "conv-1:q4", "conv-1:q5"]
    assert (q["conv-1:q0"].evidence_turns, q["conv-1:q0"].evidence_sessions, q["conv-1:q0"].category) == \
        (["D1:1"], ["session_1"], "4")
    assert q["conv-1:q1"].answer == "2022"
    assert q["conv-1:q1"].evidence_turns == ["D1:3", "D3:2"]
    assert q["conv-1:q1"].evidence_sessions == ["session_1", "session_3"]
    assert q["conv-1:q2"].evidence_turns == ["D3:1", "D1:2", "D1:1"]
    assert q["conv-1:q2"].evidence_sessions == ["session_3", "session_1"]
    assert q["conv-1:q3"].evidence_turns == []
    adversarial = q["conv-1:q4"]
    assert (adversarial.answer, adversarial.abstention, adversarial.flags, adversarial.category) == \
        (ADVERSARIAL_ANSWER, True, ["adversarial"], "5")
    assert CATEGORY_NAMES[adversarial.category] == "adversarial"
    assert q["conv-1:q5"].evidence_turns == [] and q["conv-1:q5"].abstention is False
    assert all(x.session_id is None for x in q.values())


def test_memories(result):
    s1, s3 = result.episodes[0].sessions
    assert [(m.id, m.owner, m.about, m.kind, m.text) for m in s1.memories] == [
        ("session_1:obs:0", "Ana", "Ana", "observation", "Ana went hiking in the Alps."),
        ("session_1:obs:1", "Ben", "Ben", "observation", "Ben has a new puppy."),
        ("session_1:summary", "Ana", "Ben", "session_summary",
         "Ana and Ben talked about hiking and a puppy on 8 May 2023."),
    ]
    assert s3.summary == "Ana told Ben she moved to Porto."
    assert [m.kind for m in s3.memories] == ["observation", "session_summary"]


@pytest.mark.parametrize("mutate, record, field", [
    (lambda d: d[0].pop("conversation"), "item 0 (conv-1)", "conversation"),
    (lambda d: d[1]["conversation"].update(speaker_b=7), "item 1 (conv-2)", "conversation.speaker_b"),
    (lambda d: d[1]["conversation"].update(session_1="not a list"), "item 1 (conv-2)", "conversation.session_1"),
    (lambda d: d[1].update(qa={"a": 1}), "item 1 (conv-2)", "qa"),
])
def test_skeleton_errors_name_file_record_field(tmp_path, mutate, record, field):
    data = json.loads(FIXTURE.read_text())
    mutate(data)
    bad = tmp_path / "locomo10.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(DataError) as info:
        get_loader("locomo")(bad)
    assert (info.value.file, info.value.record, info.value.field) == (str(bad), record, field)


def test_truncated_and_non_utf8_files(tmp_path):
    raw = FIXTURE.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[:200])
    with pytest.raises(DataError, match="truncated JSON") as info:
        get_loader("locomo")(cut)
    assert info.value.record.startswith("line ")
    bad = tmp_path / "bad.json"
    bad.write_bytes(raw[:100] + b"\xff" + raw[100:])
    with pytest.raises(DataError, match="not UTF-8") as info:
        get_loader("locomo")(bad)
    line = raw[:100].count(b"\n") + 1
    assert info.value.record == f"byte 100 (line {line})"
