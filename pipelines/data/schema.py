"""The canonical data model (METHODS.md section 0).

Every loader maps its source into these types and every stage reads only them.
One episode is one JSON object on one line of a ``.jsonl`` file; the first line of
the file is a header ``{"schema": "mnemos.episodes", "version": SCHEMA_VERSION}``.

Construction checks types and required ids (pydantic); rules that span records
(unique ids, evidence that resolves, time order, MiSC's filters) live in
``pipelines.validate`` so that a broken dataset produces a report, not a crash.

Ids are strings, unique within an episode. A MemoryLink points from a newer memory
to the earlier one it refers to or updates; links never delete anything.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipelines.errors import DataError
from pipelines.jsonl import iter_jsonl, write_jsonl

SCHEMA_NAME = "mnemos.episodes"
SCHEMA_VERSION = 1
SPLITS = ("train", "valid", "test")
QUERY_CATEGORIES_SYNTHETIC = ("single-session", "multi-session", "knowledge-update", "temporal")

Id = str


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=True)


def _nonblank(value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


class Triplet(_Model):
    """A fact (subject, relation, object), e.g. ("Ana", "works_as", "nurse")."""

    subject: str
    relation: str
    object: str

    _check = field_validator("subject", "relation", "object")(_nonblank)

    def serialise(self) -> str:
        """The "subject relation object" line G-Long puts in its MEMORY block."""
        return f"{self.subject} {self.relation.replace('_', ' ')} {self.object}"


class Speaker(_Model):
    """A participant: name, role or job (or relationship), persona sentences."""

    name: str
    role: str | None = None
    persona: list[str] = Field(default_factory=list)

    _check = field_validator("name")(_nonblank)


class Turn(_Model):
    """One utterance. ``memory_tags`` are ids of memories the utterance used."""

    id: Id
    speaker: str
    text: str
    triplets: list[Triplet] = Field(default_factory=list)
    memory_tags: list[Id] = Field(default_factory=list)
    has_answer: bool = False  # turn-level evidence flag as published (LongMemEval)

    _check = field_validator("id", "speaker")(_nonblank)


class Memory(_Model):
    """An egocentric memory: ``owner`` remembers ``text`` about ``about``."""

    id: Id
    owner: str
    about: str
    text: str
    session_id: Id
    importance: float | None = None
    kind: str | None = None  # source-specific type (e.g. RealMem's Dynamic/Static/Schedule, observation)

    _check = field_validator("id", "owner", "about", "session_id")(_nonblank)


class MemoryLink(_Model):
    """``from_id`` (newer memory) refers to or updates ``to_id`` (earlier memory)."""

    from_id: Id
    to_id: Id

    _check = field_validator("from_id", "to_id")(_nonblank)


class Session(_Model):
    """A session in time order; ``partner`` is the main speaker's partner in it."""

    id: Id
    index: int = Field(ge=0)
    timestamp: datetime | None = None
    partner: str | None = None
    turns: list[Turn] = Field(default_factory=list)
    memories: list[Memory] = Field(default_factory=list)
    links: list[MemoryLink] = Field(default_factory=list)
    summary: str | None = None

    _check = field_validator("id")(_nonblank)


class Query(_Model):
    """A question asked in session ``session_id`` (None: after the last session), by its turn ``turn_id`` when
    the question is a turn of that session.

    Evidence is given at every granularity the source has: turn ids, session ids,
    memory ids. ``abstention`` marks questions with no answer in the history
    (left out of retrieval metrics).
    """

    id: Id
    session_id: Id | None = None
    turn_id: Id | None = None  # the turn of session_id that asks it, when the question is one (RealMem)
    question: str
    answer: str = ""
    evidence_turns: list[Id] = Field(default_factory=list)
    evidence_sessions: list[Id] = Field(default_factory=list)
    evidence_memories: list[Id] = Field(default_factory=list)
    category: str | None = None
    abstention: bool = False
    timestamp: datetime | None = None
    flags: list[str] = Field(default_factory=list)  # e.g. "evidence_not_earlier" (RealMem quirk)
    # the turns of its session before turn_id: the conversation so far, which the assistant has read when it is
    # asked. Filled by the temporal protocol when it asks (pipelines.evaluate.protocol.in_conversation), never by
    # a loader nor written to a file: they are not in memory yet (their session is observed after its queries).
    preceding: list[Turn] = Field(default_factory=list, exclude=True)

    _check = field_validator("id", "question")(_nonblank)

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_to_str(cls, value):  # LongMemEval answers are sometimes integers
        return "" if value is None else str(value) if isinstance(value, (int, float)) else value


class Episode(_Model):
    """A multi-session dialogue of one main speaker with one or more partners."""

    id: Id
    source: str
    main_speaker: str
    speakers: list[Speaker] = Field(default_factory=list)
    sessions: list[Session] = Field(default_factory=list)
    queries: list[Query] = Field(default_factory=list)
    split: Literal["train", "valid", "test"] = "train"

    _check = field_validator("id", "source", "main_speaker")(_nonblank)

    # --- convenient views -------------------------------------------------
    def turns(self) -> Iterator[tuple[Session, Turn]]:
        for session in self.sessions:
            for turn in session.turns:
                yield session, turn

    def memories(self) -> Iterator[Memory]:
        for session in self.sessions:
            yield from session.memories

    def session_by_id(self) -> dict[Id, Session]:
        return {s.id: s for s in self.sessions}


# --- storage ------------------------------------------------------------------

def write_episodes(path: str | os.PathLike, episodes: Iterable[Episode]) -> int:
    """Write episodes atomically (temporary file, then rename). Returns the count."""
    return write_jsonl(path, SCHEMA_NAME, SCHEMA_VERSION, (episode_line(e) for e in episodes))


def episode_line(episode: Episode) -> str:
    """One episode as a line of an episodes file (without the newline)."""
    return episode.model_dump_json(exclude_defaults=True)


def header_line() -> str:
    """The first line of an episodes file (without the newline): what :func:`write_episodes` writes first."""
    return json.dumps({"schema": SCHEMA_NAME, "version": SCHEMA_VERSION})


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "<record>"
    return field, err["msg"]


def iter_episodes(path: str | os.PathLike) -> Iterator[Episode]:
    """Read episodes written by :func:`write_episodes`, validating each line.

    Raises DataError naming the file, the line and the field on any bad record.
    """
    for _, episode in iter_numbered_episodes(path):
        yield episode


def iter_numbered_episodes(path: str | os.PathLike) -> Iterator[tuple[int, Episode]]:
    """Like :func:`iter_episodes`, with the 1-based line number of each episode."""
    for lineno, obj in iter_jsonl(path, SCHEMA_NAME, SCHEMA_VERSION):
        try:
            yield lineno, Episode.model_validate(obj)
        except ValidationError as exc:
            field, msg = _first_error(exc)
            raise DataError(msg, file=str(path), record=f"line {lineno}", field=field) from None


def read_episodes(path: str | os.PathLike) -> list[Episode]:
    return list(iter_episodes(path))
