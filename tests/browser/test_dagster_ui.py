"""The Dagster web UI (`make ui`) in headless Chromium: the graph launched from the UI, the asset
graph in groups, the registry's descriptions, the asset checks, a run page, the benchmark metadata.

Every expected name comes from ``pipelines.stages.STAGES`` (stages, groups, descriptions, checks)
or from the files the run wrote; nothing is listed by hand.
"""

from __future__ import annotations

import json

import pytest

from pipelines.stages import STAGES
from tests.browser import harness as h

pytestmark = pytest.mark.browser

GROUPS = sorted({s.group for s in STAGES.values()})
ASSET_QUERY = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { __typename ... on Asset {
  assetMaterializations(limit: 1) { runId metadataEntries { __typename label
    ... on MarkdownMetadataEntry { mdStr } ... on UrlMetadataEntry { url } ... on TextMetadataEntry { text } } } } } }"""


def description_head(description: str, chars: int = 60) -> str:
    """The start of a stage's description, cut at a word boundary (how the UI's text begins)."""
    text = h.squash(description)
    if len(text) <= chars:
        return text
    return text[:chars].rsplit(" ", 1)[0]


def latest_materialization(project, stage: str) -> dict:
    asset = h.graphql(project.dagster_url, ASSET_QUERY, {"key": {"path": [stage]}})["assetOrError"]
    assert asset["__typename"] == "Asset", asset
    return asset["assetMaterializations"][0]


def test_materialize_all_from_the_ui_runs_every_stage(project, driver, ui_run):
    assert ui_run.status == "SUCCESS", f"run {ui_run.run_id} launched from the UI ended {ui_run.status}"
    nodes = h.graphql(project.dagster_url, "{ assetNodes { assetKey { path } groupName "
                                           "assetMaterializations(limit: 1) { runId } } }")["assetNodes"]
    by_name = {n["assetKey"]["path"][-1]: n for n in nodes}
    assert sorted(by_name) == sorted(STAGES)
    for name, stage in STAGES.items():
        assert by_name[name]["groupName"] == stage.group
        assert [m["runId"] for m in by_name[name]["assetMaterializations"]] == [ui_run.run_id], name

    driver.get(f"{project.dagster_url}/runs/{ui_run.run_id}")
    h.wait_for_texts(driver, ["Success", f"{len(STAGES)} assets", f"Succeeded ({len(STAGES)})",
                              ui_run.run_id.split("-")[0], "STEP_SUCCESS", "ASSET_MATERIALIZATION"], "run page")
    h.wait_until(driver, lambda: "Loading run logs" not in h.page_text(driver), "the run's logs never loaded",
                 shot="run-logs")
    h.screenshot(driver, "dagster-run")


def test_asset_graph_shows_every_stage_in_its_group(dagster_ui, driver, materialized):
    driver.get(f"{dagster_ui.dagster_url}/asset-groups")
    h.wait_for_texts(driver, ["Global asset lineage", "Materialize all", *GROUPS], "collapsed asset graph")
    # The graph's own settings button (not the navigation's Settings), then "Expand all groups".
    h.click(driver, "//button[not(contains(@class,'MainNavigation'))][.//*[@aria-label='settings']]",
            "asset graph settings")
    h.click(driver, "//*[normalize-space(text())='Expand all groups']", "Expand all groups")
    # Room for the graph: hide the navigation and the asset sidebar.
    h.click(driver, h.button_with_text("Hide navigation"), "Hide navigation")
    h.click(driver, "//button[not(normalize-space())][.//*[@aria-label='panel_show_right']]", "asset sidebar toggle")
    h.wait_until(driver, lambda: not driver.find_elements("xpath", "//input[@placeholder='Jump to…']"),
                 "the asset sidebar stayed open", shot="asset-sidebar")
    h.wait_for_texts(driver, [*STAGES, *GROUPS], "expanded asset graph")
    h.wait_until(driver, lambda: not any(e.is_displayed() for e in
                                         driver.find_elements("xpath", "//*[text()='Collapse all groups']")),
                 "the graph settings menu stayed open", shot="graph-menu")
    h.screenshot(driver, "dagster-asset-graph")


def test_catalog_lists_every_stage_with_its_group_description_and_status(dagster_ui, driver, materialized):
    driver.get(f"{dagster_ui.dagster_url}/assets")
    # Each row reads: name, description (cut), code location, group, status (loaded last).
    expected = {name: (description_head(s.description), ["assets.definitions", s.group, "Materialized"])
                for name, s in STAGES.items()}

    def rows_complete():
        lines = [line.strip() for line in h.page_text(driver).splitlines()]
        rows = {line: lines[i + 1:i + 5] for i, line in enumerate(lines) if line in STAGES}
        return all(len(rows.get(name, [])) == 4 and h.squash(rows[name][0]).startswith(head)
                   and rows[name][1:] == tail for name, (head, tail) in expected.items())

    h.wait_until(driver, rows_complete, "the catalog does not list every stage as: name, description, "
                 f"code location, group, Materialized: {expected}", shot="catalog")
    h.screenshot(driver, "dagster-catalog")


@pytest.mark.parametrize("group", GROUPS)
def test_asset_page_shows_the_registry_description(dagster_ui, driver, materialized, group):
    stage = next(s for s in STAGES.values() if s.group == group)
    driver.get(f"{dagster_ui.dagster_url}/assets/{stage.name}")
    lines = [line for line in stage.description.splitlines() if line.strip()]
    h.wait_for_texts(driver, ["Description", description_head(lines[0], 200), "Group", group,
                              "Latest materialization"], f"asset page of {stage.name}")


def test_ingest_checks_render_with_their_results(dagster_ui, driver, materialized):
    stage = STAGES["ingest_synthetic"]
    report = json.loads((dagster_ui.root / "reports/validation/synthetic.json").read_text())
    passed = {r["name"]: r["passed"] for r in report["rules"]}
    assert sorted(passed) == sorted(c.name for c in stage.checks)
    expected = {name: "Succeeded" if ok else "Failed" for name, ok in passed.items()}
    driver.get(f"{dagster_ui.dagster_url}/assets/{stage.name}?view=checks")
    h.wait_for_texts(driver, [f"Checks ({len(stage.checks)})"], "checks list")
    listed: dict[str, str] = {}

    def every_check_listed_with_its_result():
        lines = [line.strip() for line in h.page_text(driver).splitlines()]
        pairs = list(zip(lines, lines[1:]))
        listed.clear()
        listed.update({name: next((status for shown, status in pairs if h.shown_as(shown, name)), "absent")
                       for name in expected})
        return listed == expected

    h.wait_until(driver, every_check_listed_with_its_result,
                 lambda: f"checks listed as {listed}, expected {expected}", shot="checks-list")
    first = stage.checks[0]
    h.click(driver, f"//*[normalize-space(text())='{first.name}']", f"check {first.name}")
    result = "Passed" if passed[first.name] else "Failed"
    h.wait_for_texts(driver, [first.name, f"This is a {'blocking' if first.blocking else 'non-blocking'} asset check",
                              first.description, "Evaluation result", result, "failing_records"],
                     f"check {first.name}")
    h.screenshot(driver, "dagster-asset-check")


def test_benchmark_metadata_shows_the_table_and_links_the_mlflow_run(dagster_ui, driver, materialized):
    from pipelines.config import resolve
    from pipelines.evaluate.suite import load_suite

    project = dagster_ui
    profile = resolve(params_file=project.root / "params.yaml")["profile"]
    suite = load_suite("synthetic")
    strategies = suite.strategies
    meta = latest_materialization(project, "benchmark")
    assert meta["runId"] == materialized.run_id
    # The markdown entry that is the benchmark table: the one naming every strategy.
    tables = [e for e in meta["metadataEntries"] if e["__typename"] == "MarkdownMetadataEntry"
              and all(s in e["mdStr"] for s in strategies)]
    assert tables, [e["label"] for e in meta["metadataEntries"]]
    label = tables[0]["label"]
    run_url = next(e["url"] for e in meta["metadataEntries"] if e["label"] == "mlflow_run_url")
    assert run_url.startswith(f"{project.mlflow_url}/#/experiments/")

    driver.get(f"{project.dagster_url}/assets/benchmark")
    h.wait_for_texts(driver, ["Metadata", label, "mlflow_run_url", run_url], "benchmark asset page")
    h.screenshot(driver, "dagster-benchmark")
    h.click(driver, f"//tr[td[normalize-space()='{label}']]//*[contains(text(),'Show Markdown')]",
            f"{label} markdown button")
    dialog = h.element(driver, "//*[contains(@class,'bp5-dialog')]", "markdown dialog")
    h.wait_until(driver, lambda: all(s in dialog.text for s in strategies)
                 and all(f"recall@{k}" in dialog.text for k in suite.ks),
                 f"the {label} table lacks a strategy or a cut-off", shot="benchmark-table")
    h.screenshot(driver, "dagster-benchmark-table")
    h.click(driver, h.button_with_text("Close"), "markdown dialog's Close button")

    link = h.element(driver, "//tr[td[normalize-space()='mlflow_run_url']]//a[@href]", "MLflow run link")
    assert link.get_attribute("href") == run_url
    driver.get(run_url)  # the link leads to the benchmark's run in the started MLflow server
    h.wait_for_texts(driver, [f"benchmark-{profile}", "Metrics"], "MLflow run behind the link")


def metadata_value(driver, key: str) -> str:
    """The value cell of metadata row ``key`` on an asset page (cells: key, timestamp, value)."""
    return h.element(driver, f"//tr[td[1][normalize-space()='{key}']]/td[last()]", f"metadata {key}").text.strip()


def test_materialisation_metadata_shows_row_counts_and_losses(dagster_ui, driver, materialized):
    from mlflow import MlflowClient

    root = dagster_ui.root
    counts = json.loads((root / "reports/validation/synthetic.json").read_text())["counts"]
    driver.get(f"{dagster_ui.dagster_url}/assets/ingest_synthetic")
    h.wait_for_texts(driver, ["Metadata", "validation_report"], "ingest_synthetic metadata")
    for table in ("episodes", "sessions", "turns", "memories", "queries", "triplets"):
        assert metadata_value(driver, table) == str(counts[table]), table

    # A training stage's losses, as its MLflow run recorded them.
    stage = next(s for s in STAGES.values() if s.launcher == "accelerate")
    client = MlflowClient(tracking_uri=dagster_ui.env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(stage.mlflow_experiment)
    [run] = client.search_runs([exp.experiment_id], filter_string=f"attributes.run_name LIKE '{stage.name}-%'")
    driver.get(f"{dagster_ui.dagster_url}/assets/{stage.name}")
    h.wait_for_texts(driver, ["Metadata", "final_train_loss", "best_valid_loss"], f"{stage.name} metadata")
    for key in ("final_train_loss", "best_valid_loss"):
        assert float(metadata_value(driver, key)) == pytest.approx(run.data.metrics[key], rel=1e-6), key
