"""Load a script of benchmarks/ as a module (the folder is no package) and run it as a user would."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    """benchmarks/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def run(name: str, *args: str) -> subprocess.CompletedProcess:
    """``python benchmarks/<name>.py ARGS`` from the repository root; fails the test on a non-zero exit."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done
