"""A stage that succeeds outside ``dvc repro`` is recorded in dvc.lock, as ``dvc repro`` would record it.

A real DVC repository in a temp dir holding one stage ``demo`` (a dep, params, a cached out), run through
``run_stage`` as Dagster and the CLI run stages; DVC's own API then says whether it is up to date.
"""

from __future__ import annotations

import json
import logging

import pytest
import yaml

import pipelines.stages as stages_mod
from pipelines.dvc_lock import params_config, record_stage, skip_reason
from pipelines.registry import CheckOutcome, Stage, StageResult
from pipelines.runner import run_stage

DVC_YAML = {"stages": {"demo": {"cmd": "bin/python -m pipelines run demo", "deps": ["in.txt"],
                                "params": ["profile", "seed", "benchmark"], "outs": ["out/demo.json"]}}}


def write_output(ctx) -> StageResult:
    out = ctx.path("out/demo.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"budget": ctx.config["benchmark"]["embedding_batch_size"],
                               "input": ctx.path("in.txt").read_text()}))
    return StageResult()


def fail_blocking(ctx) -> StageResult:
    write_output(ctx)
    return StageResult(checks=[CheckOutcome(name="rule", passed=False, count=1, examples=["in.txt:1: bad"])])


@pytest.fixture
def dvc_repo(tmp_path, monkeypatch):
    """A DVC repository (no git) with dvc.yaml's stage ``demo`` registered as the only stage."""
    from dvc.repo import Repo

    Repo.init(str(tmp_path), no_scm=True).close()
    (tmp_path / "params.yaml").write_text("profile: tiny\nseed: 1\nbenchmark: {embedding_batch_size: 5}\n")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    (tmp_path / "in.txt").write_text("hello\n")
    monkeypatch.setattr(stages_mod, "STAGES", {"demo": make_stage(write_output)})
    monkeypatch.delenv("DVC_STAGE", raising=False)
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    return tmp_path


def make_stage(fn) -> Stage:
    return Stage(name="demo", group="data", description="demo stage", fn=fn, inputs=("in.txt",),
                 outputs=("out/demo.json",), params=("benchmark",))


def dvc_status(root) -> dict:
    """``dvc status``: stage name -> what changed ({} when everything is up to date)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {name.rsplit(":", 1)[-1]: changes for name, changes in repo.status().items()}


def test_a_stage_run_outside_dvc_is_recorded_and_dvc_sees_it_up_to_date(dvc_repo):
    assert "demo" in dvc_status(dvc_repo)  # never run: DVC lists it as changed
    run_stage("demo", track=False, root=dvc_repo)
    lock = yaml.safe_load((dvc_repo / "dvc.lock").read_text())["stages"]["demo"]
    assert lock["cmd"] == DVC_YAML["stages"]["demo"]["cmd"]
    assert lock["params"]["params.yaml"] == {"profile": "tiny", "seed": 1, "benchmark": {"embedding_batch_size": 5}}
    assert [d["path"] for d in lock["deps"]] == ["in.txt"] and [o["path"] for o in lock["outs"]] == ["out/demo.json"]
    assert dvc_status(dvc_repo) == {}
    # What DVC records is what the files are: a changed dep or param makes the stage changed again.
    (dvc_repo / "in.txt").write_text("changed\n")
    assert "demo" in dvc_status(dvc_repo)


def test_outputs_are_left_as_the_stage_wrote_them(dvc_repo):
    run_stage("demo", track=False, root=dvc_repo)
    out = dvc_repo / "out" / "demo.json"
    assert not out.is_symlink() and json.loads(out.read_text()) == {"budget": 5, "input": "hello\n"}


def test_a_run_with_overrides_is_not_recorded(dvc_repo, monkeypatch):
    run_stage("demo", {"benchmark": {"embedding_batch_size": 9}}, track=False, root=dvc_repo)
    assert not (dvc_repo / "dvc.lock").exists()
    monkeypatch.setenv("MNEMOS_PROFILE", "paper")  # a profile other than params.yaml's
    run_stage("demo", track=False, root=dvc_repo)
    assert not (dvc_repo / "dvc.lock").exists()


def test_a_failed_blocking_check_is_not_recorded(dvc_repo, monkeypatch):
    monkeypatch.setitem(stages_mod.STAGES, "demo", make_stage(fail_blocking))
    run_stage("demo", track=False, enforce_checks=False, root=dvc_repo)
    assert not (dvc_repo / "dvc.lock").exists() and not (dvc_repo / "out" / "demo.json").exists()


def test_under_dvc_repro_dvc_writes_the_lock_itself(dvc_repo, monkeypatch):
    monkeypatch.setenv("DVC_STAGE", "demo")  # what DVC sets for a stage's command (dvc/stage/run.py)
    run_stage("demo", track=False, root=dvc_repo)
    assert not (dvc_repo / "dvc.lock").exists()
    assert "dvc repro" in skip_reason(make_stage(write_output), dvc_repo, {}, dvc_repo / "params.yaml")


def test_a_project_that_is_no_dvc_repository_is_skipped_quietly(tmp_path, monkeypatch, caplog):
    (tmp_path / "params.yaml").write_text("profile: tiny\nseed: 1\nbenchmark: {embedding_batch_size: 5}\n")
    (tmp_path / "in.txt").write_text("hello\n")
    monkeypatch.setattr(stages_mod, "STAGES", {"demo": make_stage(write_output)})
    monkeypatch.delenv("DVC_STAGE", raising=False)
    with caplog.at_level(logging.INFO, logger="mnemos"):
        run_stage("demo", track=False, root=tmp_path)
    assert (tmp_path / "out" / "demo.json").exists() and not (tmp_path / "dvc.lock").exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_stage_dvc_yaml_does_not_declare_is_a_warning_not_a_failure(dvc_repo, caplog):
    (dvc_repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"other": DVC_YAML["stages"]["demo"]}}))
    stage = make_stage(write_output)
    with caplog.at_level(logging.WARNING, logger="mnemos"):
        run_stage("demo", track=False, root=dvc_repo)
    assert (dvc_repo / "out" / "demo.json").exists()
    warning = caplog.records[-1].getMessage()
    assert "dvc.lock" in warning and "demo" in warning and "dvc commit --force demo" in warning
    assert record_stage(stage, dvc_repo, params_config(stage, dvc_repo / "params.yaml")) is False


def test_bytecode_written_after_the_record_does_not_change_a_code_dep(dvc_repo, monkeypatch):
    """Stages import code after earlier stages were recorded: the project's .dvcignore keeps __pycache__ out."""
    from pipelines.config import CODE_ROOT

    (dvc_repo / ".dvcignore").write_text((CODE_ROOT / ".dvcignore").read_text())
    (dvc_repo / "code").mkdir()
    (dvc_repo / "code" / "stage.py").write_text("VALUE = 1\n")
    stages = {"stages": {"demo": {**DVC_YAML["stages"]["demo"], "deps": ["in.txt", "code"]}}}
    (dvc_repo / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    run_stage("demo", track=False, root=dvc_repo)
    (dvc_repo / "code" / "__pycache__").mkdir()
    (dvc_repo / "code" / "__pycache__" / "stage.cpython-311.pyc").write_bytes(b"\x00bytecode")
    assert dvc_status(dvc_repo) == {}
    (dvc_repo / "code" / "stage.py").write_text("VALUE = 2\n")
    assert "demo" in dvc_status(dvc_repo)
