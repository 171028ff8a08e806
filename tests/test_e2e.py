"""End to end on a copy of the project: Dagster asset selection, the CLI and `dvc repro` run the
same stages and agree on what is up to date (a stage run by Dagster or the CLI is recorded in dvc.lock);
`dvc repro` runs the project's interpreter whatever `python` comes first on PATH; a corrupted input stops
the chain with a message naming file, record and rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests._cli import break_an_evidence_turn
from tests.browser.harness import BROWSER_PARAMS, copy_checkout

VENV_BIN = Path(sys.executable).parent
def copy_project(root: Path) -> None:
    """The committed code (every file git would ship) copied into ``root``, with the browser tests' smaller knobs
    (synthetic data, 2 questions a reader, fewer training passes: what these tests check holds whatever the models
    reach)."""
    copy_checkout(root, BROWSER_PARAMS)


def git_init(root: Path, env: dict) -> None:
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=root, check=True, env=env)


@pytest.fixture(scope="module")
def project(tmp_path_factory, smollm2_models):
    """A fresh git + DVC project holding the committed code, with smaller synthetic knobs (the shipped reader
    model converted once per test session: MNEMOS_LLM_MODELS)."""
    root = tmp_path_factory.mktemp("project")
    copy_project(root)
    home = root / ".dagster_home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", MNEMOS_ROOT=str(root),
               DAGSTER_HOME=str(home), MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow' / 'mlflow.db'}",
               MNEMOS_ARTIFACT_ROOT=(root / "mlflow" / "artifacts").as_uri(), PYTHONPATH=str(root),
               MNEMOS_LLM_MODELS=str(smollm2_models))
    git_init(root, env)
    return root, env


@pytest.fixture(scope="module")
def venv_project(tmp_path_factory):
    """A second fresh project as the README's set-up leaves it (``.venv`` in it: here a link to the test's
    virtualenv), used from a shell whose PATH starts with the system's ``python`` (no pandas, no mnemos)."""
    root = tmp_path_factory.mktemp("venv_project")
    copy_project(root)
    system = tmp_path_factory.mktemp("system_bin")
    (system / "python").symlink_to(Path(sys.base_prefix) / "bin" / "python3")  # the interpreter under .venv
    drop = {"MNEMOS_ROOT", "MNEMOS_ARTIFACT_ROOT", "MNEMOS_PROFILE", "MLFLOW_TRACKING_URI", "PYTHONPATH",
            "VIRTUAL_ENV", "DVC_STAGE", "DVC_ROOT"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.pathsep.join([str(system), "/usr/bin", "/bin"])
    git_init(root, env)
    (root / ".venv").symlink_to(sys.prefix)
    return root, env


def sh(project, *cmd, check=True):
    root, env = project
    proc = subprocess.run(list(cmd), cwd=root, env=env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def mlflow_runs(root: Path) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow' / 'mlflow.db'}")
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps, max_results=1000)


def test_dvc_yaml_in_copy_is_current(project):
    out = sh(project, "python", "-m", "pipelines", "dvc-yaml").stdout
    assert out == (project[0] / "dvc.yaml").read_text()


def test_dagster_select_then_dvc_repro_then_cli_run_the_same_stages(project):
    root, _ = project
    # 1. Dagster, with an asset selection (the antlr4 snag breaks --select if unfixed); each asset it
    #    materialises is recorded in dvc.lock, so DVC sees those stages up to date.
    sh(project, "dagster", "asset", "materialize", "-m", "assets.definitions", "--select", "synthetic,ingest_synthetic")
    first = (root / "data/canonical/synthetic/test.jsonl").read_bytes()
    assert first.startswith(b'{"schema": "mnemos.episodes"')
    status = sh(project, "dvc", "status", "--with-deps", "ingest_synthetic").stdout
    assert "Data and pipelines are up to date." in status, status
    # 2. dvc repro: the rest of the chain (not what Dagster ran), ending in the report and the DVC metrics.
    repro = sh(project, "dvc", "repro").stdout
    assert "Stage 'synthetic' didn't change" in repro and "Stage 'ingest_synthetic' didn't change" in repro, repro
    assert "Running stage 'benchmark'" in repro
    metrics = json.loads((root / "reports/metrics.json").read_text())
    assert "synthetic" in metrics
    assert (root / "reports/benchmark.md").read_text().startswith("#")
    shown = json.loads(sh(project, "dvc", "metrics", "show", "--json").stdout)[""]["data"]
    suite = yaml.safe_load((root / "pipelines/evaluate/suites/synthetic.yaml").read_text())
    ran = [s for s in suite["strategies"] if "missing" not in metrics["synthetic"][s]]
    readers = [*suite["strategies"], *suite["answers"]["references"]]  # the reference readers answer too
    assert ran and sorted(shown) == sorted(f"reports/headline/synthetic/{s}.json" for s in readers)
    for strategy in ran:  # the headline figures are metrics.json's, a handful per strategy
        figures = shown[f"reports/headline/synthetic/{strategy}.json"]["data"]
        assert 1 <= len(figures) <= 6 and "context_tokens" in figures
        assert any(key.startswith("answers/") for key in figures), figures  # its answer accuracy
        assert all(metrics["synthetic"][strategy][key] == pytest.approx(v, abs=1e-4) for key, v in figures.items())
    table = sh(project, "dvc", "metrics", "show").stdout.splitlines()  # one row per reader, a few columns
    assert len(table) == 1 + len(readers) and table[0].split()[0] == "Path", "\n".join(table)
    assert 2 <= len(table[0].split()) <= 8, table[0]
    # Same stages, same (deterministic) data, whoever runs them.
    assert (root / "data/canonical/synthetic/test.jsonl").read_bytes() == first
    # 3. The CLI reruns one stage by hand.
    out = sh(project, "python", "-m", "pipelines", "run", "synthetic").stdout
    assert json.loads(out.strip().splitlines()[-1])["episodes_test"] >= 1
    # One MLflow run per stage execution: dagster 2 + dvc (the stages Dagster did not run) + cli 1.
    from pipelines.stages import STAGES

    names = [r.info.run_name for r in mlflow_runs(root)]
    assert names.count("synthetic-tiny") == 2 and names.count("ingest_synthetic-tiny") == 1
    assert sorted(set(names)) == sorted(f"{STAGES[s].for_partition(None).run_name}-tiny" for s in STAGES)
    assert sh(project, "dvc", "status").stdout.strip().endswith("Data and pipelines are up to date.")
    assert sh(project, "dvc", "repro").stdout.count("didn't change") == len(STAGES)


def _figures(metrics: dict) -> dict:
    """metrics.json without what measures a run rather than the memories (wall times, the LLM calls' counts and
    cache hits: a second run answers from the response cache)."""
    return {suite: {name: {k: v for k, v in values.items()
                           if not (k.startswith("latency_ms") or k.endswith("_ms") or k.startswith("writer/"))}
                    for name, values in per.items() if name != "llm"}
            for suite, per in metrics.items()}


def test_benchmark_shards_run_as_dagster_partitions_and_merge_to_the_same_report(project):
    """params.yaml benchmark.shards: 2 makes benchmark_shard a partitioned asset (and a dvc.yaml foreach); its two
    partitions materialised by two Dagster runs, then the benchmark asset, report what one shard did."""
    root, env = project
    if not (root / "reports/metrics.json").exists():
        sh(project, "dagster", "asset", "materialize", "-m", "assets.definitions", "--select", "*")
    whole = _figures(json.loads((root / "reports/metrics.json").read_text()))
    params_text, dvc_text = (root / "params.yaml").read_text(), (root / "dvc.yaml").read_text()
    try:
        params = yaml.safe_load(params_text)
        params["benchmark"]["shards"] = 2
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        (root / "dvc.yaml").write_text(sh(project, "python", "-m", "pipelines", "dvc-yaml").stdout)
        assert {"benchmark_shard@0", "benchmark_shard@1"} <= set(sh(project, "dvc", "stage", "list").stdout.split())
        whole_select = sh(project, "dagster", "asset", "materialize", "-m", "assets.definitions", "--select", "*",
                          check=False)
        assert whole_select.returncode != 0 and "partition" in whole_select.stderr  # Dagster asks for a partition
        for key in ("0", "1"):  # one run per partition (side by side: test_benchmark_concurrency, untracked)
            sh(project, "dagster", "asset", "materialize", "-m", "assets.definitions", "--select", "benchmark_shard",
               "--partition", key)
        for key in ("0", "1"):
            manifest = json.loads((root / f"reports/shards/{key}/synthetic/manifest.json").read_text())
            assert manifest["complete"] and manifest["shard"] == int(key) and manifest["shards"] == 2
        sh(project, "dagster", "asset", "materialize", "-m", "assets.definitions", "--select", "benchmark")
        assert _figures(json.loads((root / "reports/metrics.json").read_text())) == whole
    finally:
        (root / "params.yaml").write_text(params_text)
        (root / "dvc.yaml").write_text(dvc_text)


def _files(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` and its bytes; None when it does not exist."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_corrupted_input_stops_the_chain_naming_file_record_rule(project):
    root, _ = project
    raw = root / "data/raw/synthetic/test.jsonl"
    if not raw.exists():
        sh(project, "python", "-m", "pipelines", "run", "synthetic", "--no-track")
    if not (root / "data/canonical/synthetic").exists():  # a last good canonical data set, which must survive
        sh(project, "python", "-m", "pipelines", "run", "ingest_synthetic", "--no-track")
    break_an_evidence_turn(raw)
    for rel in ("reports/benchmark.md", "reports/metrics.json"):
        (root / rel).unlink(missing_ok=True)

    # CLI: non-zero exit, message naming file, record and rule; the canonical data of the last good run (if
    # any) stays exactly as it was (pipelines/staging.py): nothing of the corrupted file is written.
    canonical = root / "data/canonical/synthetic"
    before = _files(canonical)
    proc = sh(project, "python", "-m", "pipelines", "run", "ingest_synthetic", "--no-track", check=False)
    assert proc.returncode == 5   # bad data (pipelines.errors.EXIT_CODES)
    assert "test.jsonl" in proc.stderr and "line 2" in proc.stderr and "rule '" in proc.stderr
    assert _files(canonical) == before
    # dvc repro: the same (dvc.yaml's outputs persist: DVC leaves them to the runner, which keeps them when the
    # stage fails). DVC would regenerate a corrupted stage output, so run the validating stage alone on it.
    repro = sh(project, "dvc", "repro", "--single-item", "ingest_synthetic", check=False)
    assert repro.returncode != 0 and "evidence" in repro.stderr + repro.stdout
    assert _files(canonical) == before

    # Dagster: the blocking asset check fails and the downstream benchmark asset never runs.
    proc = sh(project, "dagster", "asset", "materialize", "-m", "assets.definitions",
              "--select", "ingest_synthetic*", check=False)
    log = proc.stdout + proc.stderr
    assert "ASSET_CHECK_EVALUATION" in log or "check" in log.lower()
    assert not (root / "reports/metrics.json").exists()
    assert _files(canonical) == before
    report = json.loads((root / "reports/validation/synthetic.json").read_text())
    assert any(not r["passed"] for r in report["rules"])


def test_cli_runs_are_recorded_and_dvc_repro_reruns_only_what_changed(venv_project):
    root, _ = venv_project
    python, dvc = str(root / ".venv/bin/python"), str(root / ".venv/bin/dvc")
    chain = ("synthetic", "ingest_synthetic", "emma_examples")
    assert sh(venv_project, "python", "-c", "import pandas", check=False).returncode != 0  # the system python
    for name in chain:
        sh(venv_project, python, "-m", "pipelines", "run", name, "--no-track")
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    assert set(lock) == set(chain)
    status = sh(venv_project, dvc, "status", "--with-deps", "emma_examples").stdout
    assert "Data and pipelines are up to date." in status, status
    repro = sh(venv_project, dvc, "repro", "emma_examples").stdout
    assert "Running stage" not in repro and all(f"Stage '{n}' didn't change" in repro for n in chain), repro

    # A param of emma_examples alone: DVC sees that stage changed, and reruns it alone, with the project's python.
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["emma"]["formats"]["negatives_per_positive"] = 2.0
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = sh(venv_project, dvc, "status", "--with-deps", "emma_examples").stdout
    assert "emma_examples:" in status and "synthetic:" not in status, status
    repro = sh(venv_project, dvc, "repro", "emma_examples").stdout
    assert "Running stage 'emma_examples'" in repro, repro
    assert "Running stage 'synthetic'" not in repro and "Running stage 'ingest_synthetic'" not in repro, repro
    assert "up to date" in sh(venv_project, dvc, "status", "--with-deps", "emma_examples").stdout


def test_a_run_with_overrides_leaves_dvc_seeing_the_stage_changed(venv_project):
    root, _ = venv_project
    sh(venv_project, str(root / ".venv/bin/python"), "-m", "pipelines", "run", "synthetic", "--no-track",
       "--set", "synthetic.turns=4")
    status = sh(venv_project, str(root / ".venv/bin/dvc"), "status", "synthetic").stdout
    assert "synthetic:" in status and "changed outs" in status, status
