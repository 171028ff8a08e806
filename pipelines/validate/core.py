"""validate(): every rule of RULES over one dataset, as a ValidationReport.

The episodes are flattened once into the canonical tables (``pipelines.data.tables``); the
``schema`` rules (and two quality warnings) run as great-expectations suites in one ephemeral
context, the other rules are plain pandas/Python checks (``pipelines.validate.integrity`` and
``pipelines.validate.misc``). Every rule yields one CheckOutcome, in RULES order, whether or not it
applies to the profile or the data (a rule that does not apply passes with
``metadata["applied"] = False``).
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from pipelines.data.schema import Episode
from pipelines.data.tables import table_counts, to_tables
from pipelines.errors import ConfigError
from pipelines.registry import CheckOutcome
from pipelines.validate import integrity, misc  # noqa: F401  (register the plain-Python checks)
from pipelines.validate.expectations import EXPECTATION_RULES, run_expectations
from pipelines.validate.report import MAX_EXAMPLES, ValidationReport
from pipelines.validate.rules import CHECKS, PROFILES, RULES, Failure, Rule

_unimplemented = set(RULES) - set(CHECKS) - set(EXPECTATION_RULES)
_twice = set(CHECKS) & set(EXPECTATION_RULES)
if _unimplemented or _twice:  # a programming error: fail at import, not in the middle of a run
    raise RuntimeError(f"validation rules without an implementation: {sorted(_unimplemented)}; "
                       f"implemented twice: {sorted(_twice)}")


def _outcome(rule: Rule, file: str, profile: str, failures: list[Failure], count: int, applied: bool,
             extra: dict | None = None) -> CheckOutcome:
    shown = failures[:MAX_EXAMPLES]
    metadata = {"family": rule.family, "unit": rule.unit, "profile": profile, "applied": applied,
                "records": [f.record for f in shown], "messages": [f.message for f in shown]}
    metadata.update(extra or {})
    return CheckOutcome(name=rule.name, passed=count == 0, description=rule.description,
                        blocking=rule.blocking, count=count,
                        examples=[f"{file} {f.record}: {f.message}" for f in shown], metadata=metadata)


def validate(episodes: Iterable[Episode], *, file: str, profile: str = "generic",
             records: Mapping[str, str] | None = None) -> ValidationReport:
    """Check every rule of RULES on ``episodes`` read from ``file``.

    ``profile`` is "generic" (every source) or "misc" (adds MiSC's Appendix D filters and makes
    short utterances blocking). ``records`` maps an episode id to its locator in ``file``
    (e.g. "line 3"); others are located as "episode <i>" (0-based position).
    Returns the report; it never raises on bad data (see ``ValidationReport.raise_if_blocking``).
    """
    if profile not in PROFILES:
        raise ConfigError(f"validation profile must be one of {', '.join(PROFILES)}, got {profile!r}.")
    start = time.perf_counter()
    tables = to_tables(episodes, records)
    gx_results = run_expectations(tables)
    outcomes = []
    for name, rule in RULES.items():
        if profile not in rule.profiles:
            outcomes.append(_outcome(rule, file, profile, [], 0, applied=False))
        elif name in gx_results:
            res = gx_results[name]
            outcomes.append(_outcome(rule, file, profile, res.failures, res.count, res.applied, res.metadata))
        else:
            failures = CHECKS[name](tables)
            outcomes.append(_outcome(rule, file, profile, failures, len(failures), applied=True))
    return ValidationReport(file=file, profile=profile, outcomes=outcomes, counts=table_counts(tables),
                            duration_s=time.perf_counter() - start)
