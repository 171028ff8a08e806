"""The benchmark report: every strategy through the temporal protocol, written as files.

:func:`run_benchmark` runs :func:`pipelines.evaluate.protocol.run_protocol` for each strategy and
writes under ``out_dir``:

- ``benchmark.md``: header (profile, suite, episodes, protocol settings, query counts and
  exclusions), one table per granularity (strategies as rows, metrics as columns, the best value
  of each column in bold), per-category and per-session tables of recall@K, and published
  reference numbers where the suite has them;
- ``metrics.json``: ``{suite: {strategy: {metric: value}}}`` with flat keys such as
  ``"turn/recall@5"``, ``"session/ndcg_any@10"``, ``"turn/mrr"``, ``"context_tokens"``,
  ``"queries"`` (a DVC metrics file);
- ``queries.jsonl``: one line per (strategy, query, granularity) with its metrics;
- ``plots/recall_at_k.png`` (recall@k against k, a line per strategy, a panel per granularity),
  ``plots/tokens_vs_recall.png`` (mean context tokens against recall@K, a point per strategy) and
  ``plots/recall_at_k.csv`` (column ``k`` and one column ``<granularity>/<strategy>`` each: a DVC
  plot with x = k).

"Best" is the highest value for every retrieval metric; ``context_tokens`` and ``queries`` are
reported, not ranked. A column where every strategy ties has no bold value.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from pipelines.data.schema import Episode
from pipelines.errors import ConfigError
from pipelines.evaluate.metrics import METRICS
from pipelines.evaluate.protocol import ProtocolConfig, ProtocolResult, flat_metrics, run_protocol
from pipelines.memory import GRANULARITIES, TokenCounter

# Published numbers the report prints beside ours (METHODS.md section 6), by suite name.
REFERENCE_NUMBERS: dict[str, dict[str, dict[str, float]]] = {
    "longmemeval": {"G-Long (paper)": {"recall@3": 0.6286, "recall@5": 0.7220}},
}


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


def metric_columns(ks: Sequence[int]) -> list[str]:
    return [f"{m}@{k}" for m in METRICS for k in ks] + ["mrr"]


def granularity_tables(results: dict[str, ProtocolResult], ks: Sequence[int]) -> dict[str, str]:
    """One markdown table per granularity that any strategy was scored at."""
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    columns = metric_columns(ks)
    tables = {}
    for g in GRANULARITIES:
        rows = {name: {**agg[g], "context_tokens": agg["context_tokens"]} for name, agg in aggs.items() if g in agg}
        if rows:
            tables[g] = markdown_table(rows, columns + ["context_tokens", "queries"], ranked=columns)
    return tables


def breakdown_table(results: dict[str, ProtocolResult], by: str, granularity: str, metric: str) -> str | None:
    """Strategies x groups (``by`` = "per_category" | "per_session") of one metric."""
    rows: dict[str, dict[str, float]] = {}
    groups: list[str] = []
    for name, result in results.items():
        for group, agg in result.aggregate()[by].items():
            label = str(group) if by == "per_category" else f"session {group}"
            if granularity in agg:
                rows.setdefault(name, {})[label] = agg[granularity][metric]
                if label not in groups:
                    groups.append(label)
    if not rows:
        return None
    return markdown_table(rows, groups)


def _plot_recall_at_k(results: dict[str, ProtocolResult], ks: Sequence[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = [g for g in GRANULARITIES if any(g in a for a in aggs.values())] or ["turn"]
    fig, axes = plt.subplots(1, len(grans), figsize=(5 * len(grans), 4), squeeze=False)
    for ax, g in zip(axes[0], grans):
        for name, agg in aggs.items():
            if g in agg:
                ax.plot(list(ks), [agg[g][f"recall@{k}"] for k in ks], marker="o", label=name)
        ax.set(title=f"{g} granularity", xlabel="k", ylabel="recall@k", ylim=(0, 1.02), xticks=list(ks))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_tokens_vs_recall(results: dict[str, ProtocolResult], k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = [g for g in GRANULARITIES if any(g in a for a in aggs.values())] or ["turn"]
    fig, axes = plt.subplots(1, len(grans), figsize=(5 * len(grans), 4), squeeze=False)
    for ax, g in zip(axes[0], grans):
        for name, agg in aggs.items():
            if g in agg:
                ax.scatter([agg["context_tokens"]], [agg[g][f"recall@{k}"]], s=50, alpha=0.8, label=name,
                           marker=MARKERS[list(aggs).index(name) % len(MARKERS)])
        ax.set(title=f"{g} granularity", xlabel="mean context tokens", ylabel=f"recall@{k}", ylim=(-0.02, 1.05))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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


def render_markdown(results: dict[str, ProtocolResult], ks: Sequence[int], profile: str, suite: str,
                    episodes: int, budget_tokens: int, counter: TokenCounter) -> tuple[str, str]:
    """(the whole benchmark.md, the granularity tables alone for Dagster metadata)."""
    tables = granularity_tables(results, ks)
    k = headline_k(ks)
    main = "\n\n".join(f"### {g} granularity\n\n{t}" for g, t in tables.items())
    lines = [f"# Memory benchmark: {suite}", "",
             f"- profile: `{profile}`", f"- suite: `{suite}`", f"- episodes: {episodes}",
             f"- strategies: {', '.join(results)}",
             f"- cut-offs k: {', '.join(map(str, ks))}; context budget: {budget_tokens} tokens ({counter.name} tokens)",
             "- protocol: RealMem's temporal loop — a fresh memory per episode; each query is answered from "
             "the sessions before the one it is asked in; the session enters memory afterwards.",
             "- metrics: recall@k = share of evidence in the top k; recall_any / recall_all / ndcg_any as in "
             "LongMemEval; mrr = reciprocal rank of the first evidence item; means over queries. Bold: best per column.",
             "", "## Queries", ""]
    counts = {name: {"scored": r.aggregate()["overall"]["queries"], **r.exclusion_counts()} for name, r in results.items()}
    cols = list(next(iter(counts.values())).keys()) if counts else ["scored"]
    lines += [markdown_table(counts, cols, ranked=()), "",
              "Excluded: abstention questions (no evidence to retrieve), queries whose evidence is not strictly "
              "earlier than the session they are asked in (never shown to a retriever), queries without evidence.",
              "", "## Retrieval", "", main]
    for by, title in (("per_category", "Per category"), ("per_session", "Per session index (0-based; the session the query is asked in)")):
        lines += ["", f"## {title}: recall@{k}"]
        for g in GRANULARITIES:
            table = breakdown_table(results, by, g, f"recall@{k}")
            if table:
                lines += ["", f"### {g} granularity", "", table]
    refs = {label: nums for key, table in REFERENCE_NUMBERS.items() if key in suite.lower()
            for label, nums in table.items()}
    if refs:
        cols = sorted({c for nums in refs.values() for c in nums})
        lines += ["", "## Published reference numbers", "",
                  markdown_table({label: dict(nums) for label, nums in refs.items()}, cols, ranked=(), row_label="system"),
                  "", "As published; granularity and haystack as in the paper, not necessarily this run's."]
    return "\n".join(lines) + "\n", main


def run_benchmark(episodes: Iterable[Episode], strategies: Sequence[str], ks: Sequence[int] = (1, 3, 5, 10),
                  out_dir: str | os.PathLike = "reports", profile: str = "tiny", budget_tokens: int = 1024,
                  suite: str = "synthetic", strategy_settings: dict[str, dict[str, Any]] | None = None,
                  depth: int | None = None, tokenizer: str | None = None,
                  show_progress: bool = True) -> dict[str, Any]:
    """Run every strategy through the temporal protocol and write the report files.

    ``strategy_settings`` maps a strategy name to its config fields (e.g. ``{"dense":
    {"cache_dir": ".cache/embeddings", "batch_size": 64}}``); ``tokenizer`` is a local HF
    tokenizer directory for token counts (None: regex tokens).

    Returns ``{"metrics": {suite: {strategy: {metric: value}}}, "markdown": tables for Dagster,
    "plots": [png, png, csv], "files": {name: path}, "counts": {strategy: {scored, <reason>: n}},
    "dvc_plot": {"path", "x", "y"}}``.
    """
    strategies = list(strategies)
    if not strategies:
        raise ConfigError("benchmark.strategies is empty: name at least one memory strategy.")
    if len(set(strategies)) != len(strategies):
        raise ConfigError(f"benchmark.strategies repeats a name: {strategies}.")
    unknown = sorted(set(strategy_settings or {}) - set(strategies))
    if unknown:
        raise ConfigError(f"settings are given for strategies {unknown} that benchmark.strategies does not run.")
    config = ProtocolConfig(ks=tuple(ks), budget_tokens=budget_tokens, depth=depth, show_progress=show_progress)
    ks = config.ks
    counter = TokenCounter.from_config(tokenizer)
    episodes = list(episodes)
    results = {name: run_protocol(episodes, name, config, (strategy_settings or {}).get(name), counter)
               for name in strategies}

    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    metrics = {suite: {name: flat_metrics(r.aggregate()["overall"]) for name, r in results.items()}}
    files = {"markdown": out / "benchmark.md", "metrics": out / "metrics.json", "queries": out / "queries.jsonl",
             "recall_at_k_png": out / "plots" / "recall_at_k.png",
             "tokens_vs_recall_png": out / "plots" / "tokens_vs_recall.png",
             "recall_at_k_csv": out / "plots" / "recall_at_k.csv"}
    _write_json(files["metrics"], metrics)
    with open(files["queries"], "w", encoding="utf-8") as f:
        for r in results.values():
            for s in r.scores:
                f.write(json.dumps({"suite": suite, **s.__dict__}) + "\n")
    document, tables = render_markdown(results, ks, profile, suite, len(episodes), budget_tokens, counter)
    files["markdown"].write_text(document, encoding="utf-8")
    _plot_recall_at_k(results, ks, files["recall_at_k_png"])
    _plot_tokens_vs_recall(results, headline_k(ks), files["tokens_vs_recall_png"])
    y_columns = _write_recall_csv(results, ks, files["recall_at_k_csv"])
    return {
        "metrics": metrics,
        "markdown": tables,
        "plots": [files["recall_at_k_png"], files["tokens_vs_recall_png"], files["recall_at_k_csv"]],
        "files": files,
        "counts": {name: {"scored": r.aggregate()["overall"]["queries"], **r.exclusion_counts()}
                   for name, r in results.items()},
        "dvc_plot": {"path": files["recall_at_k_csv"], "x": "k", "y": y_columns},
    }
