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
    # what was dropped, with the first record of each reason, and the warnings (the stage's metadata)
    assert summary["dropped"]["bad_turn"] == 1 and summary["warnings"] == {"short_utterances": 1}
    assert summary["examples"]["bad_turn"] == [
        f"file {tmp_path / 'locomo10.json'}, record item 0 (conv-1) session_3 turn 2, field 'text': missing required "
        "field"]
    assert (tmp_path / "data/canonical/locomo/test.jsonl").exists()
    report = json.loads((tmp_path / "reports/validation/locomo.json").read_text())
    assert report["passed"] is True and {r["name"] for r in report["rules"]} >= {"episode_ids_unique"}
    assert report["load"]["dropped"]["bad_turn"] == 1
    assert "<h2>Normalised on load</h2>" in (tmp_path / "reports/validation/locomo.html").read_text()


def test_ingest_cli_prints_counts_as_last_line(tmp_path):
    shutil.copy(CODE_ROOT / "params.yaml", tmp_path / "params.yaml")  # ingest reads params.yaml ingest
    proc = run(tmp_path, "ingest", "--source", "locomo", "--path", str(FIXTURE), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(counts) >= {"episodes", "sessions", "turns", "memories", "queries", "triplets", "dropped"}
    assert (tmp_path / "out" / "test.jsonl").exists()


def test_methods_learn_from_the_datasets_named_in_their_sources(tmp_path):
    """mdr.sources / emma.sources: the stages read every named canonical dataset (split by split), their
    inputs (Dagster deps, dvc.yaml deps) follow, and a source that was never ingested is a clear error."""
    fixtures = CODE_ROOT / "tests/data/loaders/fixtures"
    params = yaml.safe_load((CODE_ROOT / "params.yaml").read_text())
    shutil.copytree(fixtures / "convai2", tmp_path / "convai2")
    shutil.copytree(CODE_ROOT / "tests/evaluate/fixtures/misc", tmp_path / "misc")
    params["sources"].update(convai2="convai2", misc="misc")
    params["synthetic"].update(episodes=6, sessions=3, turns=6)
    params["mdr"]["sources"] = ["synthetic", "convai2"]
    params["emma"]["sources"] = ["synthetic", "misc"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))

    dvc = yaml.safe_load(run(tmp_path, "dvc-yaml").stdout)["stages"]
    assert {"data/canonical/synthetic", "data/canonical/convai2"} <= set(dvc["mdr_examples"]["deps"])
    assert {"data/canonical/synthetic", "data/canonical/misc"} <= set(dvc["emma_retriever"]["deps"])
    for name in ("synthetic", "ingest_synthetic", "ingest_convai2"):
        assert run(tmp_path, "run", name).returncode == 0, name
    proc = run(tmp_path, "run", "mdr_examples")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from pipelines.data.tasks import read_mdr_examples

    canonical = tmp_path / "data/canonical"
    examples = {split: read_mdr_examples(tmp_path / f"data/tasks/mdr/{split}.jsonl") for split in ("train", "valid")}
    for split, found in examples.items():
        convai2 = [e for e in found if e.episode_id.startswith(("train_both", "valid_self"))]
        assert convai2 and len(convai2) < len(found), split          # both datasets, in their own splits
        assert all(e.episode_id.startswith("train_both" if split == "train" else "valid_self") for e in convai2)
    assert any("i play the violin." in e.persona for e in examples["train"])
    assert (canonical / "convai2/train.jsonl").exists() and not (canonical / "convai2/test.jsonl").exists()

    proc = run(tmp_path, "run", "emma_examples")                       # misc was never ingested
    assert proc.returncode != 0
    assert "input data/canonical/misc of stage emma_examples does not exist; run stage ingest_misc" in proc.stderr
    assert not (tmp_path / "data/tasks/emma").exists()                 # nothing partial left behind
    assert run(tmp_path, "run", "ingest_misc").returncode == 0
    proc = run(tmp_path, "run", "emma_examples")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "data/tasks/emma/test.jsonl").read_text().splitlines()[1:]]
    misc_episodes = {json.loads(line)["id"] for line in (canonical / "misc/test.jsonl").read_text().splitlines()[1:]}
    assert {r["episode_id"] for r in rows} & misc_episodes                 # MiSC examples, beside synthetic ones
    assert {r["episode_id"] for r in rows} - misc_episodes


def test_training_sources_are_checked(tmp_path):
    from types import SimpleNamespace

    import pytest

    from pipelines.data.stage import training_sources, training_split
    from pipelines.errors import ConfigError

    assert training_sources({}, "mdr") == ("synthetic",) and training_sources({"sources": "msc"}, "mdr") == ("msc",)
    assert training_sources({"sources": ["msc", "cc", "msc"]}, "mdr") == ("msc", "cc")
    with pytest.raises(ConfigError, match="mdr.sources must be a list"):
        training_sources({"sources": [3]}, "mdr")
    ctx = SimpleNamespace(config={"mdr": {"sources": ["msc"]}}, path=lambda rel: tmp_path / rel)
    with pytest.raises(ConfigError, match=r"mdr.sources names 'msc', but .* set params.yaml sources.msc .* ingest_msc"):
        training_split(ctx, "mdr", "train")
    (tmp_path / "data/canonical/msc").mkdir(parents=True)
    assert training_split(ctx, "mdr", "valid") == []                    # a dataset without that split
    with pytest.raises(ConfigError, match=r"mdr.sources \['msc'\] has no train split"):
        training_split(ctx, "mdr", "train")
