"""DVC over the same project the UI run filled: metrics, plots and a params diff (no browser needed).

The outputs come from the Dagster run launched in the UI, which recorded each stage in dvc.lock as it
finished: with no `dvc commit` and no second run, DVC sees the pipeline up to date (Dagster and DVC run
the same stages over the same files).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines.config import resolve
from pipelines.stages import STAGES
from tests.browser import harness as h

pytestmark = pytest.mark.browser

METRICS = [m for s in STAGES.values() for m in s.metrics]
PLOTS = [p if isinstance(p, str) else next(iter(p)) for s in STAGES.values() for p in s.plots]


@pytest.fixture(scope="module")
def dvc_project(project, materialized) -> h.Project:
    status = project.run("dvc", "status").stdout
    assert "Data and pipelines are up to date." in status, status
    return project


def flat_keys(tree: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        if isinstance(value, dict):
            keys |= flat_keys(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def metric_files(root: Path) -> list[str]:
    """The declared metrics files, a declared folder standing for the files in it (as DVC reads it)."""
    paths = [p for m in METRICS for p in (sorted((root / m).rglob("*.json")) if (root / m).is_dir() else [root / m])]
    return [p.relative_to(root).as_posix() for p in paths]


def test_dvc_metrics_show_prints_the_benchmark_metrics(dvc_project):
    assert METRICS, "no stage declares a DVC metrics file"
    files = metric_files(dvc_project.root)
    shown = json.loads(dvc_project.run("dvc", "metrics", "show", "--json").stdout)
    assert sorted(shown[""]["data"]) == files
    for path in files:
        written = json.loads((dvc_project.root / path).read_text())
        assert shown[""]["data"][path]["data"] == written
    table = dvc_project.run("dvc", "metrics", "show").stdout.splitlines()
    header = table[0].split()
    assert header[0] == "Path" and set(header[1:]) == set().union(
        *(flat_keys(json.loads((dvc_project.root / p).read_text())) for p in files))
    assert len(table) == 1 + len(files)  # one row per file: per suite and strategy, a handful of columns


def test_dvc_plots_show_renders_the_recall_curves(dvc_project):
    assert PLOTS, "no stage declares a DVC plot"
    answer = json.loads(dvc_project.run("dvc", "plots", "show", "--json").stdout)
    assert not answer.get("errors"), answer["errors"]
    shown = answer["data"]
    assert sorted(shown) == sorted(PLOTS)
    assert all(len(shown[p]) == 1 for p in PLOTS), {p: len(shown[p]) for p in PLOTS}
    recall = next(p for p in PLOTS if p.endswith(".csv"))
    spec = next(p[recall] for st in STAGES.values() for p in st.plots if isinstance(p, dict) and recall in p)
    content = shown[recall][0]["content"]
    rows = content["data"]["values"]
    assert {r["field"] for r in rows} == set(spec["y"])                 # one curve per strategy
    from pipelines.evaluate.suite import load_suite

    suites = resolve(params_file=dvc_project.root / "params.yaml")["benchmark"]["suites"]
    ks = load_suite(suites[0]).ks
    assert sorted({r["k"] for r in rows}, key=int) == [str(k) for k in ks]  # one point per cut-off
    html = dvc_project.run("dvc", "plots", "show", "-o", "dvc_plots").stdout
    index = dvc_project.root / "dvc_plots" / "index.html"
    assert index.exists(), html
    page = index.read_text()
    # The CSV plot is rendered as a vega chart under its sanitised id, with the declared title.
    assert Path(recall).stem + "_csv" in page and spec["title"] in page


def test_dvc_params_diff_shows_a_changed_parameter(dvc_project):
    path = dvc_project.root / "params.yaml"
    original = path.read_text()
    params = yaml.safe_load(original)
    before = params["synthetic"]["turns"]
    params["synthetic"]["turns"] = before // 2
    try:
        path.write_text(yaml.safe_dump(params, sort_keys=False))
        diff = json.loads(dvc_project.run("dvc", "params", "diff", "--json").stdout)
        assert diff == {"params.yaml": {"synthetic.turns": {"old": before, "new": before // 2,
                                                                    "diff": before // 2 - before}}}
        table = dvc_project.run("dvc", "params", "diff").stdout
        assert "synthetic.turns" in table and str(before) in table and str(before // 2) in table
    finally:
        path.write_text(original)
    assert dvc_project.run("dvc", "params", "diff", "--json").stdout.strip() in ("", "{}")
