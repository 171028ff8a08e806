"""What the training-throughput benchmarks share: each contender runs in a process of its own and
reports one ``RESULT {json}`` line, and the device is synchronised only at the edges of the timed
window (never per step), so the CPU may run ahead of the GPU as in a real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "RESULT "


def sync() -> None:
    """Wait for the GPU's queued work (no-op without CUDA)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def edge_stamps(first: int, last: int, stamps: dict[int, float], marks: dict[int, int] | None = None, mark=None):
    """A transformers TrainerCallback writing ``stamps[step]`` (after a device sync) at the end of
    optimizer steps ``first`` and ``last`` only, and ``marks[step] = mark()`` there when given (the implicit
    syncs counted so far: those of the timed window are the difference)."""
    from transformers import TrainerCallback

    class Edges(TrainerCallback):
        def on_step_end(self, targs, state, control, **kwargs):
            if state.global_step in (first, last):
                sync()
                stamps[state.global_step] = time.perf_counter()
                if mark is not None and marks is not None:
                    marks[state.global_step] = mark()

    return Edges()


def emit(result: dict) -> None:
    """Print a contender's result as the line :func:`run_contender` reads."""
    print(PREFIX + json.dumps(result), flush=True)


def run_contender(cmd: list[str]) -> dict | None:
    """Run ``cmd`` (a benchmark's child invocation) from the repository root, offline, and return its
    reported result; None after writing the end of its output to stderr when it failed."""
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(PREFIX)]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-6000:])
        return None
    return json.loads(lines[-1][len(PREFIX):])
