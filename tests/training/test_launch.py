"""Launch commands: one code path, the topology is a launcher setting."""

from __future__ import annotations

import shlex
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
        PY, "-m", "deepspeed.launcher.runner", "--num_gpus", "4", "--no_local_rank",
        "--module", "pipelines", "run", "s"]
    assert launch_command("s", launcher="python") == [PY, "-m", "pipelines", "run", "s"]
    assert launch_command("s", launcher="torchrun", entry=["bench.py", "--tiny"]) == [
        PY, "-m", "torch.distributed.run", "--nproc_per_node", "1", "bench.py", "--tiny"]


def test_deepspeeds_runner_gets_a_module_entry_as_its_module_flag():
    """One entry for every launcher: DeepSpeed's runner refuses ``-m`` and spells it ``--module``."""
    entry = ["-m", "tests.training.tiny_task", "--out", "o"]
    assert launch_command("s", launcher="deepspeed", num_processes=2, entry=entry) == [
        PY, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--no_local_rank",
        "--module", "tests.training.tiny_task", "--out", "o"]
    assert launch_command("s", launcher="torchrun", entry=entry)[-4:] == entry
    assert launch_command("s", launcher="deepspeed", entry=["train.py", "-m", "x"])[-3:] == ["train.py", "-m", "x"]


def test_several_machines_are_launcher_options():
    """The README's two-machine forms (tests/training/test_launchers.py runs them on localhost)."""
    cfg = str(DEPLOY_DIR / "accelerate" / "multi_node.yaml")
    assert launch_command("s", accelerate_config="multi_node", extra_args=["--machine_rank", "1"]) == [
        PY, "-m", "accelerate.commands.launch", "--config_file", cfg, "--machine_rank", "1",
        "-m", "pipelines", "run", "s"]
    assert launch_command("s", launcher="torchrun", num_processes=8, extra_args=[
        "--nnodes", "2", "--node_rank", "0", "--master_addr", "10.0.0.1", "--master_port", "29500"]) == [
        PY, "-m", "torch.distributed.run", "--nproc_per_node", "8", "--nnodes", "2", "--node_rank", "0",
        "--master_addr", "10.0.0.1", "--master_port", "29500", "-m", "pipelines", "run", "s"]


def _readme_launches() -> list[list[str]]:
    """Every launcher command deploy/README.md prints (continued lines joined), as argv after ``python -m``."""
    text = (DEPLOY_DIR / "README.md").read_text().replace("\\\n", " ")
    return [shlex.split(line, comments=True)[2:] for line in text.splitlines()
            if line.startswith("python -m ") and not line.startswith("python -m pipelines ")]


README_LAUNCHES = _readme_launches()


def test_the_readme_shows_every_launcher():
    assert {cmd[0] for cmd in README_LAUNCHES} == {
        "accelerate.commands.launch", "torch.distributed.run", "deepspeed.launcher.runner"}
    assert len(README_LAUNCHES) >= 7


@pytest.mark.parametrize("cmd", README_LAUNCHES, ids=" ".join)
def test_every_readme_launch_command_parses(cmd):
    """Each launcher's own parser (and accelerate's check of the command against its config file) accepts the
    README's command, and it launches ``pipelines run STAGE`` as a module, or the tests' tiny task."""
    module, argv = cmd[0], cmd[1:]
    if module == "accelerate.commands.launch":
        from accelerate.commands.launch import _validate_launch_command, launch_command_parser

        args = launch_command_parser().parse_args(argv)
        assert (DEPLOY_DIR.parent / args.config_file).is_file()
        _validate_launch_command(args)
        script, script_args, as_module = args.training_script, args.training_script_args, args.module
    elif module == "torch.distributed.run":
        from torch.distributed.run import get_args_parser

        args = get_args_parser().parse_args(argv)
        script, script_args, as_module = args.training_script, args.training_script_args, args.module
    else:
        assert module == "deepspeed.launcher.runner"
        from deepspeed.launcher.runner import parse_args

        args = parse_args(argv)
        assert args.no_local_rank  # the stage CLI takes no --local_rank
        script, script_args, as_module = args.user_script, args.user_args, args.module
    launched = f"-m {script}" if as_module else script
    assert launched in ("-m pipelines", "-m tests.training.tiny_task", "tests/training/tiny_task.py")
    assert script != "pipelines" or script_args[0] == "run"


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
