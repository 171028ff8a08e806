"""The benchmark report: benchmark.md, metrics.json, queries.jsonl and the plots of every suite run.

A suite is run by :func:`pipelines.evaluate.suite_run.evaluate_suite` (every strategy through RealMem's temporal
protocol; a strategy that cannot run on the suite's data or whose trained model does not exist is recorded as
*missing* with the reason, never dropped and never scored 0) into a
:class:`~pipelines.evaluate.suite_run.SuiteRun`; this module writes the runs. The tables come from
:mod:`pipelines.evaluate.tables`, the plots from :mod:`pipelines.evaluate.plots`; the report composes them with
each suite's settings, notes and published reference numbers. A strategy that ran but retrieved nothing for any
query is flagged (a note under the tables and plots).

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

The report is written whole or not at all: every file goes to a hidden folder in ``out_dir``
(``.report.<random>.tmp``), and only once all are written is each renamed over its place (a rename needs no room on
the disk); a file or folder that cannot be written (a path under a regular file, a read-only folder, a full disk) is
a :class:`ReportWriteError` naming the file and the cause, and leaves the files already in ``out_dir`` as they were:
a failed run never loses the last report written whole, nor mixes it with its own.

"Best" is the highest value for every retrieval metric; ``context_tokens`` (mean over queries),
``latency_ms_p50`` (median time of a query's retrieval, ms) and ``queries`` are reported, not ranked.
A column where every strategy ties has no bold value. An oracle strategy (its
class's ``oracle`` says why, e.g. ``egocentric_gold`` reads the dataset's own memories) is a row labelled
``name (oracle)`` that never takes the bold, with a note under the tables; metrics.json keeps its name.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from pipelines import atomic
from pipelines.atomic import atomic_write
from pipelines.data.schema import Episode
from pipelines.errors import ConfigError, MnemosError, os_cause
from pipelines.evaluate.answers import section as answer_section
from pipelines.evaluate.answers.aggregate import summarise
from pipelines.evaluate.answers.run import AnswerRun
from pipelines.evaluate.plots import (plot_ablation, plot_by_session, plot_generation_by_session, plot_recall_at_k,
                                      plot_tokens_vs_recall, write_recall_csv)
from pipelines.evaluate.protocol import flat_metrics
from pipelines.evaluate.suite import Suite
from pipelines.evaluate.suite_run import (GLONG_SESSIONS, WRITER_COLUMNS, SuiteRun, evaluate_suite,
                                          glong_session_mean, writer_rows)
from pipelines.evaluate.tables import (breakdown_table, category_names, fmt, granularity_tables, headline_k,
                                       markdown_table, oracle_reason, row_label, session_groups)
from pipelines.memory import GRANULARITIES, STRATEGIES

GENERATION_COLUMNS = ("bleu-1", "bleu-2", "bleu-3", "bleu-4", "rouge-l", "dist-1", "dist-2", "c_dist-1", "c_dist-2",
                      "s_dist-1", "s_dist-2")
SESSION_COLUMNS = ("responses", "bleu-1", "bleu-2", "bleu-3", "bleu-4", "rouge-l", "c_dist-1", "c_dist-2",
                   "s_dist-1", "s_dist-2")


class ReportWriteError(MnemosError):
    """A report's folder or file that cannot be written (a path under a regular file, a read-only folder, a full
    disk): the message names the file, the cause and its errno name; the report already there is left whole. Exit 8,
    as a benchmark shard that cannot be written: the benchmark's ``--out`` cannot be written."""

    exit_code = 8
    hint = ("make room on that disk or make the report's folder writable, then run the same command again (a "
            "benchmark goes on after the episodes it kept under --out/shards/).")


WRITER_LOCK = ".writer.lock"   # in a staging folder: held by the process that writes the report there
ABANDONED_UNLOCKED_S = 60.0    # a staging folder with no lock file at all: abandoned once this old


def _sweep_abandoned(out: Path, keep: Path) -> None:
    """Remove the staging folders of ``out`` left by report writers that died (killed mid-report): those whose
    writer lock nobody holds. A live writer's folder (its lock held, on this host) is left alone."""
    for folder in out.glob(".report.*.tmp"):
        if folder == keep or not folder.is_dir():
            continue
        lock = folder / WRITER_LOCK
        try:
            if not lock.exists():                      # made before its lock: only an old one is abandoned
                abandoned = time.time() - folder.stat().st_mtime > ABANDONED_UNLOCKED_S
            else:
                fd = os.open(lock, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    abandoned = True
                except BlockingIOError:
                    abandoned = False                  # its writer is still at work
                finally:
                    os.close(fd)
        except OSError:
            continue                                    # gone meanwhile, or not ours to read: leave it
        if abandoned:
            shutil.rmtree(folder, ignore_errors=True)


class _StagedReport:
    """The files of one report, written under a hidden folder of ``out`` (:meth:`writing`) and renamed into place
    together when the ``with`` block ends without error; otherwise the hidden folder is removed and ``out`` is left
    as it was. Every OSError is a :class:`ReportWriteError` naming the file where it goes. The writer holds a lock
    in its folder; the next report into ``out`` removes the folders of writers that were killed."""

    def __init__(self, out: Path):
        self.out, self.written = out, []   # the report's files written so far, relative to out

    def __enter__(self) -> _StagedReport:
        with self._naming(self.out):
            self.out.mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(prefix=".report.", suffix=".tmp", dir=self.out))
            try:
                self._held = os.open(self.folder / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(self._held, fcntl.LOCK_EX)     # released by the kernel if this process dies
            except BaseException:
                shutil.rmtree(self.folder, ignore_errors=True)
                raise
        _sweep_abandoned(self.out, keep=self.folder)
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is None:
                for rel in self.written:     # every folder made and writable, no folder in a file's place:
                    with self._naming(self.out / rel):   # checked before anything moves
                        (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
                        if (self.out / rel).is_dir():
                            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
                        if not os.access((self.out / rel).parent, os.W_OK | os.X_OK):
                            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
                for rel in self.written:
                    with self._naming(self.out / rel):
                        os.replace(self.folder / rel, self.out / rel)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            os.close(self._held)     # released last: until its folder is gone, no other writer's sweep may take it

    @contextlib.contextmanager
    def writing(self, rel: str) -> Iterator[Path]:
        """The hidden path of the report's file ``rel`` (e.g. ``plots/<suite>/recall_at_k.png``), to write."""
        with self._naming(self.out / rel):
            yield self.folder / rel
        self.written.append(rel)

    @contextlib.contextmanager
    def _naming(self, path: Path) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise ReportWriteError(f"the benchmark report cannot write {path}: {os_cause(exc)}; the files already "
                                   f"in {self.out} are left as they were.") from exc


def plot_note(run: SuiteRun) -> str:
    """The line under a suite's plots: the strategies not drawn, each with its reason (shortened), and those
    drawn at 0 because they retrieved nothing ("" when every strategy ran and retrieved)."""
    parts = []
    if run.missing:
        parts.append("not run: " + "; ".join(f"{name} ({textwrap.shorten(why, 100, placeholder=' ...')})"
                                             for name, why in run.missing.items()))
    if run.retrieved_nothing():
        parts.append("retrieved nothing for any query (drawn at 0): " + ", ".join(run.retrieved_nothing()))
    return ". ".join(parts)


def _write_json(path: Path, obj: Any) -> None:
    atomic.write_json(path, obj, indent=2)


def writers_markdown(run: SuiteRun) -> list[str]:
    """The "Language-model writers" part of a suite's section (empty when no strategy called one)."""
    rows = writer_rows(run)
    if not rows:
        return []
    columns = [c for c in WRITER_COLUMNS.values() if any(c in r for r in rows.values())]
    return ["### Language-model writers", "",
            markdown_table(rows, columns, ranked=(), row_label="strategy: writer (model)",
                           decimals={c: (1 if c == "seconds" else 0) for c in columns}), "",
            "What each memory writer of the LLM layer (pipelines/memory/writers.py) did in this suite: requests, "
            "those answered from the response cache, the prompt and completion tokens of every request (those "
            "answered from the cache as they were counted when asked: the same figures on a rerun), wall seconds "
            "of this run's calls, "
            "prompts cut to the model's window; G-Long's extractor: utterances read, triplets written, and how its "
            "answers parsed (parsed: a well-formed JSON list; repaired: read after a fix; unparseable: no triplet); "
            "a memory product's model (pipelines/memory/peers): prompts over the model's window (refused, never "
            "cut), memories written, answers the product could not read, the product's own errors.",
            ""]


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
            cells.append(fmt(value) + (f" ({gain:+.4f})" if gain is not None else ""))
        lines.append(f"| {step} | {row['strategy']} | {row['adds']} | " + " | ".join(cells)
                     + f" | {fmt(row['latency_ms_p50'], 2)} | {fmt(row['index_mb'], 3)} |")
    losses = ablation_losses(rows, metrics)
    if losses:
        lines += ["", "**Steps that lose:** " + "; ".join(losses) + ". A trained step's model makes this suite's "
                  "retrieval worse than the step it builds on: it learnt from other data (its trained_on.json names "
                  "the sources), or too little of it."]
    return lines + [""]


def ablation_losses(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[str]:
    """"`rerank` (a trained model) below `fusion_threads` on session/recall_all@5 (-0.0125)" for each step of the
    ablation that scores below the step above it on some metric (the first stage a step builds on)."""
    out, previous = [], None
    for row in rows:
        if "missing" in row:
            continue
        lost = [f"{m} ({row[f'gain {m}']:+.4f})" for m in metrics
                if row.get(f"gain {m}") is not None and row[f"gain {m}"] < 0]
        if lost and previous is not None:
            trained = " (a trained model)" if getattr(STRATEGIES.get(row["strategy"]), "model_settings", None) else ""
            out.append(f"`{row['strategy']}`{trained} below `{previous}` on " + ", ".join(lost))
        previous = row["strategy"]
    return out


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
        said = [f"`{name}` returned no item for any of its {results[name].aggregate()['overall']['queries']} scored "
                "queries" + (f" ({why})" if (why := run.why_empty(name)) else "") for name in empty]
        main += ("\n\n**Retrieved nothing:** " + "; ".join(said)
                 + (". Its memory" if len(empty) == 1 else ". Their memories")
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
        text, answer_tables = answer_section.answers_markdown(answers, summary, run.missing, suite.budget_tokens,
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
    retrieval``) and ``plots/<suite>/accuracy_vs_tokens.png``. Every file is written once, whole
    (pipelines.atomic), and the report whole or not at all (the module docstring): a file or folder that cannot be
    written is a :class:`ReportWriteError`, and the report already in ``out_dir`` stays as it was.
    Returns ``{"metrics", "markdown" (suite -> tables), "plots" (paths), "files", "counts" (suite ->
    strategy -> counts), "missing" (suite -> strategy -> why), "generation_missing" (suite -> generator
    -> why), "dvc_plot" (the first suite's recall CSV: path, x, y), "answers" (suite -> reader -> setting ->
    figures: pipelines.evaluate.answers.aggregate.summarise), "answers_missing" (suite -> reader -> why)}``.
    """
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
    metrics = {run.suite.name: run.metrics() for run in runs}
    for suite, per_key in (section_metrics or {}).items():
        metrics.setdefault(suite, {}).update({key: dict(values) for key, values in per_key.items()})
    for name, a in answer_runs.items():
        for reader, values in answer_section.answer_metrics(a, summaries[name], by_suite[name].missing).items():
            metrics[name].setdefault(reader, {}).update(values)
        if answer_section.llm_metrics(a):
            metrics[name]["llm"] = answer_section.llm_metrics(a)
    names = ", ".join(run.suite.name for run in runs)
    lines = [f"# Memory benchmark: {names}", "", f"- profile: `{profile}`"]
    if models:
        lines += ["- models: " + "; ".join(f"{k}: {v}" for k, v in models.items())]
    lines += ["- protocol: RealMem's temporal loop — a fresh memory per episode; each query is answered from "
              "the sessions before the one it is asked in; the session enters memory afterwards.",
              "- metrics: recall@k = share of evidence in the top k; recall_any / recall_all / ndcg_any as in "
              "LongMemEval; mrr = reciprocal rank of the first evidence item; means over queries. Bold: best per column.",
              ""]
    tables: dict[str, str] = {}
    dvc_plot: dict[str, Any] = {}
    with _StagedReport(out) as report:
        with report.writing("metrics.json") as path:
            _write_json(path, metrics)
        with report.writing("queries.jsonl") as path, atomic_write(path) as f:
            for run in runs:
                for r in run.results.values():
                    for s in r.scores:
                        f.write(json.dumps({"kind": "retrieval", "suite": run.suite.name,
                                            "suite_version": run.suite.version, **s.__dict__}) + "\n")
                answered = answer_runs.get(run.suite.name)
                for record in answered.records if answered is not None else ():
                    f.write(json.dumps({**record.to_json(), "suite_version": run.suite.version}) + "\n")
        for run in runs:
            suite_name = run.suite.name
            section, tables[suite_name] = _suite_markdown(run, profile, answer_runs.get(suite_name),
                                                          summaries.get(suite_name))
            lines.append(section)
            folder = f"plots/{suite_name}"
            if summaries.get(suite_name):
                answered = answer_runs[suite_name]
                with report.writing(f"{folder}/accuracy_vs_tokens.png") as path:
                    answer_section.plot_accuracy_vs_tokens(answered, summaries[suite_name], path, suite_name,
                                                           answer_section.plot_note(answered, run.missing))
            for name, result in run.generation.items():
                if len(result["by_session"]) > 1:
                    with report.writing(f"{folder}/generation_by_session.png") as path:
                        plot_generation_by_session(result, path, f"{run.suite.name}: {name} generation")
            if not run.results:
                continue
            if any("missing" not in row for row in ablation_rows(run)):
                with report.writing(f"{folder}/ablation.png") as path:
                    plot_ablation([r for r in ablation_rows(run) if "missing" not in r],
                                  run.suite.ablation["metrics"], run.suite.name, path, plot_note(run))
            k, note = headline_k(run.suite.ks), plot_note(run)
            with report.writing(f"{folder}/recall_at_k.png") as path:
                plot_recall_at_k(run.results, run.suite.ks, path, run.suite.name, note)
            with report.writing(f"{folder}/recall_by_session.png") as path:
                plot_by_session(run.results, k, path, run.suite.name, note)
            with report.writing(f"{folder}/tokens_vs_recall.png") as path:
                plot_tokens_vs_recall(run.results, k, path, run.suite.name, note)
            with report.writing(f"{folder}/recall_at_k.csv") as path:
                y = write_recall_csv(run.results, run.suite.ks, path)
            dvc_plot = dvc_plot or {"path": out / folder / "recall_at_k.csv", "x": "k", "y": y}
        with report.writing("benchmark.md") as path:
            atomic.write_text(path, "\n".join(lines) + "".join("\n" + md for md in sections))
    files = {"markdown": out / "benchmark.md", "metrics": out / "metrics.json", "queries": out / "queries.jsonl"}
    plots = [out / rel for rel in report.written if rel.startswith("plots/")]
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
    k = headline_k(run.suite.ks)
    keys = (*(f"{m}@{k}" for m in HEADLINE_METRICS), "context_tokens")
    metrics = run.metrics()
    figures = {name: {key: round(metrics[name][key], 4) for key in keys if key in metrics[name]}
               if name in run.results else {} for name in run.suite.strategies}
    for reader, values in (answer_section.headline_figures(answers) if answers is not None else {}).items():
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
