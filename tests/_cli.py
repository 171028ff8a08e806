"""Run ``python -m pipelines`` in a subprocess against a temporary project folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tmp_project(root: Path) -> Path:
    """A project folder holding only a copy of params.yaml: nothing is written into the repo."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    return root


def run_cli(args: list[str], root: Path, timeout: float = 300,
            extra_path: list[Path] = ()) -> subprocess.CompletedProcess:
    """``python -m pipelines ARGS`` in project ``root``; ``extra_path``: folders put on the PYTHONPATH after the
    repository (e.g. one holding an installed plugin package)."""
    path = os.pathsep.join([str(REPO), *(str(p) for p in extra_path)])
    env = dict(os.environ, MNEMOS_ROOT=str(root), PYTHONPATH=path, TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


LOCOMO_FIXTURE = REPO / "tests" / "data" / "loaders" / "fixtures" / "locomo10_fixture.json"


def locomo_without_text(tmp_path: Path) -> Path:
    """The LoCoMo fixture with every turn's ``text`` renamed (issue 15: it used to ingest with exit 0, 0 turns and
    validation 'passed')."""
    import json

    data = json.loads(LOCOMO_FIXTURE.read_text(encoding="utf-8"))
    for conversation in data:
        for key, turns in conversation["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    turn["txt"] = turn.pop("text", "")
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def break_an_evidence_turn(raw) -> None:
    """Make the second line of a raw synthetic episodes file (``raw``, a Path) name a turn that does not exist as
    a query's evidence: a file whose validation fails on a blocking rule."""
    lines = raw.read_text().splitlines()
    episode = json.loads(lines[1])
    query = next(q for q in episode["queries"] if q.get("evidence_turns"))
    query["evidence_turns"][0] = "no-such-turn"
    lines[1] = json.dumps(episode)
    raw.write_text("\n".join(lines) + "\n")
