"""Verdicts kept by content: a published file whose exact bytes passed validation is not validated again by the
runs that only read it (a benchmark run, each of its shards, their merge).

Validating a published file costs seconds to minutes (great-expectations alone takes about 10 s to import; the
streamed validation of LongMemEval M reads 2.7 GB), and a sharded benchmark used to pay it in every process. The
verdict is a pure function of the file's bytes, the loader, the validation profile, the loss policy and the code
that loads and checks: the key (:func:`verdict_key`) is a sha256 over all of them, so new bytes, another policy or
changed loaders or rules (any file of ``pipelines/data`` or ``pipelines/validate``) validate again.

Only a passing verdict is kept (a failing one is recomputed, so its error names the file, record and rule every
time), with what the loader normalised on the way and the counts of the pass. The stage that ingests a dataset
never reads it: ``ingest`` validates in full and writes its report every time. Written atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipelines.atomic import write_json
from pipelines.digest import files_digest, sources_digest
from pipelines.registry import CheckOutcome
from pipelines.validate.report import ValidationReport

FORMAT = 2  # bump when the kept payload changes: older verdicts are then ignored
_ROOT = Path(__file__).resolve().parents[2]
_CODE = ("pipelines/data", "pipelines/validate")   # the code that loads and checks a file


def verdict_key(source: str, path: str | os.PathLike, profile: str, max_dropped_turn_share: float) -> str:
    """sha256 over the file's bytes (a folder: its files by relative path), the loader, the profile, the loss
    policy and the code of ``pipelines/data`` and ``pipelines/validate``."""
    return files_digest([path], {"format": FORMAT, "source": source, "profile": profile,
                                 "max_dropped_turn_share": float(max_dropped_turn_share),
                                 "code": sources_digest(_ROOT, _CODE)})


def report_from_dict(d: dict[str, Any]) -> ValidationReport:
    """The :class:`ValidationReport` that :meth:`ValidationReport.to_dict` wrote."""
    return ValidationReport(file=d["file"], profile=d["profile"], outcomes=[CheckOutcome(**o) for o in d["rules"]],
                            counts=dict(d.get("counts", {})), duration_s=float(d.get("duration_s", 0.0)),
                            load=dict(d.get("load", {})), created=d.get("created", ""))


def recall(folder: str | os.PathLike | None, key: str) -> dict[str, Any] | None:
    """The payload kept under ``key`` (its ``report`` a ValidationReport again), or None (none kept, unreadable)."""
    if folder is None:
        return None
    path = Path(folder) / f"{key}.json"
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        payload["report"] = report_from_dict(payload["report"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return payload if payload["report"].passed else None


def remember(folder: str | os.PathLike | None, key: str, report: ValidationReport, **extra: Any) -> None:
    """Keep a passing ``report`` (and ``extra``: the loader's normalisations, the pass's counts) under ``key``."""
    if folder is None or not report.passed:
        return
    write_json(Path(folder) / f"{key}.json", {"report": report.to_dict(), **extra})
