"""MiSC (``train.jsonl``, ``val.jsonl``, ``test.jsonl``; Jang et al. 2024, seed 000).

One episode per line: four speakers (one main speaker, three partners, each with a
name and a job or relationship), six sessions, each with its event outline, its
partner, the dialogue, the main speaker's memories "About {MAIN}" and "About {SUB}",
memory links (pairs of memory numbers) and memory tags on the main speaker's
utterances (seed 000, section 3 and Appendix C). The exact published field names could
not be checked (FORMATS.md), so every field is read through :data:`FIELDS`, one small
table of the names tried in order; a missing field raises DataError naming the
canonical field and the names tried. Adapting to the published names is a one-line
change here.

| canonical field   | names tried (in order)                  | expected value                                         |
| ----------------- | --------------------------------------- | ------------------------------------------------------ |
| episode id        | dataID, episode_id, id                  | string or integer (else ``<file stem>:<line>``)        |
| speakers          | speakers, characters                    | list, main speaker first: ``{name, job or relationship}`` or ``"Name-Job"`` (the scenario prompt's format) |
| sessions          | sessions                                | list of session objects, in order                      |
| session event     | event, outline                          | string (optional; not stored: no canonical field)      |
| session partner   | partner, sub_speaker                    | the partner's name                                     |
| session dialogue  | dialogue, dialog, utterances            | list of ``{speaker, text or utterance, memory_tag?}`` or ``"Name: text"`` strings |
| turn memory tags  | memory_tag, memory_tags, tags           | list of memory numbers (integers or digit strings)     |
| session memory    | memory, memories                        | ``{"About Name": [sentences] or "N/A"}``, or a list of ``{about, text, number?}`` |
| session links     | memory_link, memory_links, links        | ``"3-7"`` strings or ``[3, 7]`` pairs, or ``"N/A"``    |

Memory numbers: memories are numbered 1, 2, ... across the episode in order of
appearance (session order, then the order inside the session), unless an item gives
its own ``number``; Memory ids are ``M<number>``. The memories are the main speaker's
own (egocentric): owner = main speaker, about = the named speaker. A link pair joins
the newer memory (larger number) to the earlier one it refers to or updates:
MemoryLink(from_id = newer, to_id = earlier), stored in the session that lists it.

Drop reasons: ``bad_session``, ``bad_turn``, ``bad_memory``, ``duplicate_memory_number``,
``bad_link``, ``unresolved_link``, ``unresolved_memory_tag``. Appendix D's filters
(4 speakers, 6 sessions, one named partner per session, utterances of 10+ characters,
no missing memory) are validation rules, applied after loading, not here.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.data.loaders.registry import register
from pipelines.data.loaders.base import (LoadResult, Where, build, check, files_in, iter_jsonl,
                                         split_from_name)
from pipelines.data.schema import Episode, Memory, MemoryLink, Session, Speaker, Turn

FIELDS: dict[str, tuple[str, ...]] = {
    "episode_id": ("dataID", "episode_id", "id"),
    "speakers": ("speakers", "characters"),
    "speaker_name": ("name",),
    "speaker_role": ("job", "relationship", "role"),
    "sessions": ("sessions",),
    "session_event": ("event", "outline"),
    "session_partner": ("partner", "sub_speaker"),
    "session_dialogue": ("dialogue", "dialog", "utterances"),
    "turn_speaker": ("speaker",),
    "turn_text": ("text", "utterance"),
    "turn_tags": ("memory_tag", "memory_tags", "tags"),
    "session_memory": ("memory", "memories"),
    "memory_about": ("about",),
    "memory_text": ("text", "memory"),
    "memory_number": ("number", "index"),
    "session_links": ("memory_link", "memory_links", "links"),
}
NONE_MARK = "N/A"  # what the generation prompts write for an empty memory or link list
_ABOUT = re.compile(r"^\s*about\s+(.+?)\s*:?\s*$", re.IGNORECASE)
_PAIR = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


def field(obj: object, role: str, types: type | tuple[type, ...], where: Where, *,
          required: bool = True, default=None):
    """The value of canonical field ``role``: the first name of FIELDS[role] present in ``obj``."""
    names = FIELDS[role]
    label = f"{role} ({' | '.join(names)})"
    if not isinstance(obj, dict):
        raise where.error(f"expected a JSON object, got {type(obj).__name__}", field=label)
    for name in names:
        if obj.get(name) is not None:
            return check(obj[name], types, where, name)
    if required:
        raise where.error("missing required field", field=label)
    return default


@register("misc")
def load(path: str | Path) -> LoadResult:
    result = LoadResult()
    for file in files_in(path, "*.jsonl"):
        split = split_from_name(file, "train")
        for lineno, record in iter_jsonl(file):
            where = Where(str(file), f"line {lineno}")
            result.episodes.append(_episode(record, where, f"{file.stem}:{lineno}", split, result))
    return result


def _speaker(raw: object, where: Where) -> Speaker:
    if isinstance(raw, str):
        name, _, role = raw.partition("-")
        return build(Speaker, where, name=name.strip(), role=role.strip() or None)
    name = field(raw, "speaker_name", str, where)
    role = field(raw, "speaker_role", str, where, required=False)
    return build(Speaker, where, name=name.strip(), role=role)


def _number(raw: object, where: Where, name: str) -> int:
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw)
    return check(raw, int, where, name)


def _episode(record: object, where: Where, fallback_id: str, split: str, result: LoadResult) -> Episode:
    episode_id = str(field(record, "episode_id", (str, int), where, required=False, default=fallback_id))
    where = Where(where.file, f"{where.record} ({episode_id})")
    speakers = [_speaker(s, where.at(f"speaker {i}"))
                for i, s in enumerate(field(record, "speakers", list, where))]
    if not speakers:
        raise where.error("no speaker", field="speakers")
    main = speakers[0].name
    sessions_raw = field(record, "sessions", list, where)

    sessions: list[Session] = []
    memories: dict[int, str] = {}    # memory number -> memory id
    pending_tags: list[tuple[Turn, list, Where]] = []
    pending_links: list[tuple[Session, list, Where]] = []
    for k, raw in enumerate(sessions_raw):
        swhere = where.at(f"session {k + 1}")
        with result.dropping("bad_session"):
            partner = field(raw, "session_partner", str, swhere)
            field(raw, "session_event", str, swhere, required=False)
            sid = f"s{k + 1}"
            session = build(Session, swhere, id=sid, index=len(sessions), partner=partner.strip())
            for j, item in enumerate(field(raw, "session_dialogue", list, swhere)):
                twhere = swhere.at(f"turn {j}")
                with result.dropping("bad_turn"):
                    turn, tags = _turn(item, twhere, f"{sid}:{j}")
                    session.turns.append(turn)
                    if tags:
                        pending_tags.append((turn, tags, twhere))
            _memories(field(raw, "session_memory", (dict, list, str), swhere, required=False, default=[]),
                      session, main, memories, swhere, result)
            links = field(raw, "session_links", (list, str), swhere, required=False, default=[])
            if isinstance(links, str):
                links = [] if links.strip() == NONE_MARK else [p for p in links.split(",")]
            pending_links.append((session, links, swhere))
            sessions.append(session)

    for turn, tags, twhere in pending_tags:  # tags and links may name memories of any session
        for tag in tags:
            with result.dropping("unresolved_memory_tag"):
                number = _number(tag, twhere, "memory_tag")
                if number not in memories:
                    raise twhere.error(f"memory {number} does not exist", field="memory_tag")
                turn.memory_tags.append(memories[number])
    for session, links, lwhere in pending_links:
        for pair in links:
            with result.dropping("bad_link"):
                a, b = _pair(pair, lwhere)
                if a not in memories or b not in memories:
                    result.drop("unresolved_link", lwhere.example(f"link {a}-{b} names a missing memory"))
                    continue
                session.links.append(MemoryLink(from_id=memories[max(a, b)], to_id=memories[min(a, b)]))

    return build(Episode, where, id=episode_id, source="misc", main_speaker=main, speakers=speakers,
                 sessions=sessions, split=split)


def _turn(item: object, where: Where, turn_id: str) -> tuple[Turn, list]:
    if isinstance(item, str):
        speaker, sep, text = item.partition(":")
        if not sep:
            raise where.error("expected 'Name: utterance'", field="dialogue")
        return build(Turn, where, id=turn_id, speaker=speaker.strip(), text=text.strip()), []
    speaker = field(item, "turn_speaker", str, where)
    text = field(item, "turn_text", str, where)
    tags = field(item, "turn_tags", (list, int, str), where, required=False, default=[])
    tags = tags if isinstance(tags, list) else [tags]
    return build(Turn, where, id=turn_id, speaker=speaker.strip(), text=text), tags


def _memories(raw: dict | list | str, session: Session, main: str, memories: dict[int, str],
              where: Where, result: LoadResult) -> None:
    items: list[tuple[str, object, object]] = []  # (about, sentence, number or None)
    if isinstance(raw, str):
        if raw.strip() != NONE_MARK:
            result.drop("bad_memory", where.example("memory is a string but not 'N/A'"))
        return
    if isinstance(raw, dict):
        for key, sentences in raw.items():
            m = _ABOUT.match(key)
            if m is None:
                result.drop("bad_memory", where.example(f"memory key {key!r} is not 'About <name>'"))
                continue
            if isinstance(sentences, str):
                sentences = [] if sentences.strip() == NONE_MARK else [sentences]
            if not isinstance(sentences, list):
                result.drop("bad_memory", where.example(f"memory {key!r} is not a list"))
                continue
            items.extend((m.group(1), s, None) for s in sentences)
    else:
        for i, item in enumerate(raw):
            with result.dropping("bad_memory"):
                iwhere = where.at(f"memory {i}")
                items.append((field(item, "memory_about", str, iwhere),
                              field(item, "memory_text", str, iwhere),
                              field(item, "memory_number", (int, str), iwhere, required=False)))
    for about, sentence, number in items:
        with result.dropping("bad_memory"):
            sentence = check(sentence, str, where, "memory")
            n = _number(number, where, "memory number") if number is not None else len(memories) + 1
            if n in memories:
                result.drop("duplicate_memory_number", where.example(f"memory {n} numbered twice"))
                continue
            memory = build(Memory, where, id=f"M{n}", owner=main, about=about.strip(), text=sentence,
                           session_id=session.id)
            memories[n] = memory.id
            session.memories.append(memory)


def _pair(pair: object, where: Where) -> tuple[int, int]:
    if isinstance(pair, str):
        m = _PAIR.match(pair)
        if m is None:
            raise where.error(f"link {pair!r} is not 'NUMBER-NUMBER'", field="memory_link")
        a, b = int(m.group(1)), int(m.group(2))
    else:
        check(pair, list, where, "memory_link")
        if len(pair) != 2:
            raise where.error(f"link {pair!r} is not a pair", field="memory_link")
        a, b = (_number(x, where, "memory_link") for x in pair)
    if a == b:
        raise where.error(f"link {a}-{b} joins a memory to itself", field="memory_link")
    return a, b
