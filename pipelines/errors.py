"""The project's own error types, and the one error boundary of the CLI and the Dagster assets.

Every error raised on bad input names the file, the record (line or index) and the
field or rule, so that a user can open the file and fix the record.

Every error a user can cause is a :class:`MnemosError`; its class carries the process exit code and a hint
saying what to do (an instance may carry a hint of its own). ``python -m pipelines`` ends such an error as
``error: <message>`` and ``hint: <hint>`` on stderr, with the class's exit code and no traceback (``-v``
shows it); a Dagster asset fails with the same two lines (:func:`describe`). The exit codes (:data:`EXIT_CODES`):

  0  success
  1  an unexpected failure (a bug: the traceback is printed)
  2  a configuration that cannot work: params.yaml, --set, --profile, a command-line argument (ConfigError;
     argparse's usage errors exit 2 too)
  3  an unknown name: stage, benchmark suite, source or loader (UnknownName)
  4  a missing input: a stage's input or a model not made yet, a --path that does not exist (MissingInput,
     ModelNotTrained)
  5  bad data: a record that fails validation, nothing left to score (DataError, ValidationFailed, NothingToScore)
  6  busy: another process runs the stage and this one would not wait (longer) (pipelines.locks.StageBusy)
  7  a language model that cannot answer: server unreachable, model failed to load (pipelines.llm.LLMError)
  8  a benchmark shard that cannot be run, written or merged as asked (pipelines.evaluate.shards.ShardError), or a
     benchmark report that cannot be written (pipelines.evaluate.report.ReportWriteError): a --out that cannot be
     written ends so whichever of its files fails
"""

from __future__ import annotations

import difflib
import errno
from typing import Iterable


class MnemosError(Exception):
    """Base class of every error this project raises on purpose: a user can cause it, and fix it.

    ``exit_code`` and ``hint`` (what to do) are per class; ``hint`` may be set on an instance too.
    """

    exit_code = 1
    hint = ""


class DataError(MnemosError, ValueError):
    """Bad input data: names the file, the record and the field or rule that failed."""

    exit_code = 5
    hint = ("fix the record named above in its file (reports/validation/ lists every failing record of a "
            "validated load), then run again.")

    def __init__(self, message: str, *, file: str | None = None, record: str | int | None = None,
                 field: str | None = None, rule: str | None = None):
        self.file, self.record, self.field, self.rule = file, record, field, rule
        where = []
        if file is not None:
            where.append(f"file {file}")
        if record is not None:
            where.append(f"record {record}")
        if field is not None:
            where.append(f"field '{field}'")
        if rule is not None:
            where.append(f"rule '{rule}'")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ValidationFailed(DataError):
    """A blocking validation rule failed; nothing downstream may run on the data."""


class MissingInput(DataError):
    """A file or folder a command reads does not exist (yet): the message names it and what makes it."""

    exit_code = 4
    hint = "run the stage that makes it first (`python -m pipelines list` shows the stages in order), or fix the path."


class ConfigError(MnemosError, ValueError):
    """A configuration that cannot work, with a sentence saying why."""

    exit_code = 2
    hint = "fix the value named above in params.yaml or in the --set / --profile of the command."


class UnknownName(ConfigError):
    """A name that names nothing (a stage, a benchmark suite, a source or loader): lists the close matches."""

    exit_code = 3
    hint = ""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint


def os_cause(exc: OSError) -> str:
    """What an OSError says of its cause, for a one-line error: ``"No space left on device (ENOSPC)"``."""
    code = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    return f"{exc.strerror or exc}{f' ({code})' if code else ''}"


def close_matches(name: str, known: Iterable[str], n: int = 3) -> str:
    """``"; did you mean a, b?"`` for the names of ``known`` close to ``name``, else ``""``."""
    matches = difflib.get_close_matches(name, list(known), n=n, cutoff=0.6)
    return f"; did you mean {', '.join(matches)}?" if matches else ""


class ModelNotTrained(ConfigError):
    """A strategy or stage needs a trained model whose directory does not exist yet.

    The benchmark lists such a strategy as *missing* (with this message), never drops it
    silently; ``stage`` names the stage that trains the model, when known.
    """

    exit_code = 4
    hint = "run the stage that trains it first (`python -m pipelines run STAGE`), or point at a trained model."

    def __init__(self, message: str, *, path: str | None = None, stage: str | None = None):
        self.path, self.stage = path, stage
        hint = f" (run stage '{stage}' first)" if stage else ""
        super().__init__(f"{message}{hint}")


class NothingToScore(DataError):
    """A benchmark suite whose queries were all excluded from scoring (every one an abstention, without
    evidence, ...): the run fails naming the suite and the exclusions instead of reporting empty metrics."""



# The exit codes, as `python -m pipelines --help` lists them (the module docstring says which class is which).
EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "unexpected failure (a bug; the traceback is printed)",
    2: "configuration or argument that cannot work (params.yaml, --set, --profile, options)",
    3: "unknown name: stage, benchmark suite, source",
    4: "missing input: a stage's input, an untrained model, a --path that does not exist",
    5: "bad data: a record fails validation, nothing to score",
    6: "busy: another process runs the stage (--no-wait, --lock-timeout)",
    7: "language model unavailable: server unreachable, model failed to load",
    8: "benchmark shard refused (index out of range, shards missing, unfinished, mismatched or unwritable), or a "
       "benchmark report that cannot be written",
}


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an error a user caused and can fix (ends in one message, no traceback)."""
    return isinstance(exc, MnemosError)


def exit_code(exc: BaseException) -> int:
    """The exit code of ``exc``: its class's (see :data:`EXIT_CODES`); 1 for anything else."""
    return int(getattr(exc, "exit_code", 1)) if is_user_error(exc) else 1


def describe(exc: BaseException) -> str:
    """The one or two lines that end a user error: ``error: <message>`` and, when there is one, ``hint: <hint>``."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    hint = getattr(exc, "hint", "") if is_user_error(exc) else ""
    return f"error: {message}" + (f"\nhint: {hint}" if hint else "")
