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

:func:`ingest` then raises on a blocking failure (ValidationFailed naming the file, the record
and the rule) or writes the data: ``write_canonical`` writes ``<out_dir>/<split>.jsonl`` for each
split present plus ``<out_dir>/counts.json``, all or nothing: everything is written into a fresh
temporary folder beside ``out_dir`` and swapped in by renames at the end, so an error leaves
neither a half-written file nor a mix of old and new files.

    python -m pipelines.data.ingest --source locomo --path locomo10.json --out data/canonical/locomo

prints, as the last line of stdout, one JSON object with the counts (episodes, sessions, turns,
memories, queries, triplets), the ``dropped`` and ``flagged`` maps of reason to count, their
first ``examples`` per reason, the validation ``warnings`` (rule -> failing count) and ``splits``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from pipelines.data.loaders import LOADERS, LoadResult, get_loader
from pipelines.data.schema import SPLITS, write_episodes
from pipelines.errors import ConfigError, DataError

if TYPE_CHECKING:
    from pipelines.validate import ValidationReport

COUNTS_FILE = "counts.json"
# What write_canonical puts in out_dir: the only entries it will replace.
OWN_FILES = frozenset({*(f"{s}.jsonl" for s in SPLITS), COUNTS_FILE})


def load_source(source: str, path: str | os.PathLike) -> LoadResult:
    """Read ``path`` with the loader registered as ``source`` (ConfigError if unknown)."""
    return get_loader(source)(Path(path))


def max_dropped_turn_share(config: Mapping[str, Any] | None) -> float:
    """params.yaml ``ingest.max_dropped_turn_share`` of a resolved config, read through its declaration
    (``pipelines.config_schema.IngestSettings``: the default when unset, a value outside [0, 1] refused)."""
    from pipelines.config_schema import IngestSettings

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
                      report: str | os.PathLike | None = None) -> Ingestion:
    """Load ``path`` with loader ``source``, validate it (loss policy included), write the report if asked.

    ``config`` is the resolved configuration (params.yaml ``ingest`` is read from it; None: the
    defaults); ``report`` the path of the HTML report (the JSON goes beside it, suffix ``.json``).
    Never raises on bad data that a rule catches: see ``Ingestion.report.raise_if_blocking``.
    """
    from pipelines.validate import validate, write_report

    loaded = load_source(source, path)
    checked = validate(loaded.episodes, file=str(path), profile="misc" if source == "misc" else "generic",
                       records=loaded.records, load=loaded, max_dropped_turn_share=max_dropped_turn_share(config))
    if report is not None:
        write_report(checked, report, Path(report).with_suffix(".json"))
    return Ingestion(loaded, checked)


def write_canonical(result: LoadResult, out_dir: str | os.PathLike,
                    extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write the episodes by split and ``counts.json`` atomically; return the counts.

    ``out_dir`` may exist only if it holds nothing but files this function writes
    (a previous ingest); it is then replaced as a whole. Returns
    ``{episodes, sessions, turns, memories, queries, triplets, dropped, flagged, examples, splits}``
    and the ``extra`` entries (e.g. the validation warnings).
    """
    out = Path(out_dir)
    if out.exists():
        if not out.is_dir():
            raise ConfigError(f"output path {out} exists and is not a folder")
        foreign = sorted(p.name for p in out.iterdir() if p.name not in OWN_FILES)
        if foreign:
            raise ConfigError(f"output folder {out} holds files ingest did not write "
                              f"({', '.join(foreign[:5])}); choose an empty or new folder")
    out.parent.mkdir(parents=True, exist_ok=True)

    by_split: dict[str, list] = {}
    for episode in result.episodes:
        by_split.setdefault(episode.split, []).append(episode)
    counts = {**result.counts(), **(extra or {})}
    counts["splits"] = {s: len(by_split[s]) for s in SPLITS if s in by_split}

    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    old: Path | None = None
    try:
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary folder
        for split, episodes in by_split.items():
            write_episodes(tmp / f"{split}.jsonl", episodes)
        (tmp / COUNTS_FILE).write_text(json.dumps(counts, indent=2, sort_keys=True) + "\n",
                                       encoding="utf-8")
        if out.exists():
            old = out.with_name(f".{out.name}.{tmp.name}.old")
            os.rename(out, old)
        try:
            os.rename(tmp, out)
        except BaseException:
            if old is not None:
                os.rename(old, out)
                old = None
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return counts


def report_path(out_dir: str | os.PathLike) -> Path:
    """Where ``ingest`` on the command line writes the validation report: ``<out_dir>.validation.html``
    (and ``.json``) beside ``out_dir``."""
    out = Path(out_dir)
    return out.parent / f"{out.name}.validation.html"


def ingest(source: str, path: str | os.PathLike, out_dir: str | os.PathLike, *,
           config: Mapping[str, Any] | None = None, report: bool = False) -> dict[str, Any]:
    """:func:`load_and_validate`, raise on a blocking failure, else ``write_canonical``; returns the counts.

    ``report=True`` writes the validation report beside ``out_dir`` (:func:`report_path`).
    """
    checked = load_and_validate(source, path, config=config, report=report_path(out_dir) if report else None)
    checked.report.raise_if_blocking()
    return write_canonical(checked.loaded, out_dir, extra={"warnings": checked.warnings()})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.data.ingest",
                                 description="Read a published dataset, validate it and write canonical episodes.")
    ap.add_argument("--source", required=True, help=f"one of: {', '.join(sorted(LOADERS))}")
    ap.add_argument("--path", required=True, help="the published file or folder")
    ap.add_argument("--out", required=True, help="output folder (<split>.jsonl, counts.json)")
    args = ap.parse_args(argv)
    try:
        from pipelines.config import resolve

        counts = ingest(args.source, args.path, args.out, config=resolve(), report=True)
    except (DataError, ConfigError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps(counts, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
