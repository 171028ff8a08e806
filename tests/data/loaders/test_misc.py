"""pipelines/data/loaders/misc.py on a hand-written ``val.jsonl`` read through FIELDS.

Episode 1 uses the first name of every FIELDS row ({name, job} speakers, ``About X``
memory dicts, ``"N/A"``, ``"4-2"`` and ``[1, 4]`` links, "Name: text" dialogue
strings) plus broken parts (a tag and a link naming missing memories, a self link, a
turn without text, a memory key that is not "About <name>"); episode 2 uses the
alternative names ("Name-Job" speakers, outline, utterance, memory_tags, a memories
list with numbers, links).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.data.loaders import get_loader
from pipelines.errors import DataError

FOLDER = Path(__file__).parent / "fixtures" / "misc"


@pytest.fixture(scope="module")
def result():
    return get_loader("misc")(FOLDER)


def test_counts_and_drops(result):
    c = result.counts()
    assert {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")} == \
        {"episodes": 2, "sessions": 4, "turns": 9, "memories": 6, "queries": 0, "triplets": 0}
    assert dict(result.dropped) == {"bad_link": 1, "bad_memory": 1, "bad_turn": 1, "unresolved_link": 1,
                                    "unresolved_memory_tag": 1}


def test_speakers_sessions_memories(result):
    ep = result.episodes[0]
    assert (ep.id, ep.source, ep.split, ep.main_speaker) == ("misc-001", "misc", "valid", "Alice")
    assert [(s.name, s.role) for s in ep.speakers] == [
        ("Alice", "Teacher"), ("Bob", "Student"), ("Carol", "Bob's mother"), ("Dan", "Principal")]
    assert [(s.id, s.partner) for s in ep.sessions] == [("s1", "Bob"), ("s2", "Carol"), ("s3", "Dan")]
    assert [(m.id, m.owner, m.about, m.session_id) for m in ep.memories()] == [
        ("M1", "Alice", "Alice", "s1"), ("M2", "Alice", "Bob", "s1"), ("M3", "Alice", "Bob", "s1"),
        ("M4", "Alice", "Carol", "s2"), ("M5", "Alice", "Dan", "s3")]
    assert [(l.from_id, l.to_id) for l in ep.sessions[1].links] == [("M4", "M2"), ("M4", "M1")]
    assert [(l.from_id, l.to_id) for l in ep.sessions[2].links] == [("M5", "M4")]
    assert ep.sessions[1].turns[1].memory_tags == ["M2", "M1"]
    assert ep.sessions[1].turns[2].memory_tags == []
    assert [(t.id, t.speaker, t.text) for t in ep.sessions[2].turns] == [
        ("s3:0", "Dan", "Any students at risk this term?"),
        ("s3:1", "Alice", "Bob needed help, but his mother and I are on it.")]


def test_alternative_field_names(result):
    ep = result.episodes[1]
    assert [(s.name, s.role) for s in ep.speakers] == [
        ("Eve", "Doctor"), ("Finn", "Patient"), ("Gus", "Nurse"), ("Hana", "Pharmacist")]
    assert [(t.speaker, t.text, t.memory_tags) for t in ep.sessions[0].turns] == [
        ("Finn", "Doctor, this cough will not go away.", []), ("Eve", "Let us run a few tests today.", ["M1"])]
    assert [(m.id, m.about, m.text) for m in ep.memories()] == [("M1", "Finn", "Finn has had a cough for two weeks.")]


def test_missing_field_names_the_names_tried(tmp_path):
    record = json.loads((FOLDER / "val.jsonl").read_text().splitlines()[1])
    del record["sessions"]
    bad = tmp_path / "test.jsonl"
    bad.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError) as info:
        get_loader("misc")(bad)
    assert (info.value.file, info.value.record, info.value.field) == (str(bad), "line 1 (misc-002)",
                                                                      "sessions (sessions)")
    record["sessions"], record["speakers"] = [], None
    bad.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError) as info:
        get_loader("misc")(bad)
    assert info.value.field == "speakers (speakers | characters)"
