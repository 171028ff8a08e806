"""Content digests: sha256 over files' bytes (what a run read) or over source files (the code that computed it).

Shared by the benchmark's shard fingerprints (:mod:`pipelines.evaluate.shards`) and the kept validation verdicts
(:mod:`pipelines.validate.memo`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable


def files_digest(paths: Iterable[str | os.PathLike] = (), extra: Any = None) -> str:
    """sha256 over ``extra`` (as sorted JSON) and the bytes of the files at ``paths`` (a folder: its files, sorted by
    relative path), each file's name (relative path in a folder) before its bytes."""
    h = hashlib.sha256(json.dumps(extra, sort_keys=True, default=str).encode("utf-8"))
    for path in paths:
        path = Path(path)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode("utf-8"))
            with f.open("rb") as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def sources_digest(root: Path, folders: Iterable[str]) -> str:
    """sha256 over the ``.py`` and ``.yaml`` files under ``folders`` (relative to ``root``): each one's path relative
    to ``root``, then its bytes."""
    h = hashlib.sha256()
    for folder in folders:
        for f in sorted((root / folder).rglob("*.py")) + sorted((root / folder).rglob("*.yaml")):
            h.update(str(f.relative_to(root)).encode("utf-8"))
            h.update(f.read_bytes())
    return h.hexdigest()
