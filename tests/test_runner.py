"""run_stage: config, outputs cleaned on failure, blocking checks, MLflow run per execution."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipelines.errors import DataError, ValidationFailed
from pipelines.registry import CheckOutcome, StageResult
from pipelines.runner import run_stage
from tests._one_registry import demo_stage

REPO = Path(__file__).resolve().parents[1]


def make_stage(fn, **kw):
    return demo_stage(fn, "out/demo.json", **kw)


def test_stage_gets_resolved_config_and_logs_one_run(registry, tmp_path, mlflow_store):
    seen = {}

    def fn(ctx):
        seen.update(ctx.config)
        ctx.path("out/demo.json").parent.mkdir(parents=True, exist_ok=True)
        ctx.path("out/demo.json").write_text(json.dumps({"ok": 1}))
        return StageResult(metadata={"rows": 3}, metrics={"score": 0.5})

    registry["demo"] = make_stage(fn)
    result = run_stage("demo", {"benchmark": {"embedding_batch_size": 7}}, root=tmp_path)
    assert seen["benchmark"]["embedding_batch_size"] == 7 and seen["profile"] == "tiny"
    assert result.metadata["rows"] == 3
    client = MlflowClient(mlflow_store)
    runs = client.search_runs([client.get_experiment_by_name("mnemos-data").experiment_id])
    assert len(runs) == 1
    assert runs[0].data.metrics == {"score": 0.5}
    assert runs[0].data.params["benchmark.embedding_batch_size"] == "7"
    assert runs[0].info.run_name == "demo-tiny"


def test_failure_leaves_no_partial_output(registry, tmp_path):
    def fn(ctx):
        ctx.path("out/demo.json").parent.mkdir(parents=True, exist_ok=True)
        ctx.path("out/demo.json").write_text("half")
        raise RuntimeError("crash midway")

    registry["demo"] = make_stage(fn)
    with pytest.raises(RuntimeError):
        run_stage("demo", root=tmp_path, track=False)
    assert not (tmp_path / "out" / "demo.json").exists()


def test_blocking_check_raises_naming_rule_and_record_and_cleans(registry, tmp_path):
    def fn(ctx):
        ctx.path("out/demo.json").parent.mkdir(parents=True, exist_ok=True)
        ctx.path("out/demo.json").write_text("{}")
        bad = CheckOutcome("evidence_turns_resolve", passed=False, count=2,
                           examples=["data/x.jsonl line 3: evidence turn 'e1:S1:T9' does not exist"])
        warn = CheckOutcome("short_utterance", passed=False, blocking=False, count=1)
        return StageResult(checks=[bad, warn, CheckOutcome("ids_unique", passed=True)])

    registry["demo"] = make_stage(fn)
    with pytest.raises(ValidationFailed) as err:
        run_stage("demo", root=tmp_path, track=False)
    msg = str(err.value)
    assert "evidence_turns_resolve" in msg and "data/x.jsonl line 3" in msg and "2 record" in msg
    assert not (tmp_path / "out" / "demo.json").exists()
    # Dagster reports the checks itself: no raise, but still no output left behind.
    result = run_stage("demo", root=tmp_path, track=False, enforce_checks=False)
    assert [c.passed for c in result.checks] == [False, False, True]
    assert not (tmp_path / "out" / "demo.json").exists()


def test_non_blocking_failure_keeps_outputs(registry, tmp_path):
    def fn(ctx):
        ctx.path("out/demo.json").parent.mkdir(parents=True, exist_ok=True)
        ctx.path("out/demo.json").write_text("{}")
        return StageResult(checks=[CheckOutcome("short_utterance", passed=False, blocking=False, count=1)])

    registry["demo"] = make_stage(fn)
    run_stage("demo", root=tmp_path, track=False)
    assert (tmp_path / "out" / "demo.json").exists()


def test_missing_input_names_the_producing_stage(registry, tmp_path):
    registry["make"] = make_stage(lambda ctx: StageResult(), name="make", outputs=("data/a",))
    registry["use"] = make_stage(lambda ctx: StageResult(), name="use", inputs=("data/a",), outputs=())
    with pytest.raises(DataError, match="run stage make first"):
        run_stage("use", root=tmp_path, track=False)


def test_non_zero_rank_does_not_track(registry, tmp_path, mlflow_store, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    registry["demo"] = make_stage(lambda ctx: StageResult(metadata={"tracker": ctx.tracker}), outputs=())
    assert run_stage("demo", root=tmp_path).metadata["tracker"] is None


@pytest.mark.parametrize("overrides,params,message", [
    ({"synthetic": {"episodes": -3}}, "", "synthetic.episodes must be at least 1, got -3"),
    ({"synthetic": {"episode": 48}}, "", "unknown key synthetic.episode; did you mean synthetic.episodes?"),
    ({}, "emma: {formats: {turn_tag: roles}}\n",
     "unknown key emma.formats.turn_tag; did you mean emma.formats.turn_tags?"),
])
def test_a_refused_config_leaves_the_outputs_and_the_stage_alone(registry, tmp_path, overrides, params, message):
    """The whole config is checked (even sections the stage does not read) before any output is removed."""
    from pipelines.errors import ConfigError

    (tmp_path / "params.yaml").write_text("profile: tiny\nseed: 1\n" + params)
    (tmp_path / "out").mkdir()
    (tmp_path / "out/demo.json").write_text("kept")
    calls = []
    registry["demo"] = make_stage(lambda ctx: calls.append(1) or StageResult())
    with pytest.raises(ConfigError) as err:
        run_stage("demo", overrides, root=tmp_path, track=False)
    assert message in str(err.value)
    assert (tmp_path / "out/demo.json").read_text() == "kept" and not calls


def test_second_run_refuses_without_touching_the_running_ones_outputs(registry, tmp_path):
    from pipelines.locks import StageBusy, stage_lock

    registry["demo"] = make_stage(lambda ctx: StageResult())
    out = tmp_path / "out" / "demo.json"
    out.parent.mkdir()
    out.write_text("being written by the first run")
    with stage_lock(tmp_path, registry["demo"], registry.values()):  # the first run holds the stage
        with pytest.raises(StageBusy, match=f"held by stage demo, pid {os.getpid()}"):
            run_stage("demo", root=tmp_path, track=False, lock_timeout=0)
    assert out.read_text() == "being written by the first run"
    run_stage("demo", root=tmp_path, track=False, lock_timeout=0)  # free again: runs, and cleans first
    assert not out.exists()


def test_stages_sharing_outputs_exclude_each_other(registry, tmp_path, monkeypatch):
    from pipelines.locks import StageBusy, stage_lock

    registry["bench"] = make_stage(lambda ctx: StageResult(), name="bench", outputs=("reports/benchmark.md",))
    registry["summary"] = make_stage(lambda ctx: StageResult(), name="summary", outputs=("reports",))
    registry["other"] = make_stage(lambda ctx: StageResult(), name="other", outputs=("data/other",))
    with stage_lock(tmp_path, registry["bench"], registry.values()):
        with pytest.raises(StageBusy, match="held by stage bench"):
            run_stage("summary", root=tmp_path, track=False, lock_timeout=0)
        monkeypatch.setenv("MNEMOS_LOCK_TIMEOUT", "0")  # the default of every view
        with pytest.raises(StageBusy):
            run_stage("bench", root=tmp_path, track=False)
        run_stage("other", root=tmp_path, track=False)  # disjoint outputs: side by side
        monkeypatch.setenv("RANK", "1")  # a launch's other ranks neither lock nor clean: their rank 0 does
        (tmp_path / "reports").mkdir()
        (tmp_path / "reports" / "benchmark.md").write_text("rank 0's")
        run_stage("bench", root=tmp_path, track=False)
        assert (tmp_path / "reports" / "benchmark.md").read_text() == "rank 0's"


KILLED_CHILD = """
import sys, time, types
from pathlib import Path

from pipelines.registry import Stage, StageResult

def sleep_forever(ctx):
    Path(sys.argv[2]).write_text("started")
    time.sleep(600)
    return StageResult()

from tests._one_registry import install  # this one stage instead of the project's
install({"demo": Stage(name="demo", group="data", description="demo stage", fn=sleep_forever, inputs=(),
                       outputs=("out/demo.json",), params=("benchmark",))})
from pipelines.runner import run_stage
run_stage("demo", root=Path(sys.argv[1]))
"""


def test_a_run_left_running_by_a_killed_process_is_marked_killed_by_the_next(registry, tmp_path, mlflow_store):
    started = tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", KILLED_CHILD, str(tmp_path), str(started)],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while not started.exists():
            assert child.poll() is None, child.stderr.read().decode()[-3000:]
            assert time.time() < deadline, "the child never started its stage"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
        child.stderr.close()
    client = MlflowClient(mlflow_store)
    experiment = client.get_experiment_by_name("mnemos-data").experiment_id
    (dead,) = client.search_runs([experiment])
    assert dead.info.status == "RUNNING"  # what MLflow shows for ever without the next run
    elsewhere = client.create_run(experiment, tags={"mnemos.stage": "demo", "mnemos.lock": "otherhost:/x.lock"})

    registry["demo"] = make_stage(lambda ctx: StageResult())
    result = run_stage("demo", root=tmp_path)  # e.g. the config changed: nothing to resume
    assert client.get_run(result.metadata["mlflow_run_id"]).info.status == "FINISHED"
    dead = client.get_run(dead.info.run_id)
    assert dead.info.status == "KILLED"
    assert result.metadata["mlflow_run_id"] in dead.data.tags["mnemos.killed_reason"]
    assert client.get_run(elsewhere.info.run_id).info.status == "RUNNING"  # another project's lock: not ours


def test_cli_no_wait_refuses_with_a_message_naming_the_holder(tmp_path):
    from pipelines.locks import stage_lock
    from pipelines.stages import STAGES
    from tests._cli import run_cli, tmp_project

    root = tmp_project(tmp_path / "project")
    with stage_lock(root, STAGES["synthetic"], STAGES.values()):
        proc = run_cli(["run", "synthetic", "--no-track", "--no-wait"], root)
    assert proc.returncode == 6   # busy (pipelines.errors.EXIT_CODES)
    assert f"error: stage synthetic not started: its lock {root / '.mnemos/locks/synthetic.lock'} is held by " \
           f"stage synthetic, pid {os.getpid()}" in proc.stderr
    assert not (root / "data").exists()  # refused before touching anything
