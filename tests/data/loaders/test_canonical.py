"""pipelines/data/loaders/canonical.py: our own jsonl reads back exactly what was written."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.data.ingest import load_source, write_canonical
from pipelines.data.loaders import get_loader
from pipelines.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures"


def test_round_trip_through_ingest(tmp_path):
    original = get_loader("misc")(FIXTURES / "misc")
    write_canonical(load_source("misc", FIXTURES / "misc"), tmp_path / "out")  # unvalidated: the fixture has quirks
    again = get_loader("canonical")(tmp_path / "out")
    assert [e.model_dump() for e in again.episodes] == [e.model_dump() for e in original.episodes]
    assert dict(again.dropped) == {}
    single = get_loader("canonical")(tmp_path / "out" / "valid.jsonl")
    assert [e.id for e in single.episodes] == ["misc-001", "misc-002"]


def test_bad_line_names_file_line_field(tmp_path):
    write_canonical(load_source("misc", FIXTURES / "misc"), tmp_path / "out")
    path = tmp_path / "out" / "valid.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace('"main_speaker":"Eve"', '"main_speaker":""')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as info:
        get_loader("canonical")(path)
    assert (info.value.file, info.value.record, info.value.field) == (str(path), "line 3", "main_speaker")
