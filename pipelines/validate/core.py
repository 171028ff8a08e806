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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Iterable, Mapping

from pipelines.data.schema import Episode
from pipelines.data.tables import table_counts, to_tables
from pipelines.errors import ConfigError
from pipelines.registry import CheckOutcome
from pipelines.validate import integrity, misc  # noqa: F401  (register the plain-Python checks)
from pipelines.validate.expectations import EXPECTATION_RULES, ExpectationResult, run_expectations
from pipelines.validate.load import LOAD_CHECKS
from pipelines.validate.report import MAX_EXAMPLES, ValidationReport
from pipelines.validate.rules import (APPLIES, CHECKS, MAX_DROPPED_TURN_SHARE, PROFILES, RULES, Failure, Rule,
                                      Tables)

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
    The same report, one episode at a time in bounded memory: ``pipelines.validate.stream``.
    """
    check_settings(profile, max_dropped_turn_share)
    start = time.perf_counter()
    tables = to_tables(episodes, records)
    counts = table_counts(tables)
    loss = None
    if load is not None:
        loss = LOAD_CHECKS["load_loss_within_limit"](load, tables, max_dropped_turn_share)
    return assemble(file=file, profile=profile, expectations=run_expectations(tables),
                    checks=run_checks(tables, profile), loss=loss, load=load, counts=counts,
                    max_dropped_turn_share=max_dropped_turn_share, start=start)


def check_settings(profile: str, max_dropped_turn_share: float) -> None:
    """ConfigError for an unknown profile or a share outside [0, 1]."""
    if profile not in PROFILES:
        raise ConfigError(f"validation profile must be one of {', '.join(PROFILES)}, got {profile!r}.")
    share = max_dropped_turn_share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ConfigError(f"ingest.max_dropped_turn_share must lie in [0, 1] (a share of the turns), got {share!r}.")


@dataclass
class CheckResult:
    """What one plain-Python rule found: its first failures, their count, and whether it applied."""

    failures: list[Failure]
    count: int
    applied: bool


def run_checks(tables: Tables, profile: str, names: Collection[str] | None = None, *,
               force: bool = False) -> dict[str, CheckResult]:
    """The plain-Python rules (``CHECKS``) of ``profile`` over ``tables`` (``names``: only those).

    A rule whose ``applies`` is False on these tables passes unapplied, or with ``force=True`` is
    run all the same and marked unapplied (the streaming validator decides over the whole file).
    """
    out = {}
    for name in CHECKS:
        if profile not in RULES[name].profiles or (names is not None and name not in names):
            continue
        applied = name not in APPLIES or bool(APPLIES[name](tables))
        failures = CHECKS[name](tables) if applied or force else []
        out[name] = CheckResult(failures[:MAX_EXAMPLES], len(failures), applied)
    return out


def assemble(*, file: str, profile: str, expectations: Mapping[str, ExpectationResult],
             checks: Mapping[str, CheckResult], loss: list[Failure] | None, load: "LoadResult | None",
             counts: dict[str, int], max_dropped_turn_share: float, start: float) -> ValidationReport:
    """The report of every rule of RULES, in RULES order, from the results of each family.

    ``loss``: the loss policy's failures (None: no LoadResult, the rule does not apply); ``start``:
    ``time.perf_counter()`` when validation began.
    """
    outcomes = []
    for name, rule in RULES.items():
        if profile not in rule.profiles:
            outcomes.append(_outcome(rule, file, profile, [], 0, applied=False))
        elif name in expectations:
            res = expectations[name]
            outcomes.append(_outcome(rule, file, profile, res.failures, res.count, res.applied, res.metadata))
        elif name in LOAD_CHECKS:
            outcomes.append(_outcome(rule, file, profile, loss or [], len(loss or []), applied=loss is not None,
                                     extra={"max_dropped_turn_share": max_dropped_turn_share}))
        else:
            res = checks[name]
            outcomes.append(_outcome(rule, file, profile, res.failures if res.applied else [],
                                     res.count if res.applied else 0, applied=res.applied))
    return ValidationReport(file=file, profile=profile, outcomes=outcomes, counts=counts,
                            duration_s=time.perf_counter() - start,
                            load=load_summary(load) if load is not None else {})


def load_summary(load: "LoadResult") -> dict:
    """What the loader normalised or left out: the report's "normalised on load" section.

    ``{"dropped": {reason: count}, "flagged": {reason: count}, "lost": {kind: count},
    "examples": {reason: [first examples]}}``.
    """
    return {"dropped": dict(sorted(load.dropped.items())), "flagged": dict(sorted(load.flagged.items())),
            "lost": load.lost(), "examples": dict(sorted(load.examples.items()))}
