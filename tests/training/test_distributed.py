"""Launched runs: 2 processes on the CPU (DDP over gloo) end with identical weights; DeepSpeed ZeRO-2 trains."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipelines.training.engine import TrainConfig, train
from pipelines.training.launch import launch_command
from tests.training._launch import free_port, launch_env, run_launch
from tests.training.tiny_task import TinyLMTask

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("tiny_task.py")


def test_two_cpu_processes_end_with_identical_weights(tmp_path):
    out = tmp_path / "ddp"
    cmd = launch_command("tiny", launcher="accelerate", accelerate_config="cpu_2proc",
                         extra_args=["--main_process_port", free_port()],
                         entry=[str(SCRIPT), "--out", str(out), "--max-steps", "8", "--eval-every", "4"])
    run_launch(cmd, timeout=300)
    hashes = {p.name: p.read_text() for p in out.glob("params-rank*.sha256")}
    assert sorted(hashes) == ["params-rank0.sha256", "params-rank1.sha256"]
    assert hashes["params-rank0.sha256"] == hashes["params-rank1.sha256"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_processes"] == 2 and summary["final_step"] == 8
    losses = [loss for _, loss in summary["train_losses"]]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert (out / "final" / "model.safetensors").is_file()


def test_compiled_ddp_with_accumulation_matches_the_eager_run(tmp_path):
    """Several processes compile the DDP-wrapped model (DDP-aware graph splitting); with gradient
    accumulation (no_sync on the first micro-batch) both ranks end with the eager run's exact weights
    (aot_eager: dynamo's capture and autograd, eager kernels, so the comparison is bit for bit)."""
    hashes = {}
    for name, extra in (("eager", []), ("compiled", ["--compile-backend", "aot_eager"])):
        out = tmp_path / name
        cmd = launch_command("tiny", launcher="accelerate", accelerate_config="cpu_2proc",
                             extra_args=["--main_process_port", free_port()],
                             entry=[str(SCRIPT), "--out", str(out), "--max-steps", "6", "--eval-every", "3",
                                    "--grad-accum", "2", *extra])
        run_launch(cmd, timeout=300)
        hashes[name] = {p.name: p.read_text() for p in out.glob("params-rank*.sha256")}
    assert len(set(hashes["compiled"].values())) == 1 and hashes["compiled"] == hashes["eager"]
    card = (tmp_path / "compiled" / "final" / "MODEL_CARD.md").read_text()
    assert "torch.compile" in card


@pytest.mark.slow  # DeepSpeed compiles its shared-memory op once (~30 s to minutes on 2 cores), then ~20 s
def test_deepspeed_zero2_on_cpu_matches_the_plain_engine(tmp_path, one_thread):
    ds_out = tmp_path / "zero2"
    cmd = launch_command("tiny", launcher="python",
                         entry=[str(SCRIPT), "--out", str(ds_out), "--max-steps", "6", "--eval-every", "3",
                                "--deepspeed", str(ROOT / "deploy" / "deepspeed" / "zero2.json")])
    run_launch(cmd, timeout=600)
    ds = json.loads((ds_out / "summary.json").read_text())
    plain = train(TinyLMTask(), TrainConfig(output_dir=str(tmp_path / "plain"), lr=3e-3, warmup_steps=3,
                                            max_steps=6, batch_size=4, save_every=2, eval_every=3,
                                            early_stopping_patience=None), progress=False)
    assert ds["final_step"] == 6
    for (s_ds, l_ds), (s_pl, l_pl) in zip(ds["train_losses"], plain.train_losses):
        assert s_ds == s_pl and l_ds == pytest.approx(l_pl, abs=1e-4)
    step_dir = ds_out / "checkpoints" / "step-6"
    assert (step_dir / "model.safetensors").is_file() and (step_dir / "pytorch_model").is_dir()
    assert (ds_out / "final" / "model.safetensors").is_file()


def test_a_launched_stage_locks_on_rank_0_only_and_waits_for_the_running_one(tmp_path, mlflow_store):
    """Every rank of a launch runs run_stage: rank 0 waits for the stage's lock, the other ranks neither lock
    (no rank waits on its own launch) nor remove outputs (the running execution's files stay whole)."""
    import time

    from mlflow import MlflowClient

    from pipelines.locks import stage_lock
    from tests.training.launched_stage import OUTPUT, STAGE

    root = tmp_path / "project"
    root.mkdir()
    (root / "params.yaml").write_text("profile: tiny\nseed: 1\n")
    running = root / OUTPUT / "written-by-the-running-execution.txt"
    running.parent.mkdir(parents=True)
    running.write_text("whole")
    cmd = launch_command("tiny", launcher="accelerate", accelerate_config="cpu_2proc",
                         extra_args=["--main_process_port", free_port()],
                         entry=[str(ROOT / "tests" / "training" / "launched_stage.py"), str(root)])
    env = launch_env(drop=("MNEMOS_LOCK_TIMEOUT",))
    log = tmp_path / "launch.log"
    with stage_lock(root, STAGE, [STAGE]), open(log, "w") as out:  # an execution of the stage is running
        launch = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while "stage tiny_train waits: its lock" not in log.read_text():
            assert launch.poll() is None, log.read_text()[-3000:]
            assert time.time() < deadline, "rank 0 never waited for the lock"
            time.sleep(0.1)
        time.sleep(3)  # rank 1 has long started its stage by now
        assert launch.poll() is None and running.read_text() == "whole"
    assert launch.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert log.read_text().count("stage tiny_train waits") == 1  # rank 0 alone
    assert not running.exists() and (root / OUTPUT / "model.safetensors").is_file()
    client = MlflowClient(mlflow_store)
    (run,) = client.search_runs([client.get_experiment_by_name("mnemos-mdr").experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics["final_step"] == 6
