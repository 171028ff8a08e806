"""The one registry and the views derived from it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.config import CODE_ROOT, resolve
from pipelines.stages import PYTHON, STAGES, dvc_yaml, upstream


def test_committed_dvc_yaml_matches_the_registry():
    committed = (CODE_ROOT / "dvc.yaml").read_text()
    assert committed == dvc_yaml(), "dvc.yaml drifted from pipelines/stages.py: run `make dvc-yaml` and commit"


def test_every_stage_is_complete():
    params = resolve()
    outputs = {}
    for stage in STAGES.values():
        assert stage.description, f"{stage.name} needs a docstring (it is the asset description)"
        assert stage.outputs, f"{stage.name} declares no output"
        for section in stage.params:
            assert section in params, f"{stage.name} reads params section {section!r} missing from params.yaml"
        for out in stage.outputs:
            assert out not in outputs, f"{out} is written by both {outputs.get(out)} and {stage.name}"
            outputs[out] = stage.name


def test_dependencies_are_derived_from_paths_and_acyclic():
    order = list(STAGES)
    for stage in STAGES.values():
        for dep in upstream(stage):
            assert order.index(dep) < order.index(stage.name), f"{dep} must be registered before {stage.name}"
    assert upstream(STAGES["ingest_synthetic"]) == ["synthetic"]
    assert "ingest_synthetic" in upstream(STAGES["benchmark"])


def test_dvc_yaml_runs_the_cli_and_tracks_metrics_and_plots():
    doc = yaml.safe_load(dvc_yaml())
    assert set(doc["stages"]) == set(STAGES)
    for name, entry in doc["stages"].items():
        if STAGES[name].partitions:  # a partitioned stage: one DVC stage per key (<name>@<key>)
            assert entry["foreach"] == list(STAGES[name].partitions)
            entry = entry["do"]
            assert entry["cmd"] == f"bin/python -m pipelines run {name} --partition ${{item}}"
            assert all("${item}" in path for out in entry["outs"] for path in out)
        else:
            assert entry["cmd"] == f"bin/python -m pipelines run {name}"
        assert "profile" in entry["params"]
        # Every output persists: DVC leaves it to the runner's staging swap instead of deleting it before the command,
        # so a failed, refused or killed `dvc repro` of the stage keeps the last good outputs (tests/test_dvc_repro.py).
        for out in [*entry["outs"], *entry.get("metrics", [])]:
            ((path, flags),) = out.items()
            assert flags.get("persist") is True, f"{name}: output {path} is not persist: true"
    # The DVC metrics are the headline figures, one file per suite and strategy; metrics.json is a plain out.
    assert doc["stages"]["benchmark"]["metrics"] == [{"reports/headline": {"cache": False, "persist": True}}]
    assert {"reports/metrics.json": {"persist": True}} in doc["stages"]["benchmark"]["outs"]
    assert doc["plots"], "the benchmark plots are DVC plots"


# dvc.yaml's interpreter: DVC runs a cmd through a shell with the caller's PATH, where `python` may be the
# system one (no pandas). bin/python is the project's, whichever python comes first on PATH.
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"  # the interpreter under .venv: no mnemos, no pandas


def launch(project: Path, path: list[Path]) -> subprocess.CompletedProcess:
    """``project/bin/python`` printing the interpreter it runs, with only ``path`` on PATH (+ /usr/bin:/bin)."""
    env = {"PATH": os.pathsep.join([*map(str, path), "/usr/bin", "/bin"]), "HOME": os.environ.get("HOME", "/")}
    return subprocess.run([str(project / PYTHON), "-c", "import sys, pandas; print(sys.prefix)"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=120)


def copy_launcher(tmp_path: Path, system_python: bool = True) -> tuple[Path, list[Path]]:
    """A project folder holding bin/python only, and a PATH folder whose `python` is the base interpreter."""
    (tmp_path / "project" / "bin").mkdir(parents=True)
    launcher = tmp_path / "project" / PYTHON
    launcher.write_bytes((CODE_ROOT / PYTHON).read_bytes())
    launcher.chmod(0o755)
    system = tmp_path / "system"
    system.mkdir()
    (system / "python").symlink_to(BASE_PYTHON)
    return tmp_path / "project", [system]


def test_the_launcher_is_executable_in_the_checkout():
    assert os.access(CODE_ROOT / PYTHON, os.X_OK)
    mode = subprocess.run(["git", "ls-files", "-s", PYTHON], cwd=CODE_ROOT, capture_output=True, text=True).stdout
    assert not mode or mode.startswith("100755"), f"git must record {PYTHON} as executable: {mode}"


def test_the_launcher_runs_the_projects_venv_before_the_python_on_path(tmp_path):
    project, path = copy_launcher(tmp_path)
    (project / ".venv").symlink_to(sys.prefix)
    proc = launch(project, path)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == project / ".venv"


def test_without_a_venv_the_launcher_takes_a_python_on_path_with_mnemos_installed(tmp_path):
    project, path = copy_launcher(tmp_path)
    proc = launch(project, [*path, Path(sys.executable).parent])  # `python` lacks mnemos; the venv's python3 has it
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == Path(sys.prefix)


def test_without_any_python_with_mnemos_the_launcher_says_how_to_get_one(tmp_path):
    project, path = copy_launcher(tmp_path)
    proc = launch(project, path)
    assert proc.returncode == 127 and "ModuleNotFoundError" not in proc.stderr
    assert f"{project}/.venv/bin/python does not exist (run `make setup`)" in proc.stderr
    assert f"pip install -e {project}" in proc.stderr


def test_the_benchmark_reads_the_method_stages_outputs_through_the_registry():
    """pipelines/evaluate/stage.py names the stages whose models it reads (output_of), not their paths."""
    from pipelines.registry import OutputOf

    bench = STAGES["benchmark"]
    for name in ("mdr_examples", "mdr_decoder", "emma_retriever", "emma_dialogue", "glong_extractor", "reranker"):
        assert STAGES[name].outputs[0] in bench.inputs and upstream(bench).count(name) == 1
    assert not any(isinstance(i, OutputOf) for s in STAGES.values() for i in s.inputs)   # all resolved
    with pytest.raises(ValueError, match="reads an output of stage 'nosuch', which is not registered"):
        OutputOf("nosuch").resolve("benchmark")


def test_the_registry_and_the_dagster_definitions_load_without_torch():
    """Every stage process, Dagster step and CLI command loads the registry first: torch (about 2 s to import)
    is imported by the stages that build a model, when they run, not by the registry."""
    code = ("import sys, pipelines.stages, assets.definitions; "
            "print(sorted(m for m in ('torch', 'transformers', 'bitsandbytes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
