"""Two ``python -m pipelines run benchmark`` at once: the second waits for the first, and the report has
each section once with every file whole (they used to interleave: MDR, G-Long and EMMA sections twice)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from pipelines.data.synthetic import SyntheticConfig, generate, write_splits
from pipelines.stages import STAGES

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("benchmark_stub_run.py")
SECTIONS = ("## Response generation (MDR)", "## Triplet extraction (G-Long extractor)", "## EMMA")


def trained_inputs() -> list[str]:
    """The benchmark stage's inputs that other stages train or write (every declared input but canonical data and
    the benchmark's own shards, which the benchmark_shard stage writes)."""
    return [rel for rel in STAGES["benchmark"].inputs
            if not rel.startswith("data/canonical/") and not rel.startswith("reports/shards/")]


def _project(root: Path) -> Path:
    """A project holding canonical synthetic data, the trained models' folders (empty: the strategies that
    need them are missing) and a synthetic suite of two cheap strategies."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    suite = yaml.safe_load((REPO / "pipelines/evaluate/suites/synthetic.yaml").read_text())
    suite.update(strategies=["no_history", "bm25"], strategy_settings={}, answers=None,  # retrieval only: no model
                 ablation={})
    (root / "suite.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "suite.yaml").write_text(yaml.safe_dump(suite))
    params["benchmark"]["suites"] = [str(root / "suite.yaml")]
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_splits(generate(SyntheticConfig(episodes=6, sessions=3, turns=6, partners=2, queries_per_session=2)),
                 root / "data/canonical/synthetic")
    for rel in trained_inputs():
        (root / rel).mkdir(parents=True, exist_ok=True)
    return root


def test_two_benchmark_runs_at_once_write_each_section_once(tmp_path):
    root = _project(tmp_path / "project")
    env = dict(os.environ, MNEMOS_ROOT=str(root), PYTHONPATH=str(REPO), MNEMOS_STUB_SECONDS="8",  # the merge is quick: the sections keep the first busy
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
               MNEMOS_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri())
    env.pop("MNEMOS_LOCK_TIMEOUT", None)  # the default: the second run waits for the first
    shard = subprocess.run([sys.executable, "-m", "pipelines", "run", "benchmark_shard"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)  # the retrieval the benchmark merges
    assert shard.returncode == 0, shard.stderr[-3000:]
    assert json.loads((root / "reports/shards/0/synthetic/manifest.json").read_text())["complete"] is True
    runs = [subprocess.Popen([sys.executable, str(DRIVER)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = [run.communicate(timeout=600) for run in runs]
    for run, (_, err) in zip(runs, outcomes):
        assert run.returncode == 0, err[-3000:]
    assert sum("stage benchmark waits: its lock" in err and "held by stage benchmark, pid" in err
               for _, err in outcomes) == 1  # one waited for the other, and was told who

    reports = root / "reports"
    md = (reports / "benchmark.md").read_text(encoding="utf-8")
    assert md.count("# Memory benchmark: synthetic") == 1
    for heading in SECTIONS:
        assert md.count(heading) == 1, f"{heading!r} {md.count(heading)} times"
    assert md.rstrip().endswith("## EMMA\n\nstub")
    metrics = json.loads((reports / "metrics.json").read_text(encoding="utf-8"))
    assert set(metrics["synthetic"]) == {"no_history", "bm25", "mdr_generation", "glong_extractor", "emma"}
    assert metrics["synthetic"]["emma"] == {"generation/bleu-1": 3.0}
    lines = (reports / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines and all(json.loads(line)["suite"] == "synthetic" for line in lines)
    with open(reports / "plots/synthetic/recall_at_k.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0][0] == "k" and [r[0] for r in rows[1:]] == ["1", "3", "5", "10"]
    for png in (reports / "plots/synthetic").glob("*.png"):
        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and png.read_bytes().endswith(b"IEND\xaeB`\x82")
    assert not [p for p in reports.rglob("*") if p.name.endswith(".tmp")]  # no temporary left behind
    for out, _ in outcomes:  # each run's summary line names the report it wrote
        assert json.loads(out.strip().splitlines()[-1])["report"] == str(reports / "benchmark.md")


def _sharded_project(root: Path, shards: int) -> Path:
    """``_project`` with more test episodes, a slow strategy (tests/evaluate/slow_benchmark_cli.py) and
    ``benchmark.shards`` set."""
    _project(root)
    suite = yaml.safe_load((root / "suite.yaml").read_text())
    suite["strategies"] = ["no_history", "slow_bm25"]
    (root / "suite.yaml").write_text(yaml.safe_dump(suite))
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["benchmark"]["shards"] = shards
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_splits(generate(SyntheticConfig(episodes=30, sessions=3, turns=6, partners=2, queries_per_session=2)),
                 root / "data/canonical/synthetic")
    return root


def test_shard_partitions_run_side_by_side_resume_when_killed_and_merge_to_the_one_shard_report(tmp_path):
    import signal
    import time

    slow = REPO / "tests" / "evaluate" / "slow_benchmark_cli.py"

    def env_of(root: Path, seconds: str) -> dict:
        return dict(os.environ, MNEMOS_ROOT=str(root), PYTHONPATH=str(REPO), MNEMOS_SLOW_SECONDS=seconds,
                    MNEMOS_STUB_SECTIONS="1", MNEMOS_STUB_SECONDS="0")

    def run(root: Path, *args: str, seconds: str = "0") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(slow), "run", *args, "--no-track"], cwd=REPO,
                              env=env_of(root, seconds), capture_output=True, text=True, timeout=600)

    one = _sharded_project(tmp_path / "one", shards=1)
    for stage in ("benchmark_shard", "benchmark"):
        assert (done := run(one, stage)).returncode == 0, done.stderr[-3000:]

    two = _sharded_project(tmp_path / "two", shards=2)
    refused = run(two, "benchmark_shard")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr   # a ConfigError (pipelines.errors)
    assert "give --partition with one of 0, 1" in refused.stderr
    progress = two / ".cache/benchmark/shards/synthetic/0-of-2/episodes.jsonl"
    runs = {key: subprocess.Popen([sys.executable, str(slow), "run", "benchmark_shard", "--partition", key,
                                   "--no-track"], cwd=REPO, env=env_of(two, "0.3"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for key in ("0", "1")}
    deadline = time.time() + 300
    while time.time() < deadline and runs["0"].poll() is None:
        if progress.is_file() and progress.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert runs["0"].poll() is None, runs["0"].stderr.read()[-2000:]
    os.kill(runs["0"].pid, signal.SIGKILL)  # shard 0 killed after its first episode; shard 1 goes on beside it
    runs["0"].wait()
    _, err = runs["1"].communicate(timeout=600)
    assert runs["1"].returncode == 0, err[-3000:]
    assert not (two / "reports/shards/0").exists()  # a killed shard leaves no declared output
    finished = progress.read_text().count("\n")
    resumed = run(two, "benchmark_shard", "--partition", "0")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming after {finished} finished episode(s)" in resumed.stderr
    assert (merged := run(two, "benchmark")).returncode == 0, merged.stderr[-3000:]

    def figures(root: Path) -> dict:
        metrics = json.loads((root / "reports/metrics.json").read_text(encoding="utf-8"))
        return {s: {n: {k: v for k, v in m.items() if "latency" not in k} for n, m in per.items()}
                for s, per in metrics.items()}

    assert figures(two) == figures(one)
    assert figures(one)["synthetic"]["slow_bm25"]["queries"] > 0
