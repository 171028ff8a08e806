"""The command that runs a training stage in its own processes: one process, N GPUs or N nodes.

The Dagster asset (through Dagster Pipes), ``make`` and a user at a shell all start a
training stage with the command built here; the launcher and its config file decide the
topology, the stage code stays the same (deploy/README.md):

    accelerate: python -m accelerate.commands.launch --config_file deploy/accelerate/X.yaml [--num_processes N]
                    -m pipelines run STAGE
    torchrun:   python -m torch.distributed.run --nproc_per_node N -m pipelines run STAGE
    deepspeed:  python -m deepspeed.launcher.runner --num_gpus N --no_local_rank --module pipelines run STAGE

(``--no_local_rank``: DeepSpeed's runner otherwise appends ``--local_rank=N`` to the program's arguments, which
the stage CLI does not take; every launcher sets ``LOCAL_RANK`` in the environment, which the engine reads.)

``extra_args`` are launcher options (e.g. ``["--main_process_port", "29600"]``); for several machines,
accelerate's ``["--machine_rank", "R"]`` with ``multi_node`` (whose ``num_processes`` counts all machines) or
torchrun's ``["--nnodes", "2", "--node_rank", "R", "--master_addr", IP, "--master_port", PORT]`` with
``num_processes`` per machine (tests/training/test_launchers.py runs both as two "machines" on localhost).
``stage_args`` follow ``run STAGE`` (e.g. ``["--set", "mdr.teacher.epochs=1"]``).

DeepSpeed's runner without a GPU: ``--num_gpus N`` still starts N local processes (the slots of localhost; no
hostfile, no ssh), which train with DDP over gloo, or with DeepSpeed when ``TrainConfig.deepspeed`` is set.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from pipelines.errors import ConfigError

LAUNCHERS = ("accelerate", "torchrun", "deepspeed", "python")
DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy"


def process_device():
    """The torch device of this process: its GPU (``LOCAL_RANK`` under a launcher, else 0) when CUDA
    is available, else the CPU."""
    import os

    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def accelerate_config_path(name: str) -> Path:
    """``deploy/accelerate/<name>.yaml`` for a short name, or the path itself."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        return path
    return DEPLOY_DIR / "accelerate" / f"{name}.yaml"


def launch_command(stage_name: str, launcher: str = "accelerate", accelerate_config: str | None = None,
                   num_processes: int = 1, extra_args: Sequence[str] = (),
                   stage_args: Sequence[str] = (), entry: Sequence[str] | None = None) -> list[str]:
    """argv that runs ``python -m pipelines run stage_name`` under ``launcher`` (see module docstring).

    ``accelerate_config`` is a file or a short name of deploy/accelerate/ (e.g. "cpu_2proc",
    "gpu_multi", "deepspeed_zero2"); without it accelerate runs ``num_processes`` processes
    with its defaults. ``launcher="python"`` runs the stage in one plain process. ``entry``
    replaces ``-m pipelines run STAGE`` by a script and its arguments, or ``-m MODULE`` and its
    arguments (tests, benchmarks); DeepSpeed's runner gets ``-m`` as ``--module``.
    Several machines: the launcher's own options in ``extra_args`` (see module docstring).
    """
    if launcher not in LAUNCHERS:
        raise ConfigError(f"launcher {launcher!r} is unknown: use one of {', '.join(LAUNCHERS)}.")
    if num_processes < 1:
        raise ConfigError(f"num_processes is {num_processes}: a launch needs at least one process.")
    if accelerate_config is not None and launcher != "accelerate":
        raise ConfigError(f"an accelerate config ({accelerate_config}) only applies to launcher='accelerate', "
                          f"not {launcher!r}.")
    py = sys.executable
    module = ["-m", "pipelines", "run", stage_name, *stage_args] if entry is None else list(entry)
    if launcher == "python":
        if num_processes != 1:
            raise ConfigError("launcher='python' runs one process: use accelerate, torchrun or deepspeed for more.")
        return [py, *module]
    if launcher == "accelerate":
        cmd = [py, "-m", "accelerate.commands.launch"]
        if accelerate_config is not None:
            cfg = accelerate_config_path(accelerate_config)
            if not cfg.is_file():
                raise ConfigError(f"accelerate config {cfg} does not exist (see deploy/accelerate/).")
            cmd += ["--config_file", str(cfg)]
            if num_processes != 1:  # otherwise the file decides
                cmd += ["--num_processes", str(num_processes)]
        else:
            cmd += ["--num_processes", str(num_processes), "--num_machines", "1"]
            if num_processes > 1:
                # --multi_gpu starts the processes through torchrun; on a CPU-only machine the engine then
                # picks gloo. (`--cpu --num_processes N` would start ONE process unless mpirun is set up.)
                cmd += ["--multi_gpu"]
            cmd += ["--mixed_precision", "no", "--dynamo_backend", "no"]  # TrainConfig.precision/compile decide
        return [*cmd, *extra_args, *module]
    if launcher == "torchrun":
        return [py, "-m", "torch.distributed.run", "--nproc_per_node", str(num_processes), *extra_args, *module]
    if module[:1] == ["-m"]:
        module = ["--module", *module[1:]]  # the deepspeed runner's spelling (it refuses -m)
    return [py, "-m", "deepspeed.launcher.runner", "--num_gpus", str(num_processes), "--no_local_rank", *extra_args,
            *module]
