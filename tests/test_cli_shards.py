"""``benchmark --shards N --shard I``, ``merge`` and the resume of a killed run, through real processes (issue #29).

- the N shards of a suite, merged, give the report of the unsharded run: metrics.json, benchmark.md and every
  line of queries.jsonl equal field by field (wall times apart: measurements, not figures);
- a benchmark killed with SIGKILL in the middle resumes after the episodes it finished, and reports what an
  uninterrupted run reports;
- bad requests end in one error line on stderr (and a hint), exit 8 (a shard refused) or 2 (a bad option), no traceback, and no report written: a shard index out of
  range, a merge with shards missing (named) or unfinished, shards of another configuration or other data.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._cli import REPO, run_cli, tmp_project

SMALL = ["--set", "synthetic.episodes=30", "--set", "synthetic.sessions=3"]  # 30 episodes: 5 in the test split
SLOW_CLI = REPO / "tests" / "evaluate" / "slow_benchmark_cli.py"


def _bench(out: Path, *extra: str, strategies: str = "no_history,bm25,long_context") -> list[str]:
    return ["benchmark", "--suite", "synthetic",
        "--strategies", strategies, "--out", str(out), "--no-answers", "-q", *SMALL, *extra]


def _without_times(obj):
    """``obj`` without wall-time measurements (latency_ms*, *_ms, seconds): the rest must be equal."""
    if isinstance(obj, dict):
        return {k: _without_times(v) for k, v in obj.items()
                if not (k.startswith("latency_ms") or k.endswith("_ms") or k == "seconds")}
    if isinstance(obj, list):
        return [_without_times(v) for v in obj]
    return obj


def _markdown_without_times(text: str) -> str:
    """benchmark.md without its tables' wall-time column (``latency_ms_p50``)."""
    out, column = [], None
    for line in text.splitlines():
        cells = line.split(" | ") if line.startswith("|") else None
        if cells is not None and "latency_ms_p50" in cells:
            column = cells.index("latency_ms_p50")
        elif cells is None:
            column = None
        out.append(" | ".join(c for i, c in enumerate(cells) if i != column) if column is not None else line)
    return "\n".join(out)


def test_markdown_without_times_drops_the_latency_column_alone():
    table = "x\n| s | r | latency_ms_p50 | queries |\n| --- | ---: | ---: | ---: |\n| a | 1 | 0.031 | 3 |\n\n| s | q |"
    assert _markdown_without_times(table) == "x\n| s | r | queries |\n| --- | ---: | ---: |\n| a | 1 | 3 |\n\n| s | q |"


def _report(out: Path) -> tuple[dict, str, list[dict]]:
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    lines = [json.loads(line) for line in (out / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    return (_without_times(metrics), _markdown_without_times((out / "benchmark.md").read_text(encoding="utf-8")),
            _without_times(lines))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli_shards")
    root = tmp_project(tmp / "project")
    whole = run_cli(_bench(tmp / "whole"), root)
    assert whole.returncode == 0, whole.stderr[-3000:]
    return root, tmp


def test_merged_shards_equal_the_unsharded_run_field_by_field(project):
    root, tmp = project
    out = tmp / "sharded"
    for i in range(3):
        proc = run_cli(_bench(out, "--shards", "3", "--shard", str(i)), root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = json.loads(proc.stdout.strip().splitlines()[-1])
        assert line["shard"] == f"{i}-of-3" and line["episodes"] >= 1
        assert not (out / "metrics.json").exists()  # a shard writes its episodes, never a report
    merged = run_cli(["merge", *_bench(out, "--shards", "3")[1:]], root)
    assert merged.returncode == 0, merged.stderr[-3000:]
    metrics, markdown, queries = _report(out)
    w_metrics, w_markdown, w_queries = _report(tmp / "whole")
    assert metrics == w_metrics
    assert markdown == w_markdown
    assert len(queries) == len(w_queries) > 0
    for got, want in zip(queries, w_queries):
        assert got == want
    # the episodes were dealt round-robin: shard i holds positions i, i + 3, ...
    positions = {i: [json.loads(x)["position"] for x in
                     (out / "shards" / "synthetic" / f"{i}-of-3" / "episodes.jsonl").read_text().splitlines()]
                 for i in range(3)}
    assert all(p % 3 == i for i, ps in positions.items() for p in ps)
    assert sorted(p for ps in positions.values() for p in ps) == list(range(sum(map(len, positions.values()))))


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 8) -> str:
    """The one ``error:`` line of a refused command, exit ``code`` (pipelines.errors: 8 a shard refused, 2 a bad
    option or configuration)."""
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_shard_index_out_of_range_is_one_line(project):
    root, tmp = project
    proc = run_cli(_bench(tmp / "range", "--shards", "2", "--shard", "2"), root)
    _one_line_error(proc, "shard index 2 is out of range for 2 shard(s)")
    assert not (tmp / "range").exists()
    proc = run_cli(_bench(tmp / "range", "--shards", "0"), root)
    _one_line_error(proc, "at least 1")
    proc = run_cli(_bench(tmp / "range", "--shard", "0"), root)
    _one_line_error(proc, "--shard needs --shards", code=2)


def test_merge_names_missing_and_unfinished_shards(project):
    root, tmp = project
    out = tmp / "partial"
    assert run_cli(_bench(out, "--shards", "3", "--shard", "1"), root).returncode == 0
    proc = run_cli(["merge", *_bench(out, "--shards", "3")[1:]], root)
    _one_line_error(proc, "missing shard(s) 0-of-3, 2-of-3")
    assert not (out / "metrics.json").exists()
    for i in (0, 2):
        assert run_cli(_bench(out, "--shards", "3", "--shard", str(i)), root).returncode == 0
    manifest = out / "shards" / "synthetic" / "2-of-3" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "complete": False}))  # as a shard killed before its end leaves it
    proc = run_cli(["merge", *_bench(out, "--shards", "3")[1:]], root)
    _one_line_error(proc, "2-of-3", "did not finish")


def test_merge_refuses_shards_of_another_configuration_or_data(project):
    root, tmp = project
    out = tmp / "mixed"
    assert run_cli(_bench(out, "--shards", "2", "--shard", "0"), root).returncode == 0
    other = run_cli(_bench(out, "--shards", "2", "--shard", "1", "--set", "synthetic.seed=7"), root)
    assert other.returncode == 0, other.stderr[-2000:]
    proc = run_cli(["merge", *_bench(out, "--shards", "2")[1:]], root)
    # the synthetic data's seed: params.yaml's in shard 0, the --set in shard 1, with both values
    _one_line_error(proc, "different runs",
                    f"seed in {root / 'params.yaml'} (the synthetic data): 2022 in shard 0-of-2",
                    "--set synthetic.seed (the synthetic data): 7 in shard 1-of-2")
    proc = run_cli(["merge", *_bench(out, "--shards", "2", strategies="no_history,bm25")[1:]], root)
    assert "different runs" in proc.stderr or "other settings" in proc.stderr
    assert not (out / "metrics.json").exists()


def test_a_refused_merge_names_the_options_that_differ_with_both_values(project):
    """Issue #48: each differing value named as the user gave it (the option, the --set key, the suite file's key),
    with the value of each side: never an internal part name, and --max-episodes is part of a run."""
    root, tmp = project
    out = tmp / "named"
    k1 = "benchmark.strategy_settings.bm25.k1"
    assert run_cli(_bench(out, "--shards", "2", "--shard", "0", "--set", f"{k1}=0.5"), root).returncode == 0
    assert run_cli(_bench(out, "--shards", "2", "--shard", "1", "--max-episodes", "4"), root).returncode == 0
    suite_file = REPO / "pipelines" / "evaluate" / "suites" / "synthetic.yaml"
    error = _one_line_error(run_cli(["merge", *_bench(out, "--shards", "2")[1:]], root),
                            f"--set {k1}: 0.5 in shard 0-of-2, not set in shard 1-of-2",
                            f"suite file {suite_file}, key 'max_episodes': null in shard 0-of-2; "
                            f"--max-episodes: 4 in shard 1-of-2")
    assert "differ in: strategies" not in error
    assert run_cli(_bench(out, "--shards", "2", "--shard", "0", "--max-episodes", "4"), root).returncode == 0
    # the shards agree; this command does not: its --strategies and --max-episodes against the shards'
    error = _one_line_error(run_cli(["merge", *_bench(out, "--shards", "2", strategies="no_history,bm25")[1:]], root),
                            'the strategies that run): ["no_history", "bm25", "long_context"] in the shards, '
                            '["no_history", "bm25"] in this command',
                            "--max-episodes: 4 in the shards; suite file")
    assert error.count("--strategies") == 1
    assert not (out / "metrics.json").exists()


LOCOMO = REPO / "tests" / "data" / "loaders" / "fixtures" / "locomo10_fixture.json"


def test_where_the_caches_live_is_no_part_of_a_run(tmp_path):
    """Issue #48: LoCoMo's shards run with --cache-dir (the embedding cache), --llm-cache-dir (the memory writers'
    response cache) and --validated-cache, merged by the same command without them, report what the unsharded run
    (default caches) reports: a cache's location changes no result, and the merge is not refused."""
    root = tmp_project(tmp_path / "project")
    base = ["--suite", "locomo", "--path", str(LOCOMO), "--strategies", "bm25,dense,session_summary", "--no-answers",
            "-q"]
    caches = ["--cache-dir", str(tmp_path / "D"), "--llm-cache-dir", str(tmp_path / "L"),
              "--validated-cache", str(tmp_path / "V")]
    whole = run_cli(["benchmark", *base, "--out", str(tmp_path / "whole")], root)
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "sharded"
    for i in range(2):
        shard = run_cli(["benchmark", *base, *caches, "--out", str(out), "--shards", "2", "--shard", str(i)], root)
        assert shard.returncode == 0, shard.stderr[-3000:]
    assert list((tmp_path / "D").iterdir()), "the shards' embeddings went to --cache-dir"
    merged = run_cli(["merge", *base, "--out", str(out), "--shards", "2"], root)
    assert merged.returncode == 0, merged.stderr[-3000:]
    metrics, markdown, queries = _report(out)
    assert set(metrics["locomo"]) >= {"bm25", "dense", "session_summary"}
    assert all("missing" not in metrics["locomo"][s] for s in ("bm25", "dense", "session_summary"))
    assert (metrics, markdown, queries) == _report(tmp_path / "whole")


def test_a_killed_benchmark_resumes_after_its_finished_episodes(tmp_path):
    root = tmp_project(tmp_path / "project")
    args = ["benchmark", "--suite", "synthetic", "--strategies", "slow_bm25,no_history", "--no-answers", "-q",
            "--set", "synthetic.episodes=30", "--set", "synthetic.sessions=3"]
    env = dict(os.environ, MNEMOS_ROOT=str(root), PYTHONPATH=str(REPO), MNEMOS_SLOW_SECONDS="0.2")
    out = tmp_path / "killed"
    episodes = out / "shards" / "synthetic" / "0-of-1" / "episodes.jsonl"
    proc = subprocess.Popen([sys.executable, str(SLOW_CLI), *args, "--out", str(out)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if episodes.is_file() and len(episodes.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(episodes.read_text().splitlines())
    assert finished >= 2
    assert not (out / "metrics.json").exists()
    again = subprocess.run([sys.executable, str(SLOW_CLI), *args, "--out", str(out)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming after {finished} finished episode(s)" in again.stderr
    whole = subprocess.run([sys.executable, str(SLOW_CLI), *args, "--out", str(tmp_path / "whole")], cwd=REPO,
                           env={**env, "MNEMOS_SLOW_SECONDS": "0"}, capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert _report(out) == _report(tmp_path / "whole")


LONGMEMEVAL = REPO / "tests" / "fixtures" / "longmemeval_official" / "longmemeval_tiny.json"


def test_a_streamed_suite_reports_what_the_listed_one_does_and_answers_nothing(tmp_path):
    root = tmp_project(tmp_path / "project")
    base = ["benchmark", "--suite", "longmemeval_s", "--path", str(LONGMEMEVAL), "--no-answers", "-q",
            "--strategies", "bm25,long_context"]
    listed = run_cli([*base, "--out", str(tmp_path / "listed")], root)
    streamed = run_cli([*base, "--out", str(tmp_path / "streamed"), "--stream", "--shards", "2", "--shard", "1"], root)
    assert listed.returncode == 0 and streamed.returncode == 0, listed.stderr[-2000:] + streamed.stderr[-2000:]
    streamed = run_cli([*base, "--out", str(tmp_path / "streamed"), "--stream", "--shards", "2", "--shard", "0"], root)
    assert streamed.returncode == 0, streamed.stderr[-2000:]
    merged = run_cli(["merge", *base[1:], "--out", str(tmp_path / "streamed"), "--stream", "--shards", "2"], root)
    assert merged.returncode == 0, merged.stderr[-2000:]
    assert _report(tmp_path / "streamed") == _report(tmp_path / "listed")
    refused = run_cli(["benchmark", "--suite", "longmemeval_m", "--path", str(LONGMEMEVAL), "--out",
                       str(tmp_path / "m"), "-q"], root)
    _one_line_error(refused, "streams its data", "--no-answers", code=2)
