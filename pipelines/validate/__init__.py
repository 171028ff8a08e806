"""Validation of canonical episodes: great-expectations suites, referential integrity, MiSC filters.

    report = validate(episodes, file="data/raw/x.jsonl", profile="generic", records={"e1": "line 2"})
    write_report(report, "reports/validation/x.html", "reports/validation/x.json")
    report.raise_if_blocking()

``RULES`` (name -> Rule with ``description`` and ``blocking``) lists every rule up front; the set
never depends on the data. See ``pipelines.validate.rules`` for the families and the blocking
policy (schema, integrity and MiSC rules block; quality rules are warnings).
"""

from pipelines.validate.core import validate
from pipelines.validate.report import ValidationReport, render_html, write_report
from pipelines.validate.rules import RULES, Rule

__all__ = ["RULES", "Rule", "ValidationReport", "render_html", "validate", "write_report"]
