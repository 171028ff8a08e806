"""The project's own error types.

Every error raised on bad input names the file, the record (line or index) and the
field or rule, so that a user can open the file and fix the record.
"""

from __future__ import annotations


class MnemosError(Exception):
    """Base class of every error this project raises on purpose."""


class DataError(MnemosError, ValueError):
    """Bad input data: names the file, the record and the field or rule that failed."""

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


class ConfigError(MnemosError, ValueError):
    """A configuration that cannot work, with a sentence saying why."""


class ModelNotTrained(ConfigError):
    """A strategy or stage needs a trained model whose directory does not exist yet.

    The benchmark lists such a strategy as *missing* (with this message), never drops it
    silently; ``stage`` names the stage that trains the model, when known.
    """

    def __init__(self, message: str, *, path: str | None = None, stage: str | None = None):
        self.path, self.stage = path, stage
        hint = f" (run stage '{stage}' first)" if stage else ""
        super().__init__(f"{message}{hint}")


class NothingToScore(DataError):
    """A benchmark suite whose queries were all excluded from scoring (every one an abstention, without
    evidence, ...): the run fails naming the suite and the exclusions instead of reporting empty metrics."""
