"""The markdown tables of the benchmark report: retrieval figures of a suite's strategies as rows.

The report (:mod:`pipelines.evaluate.report`), the answers part (:mod:`pipelines.evaluate.answers.section`) and
the benchmark stage's trained-method sections (:mod:`pipelines.evaluate.stage`) build their tables here:

- :func:`markdown_table`: rows x columns, the best value of each ranked column in bold (among the rows that
  compete: an oracle strategy never takes the bold), ``–`` for a value not measured;
- :func:`row_label` / :func:`oracle_reason`: an oracle strategy (its class's ``oracle``, e.g. ``egocentric_gold``
  reads the dataset's own memories) is the row ``name (oracle)``;
- :func:`granularity_tables`: one table per granularity (turn, session), strategies x recall@k / recall_any@k /
  recall_all@k / ndcg_any@k (LongMemEval's metrics, :mod:`pipelines.evaluate.metrics`) and MRR, with the mean
  context tokens and the queries scored; a strategy not run is a row saying why;
- :func:`breakdown_table`: strategies x categories (a source's published category names,
  :func:`category_names`) or x sessions (numbered from 1 as in G-Long's tables; with queries asked in more than
  ten sessions, ten ranges of sessions, :func:`session_groups`, each cell a mean over its queries).

Nothing here runs a strategy or writes a file: the tables are strings.
"""

from __future__ import annotations

import sys
from typing import Iterable, Mapping, Sequence

from pipelines.evaluate.metrics import METRICS
from pipelines.evaluate.protocol import ProtocolResult, aggregate_sessions, session_ranges
from pipelines.memory import GRANULARITIES, STRATEGIES


def headline_k(ks: Sequence[int]) -> int:
    """The k of the per-category / per-session tables and the tokens plot: 5 if measured, else the largest."""
    return 5 if 5 in ks else max(ks)


def fmt(value: float | int | None, decimals: int = 4) -> str:
    """A table cell: ``–`` for None, an int as is, a float with ``decimals`` places."""
    if value is None:
        return "–"
    return str(value) if isinstance(value, int) else f"{value:.{decimals}f}"


def markdown_table(rows: dict[str, dict[str, float]], columns: Sequence[str],
                   ranked: Iterable[str] | None = None, row_label: str = "strategy",
                   ranked_rows: Iterable[str] | None = None, decimals: Mapping[str, int] | None = None) -> str:
    """A markdown table; in each column named in ``ranked`` the highest value(s) among the rows named
    in ``ranked_rows`` (default: every row) are bold. ``decimals`` overrides a column's decimals."""
    ranked = set(columns if ranked is None else ranked)
    competing = set(rows if ranked_rows is None else ranked_rows)
    best: dict[str, float] = {}
    for col in ranked:
        values = [r[col] for name, r in rows.items() if name in competing and r.get(col) is not None]
        if values and max(values) > min(values):
            best[col] = max(values)
    lines = [f"| {row_label} | " + " | ".join(columns) + " |",
             "| --- | " + " | ".join("---:" for _ in columns) + " |"]
    for name, row in rows.items():
        cells = []
        for col in columns:
            value = row.get(col)
            places = (decimals or {}).get(col, 0 if col == "queries" else 1 if col == "context_tokens" else 4)
            text = fmt(value, places)
            bold = name in competing and col in best and value is not None and value == best[col]
            cells.append(f"**{text}**" if bold else text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def oracle_reason(name: str) -> str | None:
    """Why strategy ``name`` is an oracle (its class's ``oracle``), or None when it is a real system."""
    cls = STRATEGIES.get(name)
    return getattr(cls, "oracle", None) if cls is not None else None


def row_label(name: str) -> str:
    """A strategy's row in the tables: ``egocentric_gold (oracle)`` for an oracle, else its name."""
    return f"{name} (oracle)" if oracle_reason(name) else name


def _labelled(rows: dict[str, dict[str, float]]) -> tuple[dict[str, dict[str, float]], list[str]]:
    """(rows keyed by :func:`row_label`, the labels of the rows that compete for bold: not the oracles)."""
    labelled = {row_label(name): row for name, row in rows.items()}
    return labelled, [row_label(name) for name in rows if not oracle_reason(name)]


def metric_columns(ks: Sequence[int], metrics: Sequence[str] = (*METRICS, "mrr")) -> list[str]:
    """The metric columns of a granularity table: each metric of ``metrics`` at each k, then ``mrr``."""
    return [f"{m}@{k}" for m in METRICS if m in metrics for k in ks] + (["mrr"] if "mrr" in metrics else [])


def granularity_tables(results: dict[str, ProtocolResult], ks: Sequence[int],
                       metrics: Sequence[str] = (*METRICS, "mrr"), missing: dict[str, str] | None = None
                       ) -> dict[str, str]:
    """One markdown table per granularity that any strategy was scored at; missing strategies
    (name -> reason) are rows of their own under each table."""
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    columns = metric_columns(ks, metrics)
    cost = ["context_tokens", "latency_ms_p50"]   # a query's mean context tokens and median retrieval time (ms)
    tables = {}
    for g in GRANULARITIES:
        rows = {name: {**agg[g], **{c: agg[c] for c in cost}} for name, agg in aggs.items() if g in agg}
        if rows:
            rows, competing = _labelled(rows)
            tables[g] = markdown_table(rows, columns + cost + ["queries"], ranked=columns, ranked_rows=competing,
                                       decimals={"latency_ms_p50": 3})
    if missing and not tables:
        tables["turn"] = markdown_table({}, columns + cost + ["queries"], ranked=())
    for g in tables:
        tables[g] += "".join(f"\n| {row_label(name)} | missing: {why} |" + " |" * (len(columns) + len(cost))
                             for name, why in missing.items()) if missing else ""
    return tables


def category_names(source: str) -> dict[str, str]:
    """The published names of a source's category codes (its loader's ``CATEGORY_NAMES``, e.g.
    LoCoMo's "2" -> "temporal"); {} when the source has none."""
    from pipelines.data.loaders import LOADERS

    loader = LOADERS.get(source)
    return dict(getattr(sys.modules.get(getattr(loader, "__module__", ""), None), "CATEGORY_NAMES", {}))


def session_groups(results: dict[str, ProtocolResult]) -> list[tuple[int, int]]:
    """The session ranges of a suite's per-session tables and plot, shared by every strategy: one per
    session index asked in, or at most ten ranges when there are more (:func:`session_ranges`)."""
    return session_ranges(s.session_index for r in results.values() for s in r.scores)


def session_label(low: int, high: int) -> str:
    """``session 3`` or ``sessions 1-27``: session indices numbered from 1, as in G-Long's tables."""
    return f"session {low + 1}" if low == high else f"sessions {low + 1}-{high + 1}"


def breakdown_table(results: dict[str, ProtocolResult], by: str, granularity: str, metric: str,
                    names: dict[str, str] | None = None) -> str | None:
    """Strategies x groups (``by`` = "per_category" | "per_session") of one metric; ``names``
    labels category codes ("2" -> "2 (temporal)"). Per session, the columns are :func:`session_groups`
    (each cell the mean over the queries asked in its sessions), and a last row counts those queries."""
    rows: dict[str, dict[str, float]] = {}
    groups: list[str] = []
    names = names or {}
    ranges = session_groups(results) if by == "per_session" else []
    asked: dict[str, set[tuple[str, str]]] = {}  # session label -> the queries scored at this granularity
    for name, result in results.items():
        if by == "per_category":
            labelled = {(f"{group} ({names[str(group)]})" if str(group) in names else str(group)): agg
                        for group, agg in result.aggregate()[by].items()}
        else:
            labelled = {session_label(*span): agg for span, agg in aggregate_sessions(
                [s for s in result.scores if s.granularity == granularity], ranges).items()}
        for label, agg in labelled.items():
            if granularity in agg:
                rows.setdefault(name, {})[label] = agg[granularity][metric]
                if label not in groups:
                    groups.append(label)
        for low, high in ranges:
            asked.setdefault(session_label(low, high), set()).update(
                (s.episode_id, s.query_id) for s in result.scores
                if s.granularity == granularity and low <= s.session_index <= high)
    if not rows:
        return None
    rows, competing = _labelled(rows)
    if by == "per_session":
        groups = [label for label in (session_label(*span) for span in ranges) if label in groups]  # time order
        rows["queries"] = {g: len(asked[g]) for g in groups}
    return markdown_table(rows, groups, ranked_rows=competing)
