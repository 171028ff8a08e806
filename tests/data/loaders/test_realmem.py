"""pipelines/data/loaders/realmem.py on a hand-written persona file in the published shape.

Quirks: a query whose ground truth names its own session (flagged), a query with no
Assistant answer, a memory_used matching no extracted memory, a session uuid not in
the file, a duplicated memory index, a turn without content, an unparseable date.
Ordinary turns pad the fixture so that its deliberate drops stay under the default loss limit (5% of the
turns read, ``pipelines.validate.load``), as in the published files.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from pipelines.data.loaders import get_loader
from pipelines.data.loaders.realmem import EVIDENCE_NOT_EARLIER
from pipelines.errors import DataError

FOLDER = Path(__file__).parent / "fixtures" / "realmem"
FILE = FOLDER / "Ana_Lima_dialogues_256k.json"


@pytest.fixture(scope="module")
def result():
    return get_loader("realmem")(FOLDER)


def test_counts_and_drops(result):
    c = result.counts()
    assert {k: c[k] for k in ("episodes", "sessions", "turns", "memories", "queries", "triplets")} == \
        {"episodes": 1, "sessions": 3, "turns": 21, "memories": 3, "queries": 3, "triplets": 0}
    assert dict(result.dropped) == {"bad_turn": 1, "duplicate_memory_id": 1, "query_without_answer": 1,
                                    "unparsed_date": 1, "unresolved_evidence": 1, "unresolved_memory": 1}
    assert dict(result.flagged) == {EVIDENCE_NOT_EARLIER: 1}
    assert result.examples[EVIDENCE_NOT_EARLIER] == [
        f"{FILE} top level dialogues[1] dialogue_turns[2]: query Q2 names the current or a later session"]


def test_sessions_and_memories(result):
    ep = result.episodes[0]
    assert (ep.id, ep.source, ep.split, ep.main_speaker) == ("Ana Lima", "realmem", "test", "User")
    assert [(s.id, s.index, s.partner) for s in ep.sessions] == [("u1", 0, "Assistant"), ("u2", 1, "Assistant"),
                                                                 ("u3", 2, "Assistant")]
    assert [s.timestamp for s in ep.sessions] == [datetime(2024, 3, 1, 9, 0), datetime(2024, 3, 8, 18, 30), None]
    assert [(m.id, m.kind, m.owner, m.about, m.session_id) for m in ep.memories()] == [
        ("P1-DM-S1_01-01", "Dynamic", "Assistant", "User", "u1"),
        ("P1-SM-S1_01-02", "Static", "Assistant", "User", "u1"),
        ("P1-DM-S2_01-01", "Schedule", "Assistant", "User", "u2"),
    ]
    assert [t.id for t in ep.sessions[2].turns] == ["u3:0", "u3:1"]


def test_queries(result):
    q = {x.id: x for x in result.episodes[0].queries}
    assert list(q) == ["Q1", "Q2", "Q4"]
    assert (q["Q1"].session_id, q["Q1"].answer, q["Q1"].category) == ("u2", "You are saving for a flat.",
                                                                       "Financial_Planning")
    assert (q["Q1"].evidence_sessions, q["Q1"].evidence_memories, q["Q1"].flags) == (["u1"], ["P1-DM-S1_01-01"], [])
    assert q["Q1"].timestamp == datetime(2024, 3, 8, 18, 30)
    assert (q["Q2"].evidence_sessions, q["Q2"].flags) == (["u2"], [EVIDENCE_NOT_EARLIER])
    assert (q["Q4"].evidence_sessions, q["Q4"].evidence_memories) == (["u1"], [])
    answer_turn = result.episodes[0].sessions[1].turns[1]
    assert (answer_turn.id, answer_turn.memory_tags) == ("u2:1", ["P1-DM-S1_01-01"])


def test_name_from_file_when_metadata_absent(tmp_path):
    data = json.loads(FILE.read_text())
    del data["_metadata"]
    (tmp_path / "Bo_Chen_dialogues_256k.json").write_text(json.dumps(data))
    assert get_loader("realmem")(tmp_path).episodes[0].id == "Bo_Chen"


def test_errors(tmp_path):
    data = json.loads(FILE.read_text())
    data["dialogues"] = {"not": "a list"}
    bad = tmp_path / "X_dialogues_256k.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(DataError) as info:
        get_loader("realmem")(bad)
    assert (info.value.file, info.value.record, info.value.field) == (str(bad), "top level", "dialogues")
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    with pytest.raises(DataError, match="no file matching"):
        get_loader("realmem")(tmp_path)


# --- the published personas' quirks (FORMATS.md): blank turns, current_time going backwards ---------------

QUIRKS = Path(__file__).parent / "fixtures" / "realmem_quirks"
QUIRKS_FILE = QUIRKS / "Bea_Silva_dialogues_256k.json"


@pytest.fixture(scope="module")
def quirks():
    return get_loader("realmem")(QUIRKS)


def test_file_order_is_kept_when_time_goes_back(quirks):
    ep = quirks.episodes[0]
    # current_time: 12-15, 12-21, 12-16 (back), 12-28; RealMem's own evaluation walks the file as listed
    assert [(s.id, s.index) for s in ep.sessions] == [("b1", 0), ("b2", 1), ("b3", 2), ("b4", 3)]
    assert [s.timestamp.day for s in ep.sessions] == [15, 21, 16, 28]
    assert dict(quirks.flagged) == {}  # nothing reordered: the time going back is validation's warning
    assert quirks.records == {"Bea Silva": QUIRKS_FILE.name}


def test_blank_turns_are_dropped_and_the_query_they_answer_kept(quirks):
    ep = quirks.episodes[0]
    assert [t.id for t in ep.sessions[0].turns] == ["b1:0", "b1:1", "b1:2", "b1:4"]  # b1:3 '' and b1:5 '   '
    assert dict(quirks.dropped) == {"blank_turn": 3}
    assert quirks.examples["blank_turn"][0] == (
        f"{QUIRKS_FILE} top level dialogues[0] dialogue_turns[3]: turn b1:3 (Assistant) has a blank content ''")
    q = {x.id: x for x in ep.queries}
    assert list(q) == ["BQ1", "BQ2", "BQ3"]
    # BQ2's answer turn is blank: its memory_used is still the ground truth, never the next Assistant turn's
    assert (q["BQ2"].answer, q["BQ2"].evidence_sessions, q["BQ2"].evidence_memories) == (
        "", ["b2"], ["F2-SM-S2_01-01"])
    assert q["BQ1"].evidence_sessions == ["b1"] and q["BQ1"].answer == "You run 5 km every morning."


def test_blank_query_turn_drops_the_query_with_a_reason(tmp_path):
    data = json.loads(QUIRKS_FILE.read_text())
    data["dialogues"][3]["dialogue_turns"][0]["content"] = " "
    (tmp_path / QUIRKS_FILE.name).write_text(json.dumps(data))
    r = get_loader("realmem")(tmp_path)
    assert [q.id for q in r.episodes[0].queries] == ["BQ1", "BQ2"]
    assert r.dropped["bad_query"] == 1 and r.lost()["queries"] == 1
    assert r.examples["bad_query"] == [f"{tmp_path / QUIRKS_FILE.name} top level dialogues[3] dialogue_turns[0]: "
                                       "the query's own turn was left out (bad or blank)"]


def test_time_going_back_is_a_warning_not_a_blocking_failure():
    """The issue: 'timestamps_non_decreasing (sessions: ...)' blocked RealMem, whose time order is the file's."""
    from pipelines.data.ingest import load_and_validate

    report = load_and_validate("realmem", QUIRKS).report  # 3 of 64 turns blank: under the default 5%
    assert report.passed, report.blocking_failures()
    blocking = report.outcome("timestamps_non_decreasing")
    assert (blocking.passed, blocking.metadata["applied"]) == (True, False)
    warning = report.outcome("file_order_timestamps")
    assert (warning.passed, warning.blocking, warning.count) == (False, False, 1)
    assert warning.examples == [f"{QUIRKS} {QUIRKS_FILE.name}: session 'b3' at 2025-12-16T00:00:00 is earlier than "
                                "the session before it in the file, 'b2' at 2025-12-21T00:00:00 (kept in file order)"]
