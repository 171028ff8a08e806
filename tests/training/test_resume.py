"""A run killed with SIGKILL midway and resumed ends like an uninterrupted run: same final step, same curve."""

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
    # the same settings as tiny_task.main(): lr 3e-3, warm-up 3, batch 4, checkpoint every 2, validate every 5
    return TrainConfig(output_dir=str(out), lr=3e-3, warmup_steps=3, max_steps=STEPS, batch_size=4, save_every=2,
                       eval_every=5, early_stopping_patience=None)


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sigkill_midway_then_resume_reproduces_the_run(tmp_path, one_thread):
    # Run A: uninterrupted.
    task_a = TinyLMTask()
    run_a = train(task_a, _config(tmp_path / "a"), progress=False)

    # Run B: a separate process, slowed down (50 ms a step), killed with SIGKILL once step 10 is checkpointed.
    out_b = tmp_path / "b"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, str(SCRIPT), "--out", str(out_b), "--max-steps", str(STEPS),
                              "--sleep", "0.05"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 180
    try:
        while not (out_b / "checkpoints" / "step-10").is_dir():
            assert child.poll() is None, f"run B ended before the kill: {child.stderr.read().decode()[-2000:]}"
            assert time.time() < deadline, "run B never reached step 10"
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    killed_at = latest_checkpoint(out_b / "checkpoints")
    assert killed_at is not None
    assert not (out_b / "final").exists()  # it never finished

    # Run B resumed in this process from the newest complete checkpoint.
    task_b = TinyLMTask()
    run_b = train(task_b, _config(out_b), progress=False)
    assert 10 <= run_b.resumed_from_step < STEPS
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
