"""``python -m pipelines run`` with several stages: one command for a chain a user would otherwise type as
``run a && run b`` (the documented command that trains both retrievers on a user's files, for one): the stages
run in the order given with the same ``--set``, one JSON line each, and every name is looked up before the first
stage runs."""

from __future__ import annotations

import json

from tests._cli import run_cli, tmp_project

SMALL = ["--set", "synthetic.episodes=6", "--set", "synthetic.sessions=2", "--no-track"]


def test_several_stages_run_in_the_order_given_with_one_json_line_each(tmp_path):
    root = tmp_project(tmp_path / "project")
    proc = run_cli(["run", "synthetic", "ingest_synthetic", *SMALL], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    assert [line["stage"] for line in lines] == ["synthetic", "ingest_synthetic"]
    assert lines[0]["episodes_test"] >= 1                       # each stage's own figures, as `run` alone prints
    assert (root / "data/canonical/synthetic/test.jsonl").exists()   # the second ran on what the first wrote
    alone = run_cli(["run", "synthetic", *SMALL], root)
    assert "stage" not in json.loads(alone.stdout.strip().splitlines()[-1])   # one stage: the line it always was


def test_an_unknown_stage_anywhere_refuses_before_the_first_runs(tmp_path):
    root = tmp_project(tmp_path / "project")
    proc = run_cli(["run", "synthetic", "ingest_synthetc", *SMALL], root)
    assert proc.returncode == 3 and "unknown stage 'ingest_synthetc'" in proc.stderr, proc.stderr[-3000:]
    assert not (root / "data").exists()


def test_a_failing_stage_stops_the_ones_after_it(tmp_path):
    root = tmp_project(tmp_path / "project")
    proc = run_cli(["run", "ingest_synthetic", "synthetic", *SMALL], root)   # ingest before its input exists
    assert proc.returncode == 4, proc.stderr[-3000:]             # a missing input (pipelines.errors.EXIT_CODES)
    assert "data/raw/synthetic" in proc.stderr and not proc.stdout.strip()
    assert not (root / "data/raw/synthetic").exists()            # the stage after it never ran


def test_partition_takes_one_stage(tmp_path):
    root = tmp_project(tmp_path / "project")
    proc = run_cli(["run", "synthetic", "benchmark_shard", "--partition", "0", *SMALL], root)
    assert proc.returncode == 2 and "--partition names a partition of one stage" in proc.stderr
    assert not (root / "data").exists()
