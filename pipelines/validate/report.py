"""The validation report: outcomes of every rule, raise-on-blocking, HTML and JSON renderings.

A :class:`ValidationReport` holds one :class:`pipelines.registry.CheckOutcome` per rule of
``pipelines.validate.RULES`` (in that order), the dataset counts (rows per canonical table), what
the loader normalised or left out on the way (drop and flag reasons with counts and their first
examples: the "Normalised on load" section) and the time the validation took. ``write_report``
writes a self-contained HTML page (inline CSS, no script, readable in any browser) and a JSON
document with the same content.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import Environment

from pipelines.errors import ValidationFailed
from pipelines.registry import CheckOutcome

MAX_EXAMPLES = 5  # failing records quoted per rule


@dataclass
class ValidationReport:
    """Outcomes of every rule over one dataset (``file``) under one ``profile``."""

    file: str                                  # the dataset the episodes came from
    profile: str                               # "generic" or "misc"
    outcomes: list[CheckOutcome]               # one per rule of RULES, in RULES order
    counts: dict[str, int] = field(default_factory=dict)  # rows per canonical table
    duration_s: float = 0.0                    # wall time of the validate() call
    # what the loader dropped / flagged: {"dropped": {reason: n}, "flagged": {reason: n},
    # "lost": {kind: n}, "examples": {reason: [first examples]}} (empty: not given)
    load: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @property
    def passed(self) -> bool:
        """True when no blocking rule failed (warnings do not count)."""
        return not self.blocking_failures()

    def blocking_failures(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if o.blocking and not o.passed]

    def warnings(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if not o.blocking and not o.passed]

    def outcome(self, name: str) -> CheckOutcome:
        for o in self.outcomes:
            if o.name == name:
                return o
        raise KeyError(f"no rule named {name!r} in this report")

    def failed(self) -> list[str]:
        """Names of every failed rule, blocking or not, in RULES order."""
        return [o.name for o in self.outcomes if not o.passed]

    def raise_if_blocking(self) -> None:
        """Raise ValidationFailed naming file, record and rule of the first failing blocking rule.

        The message also counts the failures of every other failing blocking rule.
        """
        failing = self.blocking_failures()
        if not failing:
            return
        first = failing[0]
        records = first.metadata.get("records") or []
        messages = first.metadata.get("messages") or []
        unit = first.metadata.get("unit", "records")
        text = f"{first.description} Failing {unit}: {first.count}"
        if messages:
            text += f"; first: {messages[0]}"
        others = [f"{o.name} ({o.metadata.get('unit', 'records')}: {o.count})" for o in failing[1:]]
        if others:
            text += f". Other blocking failures: {', '.join(others)}"
        raise ValidationFailed(text + ".", file=self.file, record=records[0] if records else None,
                               rule=first.name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "profile": self.profile,
            "created": self.created,
            "duration_s": round(self.duration_s, 3),
            "passed": self.passed,
            "blocking_failures": [o.name for o in self.blocking_failures()],
            "warnings": [o.name for o in self.warnings()],
            "counts": dict(self.counts),
            "load": dict(self.load),
            "rules": [asdict(o) for o in self.outcomes],
        }


_HTML = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Validation report: {{ r.file }}</title>
<style>
 body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem; color: #1d1d1f; }
 h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
 table { border-collapse: collapse; margin-top: .5rem; }
 th, td { border: 1px solid #d0d0d5; padding: .35rem .6rem; text-align: left; vertical-align: top; }
 th { background: #f3f3f6; }
 td.num { text-align: right; font-variant-numeric: tabular-nums; }
 .status { font-weight: 600; padding: .1rem .45rem; border-radius: .3rem; }
 .PASSED { background: #dcf5e0; color: #14602a; } .FAILED { background: #fbdada; color: #8c1313; }
 .WARNING { background: #fdf0cc; color: #7a5400; } .N-A { background: #ececf0; color: #55555f; }
 ul.examples { margin: 0; padding-left: 1.1rem; font-family: ui-monospace, monospace; font-size: .85rem; }
 .summary { font-size: 1.05rem; }
</style>
</head>
<body>
<h1>Validation report</h1>
<p class="summary">Dataset <code>{{ r.file }}</code>, profile <code>{{ r.profile }}</code>:
 {% if r.passed %}<span class="status PASSED">PASSED</span>
 {%- else %}<span class="status FAILED">FAILED</span>{% endif %}
 &mdash; {{ rules|length }} rules, {{ blocking|length }} blocking failure{{ '' if blocking|length == 1 else 's' }},
 {{ warnings|length }} warning{{ '' if warnings|length == 1 else 's' }}.
 Validated {{ r.created }} in {{ '%.2f'|format(r.duration_s) }} s.</p>
{% if blocking %}<p>Blocking failures (nothing downstream runs on this data):
 {% for o in blocking %}<code>{{ o.name }}</code> ({{ o.count }}){{ ', ' if not loop.last }}{% endfor %}.</p>
{% endif %}
<h2>Dataset counts</h2>
<table>
 <tr><th>table</th><th>rows</th></tr>
 {% for name, n in r.counts.items() %}<tr><td>{{ name }}</td><td class="num">{{ n }}</td></tr>
 {% endfor %}
</table>
{% if r.load %}
<h2>Normalised on load</h2>
{% if r.load.dropped or r.load.flagged %}
<p>What the loader left out (dropped) or kept and reported (flagged), by reason, with the first records.</p>
<table id="normalised-on-load">
 <tr><th>reason</th><th>action</th><th>count</th><th>first examples</th></tr>
 {% for action, reasons in (('dropped', r.load.dropped), ('flagged', r.load.flagged)) %}
 {% for reason, n in reasons.items() %}
 <tr><td><code>{{ reason }}</code></td><td>{{ action }}</td><td class="num">{{ n }}</td>
  <td><ul class="examples">{% for ex in r.load.examples.get(reason, []) %}<li>{{ ex }}</li>{% endfor %}</ul></td></tr>
 {% endfor %}
 {% endfor %}
</table>
{% else %}
<p>The loader left nothing out and flagged nothing.</p>
{% endif %}
{% endif %}
<h2>Rules</h2>
<table>
 <tr><th>rule</th><th>family</th><th>status</th><th>blocking</th><th>failing</th><th>description</th>
  <th>examples</th></tr>
 {% for o in rules %}
 <tr id="rule-{{ o.name }}">
  <td><code>{{ o.name }}</code></td>
  <td>{{ o.metadata.family }}</td>
  <td><span class="status {{ status(o) }}">{{ status(o)|replace('-', '/') }}</span></td>
  <td>{{ 'yes' if o.blocking else 'no (warning)' }}</td>
  <td class="num">{{ o.count }}{% if o.metadata.unit %} {{ o.metadata.unit }}{% endif %}</td>
  <td>{{ o.description }}</td>
  <td>{% if o.examples %}<ul class="examples">
   {% for ex in o.examples %}<li>{{ ex }}</li>{% endfor %}</ul>{% endif %}</td>
 </tr>
 {% endfor %}
</table>
</body>
</html>
"""


def _status(o: CheckOutcome) -> str:
    if o.passed:
        return "PASSED" if o.metadata.get("applied", True) else "N-A"
    return "FAILED" if o.blocking else "WARNING"


def render_html(report: ValidationReport) -> str:
    """The report as one self-contained HTML page (all values escaped)."""
    env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    return env.from_string(_HTML).render(r=report, rules=report.outcomes,
                                         blocking=report.blocking_failures(),
                                         warnings=report.warnings(), status=_status)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(report: ValidationReport, html_path: str | os.PathLike, json_path: str | os.PathLike) -> None:
    """Write the report as a self-contained HTML page and as JSON (same content), atomically."""
    _atomic_write(Path(html_path), render_html(report))
    _atomic_write(Path(json_path), json.dumps(report.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n")
