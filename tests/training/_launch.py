"""What the tests that launch training processes share: a free port, the environment a launcher must start from,
and a launch that fails the test with its output."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The variables a launcher sets for its processes: inherited from an outer launch they would mislead the inner one.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def launch_env(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment without any launcher's variables (nor ``drop``), one compute thread a process."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCH_VARS and k not in drop and not k.startswith("ACCELERATE_")}
    return {**env, "OMP_NUM_THREADS": "1"}


def run_launch(cmd: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository root in :func:`launch_env`; fail the test with its stderr unless it succeeds."""
    done = subprocess.run(cmd, cwd=ROOT, env=launch_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-4000:]}"
    return done
