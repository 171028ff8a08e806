"""One execution at a time of each stage in a project folder: per-stage file locks.

:func:`pipelines.runner.run_stage` holds, from removing a stage's outputs to its last write, an
exclusive lock on ``<root>/.mnemos/locks/<stage>.lock`` and on the lock of every other registered
stage whose declared outputs overlap its own (the same path, or one inside the other): two runs of
one stage, or two stages writing the same files, never interleave; stages with disjoint outputs run
side by side. A stage's undeclared writes (an ingest stage's ``reports/validation/<name>.*``) are its
alone, so its own lock covers them. Locks are taken in name order, so runs that each need several
never wait on one another in a cycle.

The locks are ``fcntl.flock`` locks: the kernel releases them when the holding process ends, even
by SIGKILL, so a lock is never stale, and holding one proves that no other process runs the stage
(the tracker relies on it to mark MLflow runs left RUNNING by a killed process as KILLED). The
holder writes who it is (stage, pid, host, start time, command) into the lock file for the message
of a run that has to wait.

A second run waits for the first (``timeout=None``, the default), waits at most ``timeout`` seconds,
or refuses at once (``timeout=0``: ``python -m pipelines run STAGE --no-wait``); one that gives up
raises :class:`StageBusy` naming the holder. ``MNEMOS_LOCK_TIMEOUT`` sets the default for every
view (CLI, ``dvc repro``, Dagster).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator, Mapping

from pipelines.errors import ConfigError, MnemosError

LOCK_DIR = ".mnemos/locks"
TIMEOUT_ENV = "MNEMOS_LOCK_TIMEOUT"
POLL_SECONDS = 0.2

log = logging.getLogger("mnemos")


class StageBusy(MnemosError):
    """Another process runs the stage (or one sharing its outputs) and this run would not wait (longer)."""

    exit_code = 6
    hint = ("wait for that run to end (without --no-wait a run waits for it; --lock-timeout SECONDS bounds the "
            "wait), or end it if it is stale.")


@dataclass
class StageLocks:
    """The locks one execution of a stage holds; ``identity`` names its own stage lock (host:path)."""

    stage: str
    paths: list[Path]
    identity: str


def overlap(a: str, b: str) -> bool:
    """Whether two root-relative paths name the same file or folder, or one lies inside the other."""
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return pa == pb or pa in pb.parents or pb in pa.parents


def lock_names(stage, stages: Iterable) -> list[str]:
    """``stage``'s own lock and those of the stages whose outputs overlap its outputs, in name order. One partition of
    a partitioned stage locks ``<name>@<key>``: its partitions write apart, so they run side by side."""
    names = {getattr(stage, "run_name", stage.name)}
    for other in stages:
        if other.name == stage.name:
            continue
        if any(overlap(mine, theirs) for mine in stage.outputs
               for theirs in getattr(other, "all_outputs", other.outputs)):
            names.add(other.name)
    return sorted(names)


def timeout_from_env(environ: Mapping[str, str] = os.environ) -> float | None:
    """``MNEMOS_LOCK_TIMEOUT`` in seconds (0: refuse at once); unset or empty: wait as long as it takes."""
    text = environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{TIMEOUT_ENV}={text!r}: give the seconds to wait for a running stage "
                          "(0 refuses at once; unset waits as long as it takes).") from None
    if value < 0:
        raise ConfigError(f"{TIMEOUT_ENV}={text!r}: the wait cannot be negative.")
    return value


def holder(path: Path) -> str:
    """Who holds the lock at ``path``, in words, from what the holder wrote into it."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return (f"stage {info['stage']}, pid {info['pid']} on {info['host']} since {info['started']} "
                f"({info['command']})")
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that is just starting (no holder recorded yet)"


def _acquire(path: Path, stage: str, deadline: float | None, wait: bool) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(path)
            if not wait:
                raise StageBusy(f"stage {stage} not started: its lock {path} is held by {who}; "
                                "run it again once that run ends, or without --no-wait to wait for it.") from None
            limit = "" if deadline is None else f" for at most {deadline - time.monotonic():.0f} s"
            log.warning("stage %s waits%s: its lock %s is held by %s", stage, limit, path, who)
            if deadline is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            raise StageBusy(f"stage {stage} not started: its lock {path} is still held by "
                                            f"{holder(path)} after the wait ({TIMEOUT_ENV} / --lock-timeout)."
                                            ) from None
                        time.sleep(POLL_SECONDS)
            log.info("stage %s: lock %s acquired", stage, path)
        me = {"stage": stage, "pid": os.getpid(), "host": socket.gethostname(),
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _release(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)  # nobody holds it: a waiter that reads it now finds no stale holder
    finally:
        os.close(fd)        # closing the descriptor releases the flock


@contextlib.contextmanager
def stage_lock(root: Path, stage, stages: Iterable, timeout: float | None = None) -> Iterator[StageLocks]:
    """Hold the locks of ``stage`` (see :func:`lock_names`) for the body of the ``with``."""
    folder = Path(root) / LOCK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.lock" for name in lock_names(stage, stages)]
    deadline = None if timeout is None else time.monotonic() + timeout
    held: list[int] = []
    try:
        for path in paths:
            held.append(_acquire(path, stage.name, deadline, wait=timeout is None or timeout > 0))
        own = folder / f"{getattr(stage, 'run_name', stage.name)}.lock"
        yield StageLocks(stage=stage.name, paths=paths, identity=f"{socket.gethostname()}:{own.resolve()}")
    finally:
        for fd in reversed(held):
            _release(fd)
