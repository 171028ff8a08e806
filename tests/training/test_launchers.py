"""Every launcher deploy/README.md names really starts 2 CPU processes of the tiny task, and they train as one.

Multi-GPU is a launcher setting (issue #30): torchrun, DeepSpeed's own launcher, and the several-machines forms
(accelerate's multi_node.yaml, torchrun ``--nnodes``) run as two "nodes" on this machine (one process each,
rendezvous on 127.0.0.1); accelerate with cpu_2proc.yaml is tests/training/test_distributed.py's. Each launch is
built by ``launch_command`` and runs ``-m tests.training.tiny_task`` (the ``-m`` / ``--module`` spelling the
README gives for ``pipelines run STAGE``); each must end with both ranks holding identical weights, two
processes in a DDP wrapper over gloo and a falling loss, and, the same code path whatever the topology, every
launcher with the same weights.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipelines.training.launch import launch_command
from tests.training._launch import free_port, launch_env

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.training.tiny_task"
TASK_ARGS = ["--max-steps", "8", "--eval-every", "4"]


def _commands(name: str, out: Path) -> list[list[str]]:
    """The launcher command(s) of launch ``name`` writing to ``out``: one per machine (two for the multi-node
    forms, machine/node rank 0 and 1, started together)."""
    port, task = free_port(), ["-m", MODULE, "--out", str(out), *TASK_ARGS]
    if name == "torchrun":
        return [launch_command("tiny", "torchrun", num_processes=2, extra_args=["--master_port", port], entry=task)]
    if name == "deepspeed":
        # without a hostfile the runner uses localhost; --num_gpus N gives it N slots even with no GPU (the CPU
        # accelerator counts NUMA nodes, here 1), so it starts N processes with RANK/LOCAL_RANK/WORLD_SIZE set
        return [launch_command("tiny", "deepspeed", num_processes=2, extra_args=["--master_port", port], entry=task)]
    if name == "deepspeed-zero2":  # TrainConfig.deepspeed = the JSON, as params.yaml's *_train.deepspeed sets it
        return [launch_command("tiny", "deepspeed", num_processes=2, extra_args=["--master_port", port],
                               entry=[*task, "--deepspeed", str(ROOT / "deploy" / "deepspeed" / "zero2.json")])]
    if name == "accelerate-2-nodes":
        return [launch_command("tiny", "accelerate", "multi_node", num_processes=2, entry=task, extra_args=[
            "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1", "--main_process_port", port])
            for rank in (0, 1)]
    assert name == "torchrun-2-nodes"
    return [launch_command("tiny", "torchrun", num_processes=1, entry=task, extra_args=[
        "--nnodes", "2", "--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", port])
        for rank in (0, 1)]


LAUNCHES = ("torchrun", "deepspeed", "accelerate-2-nodes", "torchrun-2-nodes")


def _launch(name: str, out: Path, timeout: int = 240) -> None:
    """Run the command(s) of launch ``name`` side by side, one compute thread per process; fail with their logs."""
    env = launch_env()
    out.mkdir(parents=True)
    procs = []
    for i, cmd in enumerate(_commands(name, out)):
        log = open(out.parent / f"{name}-{i}.log", "w")
        procs.append((cmd, log, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)))
    try:
        for cmd, log, proc in procs:
            code = proc.wait(timeout=timeout)
            assert code == 0, f"{' '.join(cmd)} failed:\n{Path(log.name).read_text()[-4000:]}"
    finally:
        for _, log, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``launched(name)``: the output folder of launch ``name``, run once per module."""
    root, done = tmp_path_factory.mktemp("launchers"), {}

    def get(name: str) -> Path:
        if name not in done:
            _launch(name, root / name)
            done[name] = root / name
        return done[name]

    return get


@pytest.mark.parametrize("name", LAUNCHES)
def test_the_launcher_trains_two_data_parallel_cpu_processes(launched, name):
    out = launched(name)
    hashes = {p.name: p.read_text() for p in out.glob("params-rank*.sha256")}
    assert sorted(hashes) == ["params-rank0.sha256", "params-rank1.sha256"]
    assert hashes["params-rank0.sha256"] == hashes["params-rank1.sha256"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_processes"] == 2 and summary["final_step"] == 8
    assert summary["model_class"] == "DistributedDataParallel"
    assert (summary["distributed_type"], summary["backend"], summary["device"]) == ("MULTI_CPU", "gloo", "cpu")
    losses = [loss for _, loss in summary["train_losses"]]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert (out / "final" / "model.safetensors").is_file()


def test_every_launcher_trains_the_same_weights(launched):
    """The topology is a launcher setting: one machine or two, whichever launcher, the same 2-process run."""
    weights = {name: (launched(name) / "params-rank0.sha256").read_text() for name in LAUNCHES}
    assert len(set(weights.values())) == 1, weights


@pytest.mark.slow  # DeepSpeed compiles its shared-memory op once (~30 s to minutes on 2 cores), then ~30 s
def test_deepspeeds_launcher_trains_zero2_like_ddp(launched):
    """DeepSpeed's own launcher with a ZeRO-2 JSON (the README's form): 2 DeepSpeed processes on gloo follow the
    DDP run's loss curve and end with the same weights on both ranks."""
    zero2, ddp = launched("deepspeed-zero2"), launched("deepspeed")
    hashes = {(zero2 / f"params-rank{r}.sha256").read_text() for r in (0, 1)}
    assert len(hashes) == 1
    summary, reference = (json.loads((out / "summary.json").read_text()) for out in (zero2, ddp))
    assert summary["num_processes"] == 2 and summary["final_step"] == 8
    assert (summary["model_class"], summary["distributed_type"]) == ("DeepSpeedEngine", "DEEPSPEED")
    for (step, loss), (ref_step, ref_loss) in zip(summary["train_losses"], reference["train_losses"], strict=True):
        assert step == ref_step and loss == pytest.approx(ref_loss, abs=1e-4)
    assert (zero2 / "checkpoints" / "step-8" / "pytorch_model").is_dir()
    assert (zero2 / "final" / "model.safetensors").is_file()
