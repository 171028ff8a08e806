"""Data stages: a real source configured in params.yaml becomes an ingestion stage with checks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from pipelines.config import CODE_ROOT

FIXTURE = CODE_ROOT / "tests/data/loaders/fixtures/locomo10_fixture.json"


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MNEMOS_ROOT=str(root), MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}",
               MNEMOS_ARTIFACT_ROOT=(root / "artifacts").as_uri())
    return subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=CODE_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_configured_source_becomes_a_validated_ingestion_stage(tmp_path):
    params = yaml.safe_load((CODE_ROOT / "params.yaml").read_text())
    shutil.copy(FIXTURE, tmp_path / "locomo10.json")
    params["sources"]["locomo"] = "locomo10.json"  # relative to the project folder
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))

    listing = run(tmp_path, "list")
    assert "ingest_locomo" in listing.stdout
    dvc = yaml.safe_load(run(tmp_path, "dvc-yaml").stdout)
    assert dvc["stages"]["ingest_locomo"]["deps"][0] == "locomo10.json"

    proc = run(tmp_path, "run", "ingest_locomo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["episodes"] >= 1 and summary["queries"] >= 1
    assert (tmp_path / "data/canonical/locomo/test.jsonl").exists()
    report = json.loads((tmp_path / "reports/validation/locomo.json").read_text())
    assert report["passed"] is True and {r["name"] for r in report["rules"]} >= {"episode_ids_unique"}


def test_ingest_cli_prints_counts_as_last_line(tmp_path):
    proc = run(tmp_path, "ingest", "--source", "locomo", "--path", str(FIXTURE), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(counts) >= {"episodes", "sessions", "turns", "memories", "queries", "triplets", "dropped"}
    assert (tmp_path / "out" / "test.jsonl").exists()
