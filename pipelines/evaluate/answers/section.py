"""The answers of a suite in the benchmark report: the "Answers" section, metrics.json keys, the plot, headlines.

:func:`pipelines.evaluate.report.write_report` calls these for every :class:`AnswerRun` it is given:

- :func:`answers_markdown`: the reader and judge models and what their calls cost (response-cache hits and
  misses, tokens, cost, seconds), then one table per setting (``context``: the strategy's budgeted context;
  ``top<k>``: its top k retrieved items), readers as rows: the suite's strategies (best score of each column in
  bold), the reference readers (``full_history``, ``oracle``: labelled, never bold) and every reader that was
  not run with its reason (never zeros); columns: each judge's figures, its unparseable verdicts (a count: an
  unparseable verdict is never counted correct), questions answered and mean tokens. Then the judge's
  headline figure per category (LoCoMo category, LongMemEval question type), G-Long's Accuracy@k, and the
  suite's published rows, marked "not comparable" unless our judge is the paper's judge model;
- :func:`answer_metrics`: reader -> ``answers/<setting>/<figure>`` (aggregate.flat) for metrics.json, with
  ``answers/missing`` for a reader that was not run, and the calls' figures under ``llm``;
- :func:`plot_accuracy_vs_tokens`: each judge's headline figure against the mean context tokens, a point per
  reader and setting (a strategy's settings joined by a line), references drawn apart;
- :func:`headline_figures`: the one answer figure of each reader that the DVC headline files carry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.evaluate.answers.aggregate import (CONTEXT, TOP_K, Summary, accuracy_at_k, flat, headline_key,
                                                  judges_in, summarise)
from pipelines.evaluate.answers.types import REFERENCE_READERS
from pipelines.evaluate.plots import MARKERS, figure, save
from pipelines.evaluate.tables import markdown_table, oracle_reason, row_label

if TYPE_CHECKING:
    from pipelines.evaluate.answers.run import AnswerRun

REFERENCE_WHY = {"full_history": "the whole history before the question, newest sessions first, as much as the "
                                 "reader model's window holds",
                 "oracle": "the evidence sessions of the question only"}
STATS = ("calls", "hits", "misses", "prompt_tokens", "completion_tokens", "cost_usd", "seconds")


def reader_label(reader: str) -> str:
    """A reader's row in the answer tables: ``full_history (reference)`` for a reference reader, the strategy's
    own row label (``egocentric_gold (oracle)``) otherwise."""
    return f"{reader} (reference)" if reader in REFERENCE_READERS else row_label(reader)


def competes(reader: str) -> bool:
    """Whether a reader's figures can be bold (a real system: not a reference reader, not an oracle strategy)."""
    return reader not in REFERENCE_READERS and not oracle_reason(reader)


def missing_readers(run: AnswerRun, strategies_missing: Mapping[str, str] | None = None) -> dict[str, str]:
    """Reader -> why it answered nothing: the answer run's ``missing`` and the suite's strategies that were not
    run at all (no trained model, nothing to read in the data), except readers that did answer."""
    answered = set(run.readers())
    merged = {**(strategies_missing or {}), **run.missing}
    return {reader: why for reader, why in merged.items() if reader not in answered}


def judge_model(label: str) -> str:
    """``local:smollm2-135m-instruct`` -> ``smollm2-135m-instruct``: the model part of an LLM label."""
    return label.split(":", 1)[1] if ":" in label else label


def comparable(run: AnswerRun) -> bool:
    """Whether our answers were judged by the paper's judge model (``reference.judge``); the readers still
    differ, so at best the judges agree."""
    paper = str((run.reference or {}).get("judge") or "")
    return bool(paper) and judge_model(run.judge) == paper


def judge_order(run: AnswerRun, summary: Summary) -> list[str]:
    """The judges whose verdicts ``summary`` holds: the run's order (its first is the headline judge), then any
    other found in the verdicts."""
    found = judges_in(summary)
    return [j for j in dict.fromkeys([*run.judges, *found]) if j in found]


def stats_line(role: str, label: str, stats: Mapping[str, Any]) -> str:
    """One header line: a model's calls, cache hits and misses, the tokens and cost of the misses (what this run
    asked; the table's ``prompt_tokens`` is every answer's, cached or not), and seconds."""
    if not stats:
        return f"- {role} calls: `{label}` (no response cache: calls not counted)"
    cost = stats.get("cost_usd")
    return (f"- {role} calls: {stats.get('calls', 0)} ({stats.get('hits', 0)} from the response cache, "
            f"{stats.get('misses', 0)} asked), {stats.get('prompt_tokens', 0):,} prompt and "
            f"{stats.get('completion_tokens', 0):,} completion tokens asked, "
            + (f"cost ${cost:.4f}" if cost is not None else "cost not priced (no price configured)")
            + f", {float(stats.get('seconds', 0.0)):.1f} s")


def _columns(summary: Summary, setting: str, judges: Sequence[str]
             ) -> tuple[list[str], list[str]]:
    """(the columns of a setting's table, those ranked): each judge's overall figures then its unparseable
    count, then questions answered and mean tokens; only each judge's headline figure is ranked (higher is
    better; not so of every figure, e.g. RealMem's hallucination_rate)."""
    columns, ranked = [], []
    for judge in judges:
        figures = [key for per in summary.values() for key in per.get(setting, {})
                   if key.startswith(f"{judge}/") and key.count("/") == 1]
        columns += list(dict.fromkeys(figures)) + [f"unparseable/{judge}"]
        ranked += [key for key in dict.fromkeys(headline_key(per.get(setting, {}), judge) for per in summary.values())
                   if key is not None]
    return columns + ["answered", "context_tokens", "prompt_tokens"], ranked


def _table(rows: dict[str, dict[str, float]], columns: Sequence[str], ranked: Sequence[str],
           missing: Mapping[str, str], row_label: str = "reader") -> str:
    decimals = {c: 0 if c.startswith("unparseable/") or c == "answered" else 1 if c.endswith("_tokens") else 4
                for c in columns}
    labelled = {reader_label(reader): row for reader, row in rows.items()}
    table = markdown_table(labelled, list(columns), ranked=ranked, row_label=row_label,
                           ranked_rows=[reader_label(r) for r in rows if competes(r)], decimals=decimals)
    return table + "".join(f"\n| {reader_label(reader)} | missing: {why} |" + " |" * (len(columns) - 1)
                           for reader, why in missing.items())


def _setting_title(setting: str, budget: int | None) -> str:
    match = TOP_K.match(setting)
    if setting == CONTEXT:
        return ("Setting `context`: each strategy's own context for the question"
                + (f" (its `context(query, budget)`, budget {budget} tokens)" if budget else "")
                + "; the reference readers' context is theirs")
    if match:
        return (f"Setting `{setting}`: the strategy's top {match.group(1)} retrieved items as the context "
                f"(G-Long's Accuracy@{match.group(1)})")
    return f"Setting `{setting}`"


def answers_markdown(run: AnswerRun, summary: Summary | None = None,
                     strategies_missing: Mapping[str, str] | None = None, budget: int | None = None,
                     categories: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(the "Answers" part of a suite's section of benchmark.md, its tables alone for the Dagster metadata).

    ``summary``: :func:`summarise` of ``run`` (computed when None); ``strategies_missing``: the suite's
    strategies that were not run (rows saying why); ``budget``: the suite's context budget; ``categories``:
    the published names of the category codes (LoCoMo's "2" -> "temporal")."""
    summary = summarise(run) if summary is None else summary
    judges = judge_order(run, summary)
    missing = missing_readers(run, strategies_missing)
    categories = categories or {}
    task = "responses" if run.task == "response" else "answers"
    lines = [f"### Answers ({run.task})", "",
             f"- reader: `{run.reader}` (prompt `{run.reader_prompt}`); judge: `{run.judge}`; judges: "
             + ", ".join(f"`{j}`" for j in run.judges),
             f"- questions: {run.questions} per reader"
             + (f" of the {run.questions_total} answerable" if run.questions_total else "")
             + (" (an evenly spaced subset: llm.max_questions)" if run.questions_total > run.questions else "")
             + ", the same for every reader"
             + ("; not answered: " + ", ".join(f"{why}: {n}" for why, n in run.not_answered.items() if n)
                if any(run.not_answered.values()) else ""),
             stats_line("reader", run.reader, run.reader_stats), stats_line("judge", run.judge, run.judge_stats),
             ""]
    if not summary:
        lines += [f"No reader gave {task}.", ""]
        lines += [f"- `{reader_label(reader)}`: missing: {why}" for reader, why in missing.items()]
        text = "\n".join(lines + [""])
        return text, text
    tables: list[str] = []
    settings = list(dict.fromkeys(s for per in summary.values() for s in per))
    for setting in settings:
        rows = {reader: dict(per[setting]) for reader, per in summary.items() if setting in per}
        columns, ranked = _columns(summary, setting, judges)
        absent = {r: why for r, why in missing.items() if setting == CONTEXT or r not in REFERENCE_READERS}
        table = _table(rows, columns, ranked, absent)
        title = _setting_title(setting, budget)
        tables.append(f"#### {title}\n\n{table}")
        lines += [f"#### {title}", "", table, ""]
    context = {reader: per[CONTEXT] for reader, per in summary.items() if CONTEXT in per}
    for judge in judges:
        per_category = _category_table(context, judge, categories)
        if per_category:
            lines += [f"#### Per category (setting `context`): `{per_category[0]}`", "", per_category[1], ""]
    at_k = accuracy_at_k(summary, judges[0]) if judges else {}
    if at_k:
        columns = list(dict.fromkeys(c for row in at_k.values() for c in row))
        metric = next(headline_key(figures, judges[0]) for per in summary.values() for setting, figures in per.items()
                      if TOP_K.match(setting) and headline_key(figures, judges[0]))
        table = _table(at_k, columns, columns, {r: why for r, why in missing.items() if r not in REFERENCE_READERS})
        tables.append(f"#### Accuracy@k (G-Long): `{metric}`\n\n{table}")
        lines += [f"#### Accuracy@k (G-Long): `{metric}` answering from the top k retrieved items", "", table, ""]
    lines += _published(run, summary, judges, at_k)
    lines += ["Reference readers (labelled, never bold): " + "; ".join(
        f"`{r}`: {REFERENCE_WHY[r]}" for r in REFERENCE_READERS) + ". Bold: the best strategy of each column. "
        "`unparseable/<judge>`: verdicts whose judge output parsed as no verdict, counted here and never as "
        "correct. Tokens are means per question: the context in the suite's tokens, the prompt and the answer "
        "in the reader model's.", ""]
    return "\n".join(lines), "\n\n".join(tables)


def _category_table(context: Mapping[str, Mapping[str, float]], judge: str, categories: Mapping[str, str]
                    ) -> tuple[str, str] | None:
    """(the judge's headline metric, readers x categories of it in setting ``context``), None without
    categories."""
    metric = next((headline_key(figures, judge) for figures in context.values() if headline_key(figures, judge)),
                  None)
    if metric is None:
        return None
    rows: dict[str, dict[str, float]] = {}
    for reader, figures in context.items():
        for key, value in figures.items():
            if key.startswith(f"{metric}/"):
                code = key[len(metric) + 1:]
                rows.setdefault(reader, {})[f"{code} ({categories[code]})" if code in categories else code] = value
    if not rows:
        return None
    columns = list(dict.fromkeys(c for row in rows.values() for c in row))
    return metric, _table(rows, columns, columns, {})


def _published(run: AnswerRun, summary: Summary, judges: Sequence[str],
               at_k: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The suite's published answer figures (``answers.reference.rows``, with its ``source`` and ``note``)
    beside ours, never bold, marked "not comparable" unless our judge model is the paper's. A published column
    is matched by one of our figures in setting ``context`` (``<judge>/<metric>``; ``<judge>`` alone for its
    headline figure, e.g. ``geval_coherence``; the first judge's bare metric, e.g. ``accuracy``) or by
    Accuracy@k (``accuracy@<k>``)."""
    reference = run.reference or {}
    published = reference.get("rows") or {}
    task = "responses" if run.task == "response" else "answers"
    if not published:
        source = f"{reference['source']}. " if reference.get("source") else ""
        return [f"#### Published {task}", "", source + reference["note"], ""] if reference.get("note") else []
    columns = list(dict.fromkeys(c for nums in published.values() for c in nums))
    same = comparable(run)
    label = "same judge model" if same else "not comparable"
    rows: dict[str, dict[str, float]] = {}
    competing: list[str] = []
    for reader, settings in summary.items():
        context = settings.get(CONTEXT, {})
        ours = {**context, **{judge: context[key] for judge in judges
                              for key in [headline_key(context, judge)] if key is not None}}
        if judges:
            ours.update({key.split("/", 1)[1]: value for key, value in context.items()
                         if key.startswith(f"{judges[0]}/")})
        ours.update(at_k.get(reader, {}))
        matched = {c: ours[c] for c in columns if c in ours}
        if matched:
            rows[f"{reader_label(reader)} (this run)"] = matched
            competing += [f"{reader_label(reader)} (this run)"] if competes(reader) else []
    rows.update({f"{system} (published, {label})": {c: float(v) for c, v in nums.items()}
                 for system, nums in published.items()})
    paper = reference.get("judge") or "not stated"
    why = (f"judged by the paper's judge model `{paper}` as ours; the readers differ" if same else
           f"our judge is `{run.judge}`, the paper's judge is `{paper}`; the reader models differ too")
    return [f"#### Published {task} ({label})", "",
            f"{reference.get('source', 'published numbers')}: {label} with this run ({why}). Published rows are "
            "never bold." + (f" {reference['note']}" if reference.get("note") else ""), "",
            markdown_table(rows, columns, ranked=columns, row_label="system", ranked_rows=competing), ""]


def answer_metrics(run: AnswerRun, summary: Summary | None = None,
                   strategies_missing: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Reader -> its metrics.json keys: ``answers/<setting>/<figure>`` (:func:`aggregate.flat`), or
    ``answers/missing``: why, for a reader that answered nothing (never zeros; a strategy that was not run at
    all already says why under ``missing``)."""
    summary = summarise(run) if summary is None else summary
    out: dict[str, dict[str, Any]] = dict(flat(summary))
    for reader, why in missing_readers(run).items():
        out[reader] = {"answers/missing": why}
    return {reader: values for reader, values in out.items() if reader not in (strategies_missing or {})}


def llm_metrics(run: AnswerRun) -> dict[str, Any]:
    """The reader's and the judge's call figures (``reader/hits``, ``judge/cost_usd``...; cost None when no
    price is configured), for metrics.json's ``llm`` entry of the suite."""
    return {f"{role}/{key}": stats[key] for role, stats in (("reader", run.reader_stats), ("judge", run.judge_stats))
            for key in STATS if key in stats}


def headline_figures(run: AnswerRun, summary: Summary | None = None
                     ) -> dict[str, dict[str, float]]:
    """Reader -> the answer figure the DVC headline files carry: the first judge's headline figure in setting
    ``context``, under its metrics.json key (``answers/context/longmemeval/accuracy``)."""
    summary = summarise(run) if summary is None else summary
    judges = judge_order(run, summary)
    out: dict[str, dict[str, float]] = {}
    for reader, settings in summary.items():
        key = headline_key(settings.get(CONTEXT, {}), judges[0]) if judges else None
        if key is not None:
            out[reader] = {f"answers/{CONTEXT}/{key}": round(settings[CONTEXT][key], 4)}
    return out


def plot_accuracy_vs_tokens(run: AnswerRun, summary: Summary, path: Path,
                            title: str, note: str = "") -> None:
    """Each judge's headline figure against the mean context tokens: one panel per judge, one point per reader
    and setting; a strategy's settings (top k, then its budgeted context) joined by a line, the reference
    readers as stars; ``note`` (readers not run, and why) under the panels."""
    judges = judge_order(run, summary)
    plt, fig, axes = figure(max(1, len(judges)))
    for ax, judge in zip(axes, judges):
        metric = None
        for j, (reader, settings) in enumerate(summary.items()):
            points = [(figures["context_tokens"], figures[key], setting) for setting, figures in settings.items()
                      for key in [headline_key(figures, judge)] if key is not None]
            if not points:
                continue
            metric = metric or headline_key(next(iter(settings.values())), judge)
            points.sort()
            reference = reader in REFERENCE_READERS
            ax.plot([p[0] for p in points], [p[1] for p in points], linestyle=":" if reference else "-",
                    marker="*" if reference else MARKERS[j % len(MARKERS)], markersize=10 if reference else 6,
                    color=f"C{j % 10}", label=reader_label(reader))
            for x, y, setting in points:
                if len(points) > 1:
                    ax.annotate(setting, (x, y), fontsize=6, textcoords="offset points", xytext=(3, 3))
        ax.set(title=f"{title}: {judge}", xlabel="mean context tokens", ylabel=metric or judge)
    save(plt, fig, axes, path, note)


def plot_note(run: AnswerRun, strategies_missing: Mapping[str, str] | None = None) -> str:
    """The line under the answers plot: the readers not drawn, each with its (shortened) reason."""
    import textwrap

    missing = missing_readers(run, strategies_missing)
    return ("not run: " + "; ".join(f"{reader} ({textwrap.shorten(why, 100, placeholder=' ...')})"
                                     for reader, why in missing.items())) if missing else ""
