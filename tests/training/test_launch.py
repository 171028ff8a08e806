"""Launch commands: one code path, the topology is a launcher setting."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipelines.errors import ConfigError
from pipelines.training.launch import DEPLOY_DIR, launch_command

PY = sys.executable


def test_accelerate_with_a_deploy_config():
    cfg = str(DEPLOY_DIR / "accelerate" / "gpu_multi.yaml")
    assert launch_command("mdr_teacher", accelerate_config="gpu_multi") == [
        PY, "-m", "accelerate.commands.launch", "--config_file", cfg, "-m", "pipelines", "run", "mdr_teacher"]
    assert launch_command("mdr_teacher", accelerate_config="gpu_multi", num_processes=4,
                          stage_args=["--profile", "paper"]) == [
        PY, "-m", "accelerate.commands.launch", "--config_file", cfg, "--num_processes", "4",
        "-m", "pipelines", "run", "mdr_teacher", "--profile", "paper"]


def test_accelerate_without_config_uses_torchrun_for_several_processes():
    assert launch_command("s", num_processes=2, extra_args=["--main_process_port", "29700"]) == [
        PY, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1", "--multi_gpu",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29700",
        "-m", "pipelines", "run", "s"]
    assert "--multi_gpu" not in launch_command("s", num_processes=1)


def test_torchrun_deepspeed_and_python():
    assert launch_command("s", launcher="torchrun", num_processes=8, extra_args=["--nnodes", "2"]) == [
        PY, "-m", "torch.distributed.run", "--nproc_per_node", "8", "--nnodes", "2", "-m", "pipelines", "run", "s"]
    assert launch_command("s", launcher="deepspeed", num_processes=4) == [
        PY, "-m", "deepspeed.launcher.runner", "--num_gpus", "4", "--no_local_rank", "--module", "pipelines", "run", "s"]
    assert launch_command("s", launcher="python") == [PY, "-m", "pipelines", "run", "s"]
    assert launch_command("s", launcher="torchrun", entry=["bench.py", "--tiny"]) == [
        PY, "-m", "torch.distributed.run", "--nproc_per_node", "1", "bench.py", "--tiny"]


@pytest.mark.parametrize("kwargs, message", [
    ({"launcher": "mpirun"}, "launcher 'mpirun' is unknown"),
    ({"num_processes": 0}, "at least one process"),
    ({"launcher": "torchrun", "accelerate_config": "gpu_1"}, "only applies to launcher='accelerate'"),
    ({"accelerate_config": "no_such_setup"}, "does not exist"),
    ({"launcher": "python", "num_processes": 2}, "runs one process"),
])
def test_bad_launch_settings(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        launch_command("s", **kwargs)


def test_every_deploy_config_is_accepted_by_accelerate():
    from accelerate.commands.config.config_args import load_config_from_file

    names = sorted(p.stem for p in (DEPLOY_DIR / "accelerate").glob("*.yaml"))
    assert names == ["cpu_1proc", "cpu_2proc", "deepspeed_zero2", "deepspeed_zero2_offload", "deepspeed_zero3",
                     "gpu_1", "gpu_multi", "multi_node"]
    for name in names:
        cfg = load_config_from_file(str(DEPLOY_DIR / "accelerate" / f"{name}.yaml"))
        assert cfg.num_processes >= 1
        if name.startswith("deepspeed_"):
            ds_file = cfg.deepspeed_config["deepspeed_config_file"]
            assert (DEPLOY_DIR.parent / ds_file).is_file()


def test_the_accelerate_entry_point_parses_the_command():
    cmd = launch_command("s", accelerate_config="cpu_2proc")
    done = subprocess.run([cmd[0], "-m", "accelerate.commands.launch", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "--config_file" in done.stdout and "--module" in done.stdout
