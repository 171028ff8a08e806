"""A run killed with SIGKILL midway and resumed ends like an uninterrupted run: same final step, same curve,
and the same MLflow run, whose metric histories read as the uninterrupted run's curves, each step once."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.training.checkpoint import latest_checkpoint
from pipelines.training.engine import TrainConfig, train
from tests.training.tiny_task import TinyLMTask, params_hash

SCRIPT = Path(__file__).with_name("tiny_task.py")
STEPS = 24  # 48 examples / batch 4 = 12 steps per epoch: the kill lands in epoch 1, the resume crosses into epoch 2


def _config(out: Path) -> TrainConfig:
    # the settings of tiny_task.main() (lr 3e-3, warm-up 3, batch 4, validate every 5), checkpoints every 5 steps
    return TrainConfig(output_dir=str(out), lr=3e-3, warmup_steps=3, max_steps=STEPS, batch_size=4, save_every=5,
                       eval_every=5, early_stopping_patience=None)


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _logged_steps(client, run_id: str, key: str) -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, key)]


def test_sigkill_midway_then_resume_reproduces_the_run_and_continues_its_mlflow_run(tmp_path, mlflow_store,
                                                                                   one_thread):
    from mlflow import MlflowClient

    from pipelines import tracking

    # Run A: uninterrupted.
    task_a = TinyLMTask()
    run_a = train(task_a, _config(tmp_path / "a"), progress=False)

    # Run B: a separate process logging to a real SQLite MLflow store, slowed down (100 ms a step), killed with
    # SIGKILL once MLflow holds a step after its checkpoint of step 10: the resumed session computes it again.
    out_b = tmp_path / "b"
    client = MlflowClient(mlflow_store)
    child = subprocess.Popen([sys.executable, str(SCRIPT), "--out", str(out_b), "--max-steps", str(STEPS),
                              "--save-every", "5", "--sleep", "0.1", "--track", "mnemos-test"],
                             env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    deadline, killed_run = time.time() + 180, None
    try:
        while killed_run is None or max(_logged_steps(client, killed_run, "train/loss"), default=0) < 11:
            assert child.poll() is None, f"run B ended before the kill: {child.stderr.read().decode()[-2000:]}"
            assert time.time() < deadline, "run B never logged step 11"
            experiment = client.get_experiment_by_name("mnemos-test")
            runs = client.search_runs([experiment.experiment_id]) if experiment else []
            killed_run = runs[0].info.run_id if runs else None
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    killed_at = latest_checkpoint(out_b / "checkpoints")
    assert killed_at is not None
    assert not (out_b / "final").exists()  # it never finished
    logged_until = max(_logged_steps(client, killed_run, "train/loss"))
    assert client.get_run(killed_run).info.status == "RUNNING"  # what MLflow would show for ever
    assert logged_until > int(killed_at.name.split("-")[1])  # MLflow holds steps the resume computes again

    # Run B resumed in this process from the newest complete checkpoint, tracked as a stage run is.
    task_b = TinyLMTask()
    with tracking.stage_run("tiny", "mnemos-test", {"profile": "tiny"}, deferred=True) as tracker:
        run_b = train(task_b, _config(out_b), tracker=tracker, progress=False)
        assert tracker.run_id == killed_run  # the same MLflow run, not a new unlinked one
    assert 10 <= run_b.resumed_from_step < logged_until
    assert run_b.final_step == run_a.final_step == STEPS
    assert [s for s, _ in run_b.train_losses] == list(range(1, STEPS + 1))
    for (_, loss_a), (_, loss_b) in zip(run_a.train_losses, run_b.train_losses):
        assert loss_b == pytest.approx(loss_a, abs=1e-5)
    assert [s for s, _ in run_b.valid_losses] == [5, 10, 15, 20, 24]
    for (_, loss_a), (_, loss_b) in zip(run_a.valid_losses, run_b.valid_losses):
        assert loss_b == pytest.approx(loss_a, abs=1e-5)
    assert params_hash(task_b.model) == params_hash(task_a.model)
    final_a, final_b = tmp_path / "a" / "final" / "model.safetensors", out_b / "final" / "model.safetensors"
    assert _file_hash(final_b) == _file_hash(final_a)

    # MLflow: one run, FINISHED, tagged with the resume; each metric one point per step, one curve.
    run = client.get_run(killed_run)
    assert run.info.status == "FINISHED"
    assert run.data.tags["mnemos.resumed_at_step"] == str(run_b.resumed_from_step)
    assert len(client.search_runs([run.info.experiment_id])) == 1
    for key in ("train/loss", "train/lr", "train/tokens_per_s", "train/peak_memory_bytes", "train/epoch",
                "train/grad_norm", "valid/loss", "valid/best_loss"):
        steps = _logged_steps(client, killed_run, key)
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice"
    curve = sorted((m.step, m.value) for m in client.get_metric_history(killed_run, "train/loss"))
    assert [s for s, _ in curve] == list(range(1, STEPS + 1))
    for (_, logged), (_, uninterrupted) in zip(curve, run_a.train_losses):  # the uninterrupted curve
        assert logged == pytest.approx(uninterrupted, abs=1e-5)
    valid = sorted((m.step, m.value) for m in client.get_metric_history(killed_run, "valid/loss"))
    assert [s for s, _ in valid] == [5, 10, 15, 20, 24]
    for (_, logged), (_, uninterrupted) in zip(valid, run_a.valid_losses):
        assert logged == pytest.approx(uninterrupted, abs=1e-5)
