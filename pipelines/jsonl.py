"""Versioned JSON-lines files, written atomically and read with errors that name file and line.

Every file starts with a header line ``{"schema": NAME, "version": N}``; then one JSON object a
line. Writing goes through :func:`pipelines.atomic.atomic_write` (a unique temporary file in the
same folder, renamed into place), so a crash never leaves half a file. Reading checks the header
and raises DataError naming the file, the line and (for the header) the field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator

from pipelines.atomic import atomic_write
from pipelines.errors import DataError


def write_jsonl(path: str | os.PathLike, schema: str, version: int, lines: Iterable[str]) -> int:
    """Write the header and ``lines`` (already-serialised JSON objects). Returns the line count."""
    count = 0
    with atomic_write(path) as f:
        f.write(json.dumps({"schema": schema, "version": version}) + "\n")
        for line in lines:
            f.write(line + "\n")
            count += 1
    return count


def iter_jsonl(path: str | os.PathLike, schema: str, version: int) -> Iterator[tuple[int, object]]:
    """``(line number, parsed object)`` of every record after a matching header."""
    path = Path(path)
    if not path.exists():
        raise DataError("file does not exist", file=str(path))
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"not UTF-8 ({exc.reason} at byte {exc.start})", file=str(path),
                                record=f"line {lineno}") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"invalid JSON ({exc.msg}, column {exc.colno})", file=str(path),
                                record=f"line {lineno}") from None
            if lineno == 1:
                if not isinstance(obj, dict) or obj.get("schema") != schema:
                    raise DataError(f"missing header {{\"schema\": \"{schema}\", \"version\": {version}}}",
                                    file=str(path), record="line 1", field="schema")
                if obj.get("version") != version:
                    raise DataError(f"schema version {obj.get('version')!r}, this code reads version {version}",
                                    file=str(path), record="line 1", field="version")
                continue
            yield lineno, obj
