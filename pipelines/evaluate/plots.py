"""The plots of the benchmark report (matplotlib, Agg backend) and the CSV that DVC plots.

Each function draws one PNG of a suite under ``plots/<suite>/`` (:func:`pipelines.evaluate.report.write_report`
chooses the paths and the note under the panels: the strategies not drawn, and why):

- :func:`plot_recall_at_k`: recall@k against k, a line per strategy, a panel per granularity;
- :func:`plot_by_session`: recall@K against the session a query is asked in (or the range of sessions,
  :func:`pipelines.evaluate.tables.session_groups`), sessions numbered from 1;
- :func:`plot_tokens_vs_recall`: mean context tokens against recall@K, a point per strategy;
- :func:`plot_ablation`: a bar per ablation step that ran, a panel per ablation metric;
- :func:`plot_generation_by_session`: BLEU-1 and ROUGE-L of a generator against the session number;
- :func:`write_recall_csv`: ``recall_at_k.csv``, column ``k`` and one column ``<granularity>/<strategy>`` each
  (a DVC plot with x = k).

:func:`figure` and :func:`save` (panels side by side; grid, legends, the note, one atomic write) are shared with
the answers plot (:mod:`pipelines.evaluate.answers.section`). A strategy keeps its colour and marker in every
panel (:data:`MARKERS`).
"""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

from pipelines.atomic import atomic_write
from pipelines.evaluate.protocol import ProtocolResult, aggregate_sessions
from pipelines.evaluate.tables import session_groups, session_label
from pipelines.memory import GRANULARITIES

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # distinct markers so overlapping points stay readable


def figure(n_panels: int):
    """(pyplot, the figure, its ``n_panels`` axes side by side), 5 x 4 inches a panel, drawn without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n_panels, figsize=(5 * n_panels, 4), squeeze=False)
    return plt, fig, axes[0]


def save(plt, fig, axes, path: Path, note: str = "") -> None:
    """Grid, legends and ``note`` (the strategies not drawn, and why) under the panels; then write ``path``."""
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    lines = textwrap.wrap(note, width=int(fig.get_figwidth() * 17)) if note else []
    if lines:
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, min(0.5, 0.035 * len(lines) + (0.01 if lines else 0)), 1, 1))
    try:
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format=path.suffix.lstrip("."), dpi=100)
    finally:
        plt.close(fig)          # a plot that cannot be written leaves no figure open in a long-lived process


def _granularities(aggs: dict[str, dict]) -> list[str]:
    """The granularities any strategy was scored at (a panel each), in GRANULARITIES' order; at least "turn"."""
    return [g for g in GRANULARITIES if any(g in a for a in aggs.values())] or ["turn"]


def plot_recall_at_k(results: dict[str, ProtocolResult], ks: Sequence[int], path: Path, title: str,
                     note: str = "") -> None:
    """recall@k against k (each k of ``ks``), a line per strategy, a panel per granularity scored."""
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = _granularities(aggs)
    plt, fig, axes = figure(len(grans))
    for i, (ax, g) in enumerate(zip(axes, grans)):
        for j, (name, agg) in enumerate(aggs.items()):
            if g in agg:
                ax.plot(list(ks), [agg[g][f"recall@{k}"] for k in ks], marker=MARKERS[j % len(MARKERS)], label=name,
                        color=f"C{j % 10}")  # a strategy keeps its colour in every panel
        ax.set(title=f"{title}: {g} granularity", xlabel="k", ylabel="recall@k", ylim=(0, 1.02), xticks=list(ks))
    save(plt, fig, axes, path, note)


def plot_ablation(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str], title: str, path: Path,
                  note: str = "") -> None:
    """One panel per ablation metric: a bar per step that ran (``rows``: :func:`pipelines.evaluate.report.
    ablation_rows` without the missing steps), in order, its value written above it."""
    plt, fig, axes = figure(len(metrics))
    for ax, metric in zip(axes, metrics):
        values = [r[metric] if r[metric] is not None else 0.0 for r in rows]
        bars = ax.bar(range(len(rows)), values, color=[f"C{i % 10}" for i in range(len(rows))])
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
        ax.set_xticks(range(len(rows)), [r["strategy"] for r in rows], rotation=30, ha="right")
        ax.set(title=f"{title}: {metric}", ylim=(0, 1.05), ylabel=metric)
    save(plt, fig, axes, path, note)


def plot_by_session(results: dict[str, ProtocolResult], k: int, path: Path, title: str, note: str = "") -> None:
    """recall@k per :func:`session_groups` (a point per session, or per range of sessions at its middle)."""
    ranges = session_groups(results)
    middle = {span: (span[0] + span[1]) / 2 + 1 for span in ranges}  # sessions numbered from 1
    grans = _granularities({n: r.aggregate()["overall"] for n, r in results.items()})
    plt, fig, axes = figure(len(grans))
    for ax, g in zip(axes, grans):
        for j, (name, result) in enumerate(results.items()):
            groups = aggregate_sessions([s for s in result.scores if s.granularity == g], ranges)
            points = [(middle[span], v[g][f"recall@{k}"]) for span, v in groups.items() if g in v]
            if points:
                ax.plot(*zip(*points), marker=MARKERS[j % len(MARKERS)], label=name, color=f"C{j % 10}")
        grouped = any(low != high for low, high in ranges)
        ax.set(title=f"{title}: {g} granularity", ylim=(-0.02, 1.05), ylabel=f"recall@{k}",
               xlabel="sessions the query is asked in (1 = first)" if grouped
               else "session the query is asked in (1 = first)")
        ax.set_xticks([middle[span] for span in ranges], [session_label(*span).split(" ")[1] for span in ranges],
                      **({"rotation": 45, "fontsize": 8} if grouped else {}))
    save(plt, fig, axes, path, note)


def plot_tokens_vs_recall(results: dict[str, ProtocolResult], k: int, path: Path, title: str,
                          note: str = "") -> None:
    """Mean context tokens against recall@k, a point per strategy, a panel per granularity scored."""
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = _granularities(aggs)
    plt, fig, axes = figure(len(grans))
    for ax, g in zip(axes, grans):
        for j, (name, agg) in enumerate(aggs.items()):
            if g in agg:
                ax.scatter([agg["context_tokens"]], [agg[g][f"recall@{k}"]], s=50, alpha=0.8, label=name,
                           marker=MARKERS[j % len(MARKERS)], color=f"C{j % 10}")
        ax.set(title=f"{title}: {g} granularity", xlabel="mean context tokens", ylabel=f"recall@{k}",
               ylim=(-0.02, 1.05))
    save(plt, fig, axes, path, note)


def plot_generation_by_session(result: dict, path: Path, title: str) -> None:
    """BLEU-1 and ROUGE-L of one generator (``result``: evaluate_mdr_episodes') against the session number."""
    sessions = sorted(result["by_session"])
    plt, fig, axes = figure(1)
    ax = axes[0]
    for j, metric in enumerate(("bleu-1", "rouge-l")):
        ax.plot(sessions, [result["by_session"][n][metric] for n in sessions], marker=MARKERS[j], label=metric)
    ax.set(title=title, xlabel="session number (1 = first)", ylabel="score (0-100)", xticks=sessions)
    save(plt, fig, axes, path)


def write_recall_csv(results: dict[str, ProtocolResult], ks: Sequence[int], path: Path) -> list[str]:
    """``path``: a row per k, a column ``<granularity>/<strategy>`` of recall@k each; returns those columns (the
    DVC plot's y)."""
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    columns = [(g, name) for g in GRANULARITIES for name, agg in aggs.items() if g in agg]
    header = ["k"] + [f"{g}/{name}" for g, name in columns]
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for k in ks:
            writer.writerow([k] + [f"{aggs[name][g][f'recall@{k}']:.6f}" for g, name in columns])
    return header[1:]
