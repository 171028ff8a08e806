"""great-expectations suites over the canonical tables (the ``schema`` rules, plus two warnings).

One ephemeral GX context per :func:`run_expectations` call (nothing is written to disk), a pandas
data source with one dataframe asset, one ``ExpectationSuite`` and one ``ValidationDefinition``
per table (an :class:`ExpectationRunner` keeps them for the next tables: the streaming validator
checks a big file chunk by chunk, and :func:`merge_results` adds the chunks' results up). Each
expectation carries its rule name in ``meta["rule"]``; its result (format
``SUMMARY``: the unexpected count and the first 20 unexpected row indices) is mapped back to
:class:`~pipelines.validate.rules.Failure` records through the table's ``record`` column.

Texts are "non-empty" when they contain a non-whitespace character (regex ``\\S``, i.e. length
>= 1 after stripping). Ids are unique per episode through compound-column uniqueness over
``(episode_pos, id)``; GX counts every row of a duplicated pair, so two turns sharing an id count
as 2.

great-expectations logs about 200 INFO lines on every run (its own import and context set-up):
its logger is set to WARNING unless debug logging is on (``python -m pipelines -v``) or the logger
was configured by the caller.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Mapping

import pandas as pd

from pipelines.data.schema import SPLITS
from pipelines.validate.rules import IMPORTANCE_RANGE, RULES, Failure

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

NONBLANK = r"\S"
RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 20}


@dataclass(frozen=True)
class ExpectationRule:
    """A rule checked by one great-expectations expectation on one table."""

    rule: str                                # rule name (a key of RULES)
    table: str                               # canonical table the expectation runs on
    build: Callable[[], Any]                 # () -> expectation instance (gxe.Expect...)
    message: Callable[[Any], str]            # failing row (a namedtuple of the table) -> message
    applies: Callable[[pd.DataFrame], bool] = lambda frame: True  # False: rule passes, not applied

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"expectation for undeclared rule {self.rule!r}")


def _quiet_gx() -> None:
    """Keep great-expectations' INFO chatter out of the output unless debug logging is on.

    Called before its import (the import logs) and after it: some of its modules set their own
    logger to INFO when imported.
    """
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        return
    top = logging.getLogger("great_expectations")
    if top.level == logging.NOTSET:
        top.setLevel(logging.WARNING)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (name.startswith("great_expectations.") and isinstance(logger, logging.Logger)
                and logging.NOTSET < logger.level < logging.WARNING):
            logger.setLevel(logging.WARNING)


def _gxe():
    _quiet_gx()
    import great_expectations.expectations as gxe  # imported on first use (about 2 s)

    _quiet_gx()

    return gxe


def unique(*columns: str) -> Callable[[], Any]:
    return lambda: _gxe().ExpectCompoundColumnsToBeUnique(column_list=list(columns))


def regex(column: str, pattern: str) -> Callable[[], Any]:
    return lambda: _gxe().ExpectColumnValuesToMatchRegex(column=column, regex=pattern)


EXPECTATIONS: tuple[ExpectationRule, ...] = (
    ExpectationRule("episode_ids_unique", "episodes", unique("split", "episode_id"),
                    lambda r: f"episode {r.episode_id!r} is listed more than once in split {r.split!r}"),
    ExpectationRule("split_in_set", "episodes",
                    lambda: _gxe().ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS)),
                    lambda r: f"episode {r.episode_id!r} has split {r.split!r}, not one of {', '.join(SPLITS)}"),
    ExpectationRule("speaker_names_unique", "speakers", unique("episode_pos", "name"),
                    lambda r: f"speaker {r.name!r} is listed more than once in episode {r.episode_id!r}"),
    ExpectationRule("session_ids_unique", "sessions", unique("episode_pos", "session_id"),
                    lambda r: f"session id {r.session_id!r} is used more than once in episode {r.episode_id!r}"),
    ExpectationRule("session_index_non_negative", "sessions",
                    lambda: _gxe().ExpectColumnValuesToBeBetween(column="session_index", min_value=0),
                    lambda r: f"session {r.session_id!r} has index {r.session_index}"),
    ExpectationRule("turn_ids_unique", "turns", unique("episode_pos", "turn_id"),
                    lambda r: f"turn id {r.turn_id!r} is used more than once in episode {r.episode_id!r}"),
    ExpectationRule("turn_text_nonempty", "turns",
                    regex("text", NONBLANK),
                    lambda r: f"turn {r.turn_id!r} in session {r.session_id!r} has a blank text {r.text!r}"),
    ExpectationRule("memory_ids_unique", "memories", unique("episode_pos", "memory_id"),
                    lambda r: f"memory id {r.memory_id!r} is used more than once in episode {r.episode_id!r}"),
    ExpectationRule("memory_text_nonempty", "memories",
                    regex("text", NONBLANK),
                    lambda r: f"memory {r.memory_id!r} in session {r.listed_in!r} has a blank text {r.text!r}"),
    ExpectationRule("query_ids_unique", "queries", unique("episode_pos", "query_id"),
                    lambda r: f"query id {r.query_id!r} is used more than once in episode {r.episode_id!r}"),
    ExpectationRule("query_question_nonempty", "queries",
                    regex("question", NONBLANK),
                    lambda r: f"query {r.query_id!r} has a blank question {r.question!r}"),
    ExpectationRule("query_category_present", "queries",
                    lambda: _gxe().ExpectColumnValuesToNotBeNull(column="category"),
                    lambda r: f"query {r.query_id!r} has no category while other queries have one",
                    applies=lambda q: bool(q["category"].notna().any())),
    ExpectationRule("memory_importance_in_range", "memories",
                    lambda: _gxe().ExpectColumnValuesToBeBetween(column="importance",
                                                              min_value=IMPORTANCE_RANGE[0],
                                                              max_value=IMPORTANCE_RANGE[1]),
                    lambda r: f"memory {r.memory_id!r} has importance {r.importance}",
                    applies=lambda m: bool(m["importance"].notna().any())),
)
EXPECTATION_RULES: tuple[str, ...] = tuple(e.rule for e in EXPECTATIONS)


@dataclass
class ExpectationResult:
    """What one expectation found: failures (at most ``RESULT_FORMAT`` partial rows) and the count."""

    failures: list[Failure]
    count: int                   # GX unexpected_count (every failing row, not only the sampled ones)
    applied: bool                # False when the rule does not apply to these tables
    metadata: dict[str, Any]     # expectation type, table, element count, unexpected percent
    element_count: int = 0       # rows checked (what merge_results adds up over chunks)
    missing_count: int | None = None  # of them null, None when GX does not count them (compound columns)


def _table_for_gx(frame: pd.DataFrame, columns: set[str]) -> pd.DataFrame:
    """The columns an expectation reads; numeric-looking object columns cast for comparisons."""
    out = frame[sorted(columns)].copy()
    for column in ("importance", "session_index"):
        if column in out.columns:
            out[column] = pd.to_numeric(out[column], errors="coerce")
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


def _columns(expectation) -> set[str]:
    cfg = expectation.configuration.kwargs
    return set(cfg.get("column_list") or [cfg["column"]])


def unexpected_percent(count: int, element_count: int, missing_count: int | None) -> float | None:
    """GX's ``unexpected_percent`` (``_format_map_output``): the share of the non-null rows, in percent."""
    if element_count <= 0:
        return None
    if missing_count is None:
        return count / element_count * 100
    nonnull = element_count - missing_count
    return count / nonnull * 100 if nonnull > 0 else None


class ExpectationRunner:
    """One ephemeral GX context running the expectation rules on as many sets of tables as it is given.

    The context, its pandas data source, and one suite and validation definition per table and set
    of rules are made on first use and reused, so a dataset validated chunk by chunk
    (``pipelines.validate.stream``) pays GX's set-up once.
    """

    def __init__(self) -> None:
        self._context = self._source = None
        self._batches: dict[str, Any] = {}
        self._definitions: dict[tuple[str, tuple[str, ...]], tuple[Any, Any]] = {}

    def _definition(self, table: str, items: list[ExpectationRule]) -> tuple[Any, set[str]]:
        """The validation definition of ``table`` with the expectations of ``items``, and the columns they read."""
        _quiet_gx()
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        _quiet_gx()
        if self._context is None:
            self._context = gx.get_context(mode="ephemeral")
            self._context.variables.progress_bars = ProgressBarsConfig(globally=False)
            self._source = self._context.data_sources.add_pandas("mnemos")
        key = (table, tuple(er.rule for er in items))
        if key not in self._definitions:
            if table not in self._batches:
                asset = self._source.add_dataframe_asset(name=table)
                self._batches[table] = asset.add_batch_definition_whole_dataframe(table)
            name = f"mnemos_{table}" + (f"_{len(self._definitions)}" if self._definitions else "")
            suite = self._context.suites.add(gx.ExpectationSuite(name=name))
            columns: set[str] = set()
            for er in items:
                expectation = er.build()
                expectation.meta = {"rule": er.rule}
                expectation.description = RULES[er.rule].description
                suite.add_expectation(expectation)
                columns |= _columns(expectation)
            definition = self._context.validation_definitions.add(
                gx.ValidationDefinition(name=name, data=self._batches[table], suite=suite))
            self._definitions[key] = (definition, columns)
        return self._definitions[key]

    def run(self, tables: Mapping[str, pd.DataFrame], rules: Collection[str] | None = None, *,
            force: bool = False) -> dict[str, ExpectationResult]:
        """Rule name -> ExpectationResult over ``tables`` for ``rules`` (default: every expectation rule).

        ``force=True`` runs an expectation even on tables where its ``applies`` is False (the
        result's ``applied`` still says whether it applies there): whether such a rule applies is
        then decided over the whole dataset by the caller.
        """
        unknown = set(rules or ()) - set(EXPECTATION_RULES)
        if unknown:
            raise ValueError(f"not expectation rules: {sorted(unknown)}")
        results: dict[str, ExpectationResult] = {}
        by_table: dict[str, list[ExpectationRule]] = {}
        applies: dict[str, bool] = {}
        for er in EXPECTATIONS:
            if rules is not None and er.rule not in rules:
                continue
            applies[er.rule] = bool(er.applies(tables[er.table]))
            if applies[er.rule] or force:
                by_table.setdefault(er.table, []).append(er)
            else:
                results[er.rule] = ExpectationResult([], 0, False, {"table": er.table})
        for table, items in by_table.items():
            frame = tables[table].reset_index(drop=True)
            definition, columns = self._definition(table, items)
            run = definition.run(batch_parameters={"dataframe": _table_for_gx(frame, columns)},
                                 result_format=RESULT_FORMAT)
            by_rule = {er.rule: er for er in items}
            for res in run.results:
                er = by_rule[res.expectation_config.meta["rule"]]
                info = res.exception_info or {}
                if info.get("raised_exception"):
                    raise RuntimeError(f"great-expectations could not evaluate rule {er.rule!r} on table "
                                       f"{table!r}: {info.get('exception_message')}")
                rows = frame.loc[res.result.get("partial_unexpected_index_list") or []]
                failures = [Failure(r.record, er.message(r)) for r in rows.itertuples()]
                missing = res.result.get("missing_count")
                results[er.rule] = ExpectationResult(
                    failures=failures, count=int(res.result.get("unexpected_count") or 0),
                    applied=applies[er.rule],
                    metadata={"table": table, "expectation": res.expectation_config.type,
                              "element_count": int(res.result.get("element_count") or 0),
                              "unexpected_percent": _round(res.result.get("unexpected_percent"))},
                    element_count=int(res.result.get("element_count") or 0),
                    missing_count=None if missing is None else int(missing))
                if not res.success and not failures:
                    raise RuntimeError(f"great-expectations failed rule {er.rule!r} without naming rows")
        return results


def run_expectations(tables: Mapping[str, pd.DataFrame]) -> dict[str, ExpectationResult]:
    """Run every expectation rule over ``tables`` in one ephemeral GX context.

    Returns rule name -> ExpectationResult for every rule of :data:`EXPECTATION_RULES`.
    """
    return ExpectationRunner().run(tables)


def merge_results(rule: str, parts: Iterable[ExpectationResult], limit: int) -> ExpectationResult:
    """One rule's results over consecutive chunks of a dataset as if GX had checked it whole.

    The chunks must hold whole episodes and the rule must group its rows by episode (every rule but
    those of ``rules.WHOLE_FILE_RULES``), and a rule applies when it applies to any chunk (each
    ``applies`` asks whether some row has a value). Counts add up, failures follow chunk order (the
    first ``limit`` kept), the percentage is recomputed as GX computes it.
    """
    parts = list(parts)
    table = next(er.table for er in EXPECTATIONS if er.rule == rule)
    applied = [p for p in parts if p.applied]
    if not applied:
        return ExpectationResult([], 0, False, {"table": table})
    count = sum(p.count for p in parts)
    elements = sum(p.element_count for p in parts)
    missing = None if any(p.missing_count is None for p in parts) else sum(p.missing_count for p in parts)
    failures = [f for p in parts for f in p.failures][:limit]
    metadata = {**applied[0].metadata, "element_count": elements,
                "unexpected_percent": _round(unexpected_percent(count, elements, missing))}
    return ExpectationResult(failures, count, True, metadata, elements, missing)
