"""pipelines/data/ingest.py: load a source, validate it (loss policy included), write canonical splits and
counts, all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.data import ingest as ingest_mod
from pipelines.cli import main
from pipelines.data.ingest import COUNTS_FILE, ingest, load_and_validate, load_source, write_canonical
from pipelines.data.schema import read_episodes
from pipelines.errors import ConfigError, DataError, ValidationFailed
from tests._cli import locomo_without_text

FIXTURES = Path(__file__).parent / "loaders" / "fixtures"
LOCOMO = FIXTURES / "locomo10_fixture.json"
REASONS = {"bad_qa": 1, "bad_turn": 1, "date_without_session": 1, "malformed_evidence": 1, "unparsed_date": 1,
           "unresolved_evidence": 1}
EXPECTED_LOCOMO = {"episodes": 2, "sessions": 3, "turns": 21, "memories": 5, "queries": 6, "triplets": 0,
                   "dropped": REASONS, "flagged": {"qa_without_evidence": 1},
                   # the first example of every drop and flag reason, naming the record (ids) and why
                   "examples": {
                       "bad_qa": [f"file {LOCOMO}, record item 0 (conv-1) qa[6], field 'question': missing required "
                                  "field"],
                       "bad_turn": [f"file {LOCOMO}, record item 0 (conv-1) session_3 turn 2, field 'text': missing "
                                    "required field"],
                       "date_without_session": [f"{LOCOMO} item 0 (conv-1): 'session_2_date_time' has no session_2"],
                       "malformed_evidence": [f"{LOCOMO} item 0 (conv-1) qa[3]: evidence 'D'"],
                       "qa_without_evidence": [f"{LOCOMO} item 0 (conv-1) qa[5]: question 'Would Ana enjoy "
                                               "mountains?'"],
                       "unparsed_date": [f"{LOCOMO} item 1 (conv-2) session_1: session_1_date_time = 'sometime in "
                                         "spring'"],
                       "unresolved_evidence": [f"{LOCOMO} item 0 (conv-1) qa[3]: D9:9 names no turn"]},
                   "warnings": {"short_utterances": 1}, "splits": {"test": 2}}


def test_ingest_writes_splits_and_counts(tmp_path):
    out = tmp_path / "canonical" / "locomo"
    counts = ingest("locomo", LOCOMO, out)
    assert counts == EXPECTED_LOCOMO
    assert sorted(p.name for p in out.iterdir()) == [COUNTS_FILE, "test.jsonl"]
    assert json.loads((out / COUNTS_FILE).read_text()) == EXPECTED_LOCOMO
    episodes = read_episodes(out / "test.jsonl")
    assert [e.id for e in episodes] == ["conv-1", "conv-2"]
    assert episodes[0].queries[1].evidence_turns == ["D1:3", "D3:2"]
    assert [p.name for p in tmp_path.joinpath("canonical").iterdir()] == ["locomo"]  # no temp left


def test_a_load_that_lost_every_turn_fails_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValidationFailed, match="every one of the 22 turns read was left out: bad_turn: 22") as info:
        ingest("locomo", locomo_without_text(tmp_path), out, report=True)
    assert info.value.rule == "load_loss_within_limit" and "field 'text': missing required field" in str(info.value)
    assert not out.exists()
    report = json.loads((tmp_path / "out.validation.json").read_text())  # the report says why, all the same
    assert report["passed"] is False and report["blocking_failures"] == ["load_loss_within_limit"]
    assert report["load"]["dropped"]["bad_turn"] == 22 and report["load"]["lost"]["turns"] == 22


def test_a_file_without_episodes_fails(tmp_path):
    empty = tmp_path / "locomo10.json"
    empty.write_text("[]")
    with pytest.raises(ValidationFailed, match="no episode was loaded"):
        ingest("locomo", empty, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_load_that_lost_every_query_fails(tmp_path):
    data = json.loads(LOCOMO.read_text())
    for conversation in data:
        for qa in conversation["qa"]:
            qa.pop("question", None)
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationFailed, match="every one of the 7 queries read was left out: bad_qa: 7"):
        ingest("locomo", path, tmp_path / "out")


def test_a_question_source_that_loads_no_query_fails(tmp_path):
    """A renamed ``qa`` key drops nothing (the loader reads qa as optional): LoCoMo publishes questions."""
    data = json.loads(LOCOMO.read_text())
    for conversation in data:
        conversation["questions"] = conversation.pop("qa")
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationFailed, match="no query was loaded, but locomo publishes questions"):
        ingest("locomo", path, tmp_path / "out")


def test_dropped_turn_share_is_configurable(tmp_path):
    """1 turn of 22 dropped (4.5%): passes the default 5%, fails a 1% limit, passes again at 10%."""
    assert load_and_validate("locomo", LOCOMO).report.passed
    strict = load_and_validate("locomo", LOCOMO, config={"ingest": {"max_dropped_turn_share": 0.01}}).report
    loss = strict.outcome("load_loss_within_limit")
    assert not strict.passed and loss.count == 1
    assert loss.metadata["messages"] == [
        "1 of the 22 turns read (4.5%) were left out, more than ingest.max_dropped_turn_share = 0.01: bad_turn: 1 "
        f"(first: file {LOCOMO}, record item 0 (conv-1) session_3 turn 2, field 'text': missing required field)"]
    with pytest.raises(ConfigError, match=r"ingest.max_dropped_turn_share must lie in \[0, 1\]"):
        load_and_validate("locomo", LOCOMO, config={"ingest": {"max_dropped_turn_share": 5}})


def test_sources_without_queries_are_not_a_loss(tmp_path):
    """ConvAI2 has no questions at all: nothing of that kind was read, so nothing was lost."""
    counts = ingest("convai2", FIXTURES / "convai2", tmp_path / "out")
    assert counts["queries"] == 0 and counts["dropped"]["silence_placeholder"] == 1


def test_splits_from_file_names(tmp_path):
    counts = ingest("convai2", FIXTURES / "convai2", tmp_path / "out")
    assert counts["splits"] == {"train": 1, "valid": 3}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [COUNTS_FILE, "train.jsonl", "valid.jsonl"]


def test_rerun_replaces_previous_output(tmp_path):
    out = tmp_path / "out"
    ingest("convai2", FIXTURES / "convai2", out)
    ingest("locomo", LOCOMO, out)
    assert sorted(p.name for p in out.iterdir()) == [COUNTS_FILE, "test.jsonl"]  # stale splits gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failure_leaves_nothing(tmp_path, monkeypatch):
    """The disk fills up at the third episode, two lines into the files: nothing is left."""
    out = tmp_path / "out"
    calls = []

    def failing_line(episode):
        calls.append(episode.split)
        if len(calls) == 3:
            raise OSError("disk full")
        return "{}"

    monkeypatch.setattr(ingest_mod, "episode_line", failing_line)
    with pytest.raises(OSError, match="disk full"):
        ingest("convai2", FIXTURES / "convai2", out)
    assert len(calls) == 3
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_previous_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    ingest("locomo", LOCOMO, out)
    before = (out / "test.jsonl").read_bytes()
    monkeypatch.setattr(ingest_mod, "episode_line", lambda episode: (_ for _ in ()).throw(OSError("boom")))
    with pytest.raises(OSError):
        ingest("convai2", FIXTURES / "convai2", out)
    assert (out / "test.jsonl").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_bad_input_writes_nothing(tmp_path):
    bad = tmp_path / "locomo10.json"
    bad.write_bytes(LOCOMO.read_bytes()[:300])
    with pytest.raises(DataError, match="truncated JSON"):
        ingest("locomo", bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_refuses_folder_with_other_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds files ingest did not write \(notes.txt\)"):
        write_canonical(load_source("locomo", LOCOMO), out)
    assert (out / "notes.txt").read_text() == "mine"


def test_unknown_source():
    with pytest.raises(ConfigError, match="unknown source 'locomo11'"):
        load_source("locomo11", LOCOMO)


def test_cli_ingest_prints_counts_as_last_line(tmp_path, capsys):
    assert main(["ingest", "--source", "locomo", "--path", str(LOCOMO), "--out", str(tmp_path / "o")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == EXPECTED_LOCOMO


def test_cli_ingest_reports_a_missing_file(tmp_path, capsys):
    assert main(["ingest", "--source", "locomo", "--path", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")]) \
        == 4  # a missing input (pipelines.errors.EXIT_CODES)
    err = capsys.readouterr().err
    assert "file does not exist" in err and "Traceback" not in err
