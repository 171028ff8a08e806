"""`dvc repro` keeps the last good outputs, as `python -m pipelines run` and Dagster do (issue #48).

dvc.yaml declares every output ``persist: true``, so DVC does not delete a stage's outputs before its command runs:
the runner's staging swap (pipelines/staging.py) replaces them whole on success, and a stage that fails its data
check, is refused or is killed leaves them, and dvc.lock, as they were. A real `dvc repro` of the committed dvc.yaml's
``synthetic`` and ``ingest_synthetic`` stages (the cheapest) in a small copy of the project: the pipelines package,
bin/python, params.yaml (smaller synthetic knobs), no git.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipelines.config import CODE_ROOT
from tests._cli import break_an_evidence_turn
from tests.browser.harness import BROWSER_PARAMS
from pipelines.locks import LOCK_DIR
from pipelines.staging import STAGING_DIR

DVC = str(Path(sys.executable).parent / "dvc")
STAGES = ("synthetic", "ingest_synthetic")
CANONICAL = "data/canonical/synthetic"
TINY = BROWSER_PARAMS["synthetic"]       # the test project copies' synthetic knobs (tests/browser/harness.py)
UP_TO_DATE = "Data and pipelines are up to date."


def files(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` and its bytes; None when it does not exist."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def environment(root: Path, store: Path) -> dict:
    drop = {"MNEMOS_ROOT", "MNEMOS_PROFILE", "MNEMOS_LOCK_TIMEOUT", "DVC_STAGE", "DVC_ROOT", "PYTHONPATH"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{store / 'mlflow.db'}",
               MNEMOS_ARTIFACT_ROOT=(store / "artifacts").as_uri(),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", DVC_NO_ANALYTICS="1")
    return env


def dvc(project, *args, check=True) -> subprocess.CompletedProcess:
    root, env = project
    proc = subprocess.run([DVC, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"dvc {args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def set_param(root: Path, section: str, key: str, value) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    params[section][key] = value
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The small project after a first, successful ``dvc repro``; the MLflow store of every run beside it."""
    base = tmp_path_factory.mktemp("dvc_repro")
    root, store = base / "project", base / "mlflow"
    shutil.copytree(CODE_ROOT / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "bin").mkdir()
    shutil.copy2(CODE_ROOT / "bin" / "python", root / "bin" / "python")
    shutil.copy2(CODE_ROOT / ".dvcignore", root / ".dvcignore")
    (root / ".venv").symlink_to(sys.prefix)  # bin/python runs .venv/bin/python, as after `make setup`
    params = yaml.safe_load((CODE_ROOT / "params.yaml").read_text())
    params["synthetic"].update(TINY)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    # The committed dvc.yaml's entries of the two stages, as they are (tests/test_stages.py: it is the generated one).
    committed = yaml.safe_load((CODE_ROOT / "dvc.yaml").read_text())["stages"]
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {n: committed[n] for n in STAGES}}, sort_keys=False))
    project = (root, environment(root, store))
    dvc(project, "init", "--no-scm", "-q")
    repro = dvc(project, "repro", "ingest_synthetic").stdout
    assert all(f"Running stage '{name}'" in repro for name in STAGES), repro
    assert dvc(project, "status").stdout.strip() == UP_TO_DATE  # persistent outputs recorded and cached as any
    return root, store


@pytest.fixture
def project(built, tmp_path):
    """A copy of the built project for one test: its outputs, dvc.lock and DVC cache as the first repro left them."""
    template, store = built
    root = tmp_path / "project"
    shutil.copytree(template, root, symlinks=True)
    return root, environment(root, store)


def test_a_stage_failing_its_data_check_keeps_its_outputs_and_dvc_lock(project):
    root, _ = project
    before, lock = files(root / CANONICAL), (root / "dvc.lock").read_bytes()
    assert before and "test.jsonl" in before

    # Bad data: a query's evidence names a turn that does not exist. DVC runs the validating stage alone on it (a
    # plain repro would regenerate the raw data first), whose blocking rule fails.
    raw = root / "data/raw/synthetic/test.jsonl"
    break_an_evidence_turn(raw)
    assert "ingest_synthetic:" in dvc(project, "status").stdout  # a changed dep: the stage is changed
    repro = dvc(project, "repro", "--single-item", "ingest_synthetic", check=False)
    assert "Running stage 'ingest_synthetic'" in repro.stdout, repro.stdout + repro.stderr
    assert repro.returncode != 0 and "evidence" in repro.stdout + repro.stderr
    assert files(root / CANONICAL) == before  # the last good canonical data, byte for byte
    assert (root / "dvc.lock").read_bytes() == lock

    # The raw data back from DVC's cache (a persistent output is checked out as any other).
    dvc(project, "checkout", "--force", "synthetic")
    assert dvc(project, "status").stdout.strip() == UP_TO_DATE
    assert not (root / STAGING_DIR).exists() or not any((root / STAGING_DIR).iterdir())


def test_a_refused_stage_keeps_its_outputs_and_dvc_lock(project):
    root, _ = project
    before, lock, params = files(root / CANONICAL), (root / "dvc.lock").read_bytes(), (root / "params.yaml").read_text()
    # A setting that cannot work stops the stage before it touches anything (exit 2).
    set_param(root, "ingest", "max_dropped_turn_share", 2.0)
    repro = dvc(project, "repro", "ingest_synthetic", check=False)
    assert "Running stage 'ingest_synthetic'" in repro.stdout and "Running stage 'synthetic'" not in repro.stdout
    assert repro.returncode != 0 and "max_dropped_turn_share" in repro.stdout + repro.stderr
    assert files(root / CANONICAL) == before
    assert (root / "dvc.lock").read_bytes() == lock

    # The setting back: the outputs and dvc.lock still agree, nothing to reproduce.
    (root / "params.yaml").write_text(params)
    assert dvc(project, "status").stdout.strip() == UP_TO_DATE
    assert not (root / STAGING_DIR).exists() or not any((root / STAGING_DIR).iterdir())


def stage_pid(root: Path, log: Path, name: str, deadline: float) -> int:
    """The pid of the process running stage ``name`` (from its lock file), once the stage itself runs: its staging
    folder exists and it logged that it starts."""
    started = f"stage {name}: starting"
    while True:
        assert time.time() < deadline, f"stage {name} never started:\n{log.read_text()[-3000:]}"
        text = log.read_text()
        assert f"stage {name}: done" not in text, "the stage finished before the kill"
        if started in text and (root / STAGING_DIR / name / "new").is_dir():
            holder = (root / LOCK_DIR / f"{name}.lock").read_text()
            if holder:
                return json.loads(holder)["pid"]
        time.sleep(0.05)


def test_a_stage_killed_mid_run_keeps_its_outputs_and_dvc_lock_and_the_next_repro_completes(project, tmp_path):
    root, env = project
    before, lock = files(root / CANONICAL), (root / "dvc.lock").read_bytes()
    # A change of its params (the loss policy, which the synthetic data never reaches): DVC reruns ingest_synthetic.
    current = yaml.safe_load((root / "params.yaml").read_text())["ingest"]["max_dropped_turn_share"]
    share = 0.4 if current == 0.5 else 0.5
    set_param(root, "ingest", "max_dropped_turn_share", share)

    log = tmp_path / "repro.log"
    with log.open("w") as out:
        repro = subprocess.Popen([DVC, "repro", "ingest_synthetic"], cwd=root, env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
        try:
            pid = stage_pid(root, log, "ingest_synthetic", time.time() + 120)
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert "pipelines run ingest_synthetic" in command, command  # the stage's own process
            os.kill(pid, signal.SIGKILL)
            repro.wait(timeout=120)
        finally:
            if repro.poll() is None:
                repro.kill()
                repro.wait()
    text = log.read_text()
    assert repro.returncode != 0 and "stage ingest_synthetic: done" not in text, text[-3000:]
    assert (root / STAGING_DIR / "ingest_synthetic").exists()  # killed while the stage ran: left to the next run
    assert files(root / CANONICAL) == before  # the last good canonical data, byte for byte
    assert (root / "dvc.lock").read_bytes() == lock

    # The next repro deletes the killed run's staging folder, runs the stage and records it.
    repro = dvc(project, "repro", "ingest_synthetic")
    assert "Running stage 'ingest_synthetic'" in repro.stdout and "Running stage 'synthetic'" not in repro.stdout
    assert "staging folder of an unfinished run" in repro.stdout + repro.stderr
    assert not (root / STAGING_DIR / "ingest_synthetic").exists()
    recorded = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["ingest_synthetic"]
    assert recorded["params"]["params.yaml"]["ingest"]["max_dropped_turn_share"] == share
    assert files(root / CANONICAL) == before  # the same data ingested again, with the new loss policy
    assert dvc(project, "status").stdout.strip() == UP_TO_DATE
