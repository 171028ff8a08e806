"""pipelines/data/loaders/realmem.py on a hand-written persona file in the published shape.

Quirks: a query whose ground truth names its own session (flagged), a query with no
Assistant answer, a memory_used matching no extracted memory, a session uuid not in
the file, a duplicated memory index, a turn without content, an unparseable date.
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
        {"episodes": 1, "sessions": 3, "turns": 9, "memories": 3, "queries": 3, "triplets": 0}
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
