"""Shared test set-up: offline, quiet, and never touching the project's own MLflow store."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import pipelines.stages  # noqa: F401  (the stage packages declare the config sections the resolver checks)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Exports of encoders and re-rankers that the tests (and the commands they start) make go to the project's own
# cache, not the user's ~/.cache/mnemos/encoders; those of models that lived in temporary folders (the tests' random
# re-rankers, one new folder of 4-90 MB a run) are removed at the end of the session (pytest_sessionfinish below).
TEST_ENCODERS = Path(__file__).resolve().parents[1] / ".cache" / "test-encoders"
os.environ.setdefault("MNEMOS_ENCODER_DIR", str(TEST_ENCODERS))
TEST_LLM_MODELS = TEST_ENCODERS.parent / "test-llm-models"
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one worker per core (pytest-xdist): one compute thread each, never oversubscribed.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


# Scheduling of `make test` (pytest-xdist's loadscope: a module's tests on one worker, sharing its fixtures). The
# browser tests share one whole-graph run (tests/browser/conftest.py's package fixtures): one scope, so one worker
# runs it once. The long scopes start first, so no worker is left with one of them at the end while the others idle
# (xdist's own order is by number of tests, which puts these last). The order changes speed only, never a result.
SHARED_SCOPES = ("tests/browser/",)
LONG_SCOPES = ("tests/browser/", "tests/test_e2e.py", "tests/training/test_distributed.py", "tests/test_cli_shards.py",
               "tests/evaluate/test_benchmark_concurrency.py", "tests/memory/peers/test_mem0.py",
               "tests/data/test_stage.py", "tests/test_cli_benchmark.py", "tests/training/test_zero3.py",
               "tests/training/test_launchers.py", "tests/evaluate/test_shard_faults.py",
               "tests/evaluate/test_write_faults.py")


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LongFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((s for s in SHARED_SCOPES if nodeid.startswith(s)), None) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            for scope in reversed(LONG_SCOPES):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LongFirst(config, log)


def pytest_sessionfinish(session, exitstatus):
    """Remove the test encoder cache's exports of models from temporary folders (never reused: each test run trains
    new ones); the shipped MiniLM's stay for the next run. Only in the controller, after every worker ended."""
    if hasattr(session.config, "workerinput") or not TEST_ENCODERS.is_dir():
        return
    temp = Path(tempfile.gettempdir()).resolve()
    for meta in TEST_ENCODERS.glob("*/encoder.json"):
        try:
            source = Path(json.loads(meta.read_text())["source"]).resolve()
        except (OSError, ValueError, KeyError):
            continue
        if source.is_relative_to(temp):
            shutil.rmtree(meta.parent, ignore_errors=True)


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """A real, empty MLflow store (SQLite + artifact folder) in a temp dir."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MNEMOS_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    return uri


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """The folder of a tiny random Llama with a chat template (tests/llm/_tiny.py), one per session."""
    from tests.llm._tiny import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "model")


@pytest.fixture(scope="session")
def smollm2_models():
    """A models folder holding the shipped SmolLM2 GGUF converted (about 20 s on 2 cores) once for every worker and
    every later test run: ``.cache/test-llm-models`` (the conversion is locked and renamed into place, so the other
    workers wait for it and never read half a folder; a new GGUF is converted again, as in a user's models folder).
    Point ``MNEMOS_LLM_MODELS`` at it so a project copy or a CLI run reuses it instead of converting again."""
    from pipelines.llm.local import resolve_model

    resolve_model("smollm2-135m-instruct", TEST_LLM_MODELS)
    return TEST_LLM_MODELS


@pytest.fixture
def registry(monkeypatch, tmp_path):
    """An empty stage registry (tests put their stages in it) and a tiny-profile params.yaml in ``tmp_path``."""
    import pipelines.stages as stages_mod

    (tmp_path / "params.yaml").write_text("profile: tiny\nseed: 1\nbenchmark: {embedding_batch_size: 5}\n")
    table = {}
    monkeypatch.setattr(stages_mod, "STAGES", table)
    return table
