"""(P, H, Q, R) examples for personalised response generation, from canonical Episodes.

MDR (seed 001, section 3.1 "Problem Definition"): given a T-round dialogue, the history is
H = {(Q(i), R(i))}_{i=0}^{T-1} and the goal is the response R(T) to the query Q(T), using H and
the responder's persona P. This module turns any canonical :class:`~pipelines.data.schema.Episode`
(ConvAI2/PersonaChat: one session of alternating partner/bot turns; MSC and Conversation
Chronicles: several sessions; the synthetic mixed-session data) into such examples:

- the responder is ``Episode.main_speaker`` (ConvAI2's bot, the speaker of "your persona");
- a round is a responder turn whose previous turn in the same session is the partner's: Q is that
  partner utterance (the partner's last one before the reply), R the responder's turn. A responder
  turn that opens a session or follows another responder turn has no query and is not a round;
- H is every earlier round of the same episode (earlier sessions included, in time order), cut to
  the ``max_history_rounds`` most recent when that is set;
- P is the responder's persona sentences (``Speaker.persona``). With ``memory_persona=True`` and an
  empty persona (MiSC-style data), P falls back to the responder's own memories about itself
  written at the end of *earlier* sessions (never the current one, which would leak the future).

Every round is one example, so a dialogue of T rounds yields T examples (the first with H empty).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

from pipelines.data.schema import Episode
from pipelines.errors import DataError
from pipelines.jsonl import iter_jsonl, write_jsonl

EXAMPLES_SCHEMA = "mnemos.mdr_examples"
EXAMPLES_VERSION = 1


@dataclass(frozen=True)
class MDRExample:
    """One (P, H, Q, R) example; ``id`` is unique across a dataset."""

    persona: list[str]                                   # P: the responder's persona sentences
    history: list[tuple[str, str]]                       # H: earlier (query, response) rounds, oldest first
    query: str                                           # Q(T): the partner's utterance just before R
    response: str                                        # R(T): the responder's reply (the target)
    episode_id: str                                      # Episode.id
    session_id: str                                      # Session.id of the round
    turn_id: str                                         # Turn.id of the response
    split: str = "train"                                 # Episode.split
    query_turn_id: str = ""                              # Turn.id of the query
    history_turn_ids: list[str] = field(default_factory=list)  # Turn.id of each history round's response

    @property
    def id(self) -> str:
        """``"<episode id>/<response turn id>"`` (turn ids are unique within an episode)."""
        return f"{self.episode_id}/{self.turn_id}"

    def to_json(self) -> dict:
        out = asdict(self)
        out["history"] = [list(pair) for pair in self.history]
        return out


def _check_text(text: str, *, source: str | None, episode: Episode, turn_id: str) -> str:
    if not text or not text.strip():
        raise DataError("empty utterance cannot be a query or a response", file=source,
                        record=f"episode {episode.id}, turn {turn_id}", field="text")
    return text.strip()


def episode_examples(episode: Episode, *, max_history_rounds: int | None = None,
                     memory_persona: bool = True, source: str | None = None) -> list[MDRExample]:
    """The (P, H, Q, R) examples of one episode, in time order (see the module docstring).

    ``source`` names the file the episode came from, for error messages. Raises DataError when
    the main speaker is not among the declared speakers or a query/response text is empty.
    """
    if max_history_rounds is not None and max_history_rounds < 0:
        raise ValueError(f"max_history_rounds must be None or >= 0, got {max_history_rounds}.")
    me = episode.main_speaker
    speakers = {s.name: s for s in episode.speakers}
    if speakers and me not in speakers:
        raise DataError(f"main speaker {me!r} is not among the declared speakers "
                        f"{sorted(speakers)}", file=source, record=f"episode {episode.id}",
                        field="main_speaker", rule="main_speaker_declared")
    persona = [p.strip() for p in speakers[me].persona if p.strip()] if me in speakers else []

    examples: list[MDRExample] = []
    rounds: list[tuple[str, str, str]] = []   # (query, response, response turn id), oldest first
    own_memories: list[str] = []              # the responder's memories about itself, earlier sessions
    for session in episode.sessions:
        if persona or not memory_persona:
            session_persona = persona
        else:
            session_persona = list(own_memories)
        previous = None
        for turn in session.turns:
            if turn.speaker == me and previous is not None and previous.speaker != me:
                query = _check_text(previous.text, source=source, episode=episode, turn_id=previous.id)
                response = _check_text(turn.text, source=source, episode=episode, turn_id=turn.id)
                kept = rounds if max_history_rounds is None else rounds[max(0, len(rounds) - max_history_rounds):]
                examples.append(MDRExample(
                    persona=list(session_persona), history=[(q, r) for q, r, _ in kept],
                    query=query, response=response, episode_id=episode.id, session_id=session.id,
                    turn_id=turn.id, split=episode.split, query_turn_id=previous.id,
                    history_turn_ids=[t for _, _, t in kept]))
                rounds.append((query, response, turn.id))
            previous = turn
        own_memories.extend(m.text.strip() for m in session.memories
                            if m.owner == me and m.about == me and m.text.strip())
    return examples


def build_mdr_examples(episodes: Iterable[Episode], *, max_history_rounds: int | None = None,
                       memory_persona: bool = True, split: str | None = None,
                       source: str | None = None) -> list[MDRExample]:
    """(P, H, Q, R) examples of every episode (optionally only those of ``split``).

    Raises DataError (naming ``source``, the episode and the field) on an example id that repeats,
    i.e. two episodes with the same id.
    """
    out: list[MDRExample] = []
    seen: set[str] = set()
    for episode in episodes:
        if split is not None and episode.split != split:
            continue
        for example in episode_examples(episode, max_history_rounds=max_history_rounds,
                                        memory_persona=memory_persona, source=source):
            if example.id in seen:
                raise DataError(f"example id {example.id!r} repeats (duplicate episode or turn id)",
                                file=source, record=f"episode {episode.id}", field="id",
                                rule="ids_unique")
            seen.add(example.id)
            out.append(example)
    return out


# --- storage (one example per line, with a header like the episodes file) --------------------

def write_mdr_examples(path: str | os.PathLike, examples: Iterable[MDRExample]) -> int:
    """Write examples as jsonl atomically (temporary file, then rename). Returns the count."""
    return write_jsonl(path, EXAMPLES_SCHEMA, EXAMPLES_VERSION,
                       (json.dumps(e.to_json(), ensure_ascii=False) for e in examples))


_FIELDS = {"persona": list, "history": list, "query": str, "response": str, "episode_id": str,
           "session_id": str, "turn_id": str, "split": str, "query_turn_id": str,
           "history_turn_ids": list}


def iter_mdr_examples(path: str | os.PathLike) -> Iterator[MDRExample]:
    """Read examples written by :func:`write_mdr_examples`; DataError names file, line, field."""
    for lineno, obj in iter_jsonl(path, EXAMPLES_SCHEMA, EXAMPLES_VERSION):
        if not isinstance(obj, dict):
            raise DataError("a line must be a JSON object", file=str(path), record=f"line {lineno}")
        for name, kind in _FIELDS.items():
            if name not in obj:
                raise DataError("missing field", file=str(path), record=f"line {lineno}", field=name)
            if not isinstance(obj[name], kind):
                raise DataError(f"must be a {kind.__name__}", file=str(path), record=f"line {lineno}",
                                field=name)
        history = obj["history"]
        for i, pair in enumerate(history):
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                raise DataError("each history round must be a [query, response] pair of strings",
                                file=str(path), record=f"line {lineno}", field=f"history.{i}")
        for name in ("query", "response"):
            if not obj[name].strip():
                raise DataError("must be non-empty", file=str(path), record=f"line {lineno}", field=name)
        extra = sorted(set(obj) - set(_FIELDS))
        if extra:
            raise DataError(f"unknown field(s) {extra}", file=str(path), record=f"line {lineno}",
                            field=extra[0])
        yield MDRExample(**{**obj, "history": [(q, r) for q, r in history]})


def read_mdr_examples(path: str | os.PathLike) -> list[MDRExample]:
    return list(iter_mdr_examples(path))
