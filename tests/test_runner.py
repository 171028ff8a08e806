"""run_stage: config, outputs cleaned on failure, blocking checks, MLflow run per execution."""

import json

import pytest
from mlflow import MlflowClient

import pipelines.stages as stages_mod
from pipelines.errors import DataError, ValidationFailed
from pipelines.registry import CheckOutcome, Stage, StageResult
from pipelines.runner import run_stage


def make_stage(fn, **kw):
    base = dict(name="demo", group="data", description="demo stage", fn=fn, inputs=(), outputs=("out/demo.json",),
                params=("benchmark",))
    base.update(kw)
    return Stage(**base)


@pytest.fixture
def registry(monkeypatch, tmp_path):
    (tmp_path / "params.yaml").write_text("profile: tiny\nseed: 1\nbenchmark: {budget_tokens: 5}\n")
    table = {}
    monkeypatch.setattr(stages_mod, "STAGES", table)
    return table


def test_stage_gets_resolved_config_and_logs_one_run(registry, tmp_path, mlflow_store):
    seen = {}

    def fn(ctx):
        seen.update(ctx.config)
        ctx.path("out/demo.json").parent.mkdir(parents=True, exist_ok=True)
        ctx.path("out/demo.json").write_text(json.dumps({"ok": 1}))
        return StageResult(metadata={"rows": 3}, metrics={"score": 0.5})

    registry["demo"] = make_stage(fn)
    result = run_stage("demo", {"benchmark": {"budget_tokens": 7}}, root=tmp_path)
    assert seen["benchmark"]["budget_tokens"] == 7 and seen["profile"] == "tiny"
    assert result.metadata["rows"] == 3
    client = MlflowClient(mlflow_store)
    runs = client.search_runs([client.get_experiment_by_name("mnemos-data").experiment_id])
    assert len(runs) == 1
    assert runs[0].data.metrics == {"score": 0.5}
    assert runs[0].data.params["benchmark.budget_tokens"] == "7"
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
