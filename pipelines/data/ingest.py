"""Ingestion: a published dataset at a local path -> canonical ``<split>.jsonl`` files.

``load_source`` runs the loader registered under the source name
(``pipelines.data.loaders``); ``write_canonical`` writes ``<out_dir>/<split>.jsonl``
for each split present plus ``<out_dir>/counts.json``, all or nothing: everything is
written into a fresh temporary folder beside ``out_dir`` and swapped in by renames at
the end, so an error leaves neither a half-written file nor a mix of old and new
files. Validation runs between the two (the caller's job).

    python -m pipelines.data.ingest --source locomo --path locomo10.json --out data/canonical/locomo

prints, as the last line of stdout, one JSON object with the counts (episodes,
sessions, turns, memories, queries, triplets) and the ``dropped`` map of reason to count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pipelines.data.loaders import LOADERS, LoadResult, get_loader
from pipelines.data.schema import SPLITS, write_episodes
from pipelines.errors import ConfigError, DataError

COUNTS_FILE = "counts.json"
# What write_canonical puts in out_dir: the only entries it will replace.
OWN_FILES = frozenset({*(f"{s}.jsonl" for s in SPLITS), COUNTS_FILE})


def load_source(source: str, path: str | os.PathLike) -> LoadResult:
    """Read ``path`` with the loader registered as ``source`` (ConfigError if unknown)."""
    return get_loader(source)(Path(path))


def write_canonical(result: LoadResult, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Write the episodes by split and ``counts.json`` atomically; return the counts.

    ``out_dir`` may exist only if it holds nothing but files this function writes
    (a previous ingest); it is then replaced as a whole. Returns
    ``{episodes, sessions, turns, memories, queries, triplets, dropped, flagged, splits}``.
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
    counts = result.counts()
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


def ingest(source: str, path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, Any]:
    """``load_source`` then ``write_canonical``; returns the counts."""
    return write_canonical(load_source(source, path), out_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.data.ingest",
                                 description="Read a published dataset and write canonical episodes.")
    ap.add_argument("--source", required=True, help=f"one of: {', '.join(sorted(LOADERS))}")
    ap.add_argument("--path", required=True, help="the published file or folder")
    ap.add_argument("--out", required=True, help="output folder (<split>.jsonl, counts.json)")
    args = ap.parse_args(argv)
    try:
        counts = ingest(args.source, args.path, args.out)
    except (DataError, ConfigError) as exc:
        ap.exit(2, f"error: {exc}\n")
    print(json.dumps(counts, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
