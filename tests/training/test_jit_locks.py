"""A DeepSpeed op build killed half-way leaves torch's lock file: the run names it instead of waiting forever.

The lock files here are real files in a temporary TORCH_EXTENSIONS_DIR; "held" means this test process has it open,
as torch's FileBaton does while it builds.
"""

from __future__ import annotations

import logging
import os
import time

import pytest

from pipelines.errors import ConfigError
from pipelines.training import engine, jit_locks
from pipelines.training.config import TrainConfig
from pipelines.training.launch import DEPLOY_DIR

from tests.training.tiny_task import TinyLMTask


def make_lock(root, op: str, age_s: float):
    lock = root / op / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def test_no_lock_no_error(tmp_path):
    (tmp_path / "deepspeed_shm_comm").mkdir()                       # built before: a folder, no lock
    jit_locks.refuse_stale_build_locks({"deepspeed_shm_comm"}, root=tmp_path)


def test_an_old_lock_nobody_holds_is_refused_by_name(tmp_path):
    lock = make_lock(tmp_path, "deepspeed_shm_comm", age_s=3600)
    with pytest.raises(ConfigError) as err:
        jit_locks.refuse_stale_build_locks({"deepspeed_shm_comm", "cpu_adam"}, root=tmp_path)
    assert str(lock) in str(err.value) and "'deepspeed_shm_comm'" in str(err.value)
    assert "60 minutes ago" in str(err.value) and "wait forever" in str(err.value)
    assert err.value.hint.startswith(f"remove it (rm {lock})")


def test_a_lock_held_open_is_a_build_in_progress(tmp_path, caplog):
    lock = make_lock(tmp_path, "cpu_adam", age_s=3600)
    fd = os.open(lock, os.O_RDONLY)                                 # as FileBaton holds it while it builds
    try:
        with caplog.at_level(logging.INFO, logger="mnemos"):
            jit_locks.refuse_stale_build_locks({"cpu_adam"}, root=tmp_path)
    finally:
        os.close(fd)
    assert "being built by another process" in caplog.text


def test_a_young_lock_nobody_holds_is_named_in_a_warning(tmp_path, caplog):
    lock = make_lock(tmp_path, "deepspeed_shm_comm", age_s=30)
    with caplog.at_level(logging.WARNING, logger="mnemos"):
        jit_locks.refuse_stale_build_locks({"deepspeed_shm_comm"}, root=tmp_path)
    assert str(lock) in caplog.text and "waits forever" in caplog.text


def test_only_deepspeeds_ops_are_looked_at(tmp_path):
    make_lock(tmp_path, "someone_elses_extension", age_s=3600)
    jit_locks.refuse_stale_build_locks({"deepspeed_shm_comm"}, root=tmp_path)
    assert "cpu_adam" in jit_locks.deepspeed_ops()                  # an op of every accelerator's builders


def test_the_root_is_torchs(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert jit_locks.extensions_root() == tmp_path
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    root = jit_locks.extensions_root()
    assert root.parent.name == "torch_extensions" and root.name.startswith("py3")


def test_a_deepspeed_run_stops_before_anything_is_written(tmp_path, no_launcher_env):
    no_launcher_env.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    make_lock(tmp_path / "ext", "deepspeed_shm_comm", age_s=3600)
    config = TrainConfig(output_dir=str(tmp_path / "run"), deepspeed=str(DEPLOY_DIR / "deepspeed" / "zero2.json"),
                         max_steps=2, batch_size=4)
    with pytest.raises(ConfigError, match="deepspeed_shm_comm"):
        engine.train(TinyLMTask(), config, progress=False)
    assert not (tmp_path / "run").exists()
