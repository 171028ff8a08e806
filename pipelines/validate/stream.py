"""validate() one episode at a time, in memory bounded by a chunk, for files too big to hold whole.

    validator = StreamingValidator(file="longmemeval_m.json", max_dropped_turn_share=0.05)
    for record, episode in episodes:          # e.g. a loader's stream
        validator.add(episode, record)        # the episode may be released right after
    report = validator.finish(load=result)    # the LoadResult that counted the drops

gives the report :func:`pipelines.validate.validate` gives on the same episodes: the same rules,
counts, first examples (in the same order), metadata and blocking decisions, with the LoadResult's
"Normalised on load" section and the loss policy. Only ``duration_s`` and ``created`` differ, and
an episode's locator is the ``record`` given with it (``validate`` looks it up by episode id).

How. ``add`` flattens the episode into the rows of the canonical tables (``pipelines.data.tables``)
and drops it. The rows of the small tables (``rules.WHOLE_TABLES``: episodes, speakers, queries,
evidence: a few rows per episode) are kept for the whole file; the rows of the big ones (sessions,
turns, memories, links, triplets, memory tags) are kept for a chunk of whole episodes only, of at
most ``chunk_rows`` rows (or one episode, when bigger), then checked and dropped. Every rule groups
its rows by episode, so its failures over the file are its failures over each chunk, in order
(great-expectations results added up with :func:`~pipelines.validate.expectations.merge_results`),
except the rules of ``rules.WHOLE_FILE_RULES`` (an episode id in two episodes or two splits, and a
warning that applies as soon as any query has a category), which run once at the end over the
whole small tables. A rule applies when it applies to any chunk (each ``applies`` asks whether some
row has a value), and each chunk runs it regardless. The loss policy weighs the totals
(``load.loss_failures``). Memory: the chunk's rows and the small tables, whatever the file's size
(LongMemEval turns: about 400 MB for the default chunk of 100k rows).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

from pipelines.data.schema import Episode
from pipelines.data.tables import COLUMNS, add_episode_rows, empty_rows, frames
from pipelines.validate.core import CheckResult, assemble, check_settings, run_checks
from pipelines.validate.expectations import (EXPECTATIONS, EXPECTATION_RULES, ExpectationResult, ExpectationRunner,
                                             merge_results)
from pipelines.validate.load import WEIGHED, loss_failures
from pipelines.validate.report import MAX_EXAMPLES, ValidationReport
from pipelines.validate.rules import CHECKS, MAX_DROPPED_TURN_SHARE, WHOLE_FILE_RULES, WHOLE_TABLES

if TYPE_CHECKING:
    from pipelines.data.loaders.base import LoadResult

CHUNK_ROWS = 100_000  # rows of the big tables checked at a time (LongMemEval M: about 20 questions)
BIG_TABLES = tuple(t for t in COLUMNS if t not in WHOLE_TABLES)

_misplaced = [e.rule for e in EXPECTATIONS if e.rule in WHOLE_FILE_RULES and e.table not in WHOLE_TABLES]
if _misplaced:  # a programming error: a whole-file rule must read the tables kept whole
    raise RuntimeError(f"whole-file rules on tables not kept whole: {_misplaced}")


class StreamingValidator:
    """Every rule of RULES over episodes given one at a time; :meth:`finish` returns the report.

    ``file``, ``profile`` and ``max_dropped_turn_share`` as for ``validate``; ``chunk_rows`` bounds
    the rows of the big tables held at a time (the memory the validator needs).
    """

    def __init__(self, *, file: str, profile: str = "generic",
                 max_dropped_turn_share: float = MAX_DROPPED_TURN_SHARE, chunk_rows: int = CHUNK_ROWS) -> None:
        check_settings(profile, max_dropped_turn_share)
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
        self.file, self.profile, self.share, self.chunk_rows = file, profile, max_dropped_turn_share, chunk_rows
        self.episodes = 0                         # episodes taken so far
        self._seconds = 0.0                       # time spent validating (add, chunks, finish)
        self._whole = {name: [] for name in WHOLE_TABLES}  # rows of the small tables, whole file
        self._chunk = empty_rows()                # rows of the episodes since the last chunk was checked
        self._chunk_size = 0                      # of them, rows of the big tables
        self._chunks = 0                          # chunks checked
        self._counts: Counter[str] = Counter()    # rows per big table, in the chunks checked
        self._expectations: dict[str, list[ExpectationResult]] = {}  # rule -> result of each chunk
        self._checks: dict[str, list[CheckResult]] = {}
        self._runner = ExpectationRunner()
        self._finished = False

    def add(self, episode: Episode, record: str | None = None) -> None:
        """Take one episode (``record``: its locator in the file, default ``"episode <i>"``)."""
        if self._finished:
            raise RuntimeError("StreamingValidator.add after finish")
        t0 = time.perf_counter()
        rows = empty_rows()
        add_episode_rows(rows, episode, self.episodes, record if record is not None else f"episode {self.episodes}")
        self.episodes += 1
        for name, new in rows.items():
            self._chunk[name].extend(new)
            if name in WHOLE_TABLES:
                self._whole[name].extend(new)
            else:
                self._chunk_size += len(new)
        if self._chunk_size >= self.chunk_rows:
            self._check_chunk()
        self._seconds += time.perf_counter() - t0

    def _check_chunk(self) -> None:
        """Check every rule but the whole-file ones on the chunk's tables, keep the first failures, drop the rows."""
        tables = frames(self._chunk)
        self._chunk, self._chunk_size = empty_rows(), 0
        self._chunks += 1
        for name in BIG_TABLES:
            self._counts[name] += len(tables[name])
        chunked = [r for r in EXPECTATION_RULES if r not in WHOLE_FILE_RULES]
        for rule, res in self._runner.run(tables, chunked, force=True).items():
            kept = self._expectations.setdefault(rule, [])
            room = max(0, MAX_EXAMPLES - sum(len(r.failures) for r in kept))
            kept.append(replace(res, failures=res.failures[:room]))
        names = [n for n in CHECKS if n not in WHOLE_FILE_RULES]
        for rule, res in run_checks(tables, self.profile, names, force=True).items():
            kept = self._checks.setdefault(rule, [])
            room = max(0, MAX_EXAMPLES - sum(len(r.failures) for r in kept))
            kept.append(replace(res, failures=res.failures[:room]))

    def finish(self, load: "LoadResult | None" = None) -> ValidationReport:
        """Check the last chunk and the whole-file rules; the report (``load``: as for ``validate``)."""
        if self._finished:
            raise RuntimeError("StreamingValidator.finish called twice")
        self._finished = True
        t0 = time.perf_counter()
        if self._chunk["episodes"] or not self._chunks:  # no episode at all: the rules over empty tables
            self._check_chunk()
        whole = frames(self._whole)  # the small tables whole, the big ones empty
        self._whole = {}
        expectations = {rule: merge_results(rule, parts, MAX_EXAMPLES) for rule, parts in self._expectations.items()}
        expectations.update(self._runner.run(whole, [r for r in WHOLE_FILE_RULES if r in EXPECTATION_RULES]))
        checks = {rule: _merge_checks(parts) for rule, parts in self._checks.items()}
        checks.update(run_checks(whole, self.profile, [n for n in CHECKS if n in WHOLE_FILE_RULES]))
        counts = {name: len(whole[name]) if name in WHOLE_TABLES else self._counts[name] for name in COLUMNS}
        loss = None
        if load is not None:
            kept = {kind: counts[kind] for kind in ("episodes", *WEIGHED)}
            loss = loss_failures(load, kept, set(whole["episodes"]["source"]), self.share)
        report = assemble(file=self.file, profile=self.profile, expectations=expectations, checks=checks, loss=loss,
                          load=load, counts=counts, max_dropped_turn_share=self.share, start=t0)
        report.duration_s += self._seconds
        return report


def _merge_checks(parts: list[CheckResult]) -> CheckResult:
    """A plain-Python rule's results over the chunks: failures in order, counts added, applied if anywhere."""
    failures = [f for p in parts for f in p.failures][:MAX_EXAMPLES]
    return CheckResult(failures, sum(p.count for p in parts), any(p.applied for p in parts))
