"""Validation of canonical episodes: great-expectations suites, referential integrity, MiSC filters.

    report = validate(episodes, file="data/raw/x.jsonl", profile="generic", records={"e1": "line 2"})
    write_report(report, "reports/validation/x.html", "reports/validation/x.json")
    report.raise_if_blocking()

The same report over episodes given one at a time, in memory bounded by a chunk of them
(``StreamingValidator``, ``pipelines.validate.stream``): for files too big to hold whole.

``RULES`` (name -> Rule with ``description`` and ``blocking``) lists every rule up front; the set
never depends on the data. See ``pipelines.validate.rules`` for the families and the blocking
policy (schema, integrity and MiSC rules block; quality rules are warnings).
"""

from pipelines.validate.core import validate
from pipelines.validate.report import ValidationReport, render_html, write_report
from pipelines.validate.rules import RULES, Rule
from pipelines.validate.stream import StreamingValidator

__all__ = ["RULES", "Rule", "StreamingValidator", "ValidationReport", "render_html", "validate", "write_report"]
