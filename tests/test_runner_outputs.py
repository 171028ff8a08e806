"""A failed run never loses the last good outputs: staged outputs, swapped in on success (pipelines/staging.py).

A stage that fails after writing part of its outputs, one whose blocking check fails, one that succeeds, a swap
killed midway, the MLflow registry, and a training stage killed with SIGKILL that resumes from its checkpoint.
"""

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipelines.errors import ValidationFailed
from pipelines.registry import CheckOutcome, Stage, StageResult
from pipelines.runner import run_stage
from tests._one_registry import demo_stage
from pipelines.staging import STAGING_DIR, Staging, published_path

REPO = Path(__file__).resolve().parents[1]
OUT = "models/demo"  # a folder output, as a trained model is


def make_stage(fn, **kw):
    return demo_stage(fn, OUT, **kw)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) and the sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def previous(tmp_path) -> dict[str, str]:
    """The last good output: a model folder with a nested file."""
    out = tmp_path / OUT
    (out / "sub").mkdir(parents=True)
    (out / "model.bin").write_bytes(bytes(range(256)) * 4)
    (out / "sub" / "config.json").write_text('{"good": true}\n')
    return snapshot(out)


def write_part(ctx) -> Path:
    """Write a new model part way: one file replaced, one new."""
    out = ctx.path(OUT)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.bin").write_bytes(b"half a model")
    (out / "extra.txt").write_text("new")
    return out


def no_staging_left(root: Path) -> bool:
    staging = root / STAGING_DIR
    return not staging.exists() or not any(staging.iterdir())


def test_a_stage_failing_after_part_of_its_output_leaves_the_previous_one_byte_for_byte(registry, tmp_path,
                                                                                        previous):
    seen = {}

    def fn(ctx):
        seen["out"] = write_part(ctx)
        raise RuntimeError("input check failed inside the stage")

    registry["demo"] = make_stage(fn)
    with pytest.raises(RuntimeError, match="input check failed"):
        run_stage("demo", root=tmp_path, track=False)
    assert seen["out"] != tmp_path / OUT  # the stage wrote elsewhere than the output ...
    assert snapshot(tmp_path / OUT) == previous  # ... which is the last good one, byte for byte
    assert no_staging_left(tmp_path)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["demo"]  # no residue beside it


def test_ctrl_c_leaves_the_previous_output(registry, tmp_path, previous):
    def fn(ctx):
        write_part(ctx)
        raise KeyboardInterrupt

    registry["demo"] = make_stage(fn)
    with pytest.raises(KeyboardInterrupt):
        run_stage("demo", root=tmp_path, track=False)
    assert snapshot(tmp_path / OUT) == previous and no_staging_left(tmp_path)


@pytest.mark.parametrize("enforce_checks", [True, False])
def test_a_failed_blocking_check_keeps_the_previous_output(registry, tmp_path, previous, enforce_checks):
    def fn(ctx):
        write_part(ctx)
        return StageResult(checks=[CheckOutcome("ids_unique", passed=False, count=1, examples=["x.jsonl line 1"])])

    registry["demo"] = make_stage(fn)
    if enforce_checks:
        with pytest.raises(ValidationFailed, match="ids_unique"):
            run_stage("demo", root=tmp_path, track=False)
    else:  # Dagster reports the checks itself
        result = run_stage("demo", root=tmp_path, track=False, enforce_checks=False)
        assert [c.passed for c in result.checks] == [False]
    assert snapshot(tmp_path / OUT) == previous and no_staging_left(tmp_path)


def test_success_replaces_the_outputs_whole(registry, tmp_path, previous):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "gone.md").write_text("a declared output this run does not write")
    (tmp_path / "reports" / "other.md").write_text("not this stage's")

    def fn(ctx):
        out = write_part(ctx)
        (out / "model.bin").write_bytes(b"the whole new model")
        ctx.path("reports").mkdir(parents=True, exist_ok=True)  # a folder holding outputs: staged too
        (ctx.path("reports") / "new.md").write_text("report")
        return StageResult(metadata={"model_dir": str(out), "files": [str(out / "model.bin")], "rows": 3})

    registry["demo"] = make_stage(fn, outputs=(OUT, "reports/new.md", "reports/gone.md"))
    result = run_stage("demo", root=tmp_path, track=False)
    assert snapshot(tmp_path / OUT) == {
        "extra.txt": hashlib.sha256(b"new").hexdigest(),
        "model.bin": hashlib.sha256(b"the whole new model").hexdigest()}  # nothing of the previous folder left
    assert (tmp_path / "reports" / "new.md").read_text() == "report"
    assert not (tmp_path / "reports" / "gone.md").exists()  # the outputs are those of the last successful run
    assert (tmp_path / "reports" / "other.md").read_text() == "not this stage's"
    assert result.metadata["model_dir"] == str(tmp_path / OUT)  # paths say where the outputs are now
    assert result.metadata["files"] == [str(tmp_path / OUT / "model.bin")] and result.metadata["rows"] == 3
    assert no_staging_left(tmp_path)


def test_under_dvc_repro_a_run_missing_a_declared_output_keeps_the_previous_ones(registry, tmp_path, previous,
                                                                               monkeypatch):
    # dvc.yaml's outputs persist (DVC leaves them to the swap) and DVC refuses to record a stage whose declared output
    # is missing: the run fails before the swap, so the outputs stay those dvc.lock describes.
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "gone.md").write_text("the last good report")

    def fn(ctx):
        write_part(ctx)
        return StageResult()

    registry["demo"] = make_stage(fn, outputs=(OUT, "reports/gone.md"))
    monkeypatch.setenv("DVC_STAGE", "demo")
    with pytest.raises(RuntimeError, match="did not write its declared output.s. reports/gone.md"):
        run_stage("demo", root=tmp_path, track=False)
    assert snapshot(tmp_path / OUT) == previous and no_staging_left(tmp_path)
    assert (tmp_path / "reports" / "gone.md").read_text() == "the last good report"


def test_a_partition_stages_its_own_output(registry, tmp_path):
    def fn(ctx):
        target = ctx.path(f"reports/shards/{ctx.stage.partition}/suite")
        target.mkdir(parents=True)
        (target / "done.json").write_text(ctx.stage.partition)
        return StageResult()

    registry["shard"] = make_stage(fn, name="shard", outputs=("reports/shards/{partition}",), partitions=("0", "1"))
    run_stage("shard", root=tmp_path, track=False, partition="1")
    assert (tmp_path / "reports/shards/1/suite/done.json").read_text() == "1"
    assert not (tmp_path / "reports/shards/0").exists() and no_staging_left(tmp_path)


def test_a_swap_killed_midway_is_completed_by_the_next_run(registry, tmp_path, previous, monkeypatch):
    import pipelines.staging as staging_mod

    stage = make_stage(lambda ctx: StageResult(), outputs=("a", OUT))
    (tmp_path / "a").write_text("old a")
    staging = Staging(tmp_path, stage)
    staging.begin()
    staging.path("a").write_text("new a")
    staging.path(OUT).mkdir()
    (staging.path(OUT) / "model.bin").write_bytes(b"new model")
    moves, real_move = [], staging_mod._move

    def killed_after_two_moves(src, dst):  # "a" aside, new "a" in, then the process dies
        if len(moves) == 2:
            raise SystemExit("killed")
        moves.append(dst)
        real_move(src, dst)

    monkeypatch.setattr(staging_mod, "_move", killed_after_two_moves)
    with pytest.raises(SystemExit):
        staging.commit()
    monkeypatch.setattr(staging_mod, "_move", real_move)
    assert (tmp_path / "a").read_text() == "new a" and snapshot(tmp_path / OUT) == previous  # half swapped

    def fails(ctx):  # the next run fails, but the run that had succeeded is completed first
        raise RuntimeError("no")

    registry["demo"] = make_stage(fails, outputs=("a", OUT))
    with pytest.raises(RuntimeError):
        run_stage("demo", root=tmp_path, track=False)
    assert (tmp_path / "a").read_text() == "new a"
    assert snapshot(tmp_path / OUT) == {"model.bin": hashlib.sha256(b"new model").hexdigest()}
    assert no_staging_left(tmp_path)


def test_a_run_killed_while_the_stage_ran_leaves_nothing_the_next_run_takes_for_output(registry, tmp_path,
                                                                                       previous):
    stage = make_stage(lambda ctx: StageResult())
    staging = Staging(tmp_path, stage)
    staging.begin()  # the killed run: it wrote part of its output, then died (no SWAP)
    staging.path(OUT).mkdir()
    (staging.path(OUT) / "model.bin").write_bytes(b"half a model")
    assert staging.recover() == "discarded"
    assert snapshot(tmp_path / OUT) == previous and no_staging_left(tmp_path)


def test_the_registry_gets_a_model_only_once_it_is_in_place(registry, tmp_path, previous, mlflow_store):
    def fn(ctx, passed):
        out = write_part(ctx)
        version = ctx.tracker.register_model(out, "mnemos-demo")  # as the training engine does
        return StageResult(metadata={"version_seen_by_stage": version},
                           checks=[CheckOutcome("ids_unique", passed=passed)])

    client = MlflowClient(mlflow_store)
    registry["demo"] = make_stage(lambda ctx: fn(ctx, passed=False))
    with pytest.raises(ValidationFailed):
        run_stage("demo", root=tmp_path)
    assert client.search_registered_models() == [] and snapshot(tmp_path / OUT) == previous

    registry["demo"] = make_stage(lambda ctx: fn(ctx, passed=True))
    result = run_stage("demo", root=tmp_path)
    assert result.metadata["version_seen_by_stage"] is None  # held back until the swap
    assert result.metadata["registered_models"] == {"mnemos-demo": "1"}
    (version,) = client.search_model_versions("name='mnemos-demo'")
    assert version.run_id == result.metadata["mlflow_run_id"]
    assert (tmp_path / OUT / "model.bin").read_bytes() == b"half a model"


KILLED_TRAINING = """
import sys, types
from pathlib import Path

from pipelines.registry import Stage
from tests.test_runner_outputs import training_stage

from tests._one_registry import install  # this one stage instead of the project's
install({"tiny_train": training_stage(sleep=0.2)})
from pipelines.runner import run_stage
run_stage("tiny_train", root=Path(sys.argv[1]), track=False)
"""
TINY = "models/tiny"


def training_stage(sleep: float = 0.0) -> Stage:
    """The engine tests' tiny task as a training stage (12 steps, a checkpoint every 3)."""

    def tiny_train(ctx):
        from pipelines.training.stage import train_stage
        from tests.training.tiny_task import TinyLMTask

        knobs = {"lr": 3e-3, "warmup_steps": 2, "max_steps": 12, "batch_size": 4, "save_every": 3,
                 "eval_every": 6, "early_stopping_patience": None}
        return train_stage(ctx, TinyLMTask(sleep=sleep), knobs, TINY)

    return Stage(name="tiny_train", group="mdr", description="tiny training stage", fn=tiny_train, inputs=(),
                 outputs=(TINY,), params=(), launcher="accelerate")


def test_a_training_stage_killed_midway_keeps_the_last_model_and_resumes_from_its_checkpoint(registry, tmp_path):
    from pipelines.training.checkpoint import latest_checkpoint, step_of

    (tmp_path / TINY).mkdir(parents=True)
    (tmp_path / TINY / "model.safetensors").write_bytes(b"the last good model")
    before = snapshot(tmp_path / TINY)
    child = subprocess.Popen([sys.executable, "-c", KILLED_TRAINING, str(tmp_path)], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    runs = tmp_path / "models" / ".runs"
    try:
        deadline, latest = time.time() + 240, None
        while latest is None or step_of(latest) < 3:
            assert child.poll() is None, f"the training ended before the kill: {child.stderr.read().decode()[-3000:]}"
            assert time.time() < deadline, "the training never saved a checkpoint"
            folders = list(runs.glob("tiny_train-*/checkpoints")) if runs.is_dir() else []
            latest = latest_checkpoint(folders[0]) if folders else None
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    assert snapshot(tmp_path / TINY) == before  # killed: the last good model is still there, whole

    registry["tiny_train"] = training_stage()
    result = run_stage("tiny_train", root=tmp_path, track=False)
    assert 3 <= result.metadata["resumed_from_step"] < 12  # from the killed run's checkpoint, not from scratch
    assert result.metrics["final_step"] == 12
    assert result.metadata["model_dir"] == str(tmp_path / TINY)
    assert (tmp_path / TINY / "model.safetensors").read_bytes() != b"the last good model"
    assert (tmp_path / TINY / "config.json").is_file()
    assert not list(runs.iterdir())  # finished: the run folder is gone
    assert no_staging_left(tmp_path)


def test_a_path_in_a_runs_staging_folder_is_published_to_its_place_in_the_project(tmp_path):
    staged = tmp_path / STAGING_DIR / "reranker" / "new" / "models" / "reranker"
    assert published_path(staged) == tmp_path / "models" / "reranker"
    assert published_path(str(staged / "folds" / "fold-0")) == tmp_path / "models/reranker/folds/fold-0"
    for elsewhere in (tmp_path / "models" / "reranker", tmp_path / STAGING_DIR / "reranker" / "old" / "models",
                      tmp_path / STAGING_DIR / "reranker", Path("models/reranker")):
        assert published_path(elsewhere) == elsewhere
