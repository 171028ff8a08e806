"""Files written whole or not at all: a unique temporary file beside the target, renamed onto it.

Every output the project writes in one piece (JSON lines, JSON, markdown, CSV, PNG) goes through
:func:`atomic_write`: the content goes to ``.<name>.<random>.tmp`` in the target's folder (``mkstemp``:
unique, so two writers never share a temporary file), which is given the usual file mode and renamed
onto the target with ``os.replace``. A reader sees the old file or the new one, never half of one; a
process killed while writing leaves at most its own ``.tmp`` file, and an exception removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO]:
    """Open a new temporary file beside ``path`` (``mode`` "w" or "wb"); on success it replaces ``path``."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        text = {"encoding": encoding, "newline": newline} if mode == "w" else {}
        with os.fdopen(fd, mode, **text) as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_write(path) as f:
        f.write(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2, sort_keys: bool = False) -> Path:
    """Write ``obj`` as JSON (and a final newline) to ``path`` atomically."""
    return write_text(path, json.dumps(obj, indent=indent, sort_keys=sort_keys) + "\n")
