"""Ingestion: a published dataset at a local path -> validated canonical ``<split>.jsonl`` files.

One path for every entry point (``python -m pipelines ingest``, the ``ingest_<source>`` stages,
``benchmark --path``): :func:`load_and_validate`

1. loads: the loader registered under the source name (``pipelines.data.loaders``) reads the
   published files and normalises the known quirks of its dataset (blank turns left out,
   LongMemEval sessions put in date order), counting every part it drops or flags by reason
   with its first examples;
2. validates (``pipelines.validate``): every rule, including the loss policy
   (``load_loss_within_limit``: no episode, no turn, a whole kind of record lost, or more than
   params.yaml ``ingest.max_dropped_turn_share`` of the turns dropped is blocking);
3. writes the validation report (HTML + JSON, with a "Normalised on load" section) when asked.

Big files (LongMemEval M: 2.7 GB) never become one list: :func:`stream_and_validate` does the
same in two passes over the file for a source with a streaming reader (``longmemeval``), the
first validating as it reads (``pipelines.validate.StreamingValidator``), the second
(:meth:`StreamedIngestion.episodes`) yielding the episodes one at a time; memory stays that of one
episode and one chunk of validation rows, whatever the file's size. Other sources fall back to
:func:`load_and_validate` behind the same interface.

:func:`ingest` (``python -m pipelines ingest``) streams in one pass: each episode is written as
it is validated (:class:`CanonicalWriter`) to ``<split>.jsonl`` for each split present, plus
``counts.json``, all or nothing: everything goes to a fresh temporary folder beside ``out_dir``,
swapped in by renames at the end only when no blocking rule failed (else ValidationFailed naming
the file, the record and the rule), so an error leaves neither a half-written file nor a mix of
old and new files (``write_canonical`` does the same from a LoadResult, ``write_streamed`` from
a StreamedIngestion).

    python -m pipelines ingest --source locomo --path locomo10.json --out data/canonical/locomo

prints, as the last line of stdout, one JSON object with the counts (episodes, sessions, turns,
memories, queries, triplets), the ``dropped`` and ``flagged`` maps of reason to count, their
first ``examples`` per reason, the validation ``warnings`` (rule -> failing count) and ``splits``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, Mapping

from pipelines.data.loaders import LoadResult, Streamer, get_loader, get_streamer
from pipelines.data.loaders.base import TOTALS, tally
from pipelines.data.schema import SPLITS, Episode, episode_line, header_line
from pipelines.errors import ConfigError, DataError

if TYPE_CHECKING:
    from pipelines.validate import ValidationReport

COUNTS_FILE = "counts.json"
# What write_canonical puts in out_dir: the only entries it will replace.
OWN_FILES = frozenset({*(f"{s}.jsonl" for s in SPLITS), COUNTS_FILE})


def load_source(source: str, path: str | os.PathLike) -> LoadResult:
    """Read ``path`` with the loader registered as ``source`` (ConfigError if unknown)."""
    return get_loader(source)(Path(path))


@dataclass(frozen=True)
class IngestSettings:
    """params.yaml ``ingest``: the loss policy of every load of a published dataset (CLI ingest, ingest_<source>,
    benchmark --path)."""

    # a load that drops more than this share of its turns fails (pipelines.validate.rules.MAX_DROPPED_TURN_SHARE)
    max_dropped_turn_share: float = 0.05

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_dropped_turn_share <= 1.0:
            raise ConfigError(f"ingest.max_dropped_turn_share must lie in [0, 1] (a share of the turns), "
                              f"got {self.max_dropped_turn_share!r}.")


def max_dropped_turn_share(config: Mapping[str, Any] | None) -> float:
    """params.yaml ``ingest.max_dropped_turn_share`` of a resolved config, read through its declaration
    (:class:`IngestSettings`: the default when unset, a value outside [0, 1] refused)."""
    return IngestSettings(**((config or {}).get("ingest") or {})).max_dropped_turn_share


@dataclass
class Ingestion:
    """A source loaded and validated: the loader's result and the validation report."""

    loaded: LoadResult
    report: "ValidationReport"

    def warnings(self) -> dict[str, int]:
        """The validation warnings: rule -> failing count (e.g. RealMem's times going backwards)."""
        return {o.name: o.count for o in self.report.warnings()}


def load_and_validate(source: str, path: str | os.PathLike, *, config: Mapping[str, Any] | None = None,
                      report: str | os.PathLike | None = None, memo: str | os.PathLike | None = None) -> Ingestion:
    """Load ``path`` with loader ``source``, validate it (loss policy included), write the report if asked.

    ``config`` is the resolved configuration (params.yaml ``ingest`` is read from it; None: the
    defaults); ``report`` the path of the HTML report (the JSON goes beside it, suffix ``.json``).
    ``memo``: a folder of kept verdicts (:mod:`pipelines.validate.memo`): the same bytes that passed before
    under the same rules and code are loaded without validating them again; a pass is kept there.
    Never raises on bad data that a rule catches: see ``Ingestion.report.raise_if_blocking``.
    """
    from pipelines.validate import memo as verdicts
    from pipelines.validate import validate, write_report

    share = max_dropped_turn_share(config)
    loaded = load_source(source, path)   # a file that cannot be read fails here, naming it
    key = verdicts.verdict_key(source, path, _profile(source), share) if memo is not None else ""
    kept = verdicts.recall(memo, key)
    if kept is not None:
        checked = kept["report"]
    else:
        checked = validate(loaded.episodes, file=str(path), profile=_profile(source),
                           records=loaded.records, load=loaded, max_dropped_turn_share=share)
        if memo is not None:   # what a streamed read of the same bytes needs too (stream_and_validate)
            totals, splits = tally(loaded.episodes), Counter(e.split for e in loaded.episodes)
            verdicts.remember(memo, key, checked, **_pass_counts(loaded, totals, splits))
    if report is not None:
        write_report(checked, report, Path(report).with_suffix(".json"))
    return Ingestion(loaded, checked)


def _profile(source: str) -> str:
    """The validation profile of a source: MiSC's filters for ``misc``, the generic rules otherwise."""
    return "misc" if source == "misc" else "generic"


def _stamp(path: Path) -> tuple[int, int] | None:
    """(size, modification time) of a file, to tell that it changed between two passes."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@dataclass
class StreamedIngestion:
    """A source validated as a whole, whose episodes are then read one at a time.

    ``report`` is the validation report over the whole file (the same rules, counts, blocking
    decisions and "Normalised on load" section as :func:`load_and_validate`'s). :meth:`episodes`
    yields the normalised Episodes in file order, equal to those of the loader's list.
    ``streamed`` says how: True (a source with a streaming reader, ``longmemeval``): each call of
    :meth:`episodes` reads the file again, and memory holds one episode at a time; False (every
    other source): the loaded list, kept in memory since :func:`stream_and_validate`.
    """

    source: str
    path: Path
    report: "ValidationReport"
    totals: dict[str, int]                 # episodes, sessions, turns, memories, queries, triplets
    splits: dict[str, int]                 # split -> episodes, in SPLITS order
    loaded: LoadResult = field(repr=False)  # drops and flags; its episodes only when not streamed
    streamer: Streamer | None = field(default=None, repr=False)
    stamp: tuple[int, int] | None = field(default=None, repr=False)  # the file's (size, mtime) when validated

    @property
    def streamed(self) -> bool:
        return self.streamer is not None

    def warnings(self) -> dict[str, int]:
        """The validation warnings: rule -> failing count."""
        return {o.name: o.count for o in self.report.warnings()}

    def counts(self) -> dict[str, Any]:
        """What :func:`write_canonical` writes to counts.json (less the warnings): totals, drops and flags by
        reason with their first examples, and ``splits``."""
        return {**self.loaded.counts(self.totals), "splits": dict(self.splits)}

    def episodes(self) -> Iterator[Episode]:
        """The normalised episodes, one at a time, in file order (a generator).

        Raises ValidationFailed (before the first episode) when the report has a blocking failure.
        Streamed: each call reads the file again from its start; no earlier episode is kept alive
        by the generator (once the caller drops an episode and takes the next, the first is freed),
        so a caller that keeps none holds one episode at a time. DataError naming the file if it
        changed since it was validated (size or modification time) or yields another number of
        episodes.
        """
        self.report.raise_if_blocking()
        if self.streamer is None:
            yield from self.loaded.episodes
            return
        if _stamp(self.path) != self.stamp:
            raise DataError("the file changed since it was validated (size or modification time); "
                            "validate it again", file=str(self.path))
        n = 0
        for _, episode in self.streamer(self.path, LoadResult()):
            n += 1
            yield episode
        if n != self.totals["episodes"]:
            raise DataError(f"{n} episodes read, {self.totals['episodes']} when validated", file=str(self.path))


def stream_and_validate(source: str, path: str | os.PathLike, *, config: Mapping[str, Any] | None = None,
                        report: str | os.PathLike | None = None, chunk_rows: int | None = None,
                        on_episode: Callable[[Episode], None] | None = None,
                        memo: str | os.PathLike | None = None) -> StreamedIngestion:
    """Validate ``path`` (loader ``source``) in a first pass over the file, holding one episode at a time.

    The report equals :func:`load_and_validate`'s (same rules and blocking decisions, loss policy
    ``load_loss_within_limit`` with params.yaml ``ingest.max_dropped_turn_share`` from ``config``,
    "Normalised on load" counts and examples); ``report`` writes it (HTML, JSON beside it). Memory:
    one episode, one chunk of at most ``chunk_rows`` rows of the validation tables (default
    ``pipelines.validate.stream.CHUNK_ROWS``), a few rows per episode and a digest per session id;
    never the whole file. A source without a streaming reader is loaded whole instead
    (``StreamedIngestion.streamed`` False). ``on_episode`` is called with each episode of this pass,
    in file order, before the verdict is known (``ingest`` writes them to a temporary folder).
    Never raises on bad data that a rule catches; raises DataError on a file it cannot read
    (missing, truncated or invalid JSON: naming the file and the item and byte reached).
    ``memo`` (a folder of kept verdicts, :mod:`pipelines.validate.memo`; not with ``on_episode``): bytes that
    passed before under the same rules and code skip this first pass (its counts and the loader's
    normalisations are kept with the verdict); a pass is kept there.
    """
    from pipelines.validate import StreamingValidator, write_report
    from pipelines.validate import memo as verdicts
    from pipelines.validate.stream import CHUNK_ROWS

    streamer = get_streamer(source)
    path = Path(path)
    if memo is not None and on_episode is not None:
        raise ValueError("stream_and_validate: a kept verdict skips the pass that on_episode watches")
    if streamer is None:
        checked = load_and_validate(source, path, config=config, report=report, memo=memo)
        if on_episode is not None:
            for episode in checked.loaded.episodes:
                on_episode(episode)
        splits = Counter(e.split for e in checked.loaded.episodes)
        totals = tally(checked.loaded.episodes)
        return StreamedIngestion(source, path, checked.report, {k: totals[k] for k in TOTALS},
                                 {s: splits[s] for s in SPLITS if s in splits}, checked.loaded)
    stamp = _stamp(path)
    memo = memo if stamp is not None else None   # a file that cannot be read fails in the pass below, naming it
    key = verdicts.verdict_key(source, path, _profile(source), max_dropped_turn_share(config)) if memo else ""
    kept = verdicts.recall(memo, key)
    if kept is not None:
        if report is not None:
            write_report(kept["report"], report, Path(report).with_suffix(".json"))
        loaded = LoadResult(dropped=Counter(kept["dropped"]), flagged=Counter(kept["flagged"]),
                            examples={k: list(v) for k, v in kept["examples"].items()})
        return StreamedIngestion(source, path, kept["report"], dict(kept["totals"]), dict(kept["splits"]), loaded,
                                 streamer, stamp)
    validator = StreamingValidator(file=str(path), profile=_profile(source),
                                   max_dropped_turn_share=max_dropped_turn_share(config),
                                   chunk_rows=chunk_rows or CHUNK_ROWS)
    loaded = LoadResult()
    totals: Counter[str] = Counter()
    splits: Counter[str] = Counter()
    for record, episode in streamer(path, loaded):
        validator.add(episode, record)
        tally([episode], totals)
        splits[episode.split] += 1
        if on_episode is not None:
            on_episode(episode)
    checked = validator.finish(load=loaded)
    if report is not None:
        write_report(checked, report, Path(report).with_suffix(".json"))
    kept = _pass_counts(loaded, totals, splits)
    if memo is not None:
        verdicts.remember(memo, key, checked, **kept)
    return StreamedIngestion(source, path, checked, kept["totals"], kept["splits"], loaded, streamer, stamp)


def _pass_counts(loaded: LoadResult, totals: Mapping[str, int], splits: Mapping[str, int]) -> dict[str, Any]:
    """What a validation pass counted, kept with its verdict: totals, splits (in SPLITS order), the loader's drops,
    flags and their examples."""
    return {"totals": {k: int(totals.get(k, 0)) for k in TOTALS},
            "splits": {s: int(splits[s]) for s in SPLITS if s in splits},
            "dropped": dict(loaded.dropped), "flagged": dict(loaded.flagged), "examples": dict(loaded.examples)}


def write_canonical(result: LoadResult, out_dir: str | os.PathLike,
                    extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write the episodes by split and ``counts.json`` atomically; return the counts.

    ``out_dir`` may exist only if it holds nothing but files this function writes
    (a previous ingest); it is then replaced as a whole. Returns
    ``{episodes, sessions, turns, memories, queries, triplets, dropped, flagged, examples, splits}``
    and the ``extra`` entries (e.g. the validation warnings).
    """
    splits = Counter(e.split for e in result.episodes)
    counts = {**result.counts(), **(extra or {})}
    counts["splits"] = {s: splits[s] for s in SPLITS if s in splits}
    with CanonicalWriter(out_dir) as writer:
        for episode in result.episodes:
            writer.write(episode)
        writer.commit(counts)
    return counts


def write_streamed(checked: StreamedIngestion, out_dir: str | os.PathLike) -> dict[str, Any]:
    """:func:`write_canonical` for a :class:`StreamedIngestion`: each episode is written as it is read
    (``checked.episodes()``, which raises on a blocking failure), all or nothing; returns the counts
    (with the validation ``warnings``)."""
    counts = {**checked.counts(), "warnings": checked.warnings()}
    with CanonicalWriter(out_dir) as writer:
        for episode in checked.episodes():
            writer.write(episode)
        writer.commit(counts)
    return counts


class CanonicalWriter:
    """``<split>.jsonl`` files written one episode at a time, then swapped in whole, or not at all.

        with CanonicalWriter(out_dir) as writer:
            for episode in episodes:
                writer.write(episode)
            writer.commit(counts)       # counts.json, then out_dir replaced by renames

    ``out_dir`` may exist only if it holds nothing but files ingest writes (:data:`OWN_FILES`: a
    previous ingest), checked when the writer is made, before any work. The files go to a fresh
    temporary folder beside ``out_dir``; leaving the block without :meth:`commit` (an exception, a
    blocking validation failure) removes it and leaves ``out_dir`` as it was.
    """

    def __init__(self, out_dir: str | os.PathLike) -> None:
        out = self.out = Path(out_dir)
        if out.exists():
            if not out.is_dir():
                raise ConfigError(f"output path {out} exists and is not a folder")
            foreign = sorted(p.name for p in out.iterdir() if p.name not in OWN_FILES)
            if foreign:
                raise ConfigError(f"output folder {out} holds files ingest did not write "
                                  f"({', '.join(foreign[:5])}); choose an empty or new folder")
        self.tmp: Path | None = None
        self._files: dict[str, IO[str]] = {}
        self._stack = ExitStack()
        self._committed = False

    def __enter__(self) -> "CanonicalWriter":
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".tmp", dir=self.out.parent))
        umask = os.umask(0)
        os.umask(umask)
        self.tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary folder
        return self

    def write(self, episode: Episode) -> None:
        """Append one episode to its split's file (made, with its header line, on the split's first episode)."""
        f = self._files.get(episode.split)
        if f is None:
            f = self._files[episode.split] = self._stack.enter_context(
                open(self.tmp / f"{episode.split}.jsonl", "w", encoding="utf-8"))
            f.write(header_line() + "\n")
        f.write(episode_line(episode) + "\n")

    def commit(self, counts: Mapping[str, Any]) -> None:
        """Write counts.json and put the folder in place of ``out_dir``."""
        self._stack.close()
        (self.tmp / COUNTS_FILE).write_text(json.dumps(counts, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        out, old = self.out, None
        if out.exists():
            old = out.with_name(f".{out.name}.{self.tmp.name}.old")
            os.rename(out, old)
        try:
            os.rename(self.tmp, out)
        except BaseException:
            if old is not None:
                os.rename(old, out)
            raise
        self._committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        if not self._committed and self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def report_path(out_dir: str | os.PathLike) -> Path:
    """Where ``ingest`` on the command line writes the validation report: ``<out_dir>.validation.html``
    (and ``.json``) beside ``out_dir``."""
    out = Path(out_dir)
    return out.parent / f"{out.name}.validation.html"


def ingest(source: str, path: str | os.PathLike, out_dir: str | os.PathLike, *,
           config: Mapping[str, Any] | None = None, report: bool = False) -> dict[str, Any]:
    """Validate ``path`` and write its canonical episodes (:class:`CanonicalWriter`); returns the counts.

    One pass over the file: :func:`stream_and_validate` hands each episode to the writer as it is
    read and validated, into a temporary folder that replaces ``out_dir`` only when no blocking
    rule failed (else ValidationFailed, and nothing is written). Memory: that of
    :func:`stream_and_validate`. ``report=True`` writes the validation report beside ``out_dir``
    (:func:`report_path`).
    """
    with CanonicalWriter(out_dir) as writer:
        checked = stream_and_validate(source, path, config=config, report=report_path(out_dir) if report else None,
                                      on_episode=writer.write)
        checked.report.raise_if_blocking()
        counts = {**checked.counts(), "warnings": checked.warnings()}
        writer.commit(counts)
    return counts
