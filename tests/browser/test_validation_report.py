"""The validation report, reached from the ingest asset's metadata in the Dagster UI and opened in
the browser: it names every validation rule of the stage and its result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.stages import STAGES
from tests.browser import harness as h

pytestmark = pytest.mark.browser


def test_validation_report_opens_from_the_ingest_metadata(dagster_ui, driver, materialized):
    stage = STAGES["ingest_synthetic"]
    driver.get(f"{dagster_ui.dagster_url}/assets/{stage.name}")
    cell = h.element(driver, "//tr[td[normalize-space()='validation_report']]/td[last()]",
                     "validation_report metadata")
    report = Path(cell.text.strip())
    assert report.is_absolute() and report.is_relative_to(dagster_ui.root) and report.suffix == ".html", report

    rules = json.loads(report.with_suffix(".json").read_text())["rules"]
    assert [r["name"] for r in rules] == [c.name for c in stage.checks]
    driver.get(report.as_uri())
    h.wait_for_texts(driver, [c.name for c in stage.checks], "validation report")
    h.screenshot(driver, "validation-report")
