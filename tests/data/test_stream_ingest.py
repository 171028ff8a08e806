"""pipelines/data/ingest.py streaming: stream_and_validate, StreamedIngestion.episodes, ingest written as read.

The LongMemEval files are written by the tests in the published format (FORMATS.md) with its quirks:
haystacks out of date order, blank turns, sessions recurring across questions (one with other
texts), has_answer flags that differ between two questions holding the same session, an integer
answer, an abstention question, a duplicated session and an unresolved answer session.
"""

from __future__ import annotations

import gc
import json
import os
import weakref
from pathlib import Path

import pytest

from pipelines.cli import main as cli_main
from pipelines.data import ingest as ingest_mod
from pipelines.data.ingest import (COUNTS_FILE, ingest, load_and_validate, stream_and_validate, write_canonical,
                                   write_streamed)
from pipelines.data.loaders import get_streamer
from pipelines.data.loaders.base import LoadResult
from pipelines.errors import DataError, ValidationFailed
from tests.validate.test_stream import same

LOCOMO = Path(__file__).parent / "loaders" / "fixtures" / "locomo10_fixture.json"


def _session(sid: str, n: int = 10, blank: int | None = None, answer: int | None = None) -> list[dict]:
    turns = [{"role": "user" if j % 2 == 0 else "assistant",
              "content": f"Turn {j} of session {sid}, long enough to be an utterance."} for j in range(n)]
    if blank is not None:
        turns[blank]["content"] = " \n"
    if answer is not None:
        turns[answer]["has_answer"] = True
    return turns


def _date(day: int) -> str:
    return f"2023/05/{day:02d} (Sat) 10:00"


def _question(qid: str, sessions: list[tuple[str, int, list[dict]]], answer_ids: list[str], answer="Lisbon") -> dict:
    """``sessions``: (id, day of May, turns), listed in that order (out of date order when the days are)."""
    return {"question_id": qid, "question_type": "multi-session", "question": f"What about {qid}?",
            "question_date": "2023/06/01 (Thu) 09:00", "answer": answer,
            "haystack_session_ids": [s[0] for s in sessions], "haystack_dates": [_date(s[1]) for s in sessions],
            "haystack_sessions": [s[2] for s in sessions], "answer_session_ids": answer_ids}


def quirky_records(blank_turns: bool = True) -> list[dict]:
    b = 1 if blank_turns else None
    return [
        _question("q1", [("sA", 3, _session("sA", answer=0)), ("sB", 1, _session("sB", blank=b)),
                         ("sC", 2, _session("sC"))], ["sA", "sZ"]),                    # out of order, unresolved sZ
        _question("q2", [("sB", 1, _session("sB", blank=b, answer=2)), ("sD", 4, _session("sD")),
                         ("sD", 4, _session("sD"))], ["sB"], answer=3),                 # repeated sD, integer answer
        _question("q3_abs", [("sE", 6, _session("sE")), ("sA", 3, _session("sA", answer=2))], []),  # sA's own flag
        _question("q4", [("sC", 2, [{"role": "user", "content": "Other texts under a known id."}]),
                         ("sF", 5, _session("sF", n=12, blank=3 if blank_turns else None))], ["sF"]),
    ]


def write_lme(path: Path, records: list[dict]) -> Path:
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return path


@pytest.fixture
def quirky(tmp_path) -> Path:
    return write_lme(tmp_path / "longmemeval_m.json", quirky_records())


def test_the_quirky_file_has_its_quirks(quirky):
    loaded = get_loader_result(quirky)
    assert loaded.dropped == {"blank_turn": 3, "duplicate_session_in_haystack": 1, "unresolved_evidence": 1}
    assert loaded.flagged == {"sessions_sorted_by_date": 2, "session_id_reused_with_other_content": 1}


def get_loader_result(path: Path) -> LoadResult:
    return load_and_validate("longmemeval", path).loaded


@pytest.mark.parametrize("chunk_rows", [1, None])
def test_streamed_report_and_episodes_equal_the_listed_ones(quirky, chunk_rows):
    listed = load_and_validate("longmemeval", quirky)
    streamed = stream_and_validate("longmemeval", quirky, chunk_rows=chunk_rows)
    assert streamed.streamed and listed.report.passed
    same(streamed.report, listed.report)
    assert streamed.report.load["flagged"] == {"session_id_reused_with_other_content": 1, "sessions_sorted_by_date": 2}
    episodes = list(streamed.episodes())
    assert episodes == listed.loaded.episodes and [e.id for e in episodes] == ["q1", "q2", "q3_abs", "q4"]
    assert list(streamed.episodes()) == episodes  # each call reads the file again
    assert [s.id for s in episodes[0].sessions] == ["sB", "sC", "sA"]  # date order
    assert episodes[2].queries[0].evidence_turns == ["sA:2"]  # q3's own has_answer on the shared session
    assert streamed.counts() == {**listed.loaded.counts(), "splits": {"test": 4}}
    assert streamed.warnings() == listed.warnings()


def test_the_published_fixtures_stream_as_they_load():
    fixtures = Path(__file__).parent / "loaders" / "fixtures"
    for name in ("longmemeval_s_fixture.json", "longmemeval_s_quirks.json"):
        listed = load_and_validate("longmemeval", fixtures / name)
        streamed = stream_and_validate("longmemeval", fixtures / name)
        same(streamed.report, listed.report)
        assert list(streamed.episodes()) == listed.loaded.episodes


def test_a_file_over_the_loss_limit_blocks_both_ways(tmp_path):
    """Every session loses a turn of ten (10% > 5%): blocking in the list path and in the streamed one."""
    records = quirky_records()
    for record in records:
        for session in record["haystack_sessions"]:
            session[0]["content"] = ""
    path = write_lme(tmp_path / "longmemeval_m.json", records)
    listed = load_and_validate("longmemeval", path).report
    streamed = stream_and_validate("longmemeval", path)
    assert listed.failed() == ["load_loss_within_limit"] and not listed.passed
    same(streamed.report, listed)
    with pytest.raises(ValidationFailed, match="turns read .* were left out") as info:
        next(streamed.episodes())
    assert info.value.rule == "load_loss_within_limit"
    with pytest.raises(ValidationFailed, match="left out, more than ingest.max_dropped_turn_share"):
        ingest("longmemeval", path, tmp_path / "out", report=True)
    assert not (tmp_path / "out").exists()
    assert json.loads((tmp_path / "out.validation.json").read_text())["blocking_failures"] == ["load_loss_within_limit"]
    relaxed = stream_and_validate("longmemeval", path, config={"ingest": {"max_dropped_turn_share": 0.5}})
    assert relaxed.report.passed


def test_ingest_writes_what_the_list_path_writes(quirky, tmp_path):
    counts = ingest("longmemeval", quirky, tmp_path / "streamed")
    checked = load_and_validate("longmemeval", quirky)
    assert counts == write_canonical(checked.loaded, tmp_path / "listed", extra={"warnings": checked.warnings()})
    for name in ("test.jsonl", COUNTS_FILE):
        assert (tmp_path / "streamed" / name).read_bytes() == (tmp_path / "listed" / name).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["listed", "longmemeval_m.json", "streamed"]


def test_a_failure_while_writing_leaves_the_previous_output(quirky, tmp_path, monkeypatch):
    out = tmp_path / "out"
    ingest("longmemeval", quirky, out)
    before = (out / "test.jsonl").read_bytes()
    lines = []

    def failing(episode):
        lines.append(episode.id)
        if len(lines) == 2:
            raise OSError("disk full")
        return "{}"

    monkeypatch.setattr(ingest_mod, "episode_line", failing)
    with pytest.raises(OSError, match="disk full"):
        ingest("longmemeval", quirky, out)
    assert (out / "test.jsonl").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["longmemeval_m.json", "out"]


@pytest.mark.parametrize("cut", ["inside the second question", "before the closing bracket"])
def test_a_truncated_file_is_one_data_error(quirky, tmp_path, cut, capsys):
    raw = quirky.read_bytes()
    end = raw.index(b'"question_id": "q2"') + 60 if cut.startswith("inside") else raw.rindex(b"]")
    broken = tmp_path / "broken.json"
    broken.write_bytes(raw[:end])
    with pytest.raises(DataError, match="truncated JSON") as info:
        stream_and_validate("longmemeval", broken)
    assert info.value.file == str(broken)
    item = 1 if cut.startswith("inside") else 4
    assert info.value.record.startswith(f"item {item} (near byte ")
    code = cli_main(["ingest", "--source", "longmemeval", "--path", str(broken), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 5 and err.startswith(f"error: file {broken}, record item {item} (near byte ")  # bad data
    assert "Traceback" not in err and "ijson" not in err and not (tmp_path / "o").exists()


def test_invalid_json_names_file_and_byte(tmp_path):
    path = tmp_path / "longmemeval_m.json"
    text = json.dumps(quirky_records())
    path.write_text(text.replace('"question_id": "q3_abs"', '"question_id": q3_abs', 1))
    with pytest.raises(DataError, match="invalid JSON") as info:
        stream_and_validate("longmemeval", path)
    assert info.value.file == str(path) and info.value.record.startswith("item 2 (near byte ")


def test_the_iterator_keeps_no_earlier_episode_alive(quirky):
    streamed = stream_and_validate("longmemeval", quirky)
    it = streamed.episodes()
    first = next(it)
    ref = weakref.ref(first)
    turn = weakref.ref(first.sessions[0].turns[0])
    del first
    second = next(it)
    gc.collect()
    assert second.id == "q2" and ref() is None and turn() is None
    assert [e.id for e in it] == ["q3_abs", "q4"]


def test_the_streaming_reader_keeps_no_earlier_episode_alive(quirky):
    refs = []
    for _, episode in get_streamer("longmemeval")(quirky, LoadResult()):
        gc.collect()
        assert all(r() is None for r in refs)
        refs.append(weakref.ref(episode))
    assert len(refs) == 4


def test_a_file_changed_after_validation_is_refused(quirky):
    streamed = stream_and_validate("longmemeval", quirky)
    write_lme(quirky, quirky_records()[:3])
    os.utime(quirky, ns=(0, 1))
    with pytest.raises(DataError, match="changed since it was validated"):
        next(streamed.episodes())


def test_sources_without_a_streaming_reader_fall_back_to_the_list(tmp_path):
    listed = load_and_validate("locomo", LOCOMO)
    streamed = stream_and_validate("locomo", LOCOMO)
    assert not streamed.streamed and get_streamer("locomo") is None
    same(streamed.report, listed.report)
    assert list(streamed.episodes()) == listed.loaded.episodes
    assert write_streamed(streamed, tmp_path / "a") == write_canonical(
        listed.loaded, tmp_path / "b", extra={"warnings": listed.warnings()})
    assert (tmp_path / "a" / "test.jsonl").read_bytes() == (tmp_path / "b" / "test.jsonl").read_bytes()
