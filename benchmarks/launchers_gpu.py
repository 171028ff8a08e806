"""Multi-GPU as a launcher setting, on one lent GPU (issue #30 point 4): the README's launchers with one process.

    python benchmarks/launchers_gpu.py --out DIR [--max-steps 20]

Trains tests/training/tiny_task.py under each launcher of deploy/README.md with one process, through the same
``launch_command`` the Dagster assets use, and checks what accelerate built from its summary.json:

- ``accelerate-gpu_1``: ``--config_file deploy/accelerate/gpu_1.yaml`` (the README's single-GPU line): a plain
  process on the GPU (distributed type NO, no process group), bf16;
- ``accelerate-gpu_multi``: ``--config_file deploy/accelerate/gpu_multi.yaml --num_processes 1`` and
  ``torchrun``: ``--nproc_per_node 1``: the data-parallel path with a world of one: started by torchrun,
  distributed type MULTI_GPU, an NCCL process group on cuda:LOCAL_RANK (barriers, rank-0 checkpointing,
  per-rank sampling). accelerate 1.15 wraps a MULTI_GPU model in DDP only from 2 processes on
  (``Accelerator.multi_device``; a MULTI_CPU one it wraps even alone), so the step should call the bare model
  here (``model_class`` in the RESULT line says what it was), and ``--multi_gpu --num_processes 1`` is refused
  by accelerate itself ("at least 2 processes"): the DDP wrapper and its all-reduce need 2 GPUs (NCCL refuses
  two ranks on one device); 2 CPU processes check them in tests/training/test_launchers.py;
- ``deepspeed``: DeepSpeed's runner ``--num_gpus 1 --no_local_rank --module``, as ``torchrun``, when deepspeed
  is installed (the lent machine's image lacks it: skipped unless carried).

Prints one JSON line per launch and one ``RESULT launchers ...`` line; exits 1 when a launch fails a check.
Needs torch with CUDA, transformers, accelerate (not mlflow: tiny_task.py runs without ``--track``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.training.launch import launch_command  # noqa: E402

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def launches(out: Path, max_steps: int) -> dict[str, tuple[list[str], dict]]:
    """name -> (command, the summary fields it must produce)."""
    def task(name: str) -> list[str]:
        return ["-m", "tests.training.tiny_task", "--out", str(out / name), "--max-steps", str(max_steps),
                "--eval-every", str(max(1, max_steps // 2))]

    data_parallel = {"distributed_type": "MULTI_GPU", "backend": "nccl", "device": "cuda", "num_processes": 1}
    found = {
        "accelerate-gpu_1": (launch_command("tiny", "accelerate", "gpu_1", entry=task("accelerate-gpu_1")),
                             {"distributed_type": "NO", "backend": None, "device": "cuda", "num_processes": 1}),
        "accelerate-gpu_multi": (launch_command(
            "tiny", "accelerate", "gpu_multi", entry=task("accelerate-gpu_multi"),
            extra_args=["--num_processes", "1", "--main_process_port", _free_port()]), data_parallel),
        "torchrun": (launch_command("tiny", "torchrun", num_processes=1, extra_args=["--master_port", _free_port()],
                                    entry=task("torchrun")), data_parallel),
    }
    if importlib.util.find_spec("deepspeed") is not None:
        found["deepspeed"] = (launch_command("tiny", "deepspeed", num_processes=1, entry=task("deepspeed"),
                                             extra_args=["--master_port", _free_port()]), data_parallel)
    return found


def check(name: str, cmd: list[str], expected: dict, out: Path, max_steps: int, timeout: float) -> dict:
    """Run one launch; its summary's fields, what differs from ``expected`` and the wall time."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    t0 = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        try:
            code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    row = {"launch": name, "rc": code, "seconds": round(time.perf_counter() - t0, 1)}
    command = {"command": " ".join(cmd[1:])}  # last: the script's log lines are cut at 400 characters
    summary_file = out / name / "summary.json"
    if code != 0 or not summary_file.is_file():
        return {**row, "problems": [f"rc {code}, see {name}.log"], **command}
    summary = json.loads(summary_file.read_text())
    losses = [loss for _, loss in summary["train_losses"]]
    row.update({k: summary[k] for k in ("distributed_type", "backend", "device", "num_processes", "model_class")},
               first_loss=round(losses[0], 4), last_loss=round(losses[-1], 4))
    problems = [f"{k} {summary[k]!r}, expected {v!r}" for k, v in expected.items() if summary[k] != v]
    if summary["final_step"] != max_steps or not losses[-1] < losses[0]:
        problems.append(f"final step {summary['final_step']}, losses {losses[0]:.4f} -> {losses[-1]:.4f}")
    return {**row, "problems": problems, **command}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the runs' outputs and logs")
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per launch")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, (cmd, expected) in launches(out, args.max_steps).items():
        rows.append(check(name, cmd, expected, out, args.max_steps, args.timeout))
        print(json.dumps(rows[-1]), flush=True)
    (out / "launchers.json").write_text(json.dumps(rows, indent=1))
    parts = [f"{r['launch']} {'ok' if not r['problems'] else 'FAIL'} ({r.get('distributed_type')}/"
             f"{r.get('backend')}, {r.get('model_class')}, {r['seconds']} s)" for r in rows]
    print("RESULT launchers: " + "; ".join(parts))
    return 1 if any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
