"""The benchmark report: every strategy of every suite through the temporal protocol.

:func:`evaluate_suite` runs :func:`pipelines.evaluate.protocol.run_protocol` for each strategy of
a :class:`~pipelines.evaluate.suite.Suite` (a strategy whose trained model does not exist is
recorded as *missing* with the reason, never dropped); :func:`write_report` writes under
``out_dir``:

- ``benchmark.md``: header (profile, model sizes), then per suite: its settings and version, query
  counts and exclusions, one table per granularity (strategies as rows, metrics as columns, the
  best value of each column in bold, missing strategies as rows saying why), per-category and
  per-session tables of recall@K (sessions numbered from 1, as in G-Long's tables), and the
  published reference numbers of the suite, labelled comparable or not;
- ``metrics.json``: ``{suite: {strategy: {metric: value}}}`` with flat keys such as
  ``"turn/recall@5"``, ``"session/ndcg_any@10"``, ``"turn/mrr"``, ``"context_tokens"``,
  ``"queries"`` (a DVC metrics file);
- ``queries.jsonl``: one line per (suite, strategy, query, granularity) with its metrics;
- per suite, ``plots/<suite>/recall_at_k.png`` (recall@k against k, a line per strategy, a panel
  per granularity), ``recall_by_session.png`` (recall@K against the session a query is asked in),
  ``tokens_vs_recall.png`` (mean context tokens against recall@K) and ``recall_at_k.csv`` (column
  ``k`` and one column ``<granularity>/<strategy>`` each: a DVC plot with x = k).

"Best" is the highest value for every retrieval metric; ``context_tokens`` and ``queries`` are
reported, not ranked. A column where every strategy ties has no bold value.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from pipelines.data.schema import Episode
from pipelines.errors import ConfigError, ModelNotTrained
from pipelines.evaluate.metrics import METRICS
from pipelines.evaluate.protocol import ProtocolConfig, ProtocolResult, flat_metrics, run_protocol
from pipelines.evaluate.suite import Suite
from pipelines.memory import GRANULARITIES, TokenCounter, missing_models

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # distinct markers so overlapping points stay readable


def headline_k(ks: Sequence[int]) -> int:
    """The k of the per-category / per-session tables and the tokens plot: 5 if measured, else the largest."""
    return 5 if 5 in ks else max(ks)


def _fmt(value: float | int | None, decimals: int = 4) -> str:
    if value is None:
        return "–"
    return str(value) if isinstance(value, int) else f"{value:.{decimals}f}"


def markdown_table(rows: dict[str, dict[str, float]], columns: Sequence[str],
                   ranked: Iterable[str] | None = None, row_label: str = "strategy") -> str:
    """A markdown table; in each column named in ``ranked`` the highest value(s) are bold."""
    ranked = set(columns if ranked is None else ranked)
    best: dict[str, float] = {}
    for col in ranked:
        values = [r[col] for r in rows.values() if r.get(col) is not None]
        if values and max(values) > min(values):
            best[col] = max(values)
    lines = [f"| {row_label} | " + " | ".join(columns) + " |",
             "| --- | " + " | ".join("---:" for _ in columns) + " |"]
    for name, row in rows.items():
        cells = []
        for col in columns:
            value = row.get(col)
            decimals = 0 if col == "queries" else 1 if col == "context_tokens" else 4
            text = _fmt(value, decimals)
            cells.append(f"**{text}**" if col in best and value is not None and value == best[col] else text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def metric_columns(ks: Sequence[int], metrics: Sequence[str] = (*METRICS, "mrr")) -> list[str]:
    return [f"{m}@{k}" for m in METRICS if m in metrics for k in ks] + (["mrr"] if "mrr" in metrics else [])


def granularity_tables(results: dict[str, ProtocolResult], ks: Sequence[int],
                       metrics: Sequence[str] = (*METRICS, "mrr"), missing: dict[str, str] | None = None
                       ) -> dict[str, str]:
    """One markdown table per granularity that any strategy was scored at; missing strategies
    (name -> reason) are rows of their own under each table."""
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    columns = metric_columns(ks, metrics)
    tables = {}
    for g in GRANULARITIES:
        rows = {name: {**agg[g], "context_tokens": agg["context_tokens"]} for name, agg in aggs.items() if g in agg}
        if rows:
            tables[g] = markdown_table(rows, columns + ["context_tokens", "queries"], ranked=columns)
    if missing and not tables:
        tables["turn"] = markdown_table({}, columns + ["context_tokens", "queries"], ranked=())
    for g in tables:
        tables[g] += "".join(f"\n| {name} | missing: {why} |" + " |" * (len(columns) + 1)
                             for name, why in missing.items()) if missing else ""
    return tables


def breakdown_table(results: dict[str, ProtocolResult], by: str, granularity: str, metric: str) -> str | None:
    """Strategies x groups (``by`` = "per_category" | "per_session") of one metric."""
    rows: dict[str, dict[str, float]] = {}
    groups: list[str] = []
    for name, result in results.items():
        for group, agg in result.aggregate()[by].items():
            label = str(group) if by == "per_category" else f"session {group + 1}"
            if granularity in agg:
                rows.setdefault(name, {})[label] = agg[granularity][metric]
                if label not in groups:
                    groups.append(label)
    if not rows:
        return None
    return markdown_table(rows, groups)


def _figure(n_panels: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n_panels, figsize=(5 * n_panels, 4), squeeze=False)
    return plt, fig, axes[0]


def _save(plt, fig, axes, path: Path) -> None:
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _granularities(aggs: dict[str, dict]) -> list[str]:
    return [g for g in GRANULARITIES if any(g in a for a in aggs.values())] or ["turn"]


def _plot_recall_at_k(results: dict[str, ProtocolResult], ks: Sequence[int], path: Path, title: str) -> None:
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = _granularities(aggs)
    plt, fig, axes = _figure(len(grans))
    for i, (ax, g) in enumerate(zip(axes, grans)):
        for j, (name, agg) in enumerate(aggs.items()):
            if g in agg:
                ax.plot(list(ks), [agg[g][f"recall@{k}"] for k in ks], marker=MARKERS[j % len(MARKERS)], label=name)
        ax.set(title=f"{title}: {g} granularity", xlabel="k", ylabel="recall@k", ylim=(0, 1.02), xticks=list(ks))
    _save(plt, fig, axes, path)


def _plot_by_session(results: dict[str, ProtocolResult], k: int, path: Path, title: str) -> None:
    aggs = {name: r.aggregate() for name, r in results.items()}
    grans = _granularities({n: a["overall"] for n, a in aggs.items()})
    plt, fig, axes = _figure(len(grans))
    for ax, g in zip(axes, grans):
        for j, (name, agg) in enumerate(aggs.items()):
            points = sorted((i + 1, v[g][f"recall@{k}"]) for i, v in agg["per_session"].items() if g in v)
            if points:
                ax.plot(*zip(*points), marker=MARKERS[j % len(MARKERS)], label=name)
        ax.set(title=f"{title}: {g} granularity", xlabel="session the query is asked in (1 = first)",
               ylabel=f"recall@{k}", ylim=(-0.02, 1.05))
    _save(plt, fig, axes, path)


def _plot_tokens_vs_recall(results: dict[str, ProtocolResult], k: int, path: Path, title: str) -> None:
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = _granularities(aggs)
    plt, fig, axes = _figure(len(grans))
    for ax, g in zip(axes, grans):
        for j, (name, agg) in enumerate(aggs.items()):
            if g in agg:
                ax.scatter([agg["context_tokens"]], [agg[g][f"recall@{k}"]], s=50, alpha=0.8, label=name,
                           marker=MARKERS[j % len(MARKERS)])
        ax.set(title=f"{title}: {g} granularity", xlabel="mean context tokens", ylabel=f"recall@{k}",
               ylim=(-0.02, 1.05))
    _save(plt, fig, axes, path)


def _write_recall_csv(results: dict[str, ProtocolResult], ks: Sequence[int], path: Path) -> list[str]:
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    columns = [(g, name) for g in GRANULARITIES for name, agg in aggs.items() if g in agg]
    header = ["k"] + [f"{g}/{name}" for g, name in columns]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for k in ks:
            writer.writerow([k] + [f"{aggs[name][g][f'recall@{k}']:.6f}" for g, name in columns])
    return header[1:]


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class SuiteRun:
    """Every strategy of one suite through the protocol (or the reason it is missing)."""

    suite: Suite
    episodes: int
    results: dict[str, ProtocolResult]
    missing: dict[str, str]   # strategy -> why it could not run (its model is not trained)
    counter: TokenCounter

    def metrics(self) -> dict[str, dict[str, float]]:
        return {name: flat_metrics(r.aggregate()["overall"]) for name, r in self.results.items()}

    def counts(self) -> dict[str, dict[str, int]]:
        return {name: {"scored": r.aggregate()["overall"]["queries"], **r.exclusion_counts()}
                for name, r in self.results.items()}


def evaluate_suite(suite: Suite, episodes: Sequence[Episode], settings: dict[str, dict[str, Any]] | None = None,
                   tokenizer: str | None = None, show_progress: bool = True, depth: int | None = None) -> SuiteRun:
    """Run each strategy of ``suite`` over ``episodes``; ``settings`` (strategy -> config fields)
    go under the suite's own ``strategy_settings``."""
    settings = settings or {}
    unknown = sorted(set(settings) - set(suite.strategies))
    if unknown:
        raise ConfigError(f"settings are given for strategies {unknown} that suite {suite.name!r} does not run.")
    config = ProtocolConfig(ks=suite.ks, budget_tokens=suite.budget_tokens, depth=depth,
                            show_progress=show_progress, session_scoring=suite.session_scoring)
    counter = TokenCounter.from_config(tokenizer)
    results: dict[str, ProtocolResult] = {}
    missing: dict[str, str] = {}
    for name in suite.strategies:
        merged = {**settings.get(name, {}), **suite.strategy_settings.get(name, {})}
        absent = missing_models(name, merged)
        if absent:
            missing[name] = "; ".join(str(e) for e in absent)
            continue
        try:
            results[name] = run_protocol(episodes, name, config, merged, counter)
        except ModelNotTrained as exc:
            missing[name] = str(exc)
    return SuiteRun(suite, len(episodes), results, missing, counter)


def _suite_markdown(run: SuiteRun) -> tuple[str, str]:
    """(the suite's section of benchmark.md, its granularity tables alone for Dagster metadata)."""
    suite, results, ks = run.suite, run.results, run.suite.ks
    tables = granularity_tables(results, ks, suite.metrics, run.missing)
    k = headline_k(ks)
    main = "\n\n".join(f"### {g} granularity\n\n{t}" for g, t in tables.items())
    lines = [f"## Suite `{suite.name}` (version {suite.version})", ""]
    if suite.description:
        lines += [suite.description, ""]
    lines += [f"- source: `{suite.source}`, split `{suite.split}`, {run.episodes} episodes; corpus: "
              f"{'main speaker turns only' if suite.corpus == 'main_speaker' else 'every turn'}; session scoring: "
              f"{'LongMemEval turn2session' if suite.session_scoring == 'longmemeval' else 'deduplicated ranking'}",
              f"- strategies: {', '.join(suite.strategies)}"
              + (f" (missing: {', '.join(run.missing)})" if run.missing else ""),
              f"- cut-offs k: {', '.join(map(str, ks))}; context budget: {suite.budget_tokens} tokens "
              f"({run.counter.name} tokens)", "", "### Queries", ""]
    counts = run.counts()
    if counts:
        cols = list(next(iter(counts.values())).keys())
        lines += [markdown_table(counts, cols, ranked=()), "",
                  "Excluded: abstention questions (no evidence to retrieve), queries whose evidence is not "
                  "strictly earlier than the session they are asked in (never shown to a retriever), queries "
                  "without evidence.", ""]
    lines += ["### Retrieval", "", main if main else "No strategy could run.", ""]
    for by, title in (("per_category", "Per category"),
                      ("per_session", "Per session (the session a query is asked in, numbered from 1)")):
        parts = [(g, breakdown_table(results, by, g, f"recall@{k}")) for g in GRANULARITIES]
        parts = [(g, t) for g, t in parts if t]
        if parts:
            lines += [f"### {title}: recall@{k}", ""]
            for g, t in parts:
                lines += [f"{g} granularity:", "", t, ""]
    ref = suite.reference
    if ref.get("rows") or ref.get("note"):
        label = "comparable" if ref.get("comparable") else "not comparable with this run"
        lines += [f"### Published reference numbers ({label})", "", f"{ref.get('source', '')}.", ""]
        rows = ref.get("rows") or {}
        if rows:
            cols = list(dict.fromkeys(c for nums in rows.values() for c in nums))
            lines += [markdown_table(rows, cols, ranked=(), row_label="system"), ""]
        if ref.get("note"):
            lines += [ref["note"], ""]
    return "\n".join(lines), main


def write_report(runs: Sequence[SuiteRun], out_dir: str | os.PathLike, profile: str = "tiny",
                 models: dict[str, str] | None = None) -> dict[str, Any]:
    """Write benchmark.md, metrics.json, queries.jsonl and the plots of ``runs`` under ``out_dir``.

    ``models`` maps a model to its size / description for the header (e.g. ``{"mdr decoder":
    "GPT-2 2x64"}``). Returns ``{"metrics", "markdown" (suite -> tables), "plots" (paths),
    "files", "counts" (suite -> strategy -> counts), "missing" (suite -> strategy -> why),
    "dvc_plot" (the first suite's recall CSV: path, x, y)}``.
    """
    if not runs:
        raise ConfigError("no suite to report.")
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    metrics = {run.suite.name: run.metrics() for run in runs}
    files = {"markdown": out / "benchmark.md", "metrics": out / "metrics.json", "queries": out / "queries.jsonl"}
    _write_json(files["metrics"], metrics)
    with open(files["queries"], "w", encoding="utf-8") as f:
        for run in runs:
            for r in run.results.values():
                for s in r.scores:
                    f.write(json.dumps({"suite": run.suite.name, "suite_version": run.suite.version, **s.__dict__}) + "\n")
    names = ", ".join(run.suite.name for run in runs)
    lines = [f"# Memory benchmark: {names}", "", f"- profile: `{profile}`"]
    if models:
        lines += [f"- models: " + "; ".join(f"{k}: {v}" for k, v in models.items())]
    lines += ["- protocol: RealMem's temporal loop — a fresh memory per episode; each query is answered from "
              "the sessions before the one it is asked in; the session enters memory afterwards.",
              "- metrics: recall@k = share of evidence in the top k; recall_any / recall_all / ndcg_any as in "
              "LongMemEval; mrr = reciprocal rank of the first evidence item; means over queries. Bold: best per column.",
              ""]
    tables: dict[str, str] = {}
    plots: list[Path] = []
    dvc_plot: dict[str, Any] = {}
    for run in runs:
        section, tables[run.suite.name] = _suite_markdown(run)
        lines.append(section)
        if not run.results:
            continue
        folder = out / "plots" / run.suite.name
        k = headline_k(run.suite.ks)
        paths = [folder / "recall_at_k.png", folder / "recall_by_session.png", folder / "tokens_vs_recall.png",
                 folder / "recall_at_k.csv"]
        _plot_recall_at_k(run.results, run.suite.ks, paths[0], run.suite.name)
        _plot_by_session(run.results, k, paths[1], run.suite.name)
        _plot_tokens_vs_recall(run.results, k, paths[2], run.suite.name)
        y = _write_recall_csv(run.results, run.suite.ks, paths[3])
        plots += paths
        dvc_plot = dvc_plot or {"path": paths[3], "x": "k", "y": y}
    files["markdown"].write_text("\n".join(lines), encoding="utf-8")
    files.update({p.relative_to(out).as_posix(): p for p in plots})
    return {"metrics": metrics, "markdown": tables, "plots": plots, "files": files,
            "counts": {run.suite.name: run.counts() for run in runs},
            "missing": {run.suite.name: dict(run.missing) for run in runs}, "dvc_plot": dvc_plot}


def run_benchmark(episodes: Iterable[Episode], strategies: Sequence[str], ks: Sequence[int] = (1, 3, 5, 10),
                  out_dir: str | os.PathLike = "reports", profile: str = "tiny", budget_tokens: int = 1024,
                  suite: str = "synthetic", strategy_settings: dict[str, dict[str, Any]] | None = None,
                  tokenizer: str | None = None, show_progress: bool = True) -> dict[str, Any]:
    """One ad-hoc suite (named ``suite``, source canonical) through :func:`evaluate_suite` and
    :func:`write_report`; see those for the settings and the returned dict."""
    strategies = list(strategies)
    if not strategies:
        raise ConfigError("benchmark.strategies is empty: name at least one memory strategy.")
    if len(set(strategies)) != len(strategies):
        raise ConfigError(f"benchmark.strategies repeats a name: {strategies}.")
    spec = Suite(name=suite, version=1, source="canonical", strategies=tuple(strategies), ks=tuple(ks),
                 budget_tokens=budget_tokens)
    run = evaluate_suite(spec, list(episodes), strategy_settings, tokenizer, show_progress)
    return write_report([run], out_dir, profile)
