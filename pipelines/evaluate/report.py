"""The benchmark report: every strategy of every suite through the temporal protocol.

:func:`evaluate_suite` runs every strategy of a :class:`~pipelines.evaluate.suite.Suite` through the temporal
protocol, episode by episode (:mod:`pipelines.evaluate.shards`: one shard, or shard i of N, resumable). A strategy that cannot run on the suite's data (its class's
``unavailable``: ``session_summary`` without session summaries, ``egocentric_gold`` without memories,
``graph`` reading triplets the data does not have) or whose trained model does not exist is not run and is
recorded as *missing* with the reason, never dropped and never scored 0; a strategy that ran but retrieved
nothing for any query is flagged (a note under the tables and plots, a logged warning).
:func:`write_report` writes under ``out_dir``:

- ``benchmark.md``: header (profile, model sizes), then per suite: its settings and version, query
  counts and exclusions, one table per granularity (strategies as rows, metrics as columns, the
  best value of each column in bold, missing strategies as rows saying why), per-category and
  per-session tables of recall@K (sessions numbered from 1, as in G-Long's tables; with queries asked
  in more than ten sessions, ten ranges of sessions, each a mean over its queries, with a row counting
  them), and the published reference numbers of the suite, labelled comparable or not; for a suite with
  ``generation: [mdr]``, a "Response generation" table (our MDR row labelled with the profile, the
  suite's reference rows beside it labelled comparable or not; bold marks the best value of a
  column among comparable rows only), a per-session table and a few sample responses;
- ``metrics.json``: ``{suite: {strategy: {metric: value}}}`` with flat keys such as
  ``"turn/recall@5"``, ``"session/ndcg_any@10"``, ``"turn/mrr"``, ``"context_tokens"``,
  ``"queries"`` (the full table; the DVC metrics are :func:`write_headline`'s few figures), and
  ``{"missing": why}`` for a strategy or generator that was not run (never zeros); a suite's generation
  sits beside its strategies under ``"mdr_generation"`` with keys ``"bleu-1"``.. ``"bleu-4"``, ``"rouge-l"``,
  ``"dist-n"``, ``"c_dist-n"``, ``"s_dist-n"``, ``"responses"``, ``"examples_total"``, per session
  ``"session_<n>/<metric>"`` and the mean over sessions 2-5 (G-Long's tables) ``"sessions_2-5/<metric>"``;
- ``queries.jsonl``: one line per (suite, strategy, query, granularity) with its metrics (``kind: retrieval``);
- per suite, ``plots/<suite>/recall_at_k.png`` (recall@k against k, a line per strategy, a panel
  per granularity), ``recall_by_session.png`` (recall@K against the session, or range of sessions, a
  query is asked in), ``tokens_vs_recall.png`` (mean context tokens against recall@K), each with the
  strategies not run (and why) and those that retrieved nothing noted under its panels, and
  ``recall_at_k.csv`` (column ``k`` and one column ``<granularity>/<strategy>`` each: a DVC plot with
  x = k), and with more than one session scored for generation ``generation_by_session.png`` (BLEU-1
  and ROUGE-L against the session number).

With a suite's answer run (``answers``: a language model answered its questions from each strategy's memory
and from the reference readers', judges scored the answers), its section gains an "Answers" part, metrics.json
``answers/...`` keys per reader, queries.jsonl one ``kind: answer`` line per answer and the plots
``accuracy_vs_tokens.png`` (pipelines.evaluate.answers.section says what each shows).

"Best" is the highest value for every retrieval metric; ``context_tokens`` and ``queries`` are
reported, not ranked. A column where every strategy ties has no bold value. An oracle strategy (its
class's ``oracle`` says why, e.g. ``egocentric_gold`` reads the dataset's own memories) is a row labelled
``name (oracle)`` that never takes the bold, with a note under the tables; metrics.json keeps its name.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from pipelines import atomic
from pipelines.atomic import atomic_write
from pipelines.data.schema import Episode
from pipelines.errors import ConfigError, NothingToScore
from pipelines.evaluate.metrics import METRICS
from pipelines.evaluate.protocol import (ProtocolConfig, ProtocolResult, aggregate_sessions, flat_metrics,
                                         session_ranges)
from pipelines.evaluate.shards import (ShardError, ShardSpec, ShardStore, merge, results_from_records, run_fingerprint,
                                       run_shard, shard_dir)
from pipelines.evaluate.suite import StreamedEpisodes, Suite
from pipelines.memory import GRANULARITIES, STRATEGIES, TokenCounter, build_strategy, missing_models

if TYPE_CHECKING:
    from pipelines.evaluate.answers.run import AnswerRun

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # distinct markers so overlapping points stay readable
GENERATION_COLUMNS = ("bleu-1", "bleu-2", "bleu-3", "bleu-4", "rouge-l", "dist-1", "dist-2", "c_dist-1", "c_dist-2",
                      "s_dist-1", "s_dist-2")
SESSION_COLUMNS = ("responses", "bleu-1", "bleu-2", "bleu-3", "bleu-4", "rouge-l", "c_dist-1", "c_dist-2",
                   "s_dist-1", "s_dist-2")
GLONG_SESSIONS = (2, 3, 4, 5)  # G-Long's tables: sessions 2-5 (and their average)
EMPTY_BY_DESIGN = ("no_history",)  # strategies whose memory is empty on purpose (the floor), never flagged empty


def headline_k(ks: Sequence[int]) -> int:
    """The k of the per-category / per-session tables and the tokens plot: 5 if measured, else the largest."""
    return 5 if 5 in ks else max(ks)


def _fmt(value: float | int | None, decimals: int = 4) -> str:
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
            text = _fmt(value, places)
            bold = name in competing and col in best and value is not None and value == best[col]
            cells.append(f"**{text}**" if bold else text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def oracle_reason(name: str) -> str | None:
    """Why strategy ``name`` is an oracle (its class's ``oracle``), or None when it is a real system."""
    from pipelines.memory import STRATEGIES

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
            rows, competing = _labelled(rows)
            tables[g] = markdown_table(rows, columns + ["context_tokens", "queries"], ranked=columns,
                                       ranked_rows=competing)
    if missing and not tables:
        tables["turn"] = markdown_table({}, columns + ["context_tokens", "queries"], ranked=())
    for g in tables:
        tables[g] += "".join(f"\n| {row_label(name)} | missing: {why} |" + " |" * (len(columns) + 1)
                             for name, why in missing.items()) if missing else ""
    return tables


def category_names(source: str) -> dict[str, str]:
    """The published names of a source's category codes (its loader's ``CATEGORY_NAMES``, e.g.
    LoCoMo's "2" -> "temporal"); {} when the source has none."""
    import sys

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


def _figure(n_panels: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n_panels, figsize=(5 * n_panels, 4), squeeze=False)
    return plt, fig, axes[0]


def _save(plt, fig, axes, path: Path, note: str = "") -> None:
    """Grid, legends and ``note`` (the strategies not drawn, and why) under the panels; then write ``path``."""
    import textwrap

    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    lines = textwrap.wrap(note, width=int(fig.get_figwidth() * 17)) if note else []
    if lines:
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, min(0.5, 0.035 * len(lines) + (0.01 if lines else 0)), 1, 1))
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format=path.suffix.lstrip("."), dpi=100)
    plt.close(fig)


def plot_note(run: "SuiteRun") -> str:
    """The line under a suite's plots: the strategies not drawn, each with its reason (shortened), and those
    drawn at 0 because they retrieved nothing ("" when every strategy ran and retrieved)."""
    import textwrap

    parts = []
    if run.missing:
        parts.append("not run: " + "; ".join(f"{name} ({textwrap.shorten(why, 100, placeholder=' ...')})"
                                             for name, why in run.missing.items()))
    if run.retrieved_nothing():
        parts.append("retrieved nothing for any query (drawn at 0): " + ", ".join(run.retrieved_nothing()))
    return ". ".join(parts)


def _granularities(aggs: dict[str, dict]) -> list[str]:
    return [g for g in GRANULARITIES if any(g in a for a in aggs.values())] or ["turn"]


def _plot_recall_at_k(results: dict[str, ProtocolResult], ks: Sequence[int], path: Path, title: str,
                      note: str = "") -> None:
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = _granularities(aggs)
    plt, fig, axes = _figure(len(grans))
    for i, (ax, g) in enumerate(zip(axes, grans)):
        for j, (name, agg) in enumerate(aggs.items()):
            if g in agg:
                ax.plot(list(ks), [agg[g][f"recall@{k}"] for k in ks], marker=MARKERS[j % len(MARKERS)], label=name,
                        color=f"C{j % 10}")  # a strategy keeps its colour in every panel
        ax.set(title=f"{title}: {g} granularity", xlabel="k", ylabel="recall@k", ylim=(0, 1.02), xticks=list(ks))
    _save(plt, fig, axes, path, note)


def _plot_ablation(run: SuiteRun, path: Path, note: str = "") -> None:
    """One panel per ablation metric: a bar per step that ran, in order, its value written above it."""
    rows = [r for r in ablation_rows(run) if "missing" not in r]
    metrics = run.suite.ablation["metrics"]
    plt, fig, axes = _figure(len(metrics))
    for ax, metric in zip(axes, metrics):
        values = [r[metric] if r[metric] is not None else 0.0 for r in rows]
        bars = ax.bar(range(len(rows)), values, color=[f"C{i % 10}" for i in range(len(rows))])
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
        ax.set_xticks(range(len(rows)), [r["strategy"] for r in rows], rotation=30, ha="right")
        ax.set(title=f"{run.suite.name}: {metric}", ylim=(0, 1.05), ylabel=metric)
    _save(plt, fig, axes, path, note)


def _plot_by_session(results: dict[str, ProtocolResult], k: int, path: Path, title: str, note: str = "") -> None:
    """recall@k per :func:`session_groups` (a point per session, or per range of sessions at its middle)."""
    ranges = session_groups(results)
    middle = {span: (span[0] + span[1]) / 2 + 1 for span in ranges}  # sessions numbered from 1
    grans = _granularities({n: r.aggregate()["overall"] for n, r in results.items()})
    plt, fig, axes = _figure(len(grans))
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
    _save(plt, fig, axes, path, note)


def _plot_tokens_vs_recall(results: dict[str, ProtocolResult], k: int, path: Path, title: str,
                           note: str = "") -> None:
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    grans = _granularities(aggs)
    plt, fig, axes = _figure(len(grans))
    for ax, g in zip(axes, grans):
        for j, (name, agg) in enumerate(aggs.items()):
            if g in agg:
                ax.scatter([agg["context_tokens"]], [agg[g][f"recall@{k}"]], s=50, alpha=0.8, label=name,
                           marker=MARKERS[j % len(MARKERS)], color=f"C{j % 10}")
        ax.set(title=f"{title}: {g} granularity", xlabel="mean context tokens", ylabel=f"recall@{k}",
               ylim=(-0.02, 1.05))
    _save(plt, fig, axes, path, note)


def _plot_generation_by_session(result: dict, path: Path, title: str) -> None:
    sessions = sorted(result["by_session"])
    plt, fig, axes = _figure(1)
    ax = axes[0]
    for j, metric in enumerate(("bleu-1", "rouge-l")):
        ax.plot(sessions, [result["by_session"][n][metric] for n in sessions], marker=MARKERS[j], label=metric)
    ax.set(title=title, xlabel="session number (1 = first)", ylabel="score (0-100)", xticks=sessions)
    _save(plt, fig, axes, path)


def _write_recall_csv(results: dict[str, ProtocolResult], ks: Sequence[int], path: Path) -> list[str]:
    aggs = {name: r.aggregate()["overall"] for name, r in results.items()}
    columns = [(g, name) for g in GRANULARITIES for name, agg in aggs.items() if g in agg]
    header = ["k"] + [f"{g}/{name}" for g, name in columns]
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for k in ks:
            writer.writerow([k] + [f"{aggs[name][g][f'recall@{k}']:.6f}" for g, name in columns])
    return header[1:]


def _write_json(path: Path, obj: Any) -> None:
    atomic.write_json(path, obj, indent=2)


@dataclass
class SuiteRun:
    """Every strategy of one suite through the protocol (or the reason it is missing)."""

    suite: Suite
    episodes: int
    results: dict[str, ProtocolResult]
    missing: dict[str, str]   # strategy -> why it was not run (model not trained, or nothing to read in the data)
    counter: TokenCounter
    generation: dict[str, dict] = field(default_factory=dict)  # generator -> evaluate_mdr_episodes' result
    generation_missing: dict[str, str] = field(default_factory=dict)  # generator -> why it was not scored

    def metrics(self) -> dict[str, dict[str, float | str]]:
        """Strategy -> flat metrics, in the suite's order; a strategy or generator that was not run has
        ``{"missing": why}`` instead (never zeros)."""
        out: dict[str, dict[str, float | str]] = {}
        for name in dict.fromkeys([*self.suite.strategies, *self.results, *self.missing]):
            if name in self.results:
                out[name] = flat_metrics(self.results[name].aggregate()["overall"])
            elif name in self.missing:
                out[name] = {"missing": self.missing[name]}
        for row, figures in writer_rows(self).items():     # "writer/<role>/<figure>" beside its strategy's metrics
            name, role = row.split(": ", 1)
            role = role.rsplit(" (", 1)[0]
            out[name].update({f"writer/{role}/{k.replace(' ', '_')}": v for k, v in figures.items()})
        for name in dict.fromkeys([*self.generation, *self.generation_missing]):
            out[f"{name}_generation"] = (flat_generation_metrics(self.generation[name]) if name in self.generation
                                         else {"missing": self.generation_missing[name]})
        return out

    def retrieved_nothing(self) -> list[str]:
        """The strategies that ran but retrieved nothing for any scored query (their memory stayed empty on
        this data), besides those that keep nothing by design (``no_history``)."""
        return [name for name, r in self.results.items() if name not in EMPTY_BY_DESIGN and r.retrieved_nothing()]

    def counts(self) -> dict[str, dict[str, int]]:
        return {name: {"scored": r.aggregate()["overall"]["queries"], **r.exclusion_counts()}
                for name, r in self.results.items()}

    def memory_written(self) -> dict[str, dict[str, float]]:
        """Strategy -> what its memory held after each episode's last session (items, sessions, items per
        session), for the strategies that keep something."""
        return {name: r.memory_written() for name, r in self.results.items()
                if r.memory and name not in EMPTY_BY_DESIGN}


WRITER_COLUMNS = {"calls": "requests", "hits": "cache hits", "misses": "asked", "prompt_tokens": "prompt tokens",
                  "completion_tokens": "completion tokens", "seconds": "seconds", "truncated": "cut to window",
                  "utterances": "utterances", "triplets": "triplets", "parse/valid": "parsed",
                  "parse/repaired": "repaired", "parse/dropped": "unparseable"}


def writer_rows(run: "SuiteRun") -> dict[str, dict[str, float]]:
    """``"<strategy>: <role> (<model>)"`` -> the figures of :data:`WRITER_COLUMNS` of each language-model writer a
    strategy of the suite called (:attr:`ProtocolResult.writers`: this suite's calls only)."""
    rows = {}
    for name, result in run.results.items():
        for w in result.writers:
            flat = {**{k: v for k, v in w.items() if not isinstance(v, dict)},
                    **{f"{k}/{kk}": vv for k, v in w.items() if isinstance(v, dict) for kk, vv in v.items()}}
            rows[f"{name}: {w['role']} ({w['model']})"] = {label: float(flat[key]) for key, label in
                                                          WRITER_COLUMNS.items() if isinstance(flat.get(key),
                                                                                               (int, float))}
    return rows


def writers_markdown(run: "SuiteRun") -> list[str]:
    """The "Language-model writers" part of a suite's section (empty when no strategy called one)."""
    rows = writer_rows(run)
    if not rows:
        return []
    columns = [c for c in WRITER_COLUMNS.values() if any(c in r for r in rows.values())]
    return ["### Language-model writers", "",
            markdown_table(rows, columns, ranked=(), row_label="strategy: writer (model)",
                           decimals={c: (1 if c == "seconds" else 0) for c in columns}), "",
            "What each memory writer of the LLM layer (pipelines/memory/writers.py) did in this suite: requests, "
            "those answered from the response cache, prompt and completion tokens, wall seconds of the calls, "
            "prompts cut to the model's window; G-Long's extractor: utterances read, triplets written, and how its "
            "answers parsed (parsed: a well-formed JSON list; repaired: read after a fix; unparseable: no triplet).",
            ""]


def plan_strategies(suite: Suite, episodes: Sequence[Episode], settings: Mapping[str, Mapping[str, Any]] | None = None
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(strategy -> merged settings of those that run, strategy -> why not run): a strategy that cannot run on
    ``episodes`` (its class's ``unavailable``: e.g. session summaries that the data does not have) or whose
    model is not trained is not run; ``settings`` go under the suite's own ``strategy_settings``."""
    settings = settings or {}
    unknown = sorted(set(settings) - set(suite.strategies))
    if unknown:
        raise ConfigError(f"settings are given for strategies {unknown} that suite {suite.name!r} does not run.")
    to_run: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    for name in suite.strategies:
        merged = {**settings.get(name, {}), **suite.strategy_settings.get(name, {})}
        why = STRATEGIES[name].unavailable(episodes, merged)  # the data lacks what it reads: not run, not scored
        if why:
            missing[name] = f"cannot run on this data: {why}"
            continue
        absent = missing_models(name, merged)
        if absent:
            missing[name] = "; ".join(str(e) for e in absent)
            continue
        to_run[name] = merged
    return to_run, missing


def protocol_config(suite: Suite, show_progress: bool = True, depth: int | None = None,
                    answers: Any = None) -> ProtocolConfig:
    return ProtocolConfig(ks=suite.ks, budget_tokens=suite.budget_tokens, depth=depth,
                          show_progress=show_progress, session_scoring=suite.session_scoring, answers=answers)


def run_suite_shard(suite: Suite, episodes: Iterable[Episode], to_run: Mapping[str, Mapping[str, Any]],
                    config: ProtocolConfig, counter: TokenCounter, shard: ShardSpec = ShardSpec(),
                    store: ShardStore | None = None, prepare_block: int | None = None, total: int | None = None,
                    missing: dict[str, str] | None = None) -> dict[int, dict]:
    """The retrieval of one shard of ``suite`` (:func:`pipelines.evaluate.shards.run_shard`): every strategy of
    ``to_run`` built with its settings and ``counter``, episode by episode, each finished episode in ``store``."""
    from tqdm.auto import tqdm

    def build(name: str):
        return build_strategy(name, counter=counter, **dict(to_run[name]))

    bar = tqdm(total=total, desc=f"benchmark {suite.name} shard {shard.label}", unit="episode",
               disable=not config.show_progress)
    try:
        return run_shard(episodes, list(to_run), build, config, shard, store, prepare_block=prepare_block,
                         progress=bar.update, missing=missing)
    finally:
        bar.close()


@dataclass
class RunPlan:
    """What every shard of one run of a suite shares: the protocol, the token counter, the strategies that run
    (with their merged settings) and those that do not (with why), and the run's fingerprint."""

    suite: Suite
    config: ProtocolConfig
    counter: TokenCounter
    to_run: dict[str, dict[str, Any]]
    missing: dict[str, str]
    fingerprint: dict[str, Any]
    shards: int = 1


def plan_run(suite: Suite, episodes: Sequence[Episode], settings: dict[str, dict[str, Any]] | None = None,
             tokenizer: str | None = None, show_progress: bool = True, depth: int | None = None, answers: Any = None,
             data_id: str = "", shards: int = 1) -> RunPlan:
    """The :class:`RunPlan` of ``suite`` over ``episodes`` split into ``shards`` (a streamed suite's strategies are
    checked against its first block of episodes: reading them all would read the whole file once more)."""
    ShardSpec(0, shards)  # the count is checked before anything runs
    config = protocol_config(suite, show_progress, depth, answers)
    if isinstance(episodes, StreamedEpisodes):
        episodes = list(itertools.islice(episodes, suite.stream_block))
    to_run, missing = plan_strategies(suite, episodes, settings)
    return RunPlan(suite, config, TokenCounter.from_config(tokenizer), to_run, missing,
                   run_fingerprint(suite.header(), to_run, config, data_id, shards), shards)


def run_planned_shard(plan: RunPlan, episodes: Iterable[Episode], run_dir: str | os.PathLike, shard: ShardSpec,
                      prepare_block: int | None = None, total: int | None = None) -> ShardStore:
    """Shard ``shard`` of ``plan`` into ``run_dir/shards/<suite>/<i>-of-<N>`` (resuming what it finished)."""
    if shard.count != plan.shards:
        raise ShardError(f"shard {shard.label} does not belong to a run of {plan.shards} shard(s).")
    store = ShardStore(shard_dir(run_dir, plan.suite.name, shard), plan.fingerprint, shard, plan.suite.name,
                       plan.missing)
    if prepare_block is None and isinstance(episodes, StreamedEpisodes):
        prepare_block = plan.suite.stream_block  # one block of the file in memory at a time
    try:
        run_suite_shard(plan.suite, episodes, plan.to_run, plan.config, plan.counter, shard, store,
                        prepare_block=prepare_block, total=total)
    finally:
        store.close()
    return store


def merged_results(plan: RunPlan, run_dir: str | os.PathLike | None = None,
                   folders: Sequence[str | os.PathLike] | None = None
                   ) -> tuple[dict[str, ProtocolResult], dict[str, str]]:
    """The N shards of ``plan`` joined (:func:`pipelines.evaluate.shards.merge`), from ``folders`` (shard i's folder
    at index i) or from ``run_dir``'s layout: each strategy's ProtocolResult and the strategies that did not run.
    ShardError names missing, unfinished or foreign shards."""
    if folders is None:
        folders = [shard_dir(run_dir, plan.suite.name, ShardSpec(i, plan.shards)) for i in range(plan.shards)]
    folders = [Path(f) for f in folders]
    absent = [ShardSpec(i, plan.shards).label for i, f in enumerate(folders) if not (f / "manifest.json").is_file()]
    if absent:
        raise ShardError(f"cannot merge suite {plan.suite.name!r}: missing shard(s) {', '.join(absent)} ("
                         f"{', '.join(str(folders[int(a.split('-')[0])]) for a in absent)}): run them with "
                         f"`benchmark ... --shards {plan.shards} --shard <i>` and the same --out.")
    merged = merge(folders)
    if merged.fingerprint["run"] != plan.fingerprint["run"]:
        differ = [k for k in ("suite", "strategies", "models", "protocol", "data", "code", "shards")
                  if merged.fingerprint.get(k) != plan.fingerprint.get(k)]
        raise ShardError(f"the shards of suite {plan.suite.name!r} under {run_dir} were run with other settings or "
                         f"data than this command (they differ in: {', '.join(differ) or 'format'}): merge with "
                         f"the command the shards ran, or run the shards again.")
    missing = {**plan.missing, **merged.missing}
    return results_from_records(merged.records, list(plan.to_run), missing), missing


def evaluate_suite(suite: Suite, episodes: Sequence[Episode], settings: dict[str, dict[str, Any]] | None = None,
                   tokenizer: str | None = None, show_progress: bool = True, depth: int | None = None,
                   generation: dict[str, dict[str, Any]] | None = None, answers: Any = None,
                   run_dir: str | os.PathLike | None = None, data_id: str = "", shards: int = 1,
                   shard_folders: Sequence[str | os.PathLike] | None = None) -> SuiteRun:
    """Run each strategy of ``suite`` over ``episodes``, then the suite's generators; ``settings``
    (strategy -> config fields) go under the suite's own ``strategy_settings``; ``generation``
    (generator -> settings: ``teacher`` / ``student`` / ``decoder`` folders, ``max_new_tokens``,
    ``seed``, ``device``) goes over the project defaults (:func:`generation_defaults` under the
    project root). A strategy that cannot run on ``episodes`` (:func:`plan_strategies`) or whose model is not
    trained is not run and is recorded in ``missing`` with the reason; a generator whose model is missing in
    ``generation_missing``. A strategy that ran but retrieved nothing for any query is logged as a warning (and
    noted in the report). ``answers`` (a protocol AnswerRequest, pipelines.evaluate.answers.readers.answer_request)
    makes the protocol record the readers' contexts of those questions in each ProtocolResult (the retrieval
    figures do not change).

    The strategies run episode by episode (:mod:`pipelines.evaluate.shards`). With ``run_dir`` each finished
    episode is kept under ``run_dir/shards/<suite>/<i>-of-<N>`` (``data_id`` names the data in the run's
    fingerprint): with ``shards`` 1 the one shard runs here (a killed run started again resumes after the
    episodes it finished); with more, the shards must have been run (``run_planned_shard``) and are merged (from
    ``shard_folders``, shard i's folder at index i, when given: the benchmark stage's layout)."""
    plan = plan_run(suite, episodes, settings, tokenizer, show_progress, depth, answers, data_id, shards)
    if shards > 1 or shard_folders is not None:
        if run_dir is None and shard_folders is None:
            raise ConfigError(f"merging {shards} shards needs the folder they were written to (run_dir).")
        results, missing = merged_results(plan, run_dir, shard_folders)
    elif run_dir is not None:
        run_planned_shard(plan, episodes, run_dir, ShardSpec(), total=len(episodes))
        results, missing = merged_results(plan, run_dir)
    else:
        block = suite.stream_block if isinstance(episodes, StreamedEpisodes) else None
        missing = dict(plan.missing)  # with the strategies whose model turns out not trained while running
        records = run_suite_shard(suite, episodes, plan.to_run, plan.config, plan.counter, prepare_block=block,
                                  total=len(episodes), missing=missing)
        results = results_from_records(records.values(), list(plan.to_run), missing)
    return finish_suite(suite, episodes, results, missing, plan.counter, generation, answers, show_progress)


def finish_suite(suite: Suite, episodes: Sequence[Episode], results: dict[str, ProtocolResult],
                 missing: dict[str, str], counter: TokenCounter, generation: dict[str, dict[str, Any]] | None = None,
                 answers: Any = None, show_progress: bool = True) -> SuiteRun:
    """The SuiteRun of a suite whose retrieval is done (``results``, in the suite's order): the checks that
    something was scored, then the suite's generators."""
    results = {name: results[name] for name in suite.strategies if name in results}
    require_scored_queries(suite, episodes, results)
    scored, not_scored = run_generation(suite, episodes, generation, show_progress)
    answering = answers is not None and bool(answers.queries)  # the answers of its questions are scored
    if not scored and not answering and not any(r.scores for r in results.values()):  # nothing scored at all
        raise NothingToScore(f"benchmark suite {suite.name!r} scores nothing on its {len(episodes)} episodes: "
                             f"{sum(len(e.queries) for e in episodes)} queries, no strategy scored one ("
                             f"ran: {', '.join(results) or 'none'}), and no response generation was scored ("
                             + (", ".join(f"{g}: {why}" for g, why in not_scored.items()) or "none configured")
                             + ").")
    run = SuiteRun(suite, len(episodes), results, dict(missing), counter, scored, not_scored)
    for name in run.retrieved_nothing():
        logging.getLogger("mnemos").warning("strategy %s retrieved nothing for any of the %d scored queries of "
                                            "suite %s", name, results[name].aggregate()["overall"]["queries"],
                                            suite.name)
    return run


def require_scored_queries(suite: Suite, episodes: Sequence[Episode],
                           results: Mapping[str, ProtocolResult]) -> None:
    """NothingToScore when the episodes hold queries but the strategies that ran scored none of them (every one
    excluded: abstention, no evidence, ...), naming the suite and the exclusions.

    Dialogue-only data (ConvAI2, MSC, CC: no question at all, its suites score generation) is not an error; a
    source that publishes questions and loads none fails at load (rule ``load_loss_within_limit``).
    """
    if not results or any(r.scores for r in results.values()):
        return
    queries = sum(len(e.queries) for e in episodes)  # (a streamed suite reads its file again, only here)
    if queries == 0:
        return
    strategy, result = next(iter(results.items()))
    reasons = ", ".join(f"{reason}: {n}" for reason, n in result.exclusion_counts().items() if n)
    raise NothingToScore(f"benchmark suite {suite.name!r} scores no query: all {queries} queries of its "
                         f"{len(episodes)} episodes were excluded ({reasons}; for {strategy}).")


def run_generation(suite: Suite, episodes: Sequence[Episode], settings: dict[str, dict[str, Any]] | None = None,
                   show_progress: bool = True) -> tuple[dict[str, dict], dict[str, str]]:
    """The suite's generators over ``episodes`` -> (generator -> result, generator -> why not scored)."""
    from tqdm.auto import tqdm

    from pipelines.config import ROOT
    from pipelines.evaluate.suite import generation_defaults
    from pipelines.mdr.evaluate import check_models, evaluate_mdr_episodes

    settings = settings or {}
    unknown = sorted(set(settings) - set(suite.generation))
    if unknown:
        raise ConfigError(f"generation settings are given for {unknown}, which suite {suite.name!r} does not "
                          f"score (its generation: {list(suite.generation)}).")
    defaults = generation_defaults(suite.generation, ROOT)
    scored: dict[str, dict] = {}
    not_scored: dict[str, str] = {}
    for name in suite.generation:  # only "mdr" is known (Suite validates the names)
        merged = {**defaults.get(name, {}), **settings.get(name, {})}
        absent = check_models(merged.get("teacher"), merged.get("student"), merged.get("decoder"))
        if absent:
            not_scored[name] = "; ".join(str(e) for e in absent)
            continue
        bars = []

        def progress(total: int, _name: str = name):
            bar = tqdm(total=total, desc=f"{suite.name} {_name} generation", unit="response",
                       disable=not show_progress)
            bars.append(bar)
            return bar.update

        try:
            result = evaluate_mdr_episodes(
                episodes, merged["teacher"], merged["student"], merged["decoder"],
                max_examples=suite.max_generation_examples, max_new_tokens=int(merged.get("max_new_tokens", 32)),
                samples=int(merged.get("samples", 5)), seed=int(merged.get("seed", 2022)),
                device=merged.get("device"), source=f"suite {suite.name}", progress_factory=progress)
        except ConfigError as exc:  # ModelNotTrained, or a model folder without its saved settings
            not_scored[name] = str(exc)
            continue
        finally:
            for bar in bars:
                bar.close()
        if not result["examples_scored"]:
            not_scored[name] = (f"no (Q, R) round in the suite's {len(episodes)} episodes (a round is a "
                                f"main-speaker turn answering the partner)")
            continue
        scored[name] = result
    return scored, not_scored


def flat_generation_metrics(result: dict) -> dict[str, float]:
    """One generator's result as flat metrics: overall, ``session_<n>/<m>`` and ``sessions_2-5/<m>``."""
    out = {k: float(v) for k, v in result["overall"].items()}
    out["examples_total"] = float(result.get("examples_total", out.get("responses", 0.0)))
    for num, values in result["by_session"].items():
        out.update({f"session_{num}/{k}": float(v) for k, v in values.items()})
    mean = glong_session_mean(result)
    out.update({f"sessions_2-5/{k}": v for k, v in mean.items()})
    return out


def glong_session_mean(result: dict) -> dict[str, float]:
    """The mean over sessions 2-5 of each per-session metric, as G-Long averages its tables (only the
    sessions present; empty when none of 2-5 is). ``responses`` is their sum."""
    per = [values for num, values in result["by_session"].items() if num in GLONG_SESSIONS]
    if not per:
        return {}
    keys = [k for k in per[0] if all(k in v for v in per)]
    return {k: float(sum(v[k] for v in per)) if k == "responses" else sum(v[k] for v in per) / len(per)
            for k in keys}


def _generation_markdown(run: SuiteRun, profile: str) -> list[str]:
    """The "Response generation" part of a suite's section (empty when the suite scores none)."""
    suite = run.suite
    if not suite.generation:
        return []
    decimals = {c: (2 if c.startswith(("bleu", "rouge")) else 3) for c in GENERATION_COLUMNS}
    decimals["responses"] = 0
    ref = suite.reference
    comparable = bool(ref.get("comparable"))
    label = "comparable" if comparable else "not comparable"
    refs = {f"{system} ({label})": {c: float(v) for c, v in nums.items() if c in GENERATION_COLUMNS}
            for system, nums in (ref.get("rows") or {}).items()
            if any(c in GENERATION_COLUMNS for c in nums)}
    lines = ["### Response generation", ""]
    for name in suite.generation:
        result = run.generation.get(name)
        ours = f"{name} (this run, profile `{profile}`)"
        if result is not None:
            lines += [f"Greedy responses of the {name.upper()} decoder from R^(K) (computed by the trained student "
                      f"from P, H and Q) and the query Q, on {result['examples_scored']} of the "
                      f"{result['examples_total']} (Q, R) rounds of the suite's episodes (evenly spaced; "
                      f"max_generation_examples = {suite.max_generation_examples}). BLEU (sacrebleu, corpus) and "
                      "ROUGE-L (rouge-score) on 0-100; Distinct-n over all responses (dist), per response (c_dist) "
                      f"and over {result.get('samples', 5)} sampled responses per context (s_dist).", ""]
        rows = {ours: result["overall"]} if result is not None else {}
        rows.update(refs)
        competing = [ours] + (list(refs) if comparable else [])
        table = markdown_table(rows, list(GENERATION_COLUMNS), row_label="system", ranked_rows=competing,
                               decimals=decimals)
        if result is None:
            head = table.split("\n")
            why = run.generation_missing.get(name, "not scored")
            head.insert(2, f"| {ours} | missing: {why} |" + " |" * (len(GENERATION_COLUMNS) - 1))
            table = "\n".join(head)
        lines += [table, ""]
        if refs:
            lines += [f"Reference rows: {ref.get('source', 'published numbers')} ({label} with this run"
                      + ("" if comparable else ": a different model, data or scale") + "). Bold: best per column "
                      + ("among comparable rows." if comparable else "among comparable rows only (none here)."), ""]
        if result is None:
            continue
        per = {f"session {num}": values for num, values in result["by_session"].items()}
        mean = glong_session_mean(result)
        if mean:
            present = [n for n in GLONG_SESSIONS if n in result["by_session"]]
            per[f"sessions {', '.join(map(str, present))} (mean)"] = mean
        if per:
            lines += [f"#### Response generation by session ({name})", "",
                      markdown_table(per, list(SESSION_COLUMNS), ranked=(), row_label="session", decimals=decimals),
                      "", "Sessions are numbered from 1 (the session a response is in); G-Long's tables report "
                      "sessions 2-5 and their average (the mean row).", ""]
        if result["examples"]:
            lines += [f"#### Samples ({name})", "", "| query | reference | response |", "| --- | --- | --- |"]
            lines += [f"| {x['query']} | {x['reference']} | {x['response']} |".replace("\n", " ")
                      for x in result["examples"]]
            lines.append("")
    return lines


def ingredient(name: str) -> str:
    """What strategy ``name`` adds, for the ablation table: its class's ``ingredient``, else its docstring's first
    line."""
    from pipelines.memory import STRATEGIES

    cls = STRATEGIES.get(name)
    if cls is None:
        return ""
    return cls.ingredient or next(iter((cls.__doc__ or "").strip().splitlines()), "")


def ablation_rows(run: SuiteRun) -> list[dict[str, Any]]:
    """One row per step of the suite's ablation: the strategy, what it adds, each metric and its gain over the
    previous step that ran, the median latency of a query's retrieval (ms) and the mean index size per episode
    (MB; None where the strategy does not measure it); a step that did not run has ``missing``."""
    spec = run.suite.ablation
    rows, previous = [], None
    for name in spec.get("steps", ()):
        row: dict[str, Any] = {"strategy": name, "adds": ingredient(name)}
        if name not in run.results:
            rows.append({**row, "missing": run.missing.get(name, "not run")})
            continue
        result = run.results[name]
        flat = flat_metrics(result.aggregate()["overall"])
        for metric in spec["metrics"]:
            value = flat.get(metric)
            row[metric] = value
            row[f"gain {metric}"] = (value - previous[metric] if previous is not None and value is not None
                                     and previous.get(metric) is not None else None)
        row["latency_ms_p50"] = flat.get("latency_ms_p50")
        row["index_mb"] = (sum(result.index_bytes) / len(result.index_bytes) / 1e6) if result.index_bytes else None
        rows.append(row)
        previous = flat
    return rows


def ablation_markdown(run: SuiteRun) -> list[str]:
    """The "Ablation" part of a suite's section (nothing when the suite names none)."""
    rows = ablation_rows(run)
    if not rows:
        return []
    metrics = run.suite.ablation["metrics"]
    head = ["step", "strategy", "adds", *metrics, "latency p50 (ms)", "index / episode (MB)"]
    lines = ["### Ablation", "",
             "Each step adds one ingredient to the step above it; in brackets, the gain over that step. Cost: the "
             "median wall time of one query's full ranking (query embeddings cached, as in every run), and the mean "
             "index size of an episode's memory.", "",
             "| " + " | ".join(head) + " |", "| " + " | ".join(["---:", "---", "---"] + ["---:"] * (len(head) - 3)) + " |"]
    for step, row in enumerate(rows, start=1):
        if "missing" in row:
            lines.append(f"| {step} | {row['strategy']} | {row['adds']} | missing: {row['missing']} |"
                         + " |" * (len(head) - 4))
            continue
        cells = []
        for metric in metrics:
            value, gain = row[metric], row[f"gain {metric}"]
            cells.append(_fmt(value) + (f" ({gain:+.4f})" if gain is not None else ""))
        lines.append(f"| {step} | {row['strategy']} | {row['adds']} | " + " | ".join(cells)
                     + f" | {_fmt(row['latency_ms_p50'], 2)} | {_fmt(row['index_mb'], 3)} |")
    return lines + [""]


def _suite_markdown(run: SuiteRun, profile: str = "tiny", answers: AnswerRun | None = None,
                    summary: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """(the suite's section of benchmark.md, its granularity tables alone for Dagster metadata); with the
    suite's ``answers`` (an AnswerRun and its ``summary``), its "Answers" part and tables too."""
    suite, results, ks = run.suite, run.results, run.suite.ks
    tables = granularity_tables(results, ks, suite.metrics, run.missing)
    k = headline_k(ks)
    main = "\n\n".join(f"### {g} granularity\n\n{t}" for g, t in tables.items())
    empty = run.retrieved_nothing()
    if empty:  # ran, but their memory never gave an item: say so under the tables, not only zeros
        main += ("\n\n**Retrieved nothing:** " + "; ".join(
            f"`{name}` returned no item for any of its {results[name].aggregate()['overall']['queries']} scored "
            "queries" for name in empty) + (". Its memory" if len(empty) == 1 else ". Their memories")
            + " stayed empty on this data: the zeros measure no retrieval, not a poor one.")
    lines = [f"## Suite `{suite.name}` (version {suite.version})", ""]
    if suite.description:
        lines += [suite.description, ""]
    lines += [f"- source: `{suite.source}`, split `{suite.split}`, {run.episodes} episodes; corpus: "
              f"{'main speaker turns only' if suite.corpus == 'main_speaker' else 'every turn'}; session scoring: "
              f"{'LongMemEval turn2session' if suite.session_scoring == 'longmemeval' else 'deduplicated ranking'}",
              f"- strategies: {', '.join(suite.strategies)}"
              + (f" (missing: {', '.join(run.missing)})" if run.missing else ""),
              *([f"- response generation: {', '.join(suite.generation)}"
                 + (f" (missing: {', '.join(run.generation_missing)})" if run.generation_missing else "")]
                if suite.generation else []),
              f"- cut-offs k: {', '.join(map(str, ks))}; context budget: {suite.budget_tokens} tokens "
              f"({run.counter.name} tokens)", "", "### Queries", ""]
    counts = run.counts()
    if counts:
        cols = list(next(iter(counts.values())).keys())
        lines += [markdown_table({row_label(name): c for name, c in counts.items()}, cols, ranked=()), "",
                  "Excluded: abstention questions (no evidence to retrieve), queries whose evidence is not "
                  "strictly earlier than the session they are asked in (never shown to a retriever), queries "
                  "without evidence.", ""]
    written = run.memory_written()
    if written:
        lines += ["### Memory written", "",
                  markdown_table({row_label(name): m for name, m in written.items()},
                                 ["items", "sessions", "items_per_session"], ranked=(),
                                 decimals={"items": 0, "sessions": 0, "items_per_session": 2}), "",
                  "Items each memory held after the last session of every episode, summed over the episodes: "
                  "turns of a store, memories written by EMMA's summariser, triplets written by G-Long's "
                  "extractor, summaries.", ""]
    lines += writers_markdown(run)
    lines += ["### Retrieval", "", main if main else "No strategy could run.", ""]
    ablation = ablation_markdown(run)
    if ablation:
        lines += ablation
        main += "\n\n" + "\n".join(ablation)  # the Dagster benchmark asset shows it too
    oracles = {name: oracle_reason(name) for name in suite.strategies if oracle_reason(name)}
    if oracles:
        lines += ["Oracle rows (labelled, never bold: they read what a real system has to produce): "
                  + "; ".join(f"`{name}`: {why}" for name, why in oracles.items()) + ".", ""]
    ranges = session_groups(results)
    for by, title in (("per_category", "Per category"),
                      ("per_session", "Per session (the session a query is asked in, numbered from 1)")):
        parts = [(g, breakdown_table(results, by, g, f"recall@{k}", category_names(suite.source)))
                 for g in GRANULARITIES]
        parts = [(g, t) for g, t in parts if t]
        if parts:
            lines += [f"### {title}: recall@{k}", ""]
            if by == "per_session" and any(low != high for low, high in ranges):
                asked = len({s.session_index for r in results.values() for s in r.scores})
                lines += [f"Queries are asked in {asked} different sessions: grouped into {len(ranges)} ranges of "
                          "equal width; a cell is the mean over the queries asked in its range (not a mean of "
                          "per-session means), the `queries` row counts them.", ""]
            for g, t in parts:
                lines += [f"{g} granularity:", "", t, ""]
    lines += _generation_markdown(run, profile)
    if answers is not None:
        from pipelines.evaluate.answers.section import answers_markdown

        text, answer_tables = answers_markdown(answers, summary, run.missing, suite.budget_tokens,
                                               category_names(suite.source))
        lines.append(text)
        main += f"\n\n### Answers\n\n{answer_tables}"
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
                 models: dict[str, str] | None = None, sections: Sequence[str] = (),
                 section_metrics: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                 answers: Sequence[AnswerRun] = ()) -> dict[str, Any]:
    """Write benchmark.md, metrics.json, queries.jsonl and the plots of ``runs`` under ``out_dir``.

    ``models`` maps a model to its size / description for the header (e.g. ``{"mdr decoder":
    "GPT-2 2x64"}``). ``sections`` (markdown) end benchmark.md and ``section_metrics`` (suite -> key ->
    metric -> value) join metrics.json: the benchmark stage's trained-method sections. ``answers``: the
    suites' answer runs (pipelines.evaluate.answers.run.AnswerRun, at most one per suite): each adds an "Answers"
    part to its suite's section, ``answers/...`` keys to each reader in metrics.json (the reference readers
    ``full_history`` and ``oracle`` beside the strategies) and the reader's and judge's call figures under
    ``llm``, one ``kind: answer`` line per answer to queries.jsonl (whose retrieval lines are ``kind:
    retrieval``) and ``plots/<suite>/accuracy_vs_tokens.png``. The whole report is composed in memory and
    every file written once, whole (pipelines.atomic).
    Returns ``{"metrics", "markdown" (suite -> tables), "plots" (paths), "files", "counts" (suite ->
    strategy -> counts), "missing" (suite -> strategy -> why), "generation_missing" (suite -> generator
    -> why), "dvc_plot" (the first suite's recall CSV: path, x, y), "answers" (suite -> reader -> setting ->
    figures: pipelines.evaluate.answers.aggregate.summarise), "answers_missing" (suite -> reader -> why)}``.
    """
    from pipelines.evaluate.answers import section as answer_section
    from pipelines.evaluate.answers.aggregate import summarise

    if not runs:
        raise ConfigError("no suite to report.")
    by_suite = {run.suite.name: run for run in runs}
    answer_runs = {a.suite: a for a in answers}
    unknown = [a.suite for a in answers if a.suite not in by_suite]
    if unknown or len(answer_runs) < len(answers):
        raise ConfigError(f"answers are given for suites {sorted(unknown) or sorted(answer_runs)} that are not "
                          f"reported once each (suites reported: {sorted(by_suite)}).")
    summaries = {name: summarise(a) for name, a in answer_runs.items()}
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    metrics = {run.suite.name: run.metrics() for run in runs}
    for suite, per_key in (section_metrics or {}).items():
        metrics.setdefault(suite, {}).update({key: dict(values) for key, values in per_key.items()})
    for name, a in answer_runs.items():
        for reader, values in answer_section.answer_metrics(a, summaries[name], by_suite[name].missing).items():
            metrics[name].setdefault(reader, {}).update(values)
        if answer_section.llm_metrics(a):
            metrics[name]["llm"] = answer_section.llm_metrics(a)
    files = {"markdown": out / "benchmark.md", "metrics": out / "metrics.json", "queries": out / "queries.jsonl"}
    _write_json(files["metrics"], metrics)
    with atomic_write(files["queries"]) as f:
        for run in runs:
            for r in run.results.values():
                for s in r.scores:
                    f.write(json.dumps({"kind": "retrieval", "suite": run.suite.name,
                                        "suite_version": run.suite.version, **s.__dict__}) + "\n")
            answered = answer_runs.get(run.suite.name)
            for record in answered.records if answered is not None else ():
                f.write(json.dumps({**record.to_json(), "suite_version": run.suite.version}) + "\n")
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
        suite_name = run.suite.name
        section, tables[suite_name] = _suite_markdown(run, profile, answer_runs.get(suite_name),
                                                      summaries.get(suite_name))
        lines.append(section)
        folder = out / "plots" / suite_name
        if summaries.get(suite_name):
            path = folder / "accuracy_vs_tokens.png"
            answered = answer_runs[suite_name]
            answer_section.plot_accuracy_vs_tokens(answered, summaries[suite_name], path, suite_name,
                                                   answer_section.plot_note(answered, run.missing))
            plots.append(path)
        for name, result in run.generation.items():
            if len(result["by_session"]) > 1:
                path = folder / "generation_by_session.png"
                _plot_generation_by_session(result, path, f"{run.suite.name}: {name} generation")
                plots.append(path)
        if not run.results:
            continue
        if any("missing" not in row for row in ablation_rows(run)):
            path = folder / "ablation.png"
            _plot_ablation(run, path, plot_note(run))
            plots.append(path)
        k = headline_k(run.suite.ks)
        paths = [folder / "recall_at_k.png", folder / "recall_by_session.png", folder / "tokens_vs_recall.png",
                 folder / "recall_at_k.csv"]
        note = plot_note(run)
        _plot_recall_at_k(run.results, run.suite.ks, paths[0], run.suite.name, note)
        _plot_by_session(run.results, k, paths[1], run.suite.name, note)
        _plot_tokens_vs_recall(run.results, k, paths[2], run.suite.name, note)
        y = _write_recall_csv(run.results, run.suite.ks, paths[3])
        plots += paths
        dvc_plot = dvc_plot or {"path": paths[3], "x": "k", "y": y}
    atomic.write_text(files["markdown"], "\n".join(lines) + "".join("\n" + md for md in sections))
    files.update({p.relative_to(out).as_posix(): p for p in plots})
    return {"metrics": metrics, "markdown": tables, "plots": plots, "files": files,
            "counts": {run.suite.name: run.counts() for run in runs},
            "memory": {run.suite.name: run.memory_written() for run in runs},
            "missing": {run.suite.name: dict(run.missing) for run in runs},
            "generation_missing": {run.suite.name: dict(run.generation_missing) for run in runs},
            "dvc_plot": dvc_plot, "answers": summaries,
            "answers_missing": {name: answer_section.missing_readers(a, by_suite[name].missing)
                                for name, a in answer_runs.items()}}


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


HEADLINE_METRICS = ("session/recall_all", "session/ndcg_any", "turn/recall_all", "turn/ndcg_any")


def headline(run: SuiteRun, answers: AnswerRun | None = None) -> dict[str, dict[str, float]]:
    """Strategy -> its headline figures: recall_all and ndcg_any (LongMemEval's headline metrics) at session
    and turn level at the suite's headline k, and the mean context tokens; ``{}`` for a strategy not run.
    With the suite's ``answers`` (an AnswerRun), each reader that answered also has its answer figure (the
    first judge's headline figure in setting ``context``, under its metrics.json key), and the reference
    readers (``full_history``, ``oracle``) are rows of their own."""
    from pipelines.evaluate.answers.section import headline_figures

    k = headline_k(run.suite.ks)
    keys = (*(f"{m}@{k}" for m in HEADLINE_METRICS), "context_tokens")
    metrics = run.metrics()
    figures = {name: {key: round(metrics[name][key], 4) for key in keys if key in metrics[name]}
               if name in run.results else {} for name in run.suite.strategies}
    for reader, values in (headline_figures(answers) if answers is not None else {}).items():
        if reader in figures and not figures[reader]:
            continue  # a strategy not run keeps its empty row (dashes), never a partial one
        figures.setdefault(reader, {}).update(values)
    return figures


def write_headline(runs: Sequence[SuiteRun], out_dir: str | os.PathLike,
                   answers: Sequence[AnswerRun] = ()) -> list[Path]:
    """``out_dir/<suite>/<strategy>.json``: the :func:`headline` figures of each strategy of each suite (with
    the suite's answer run among ``answers``, its readers' answer figure, and a file per reference reader).

    The benchmark stage's DVC metrics: one small file per suite and strategy is one row of
    ``dvc metrics show`` (a handful of columns), where metrics.json, every figure of every suite in one
    file, would be one row thousands of columns wide. metrics.json stays the full table."""
    out, written = Path(out_dir), []
    answer_runs = {a.suite: a for a in answers}
    for run in runs:
        for strategy, figures in headline(run, answer_runs.get(run.suite.name)).items():
            path = out / run.suite.name / f"{strategy}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_json(path, figures)
            written.append(path)
    return written
