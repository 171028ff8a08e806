"""pipelines/data/ingest.py: load a source, write canonical splits and counts, all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.data import ingest as ingest_mod
from pipelines.data.ingest import COUNTS_FILE, ingest, load_source, main, write_canonical
from pipelines.data.schema import read_episodes
from pipelines.errors import ConfigError, DataError

FIXTURES = Path(__file__).parent / "loaders" / "fixtures"
LOCOMO = FIXTURES / "locomo10_fixture.json"
EXPECTED_LOCOMO = {"episodes": 2, "sessions": 3, "turns": 7, "memories": 5, "queries": 6, "triplets": 0,
                   "dropped": {"bad_qa": 1, "bad_turn": 1, "date_without_session": 1, "malformed_evidence": 1,
                               "unparsed_date": 1, "unresolved_evidence": 1},
                   "flagged": {"qa_without_evidence": 1}, "splits": {"test": 2}}


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


def test_splits_from_file_names(tmp_path):
    counts = ingest("convai2", FIXTURES / "convai2", tmp_path / "out")
    assert counts["splits"] == {"train": 1, "valid": 2}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [COUNTS_FILE, "train.jsonl", "valid.jsonl"]


def test_rerun_replaces_previous_output(tmp_path):
    out = tmp_path / "out"
    ingest("convai2", FIXTURES / "convai2", out)
    ingest("locomo", LOCOMO, out)
    assert sorted(p.name for p in out.iterdir()) == [COUNTS_FILE, "test.jsonl"]  # stale splits gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failure_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    calls = []

    def failing_write(path, episodes):
        calls.append(Path(path).name)
        Path(path).write_text("partial")
        raise OSError("disk full")

    monkeypatch.setattr(ingest_mod, "write_episodes", failing_write)
    with pytest.raises(OSError, match="disk full"):
        ingest("convai2", FIXTURES / "convai2", out)
    assert calls == ["train.jsonl"]
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_previous_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    ingest("locomo", LOCOMO, out)
    before = (out / "test.jsonl").read_bytes()
    monkeypatch.setattr(ingest_mod, "write_episodes", lambda path, eps: (_ for _ in ()).throw(OSError("boom")))
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


def test_main_prints_counts_as_last_line(tmp_path, capsys):
    assert main(["--source", "locomo", "--path", str(LOCOMO), "--out", str(tmp_path / "o")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == EXPECTED_LOCOMO


def test_main_reports_data_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--source", "locomo", "--path", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")])
    assert info.value.code == 2
    assert "file does not exist" in capsys.readouterr().err
