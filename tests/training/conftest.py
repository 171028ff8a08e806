"""Fixtures of the training-engine tests: a tracker double, one CPU thread, small tasks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


class RecordingTracker:
    """Test double of pipelines.tracking.Tracker: records what the engine sends."""

    run_id = "recorded-run"

    def __init__(self):
        self.continued: list[tuple[str, int]] = []
        self.metrics: list[tuple[int | None, dict[str, float]]] = []
        self.artifacts: list[Path] = []
        self.cards: list[str] = []
        self.registered: list[tuple[Path, str]] = []

    def continue_run(self, run_id, at_step):
        self.continued.append((run_id, at_step))
        return True

    def log_metrics(self, metrics, step=None):
        self.metrics.append((step, dict(metrics)))

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append(Path(path))

    def log_model_card(self, text, artifact_path="model"):
        self.cards.append(text)

    def register_model(self, path, name, description=""):
        self.registered.append((Path(path), name))
        return str(len(self.registered))

    def series(self, key: str) -> list[tuple[int, float]]:
        return [(step, m[key]) for step, m in self.metrics if key in m]


@pytest.fixture
def tracker():
    return RecordingTracker()


@pytest.fixture
def no_launcher_env(monkeypatch):
    """A clean environment: no launcher variable of the test runner's own leaks into the run."""
    import os

    for key in [k for k in os.environ if k.startswith("ACCELERATE_")]:
        monkeypatch.delenv(key)
    return monkeypatch


@pytest.fixture
def one_thread():
    """Bit-exact comparisons between runs need the same intra-op thread count (subprocesses use 1)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
