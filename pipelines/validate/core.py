"""validate(): every rule of RULES over one dataset, as a ValidationReport.

The episodes are flattened once into the canonical tables (``pipelines.data.tables``); the
``schema`` rules (and two quality warnings) run as great-expectations suites in one ephemeral
context, the other rules are plain pandas/Python checks (``pipelines.validate.integrity`` and
``pipelines.validate.misc``), and the ``load`` rule weighs what the loader left out against what
it kept (``pipelines.validate.load``; it applies when the LoadResult is given). Every rule yields
one CheckOutcome, in RULES order, whether or not it applies to the profile or the data (a rule
that does not apply passes with ``metadata["applied"] = False``). The report also carries what
the loader normalised or left out (``ValidationReport.load``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Mapping

from pipelines.data.schema import Episode
from pipelines.data.tables import table_counts, to_tables
from pipelines.errors import ConfigError
from pipelines.registry import CheckOutcome
from pipelines.validate import integrity, misc  # noqa: F401  (register the plain-Python checks)
from pipelines.validate.expectations import EXPECTATION_RULES, run_expectations
from pipelines.validate.load import LOAD_CHECKS
from pipelines.validate.report import MAX_EXAMPLES, ValidationReport
from pipelines.validate.rules import APPLIES, CHECKS, MAX_DROPPED_TURN_SHARE, PROFILES, RULES, Failure, Rule

if TYPE_CHECKING:
    from pipelines.data.loaders.base import LoadResult

_unimplemented = set(RULES) - set(CHECKS) - set(EXPECTATION_RULES) - set(LOAD_CHECKS)
_twice = (set(CHECKS) & set(EXPECTATION_RULES)) | (set(LOAD_CHECKS) & (set(CHECKS) | set(EXPECTATION_RULES)))
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
             records: Mapping[str, str] | None = None, load: "LoadResult | None" = None,
             max_dropped_turn_share: float = MAX_DROPPED_TURN_SHARE) -> ValidationReport:
    """Check every rule of RULES on ``episodes`` read from ``file``.

    ``profile`` is "generic" (every source) or "misc" (adds MiSC's Appendix D filters and makes
    short utterances blocking). ``records`` maps an episode id to its locator in ``file``
    (e.g. "line 3"); others are located as "episode <i>" (0-based position). ``load`` is the
    loader's result the episodes come from: the ``load`` rule weighs what it left out (with
    ``max_dropped_turn_share``, params.yaml ``ingest``), and the report lists what it dropped and
    flagged; without it the ``load`` rule is not applied.
    Returns the report; it never raises on bad data (see ``ValidationReport.raise_if_blocking``).
    """
    if profile not in PROFILES:
        raise ConfigError(f"validation profile must be one of {', '.join(PROFILES)}, got {profile!r}.")
    share = max_dropped_turn_share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ConfigError(f"ingest.max_dropped_turn_share must lie in [0, 1] (a share of the turns), got {share!r}.")
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
        elif name in LOAD_CHECKS:
            failures = [] if load is None else LOAD_CHECKS[name](load, tables, max_dropped_turn_share)
            outcomes.append(_outcome(rule, file, profile, failures, len(failures), applied=load is not None,
                                     extra={"max_dropped_turn_share": max_dropped_turn_share}))
        elif name in APPLIES and not APPLIES[name](tables):
            outcomes.append(_outcome(rule, file, profile, [], 0, applied=False))
        else:
            failures = CHECKS[name](tables)
            outcomes.append(_outcome(rule, file, profile, failures, len(failures), applied=True))
    return ValidationReport(file=file, profile=profile, outcomes=outcomes, counts=table_counts(tables),
                            duration_s=time.perf_counter() - start,
                            load=load_summary(load) if load is not None else {})


def load_summary(load: "LoadResult") -> dict:
    """What the loader normalised or left out: the report's "normalised on load" section.

    ``{"dropped": {reason: count}, "flagged": {reason: count}, "lost": {kind: count},
    "examples": {reason: [first examples]}}``.
    """
    return {"dropped": dict(sorted(load.dropped.items())), "flagged": dict(sorted(load.flagged.items())),
            "lost": load.lost(), "examples": dict(sorted(load.examples.items()))}
