"""Outputs that cannot be written outside a shard's folder: the benchmark report and the response cache.

- The report (:func:`pipelines.evaluate.report.write_report`) whose folder or one of whose files cannot be written (a
  path under a regular file, a full disk while writing metrics.json, queries.jsonl, a plot or benchmark.md) is a
  :class:`~pipelines.evaluate.report.ReportWriteError` naming the file, the cause and its errno name: the CLI ends in
  one ``error:`` line and a ``hint:``, exit 8 (as a shard that cannot be written: the benchmark's --out), and the
  report already in the folder stays whole, every file as it was (none of the new one is moved in). A writer killed
  mid-report leaves its hidden staging folder; the next report into the folder removes it, never a live writer's.
- A response cache (``--llm-cache-dir``) that cannot be written, from the start (a path under a regular file) or once
  its disk is full, does not stop the run: the answers are computed already, so it goes on without storing them, with
  one warning naming the cache folder and the cause, and reports what a run with a working cache reports.

The full disk is the test double of tests/evaluate/test_shard_faults.py (``FULL_DISK``): every write under a folder
fails with ENOSPC.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pipelines.evaluate.report import ReportWriteError, write_report
from pipelines.evaluate.suite import Suite
from pipelines.evaluate.suite_run import evaluate_suite
from pipelines.llm import CachedLLM, GenerationSettings, ResponseCache
from pipelines.llm.batch_server import BatchingServer
from tests._cli import REPO, run_cli, tmp_project
from tests.evaluate.test_shard_faults import FULL_DISK, Counting, _env
from tests.llm.test_cache import Echo
from tests.test_cli_shards import _one_line_error, _report

SMALL = ["--set", "synthetic.episodes=30", "--set", "synthetic.sessions=3"]  # 5 test episodes
ENOSPC = f"{os.strerror(errno.ENOSPC)} (ENOSPC)"
ENOTDIR = f"{os.strerror(errno.ENOTDIR)} (ENOTDIR)"


def _full_disk(tmp_path: Path, root: Path, args: list[str], under: Path) -> subprocess.CompletedProcess:
    """``python -m pipelines ARGS`` with every write under ``under`` failing with ENOSPC (FULL_DISK, no room)."""
    script = tmp_path / "full_disk_cli.py"
    script.write_text(FULL_DISK.format(repo=str(REPO)), encoding="utf-8")
    return subprocess.run([sys.executable, str(script), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=_env(root, FULL_DISK_UNDER=str(under), FULL_DISK_ROOM="0"))


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (but the shards' folder) by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] != "shards"}


# --- the benchmark report ----------------------------------------------------------------------------------------

def _bench(out: Path, *extra: str) -> list[str]:
    return ["benchmark", "--suite", "synthetic", "--strategies", "no_history,bm25", "--out", str(out), "--no-answers",
            "-q", *SMALL, *extra]


def test_a_full_disk_while_writing_the_report_is_one_line_and_keeps_the_last_report(tmp_path):
    """Two shards, merged into a report; merged again on a full disk: exit 8, one error line naming metrics.json (the
    first file written) and the cause, a hint, no traceback, and every file of the first report as it was."""
    root = tmp_project(tmp_path / "project")
    out = tmp_path / "out"
    for i in range(2):
        assert run_cli(_bench(out, "--shards", "2", "--shard", str(i)), root).returncode == 0
    merged = run_cli(_bench(out, "--shards", "2"), root)
    assert merged.returncode == 0, merged.stderr[-3000:]
    before = _files(out)
    assert {"benchmark.md", "metrics.json", "queries.jsonl", "plots/synthetic/recall_at_k.png"} <= set(before)

    proc = _full_disk(tmp_path, root, _bench(out, "--shards", "2"), under=out)
    _one_line_error(proc, f"cannot write {out / 'metrics.json'}: {ENOSPC}")
    assert "hint: " in proc.stderr
    assert _files(out) == before, "a failed report changed the last one written"


def test_an_unsharded_report_whose_plots_folder_cannot_be_made_writes_nothing_of_it(tmp_path):
    """An unsharded run: --out under a regular file stops at the episodes' folder (exit 8, one line); with ``plots`` a
    regular file in --out, the episodes run and the report cannot be written: exit 8, one error line naming the first
    plot and ENOTDIR, and neither metrics.json, queries.jsonl nor benchmark.md written as if the report were whole."""
    root = tmp_project(tmp_path / "project")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    proc = run_cli(_bench(blocker / "out"), root)
    _one_line_error(proc, str(blocker / "out"), "Not a directory")

    out = tmp_path / "out"
    out.mkdir()
    (out / "plots").write_text("not a folder\n")
    proc = run_cli(_bench(out), root)
    _one_line_error(proc, f"cannot write {out / 'plots' / 'synthetic' / 'recall_at_k.png'}: {ENOTDIR}")
    assert "hint: " in proc.stderr
    assert _files(out) == {"plots": b"not a folder\n"}
    assert not list(out.glob(".*"))      # no temporary file or folder left


@pytest.fixture(scope="module")
def suite_run():
    from tests.evaluate.conftest import build_episode

    spec = Suite(name="synthetic", version=1, source="canonical", strategies=("no_history", "bm25"), ks=(1, 3),
                 budget_tokens=100)
    return evaluate_suite(spec, [build_episode()], show_progress=False)


def test_a_report_under_a_regular_file_is_a_report_write_error(suite_run, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    with pytest.raises(ReportWriteError, match=re.escape(f"cannot write {blocker / 'out'}: {ENOTDIR}")) as caught:
        write_report([suite_run], blocker / "out")
    assert caught.value.exit_code == 8 and caught.value.hint
    assert blocker.read_text() == "not a folder\n"


@pytest.mark.parametrize("name", ["metrics.json", "queries.jsonl", "recall_at_k.png", "tokens_vs_recall.png",
                                  "recall_at_k.csv", "benchmark.md"])
def test_a_full_disk_at_any_file_of_the_report_keeps_the_last_report_whole(suite_run, tmp_path, monkeypatch, name):
    """A report written whole, then again on a disk that fills when the file ``name`` is created: a ReportWriteError
    naming that file (where it goes, not a temporary file) and the cause; every file of the first report as it was,
    nothing of the second moved in, no temporary file or folder left."""
    out = tmp_path / "report"
    first = write_report([suite_run], out)
    before = _files(out)
    assert set(first["files"]) >= {"markdown", "metrics", "queries", "plots/synthetic/recall_at_k.png"}
    assert all(Path(p).is_file() and Path(p).parent.parent.parent == out for p in first["plots"])
    real = tempfile.mkstemp

    def mkstemp(*args, prefix="", **kwargs):
        if prefix.startswith(f".{name}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(ReportWriteError) as caught:
        write_report([suite_run], out)
    target = next(p for p in [out / "metrics.json", out / "queries.jsonl", out / "benchmark.md",
                              *(Path(p) for p in first["plots"])] if p.name == name)
    assert f"cannot write {target}: {ENOSPC}" in str(caught.value)
    assert _files(out) == before
    assert not [p for p in out.rglob(".*")], "a failed report left a temporary file or folder"
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == [], "a plot that could not be written left its figure open"


STAGING_WRITER = """
import sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from pipelines.evaluate.report import _StagedReport
with _StagedReport(Path({out!r})) as report:
    with report.writing("metrics.json") as path:
        path.write_text("half of a report")
    print(report.folder, flush=True)
    time.sleep(120)
"""


def _staging_writer(out: Path) -> tuple[subprocess.Popen, Path]:
    """A report writer stopped mid-report (sleeping with its staging folder made): the process and its folder."""
    writer = subprocess.Popen([sys.executable, "-c", STAGING_WRITER.format(repo=str(REPO), out=str(out))],
                              stdout=subprocess.PIPE, text=True)
    return writer, Path(writer.stdout.readline().strip())


def test_the_next_report_removes_what_a_killed_writer_left_and_never_a_live_writers_folder(suite_run, tmp_path):
    out = tmp_path / "report"
    live, working = _staging_writer(out)                   # a writer into the folder, still at work
    killed, left = _staging_writer(out)                    # another one, then SIGKILLed mid-report:
    killed.kill()                                          # its staging folder stays behind
    killed.wait()
    old = out / ".report.unlocked-old.tmp"                 # made before its lock (a kill in between), long ago
    old.mkdir()
    os.utime(old, (1_000_000_000, 1_000_000_000))
    new = out / ".report.unlocked-new.tmp"                 # the same, a moment ago: maybe a writer about to lock it
    new.mkdir()
    try:
        assert left.is_dir() and working.is_dir()
        write_report([suite_run], out)
        assert not left.exists() and not old.exists()      # the killed writer's folder, and the old unlocked one
        assert working.is_dir() and new.is_dir()           # the live writer's, and the new unlocked one
        assert (out / "metrics.json").is_file() and "half" not in (out / "metrics.json").read_text()
    finally:
        live.kill()
        live.wait()


def test_a_writer_moving_its_files_into_place_keeps_its_folder_from_another_writers_sweep(suite_run, tmp_path,
                                                                                          monkeypatch):
    """Another writer's report starting while this one renames its files in: that writer's sweep must find this
    folder's lock still held (before, the lock was let go before the renames, and the sweep took the folder)."""
    from pipelines.evaluate import report as report_module

    out = tmp_path / "report"
    real, swept = os.replace, []

    def replace_after_a_sweep(src, dst):
        if not swept and ".report." not in str(dst):       # a file moved into place (not a write inside the folder)
            report_module._sweep_abandoned(out, keep=out / ".report.another.tmp")   # another writer starts
            swept.append(src)
        return real(src, dst)

    monkeypatch.setattr(report_module.os, "replace", replace_after_a_sweep)
    written = write_report([suite_run], out)
    assert swept and (out / "metrics.json").is_file() and all(Path(p).is_file() for p in written["plots"])
    assert not [p for p in out.rglob(".*")]


# --- the response cache ------------------------------------------------------------------------------------------

def _cache_warnings(records) -> list[str]:
    return [r.getMessage() for r in records if r.levelno >= logging.WARNING and "response cache" in r.getMessage()]


def test_a_cache_that_cannot_be_written_warns_once_and_answers_as_without_it(tmp_path, caplog):
    """A cache folder under a regular file: two models on it, two batches each, answer as they would with no cache
    (nothing stored, so the second batch is asked again), with one warning in all naming the folder and the cause."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    folder = blocker / "responses"
    batch = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
    settings = GenerationSettings(max_new_tokens=4)
    reference = Echo().generate(batch, settings)
    with caplog.at_level(logging.INFO, logger="mnemos"):
        for name in ("reader", "judge"):
            backend = Echo(name)
            llm = CachedLLM(backend, ResponseCache(folder))
            for _ in range(2):
                assert [c.text for c in llm.generate(batch, settings)] == [c.text for c in reference]
            assert len(backend.asked) == 6
            assert llm.stats()["hits"] == 0 and llm.stats()["misses"] == 6
            assert llm.forget(batch, settings) == 0
    warnings = _cache_warnings(caplog.records)
    assert len(warnings) == 1, warnings
    assert str(folder) in warnings[0] and ENOTDIR in warnings[0]
    assert blocker.read_text() == "not a folder\n"


def _summaries(server: BatchingServer, out: Path, cache: Path) -> list[str]:
    """A synthetic run whose session_summary strategy asks ``server`` for every session's summary."""
    llm = f"{{backend: openai, base_url: '{server.base_url}', model: counting, concurrency: 2, max_retries: 0}}"
    return ["benchmark", "--suite", "synthetic", "--strategies", "session_summary,bm25", "--no-answers", "-q", *SMALL,
            "--set", "benchmark.strategy_settings.session_summary.summaries=llm",
            "--set", f"benchmark.strategy_settings.session_summary.summary_llm={llm}",
            "--out", str(out), "--llm-cache-dir", str(cache)]


def test_a_full_or_unmakeable_llm_cache_goes_on_with_one_warning_and_the_same_figures(tmp_path):
    """The same run with a working --llm-cache-dir, one whose disk is full and one under a regular file: the last two
    exit 0 with one warning line naming the cache folder and the cause, and report what the first reports."""
    root = tmp_project(tmp_path / "project")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    with BatchingServer(Counting(), "counting", port=0, batch_size=4, gather_s=0.01) as server:
        good = run_cli(_summaries(server, tmp_path / "good", tmp_path / "cache"), root)
        assert good.returncode == 0, good.stderr[-3000:]
        full_cache = tmp_path / "full-cache"
        full = _full_disk(tmp_path, root, _summaries(server, tmp_path / "full", full_cache), under=full_cache)
        under = run_cli(_summaries(server, tmp_path / "under", blocker / "cache"), root)
    assert len(ResponseCache(tmp_path / "cache" / "responses")) > 0
    for proc, folder, cause in ((full, full_cache / "responses", ENOSPC), (under, blocker / "cache" / "responses",
                                                                         ENOTDIR)):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line and "response cache" in line]
        assert len(warnings) == 1, warnings
        assert str(folder) in warnings[0] and cause in warnings[0]
    assert len(ResponseCache(full_cache / "responses")) == 0
    assert _report(tmp_path / "full") == _report(tmp_path / "good")
    assert _report(tmp_path / "under") == _report(tmp_path / "good")
