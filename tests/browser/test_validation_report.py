"""The validation report, reached from the ingest asset's metadata in the Dagster UI and opened in
the browser: it names every validation rule of the stage and its result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.stages import STAGES
from tests.browser import harness as h

pytestmark = pytest.mark.browser


def expected_status(rule: dict) -> str:
    """The report's status label: PASSED, N/A (rule not applicable), FAILED (blocking) or WARNING."""
    if rule["passed"]:
        return "PASSED" if rule["metadata"].get("applied", True) else "N/A"
    return "FAILED" if rule["blocking"] else "WARNING"


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
    h.wait_for_texts(driver, ["Validation report", *[c.name for c in stage.checks]], "validation report")
    # One table row per rule (id "rule-<name>"): name, family, status, blocking, ...
    for rule in rules:
        cells = [td.text for td in driver.find_elements("xpath", f"//tr[@id='rule-{rule['name']}']/td")]
        assert cells[:4] == [rule["name"], rule["metadata"]["family"], expected_status(rule),
                             "yes" if rule["blocking"] else "no (warning)"], cells
    h.screenshot(driver, "validation-report")
