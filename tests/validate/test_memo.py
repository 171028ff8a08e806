"""pipelines/validate/memo.py: a published file's passing verdict kept by content, and the runs that reuse it.

The same bytes under the same rules are not validated again (great-expectations is not even imported); other
bytes, another loss policy or other code are; a failing verdict is never kept; a kept streamed verdict skips the
whole first pass and still yields the file's episodes; the benchmark CLI keeps its verdicts where it is told.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.data.ingest import load_and_validate, stream_and_validate
from pipelines.errors import DataError, ValidationFailed
from pipelines.validate import memo as verdicts
from tests.data.test_stream_ingest import LOCOMO, quirky_records, write_lme
from tests.validate.test_stream import same


@pytest.fixture
def quirky(tmp_path) -> Path:
    return write_lme(tmp_path / "longmemeval_s.json", quirky_records())


def _refuse(*args, **kwargs):
    raise AssertionError("validated again")


def test_a_passing_verdict_is_kept_and_reused(quirky, tmp_path, monkeypatch):
    memo = tmp_path / "verdicts"
    first = load_and_validate("longmemeval", quirky, memo=memo)
    assert first.report.passed and len(list(memo.glob("*.json"))) == 1
    monkeypatch.setattr("pipelines.validate.validate", _refuse)
    again = load_and_validate("longmemeval", quirky, memo=memo)
    same(again.report, first.report)
    assert again.report.load == first.report.load and again.report.counts == first.report.counts
    assert again.loaded.episodes == first.loaded.episodes  # the file is still loaded: only the checks are skipped
    report = tmp_path / "report.html"
    load_and_validate("longmemeval", quirky, memo=memo, report=report)  # a report asked for is still written
    assert json.loads(report.with_suffix(".json").read_text())["passed"] is True


def test_other_bytes_policy_or_code_validate_again(quirky, tmp_path, monkeypatch):
    memo = tmp_path / "verdicts"
    load_and_validate("longmemeval", quirky, memo=memo)
    key = verdicts.verdict_key("longmemeval", quirky, "generic", 0.05)
    assert (memo / f"{key}.json").is_file()
    records = quirky_records()
    records[0]["question"] = "Another question?"
    write_lme(quirky, records)
    assert verdicts.verdict_key("longmemeval", quirky, "generic", 0.05) != key
    assert verdicts.verdict_key("longmemeval", quirky, "generic", 0.5) != verdicts.verdict_key(
        "longmemeval", quirky, "generic", 0.05)
    monkeypatch.setattr(verdicts, "sources_digest", lambda root, folders: "other code")
    assert verdicts.verdict_key("longmemeval", quirky, "generic", 0.05) != key
    load_and_validate("longmemeval", quirky, memo=memo)
    assert len(list(memo.glob("*.json"))) == 2


def test_a_failing_verdict_is_never_kept(tmp_path):
    records = quirky_records()
    for record in records:
        for session in record["haystack_sessions"]:
            session[0]["content"] = ""   # a turn of ten lost in every session: over the loss limit
    path = write_lme(tmp_path / "longmemeval_s.json", records)
    memo = tmp_path / "verdicts"
    for _ in range(2):
        checked = stream_and_validate("longmemeval", path, memo=memo)
        with pytest.raises(ValidationFailed, match="left out") as info:
            next(checked.episodes())
        assert info.value.rule == "load_loss_within_limit"
    assert not memo.exists() or not list(memo.glob("*.json"))


def test_a_kept_streamed_verdict_skips_the_first_pass(quirky, tmp_path, monkeypatch):
    memo = tmp_path / "verdicts"
    first = stream_and_validate("longmemeval", quirky, memo=memo)
    episodes = list(first.episodes())
    monkeypatch.setattr("pipelines.validate.StreamingValidator", _refuse)
    again = stream_and_validate("longmemeval", quirky, memo=memo)
    assert again.streamed
    same(again.report, first.report)
    assert again.totals == first.totals and again.splits == first.splits and again.counts() == first.counts()
    assert list(again.episodes()) == episodes
    with pytest.raises(ValueError, match="on_episode"):
        stream_and_validate("longmemeval", quirky, memo=memo, on_episode=lambda e: None)


def test_a_source_without_a_streamer_reuses_the_listed_verdict(tmp_path, monkeypatch):
    memo = tmp_path / "verdicts"
    first = stream_and_validate("locomo", LOCOMO, memo=memo)
    monkeypatch.setattr("pipelines.validate.validate", _refuse)
    again = stream_and_validate("locomo", LOCOMO, memo=memo)
    same(again.report, first.report)
    assert list(again.episodes()) == list(first.episodes())


def test_an_unreadable_verdict_is_ignored(quirky, tmp_path):
    memo = tmp_path / "verdicts"
    load_and_validate("longmemeval", quirky, memo=memo)
    (kept,) = memo.glob("*.json")
    kept.write_text("{not json")
    assert load_and_validate("longmemeval", quirky, memo=memo).report.passed
    assert json.loads(kept.read_text())["report"]["passed"] is True  # validated again and kept again


def test_the_benchmark_keeps_its_verdicts_where_it_is_told(quirky, tmp_path, monkeypatch):
    from pipelines.cli import main as cli_main

    def bench(out: str, memo: str) -> dict:
        code = cli_main(["benchmark", "--suite", "longmemeval_s", "--path", str(quirky), "--strategies", "bm25",
                         "--no-answers", "-q", "--out", str(tmp_path / out), "--cache-dir", str(tmp_path / "emb"),
                         "--validated-cache", memo])
        assert code == 0
        return json.loads((tmp_path / out / "metrics.json").read_text())

    none = bench("unkept", "none")
    assert not (tmp_path / "verdicts").exists()
    first = bench("first", str(tmp_path / "verdicts"))
    assert len(list((tmp_path / "verdicts").glob("*.json"))) == 1
    monkeypatch.setattr("pipelines.validate.validate", _refuse)
    again = bench("again", str(tmp_path / "verdicts"))
    strip = {name: {k: v for k, v in values.items() if "latency" not in k} for name, values in
             again["longmemeval_s"].items()}
    assert strip == {name: {k: v for k, v in values.items() if "latency" not in k}
                     for name, values in first["longmemeval_s"].items()}
    assert first["longmemeval_s"].keys() == none["longmemeval_s"].keys()


def test_a_verdict_serves_both_reads_of_the_same_bytes(quirky, tmp_path, monkeypatch):
    memo = tmp_path / "verdicts"
    listed = load_and_validate("longmemeval", quirky, memo=memo)   # kept by the listed read...
    monkeypatch.setattr("pipelines.validate.StreamingValidator", _refuse)
    streamed = stream_and_validate("longmemeval", quirky, memo=memo)   # ...serves the streamed one
    same(streamed.report, listed.report)
    assert streamed.counts() == {**listed.loaded.counts(), "splits": {"test": 4}}
    assert list(streamed.episodes()) == listed.loaded.episodes


def test_a_missing_file_is_still_named_by_the_loader(tmp_path):
    missing = tmp_path / "nowhere" / "longmemeval_s.json"
    for read in (load_and_validate, stream_and_validate):
        with pytest.raises(DataError) as info:
            read("longmemeval", missing, memo=tmp_path / "verdicts")
        assert info.value.file == str(missing)
