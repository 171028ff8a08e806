"""RealMem (``<Name>_dialogues_256k.json``, one file per persona; seed 002).

Published shape (seed 002 README, FORMATS.md): ``{_metadata: {person_name,
total_sessions, total_tokens}, dialogues: [session, ...]}``; a session is
``{session_identifier, session_uuid, current_time, extracted_memory, dialogue_turns}``.

Mapping (one Episode per persona file, split ``test``, speakers ``User`` (main) and
``Assistant``, as the turns name them):

| published                                  | canonical                                                       |
| ------------------------------------------ | --------------------------------------------------------------- |
| ``_metadata.person_name``                  | Episode.id (the file name without ``_dialogues_256k`` if absent) |
| session ``session_uuid`` / ``current_time`` | Session.id / Session.timestamp; sessions in file order (below)  |
| ``dialogue_turns[j]``                      | Turn ``<session_uuid>:<j>`` (speaker, content)                  |
| ``extracted_memory`` item                  | Memory(id = ``index``, owner ``Assistant``, about ``User``, kind = ``type``) of its session |
| turn with ``is_query: true``               | Query (id = ``query_id``, category = ``category_name``) asked in that session by that turn (``turn_id``) |
| the next ``Assistant`` turn                | Query.answer; its ``memory_session_uuids`` (else the ``session_uuid`` of each ``memory_used``) -> evidence_sessions; each ``memory_used`` matched by (session, content) to an extracted memory -> evidence_memories and that turn's memory_tags |

``session_identifier`` (project and session label, e.g. "Financial_Planning_4:S1_01")
has no canonical field and is not kept.

Time order is file order. RealMem's own evaluation code (eval/ in RealMemBench) walks
the sessions as the file lists them and never sorts them by ``current_time``, which
goes backwards between consecutive sessions in three of the ten personas (dates only).
The sessions keep the file order (Session.index = position in the file), so the
temporal protocol's "earlier" means earlier in the episode's order; validation reports
a time going backwards as a warning for this source
(``pipelines.validate.rules.FILE_ORDER_SOURCES``), not as a blocking failure.

Quirk: a turn with a blank ``content`` (6 in the ten personas) is left out
(``dropped["blank_turn"]``); the other turns keep their ids (``<session_uuid>:<j>``, j
its position in the file). A query is answered by the first Assistant turn after it even
when that turn was left out (its ``memory_used`` is still the ground truth; the answer
text is then empty).

Quirk: a few queries list the current or a later session in their ground truth. They
are kept with the flag ``evidence_not_earlier`` (counted in
``flagged["evidence_not_earlier"]``), so the temporal protocol, which lets a retriever
see only earlier sessions, can leave those ids out and the report can count them.

Drop reasons: ``bad_session``, ``bad_turn``, ``blank_turn``, ``bad_memory``, ``duplicate_memory_id``,
``bad_query`` (a query turn or its answer turn with a missing or wrongly typed field),
``duplicate_query_id``,
``query_without_answer`` (no Assistant turn follows the query: the query is dropped),
``unresolved_evidence`` (a session uuid not in the file), ``unresolved_memory`` (a
``memory_used`` matching no extracted memory), ``missing_date`` / ``unparsed_date``.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.data.loaders.registry import register
from pipelines.data.loaders.base import (BLANK_TURN, LoadResult, Where, blank, build, files_in, get,
                                         load_json, str_list)
from pipelines.data.loaders.dates import parse_datetime
from pipelines.data.schema import Episode, Memory, Query, Session, Speaker, Turn

USER, ASSISTANT = "User", "Assistant"
EVIDENCE_NOT_EARLIER = "evidence_not_earlier"


@register("realmem")
def load(path: str | Path) -> LoadResult:
    result = LoadResult()
    for file in files_in(path, "*_dialogues_*.json"):
        episode = _episode(load_json(file), Where(str(file), "top level"), file, result)
        result.episodes.append(episode)
        result.records[episode.id] = file.name
    return result


def _episode(data: object, where: Where, file: Path, result: LoadResult) -> Episode:
    meta = get(data, "_metadata", dict, where, required=False, default={})
    name = get(meta, "person_name", str, where, required=False, name="_metadata.person_name")
    episode_id = name or re.sub(r"_dialogues_.*$", "", file.stem)
    dialogues = get(data, "dialogues", list, where)

    sessions: list[Session] = []
    raw_turns: dict[str, tuple[int, list[object]]] = {}  # session id -> (its position, raw dialogue_turns)
    memory_ids: set[str] = set()
    memory_by_content: dict[tuple[str, str], str] = {}   # (session uuid, content) -> memory id
    for i, raw in enumerate(dialogues):
        swhere = where.at(f"dialogues[{i}]")
        with result.dropping("bad_session"):
            session = _session(raw, swhere, len(sessions), result)
            if any(s.id == session.id for s in sessions):
                raise swhere.error(f"session_uuid {session.id} repeated", field="session_uuid")
            for k, item in enumerate(get(raw, "extracted_memory", list, swhere, required=False, default=[])):
                mwhere = swhere.at(f"extracted_memory[{k}]")
                with result.dropping("bad_memory"):
                    memory = _memory(item, mwhere, session.id)
                    if memory.id in memory_ids:
                        result.drop("duplicate_memory_id", mwhere.example(f"index {memory.id} repeated"))
                        continue
                    memory_ids.add(memory.id)
                    session.memories.append(memory)
                    memory_by_content.setdefault((session.id, memory.text.strip()), memory.id)
            sessions.append(session)
            raw_turns[session.id] = (i, get(raw, "dialogue_turns", list, swhere))

    order = {s.id: s.index for s in sessions}
    queries: list[Query] = []
    for session in sessions:
        position, raw = raw_turns[session.id]
        swhere = where.at(f"dialogues[{position}]")
        turns = {t.id: t for t in session.turns}
        for j, item in enumerate(raw):
            if not (isinstance(item, dict) and item.get("is_query") is True):
                continue
            qwhere = swhere.at(f"dialogue_turns[{j}]")
            if f"{session.id}:{j}" not in turns:
                result.drop("bad_query", qwhere.example("the query's own turn was left out (bad or blank)"))
                continue
            with result.dropping("bad_query"):
                query = _query(item, j, raw, session, turns, qwhere, order, memory_by_content, result)
                if query is not None and any(q.id == query.id for q in queries):
                    result.drop("duplicate_query_id", qwhere.example(f"query_id {query.id} repeated"))
                elif query is not None:
                    queries.append(query)

    return build(Episode, where, id=episode_id, source="realmem", main_speaker=USER,
                 speakers=[Speaker(name=USER), Speaker(name=ASSISTANT)], sessions=sessions,
                 queries=queries, split="test")


def _session(raw: object, where: Where, index: int, result: LoadResult) -> Session:
    uuid = get(raw, "session_uuid", str, where)
    turns_raw = get(raw, "dialogue_turns", list, where)
    date = get(raw, "current_time", str, where, required=False)
    timestamp = parse_datetime(date) if date is not None else None
    if date is None:
        result.drop("missing_date", where.example("no current_time"))
    elif timestamp is None:
        result.drop("unparsed_date", where.example(f"current_time = {date!r}"))
    turns = []
    for j, item in enumerate(turns_raw):
        twhere = where.at(f"dialogue_turns[{j}]")
        with result.dropping("bad_turn"):
            speaker = get(item, "speaker", str, twhere)
            content = get(item, "content", str, twhere)
            get(item, "is_query", bool, twhere, required=False)
            if blank(content):
                result.drop(BLANK_TURN, twhere.example(f"turn {uuid}:{j} ({speaker}) has a blank content "
                                                       f"{content!r}"))
                continue
            turns.append(build(Turn, twhere, id=f"{uuid}:{j}", speaker=speaker, text=content))
    return build(Session, where, id=uuid, index=index, timestamp=timestamp, partner=ASSISTANT,
                 turns=turns)


def _memory(item: object, where: Where, session_id: str) -> Memory:
    index = get(item, "index", (str, int), where)
    content = get(item, "content", str, where)
    kind = get(item, "type", str, where, required=False)
    return build(Memory, where, id=str(index), owner=ASSISTANT, about=USER, text=content,
                 session_id=session_id, kind=kind)


def _query(item: dict, j: int, raw: list, session: Session, turns: dict[str, Turn], where: Where,
           order: dict[str, int], memory_by_content: dict[tuple[str, str], str],
           result: LoadResult) -> Query | None:
    question = get(item, "content", str, where)
    qid = get(item, "query_id", (str, int), where, required=False, default=f"{session.id}:q{j}")
    category = get(item, "category_name", str, where, required=False)
    answer_at = next((k for k in range(j + 1, len(raw))
                      if isinstance(raw[k], dict) and raw[k].get("speaker") == ASSISTANT), None)
    if answer_at is None:
        result.drop("query_without_answer", where.example(f"query {qid}: no Assistant turn follows"))
        return None
    answer = raw[answer_at]
    awhere = where.at(f"answer dialogue_turns[{answer_at}]")
    used = get(answer, "memory_used", list, awhere, required=False, default=[])
    listed = str_list(answer, "memory_session_uuids", awhere, required=False)
    if not listed:
        listed = [get(u, "session_uuid", str, awhere.at(f"memory_used[{u_i}]"))
                  for u_i, u in enumerate(used)]
    sessions: list[str] = []
    for sid in listed:
        if sid not in order:
            result.drop("unresolved_evidence", awhere.example(f"session {sid} not in the file"))
        elif sid not in sessions:
            sessions.append(sid)
    memories: list[str] = []
    for u_i, u in enumerate(used):
        uwhere = awhere.at(f"memory_used[{u_i}]")
        sid = get(u, "session_uuid", str, uwhere)
        content = get(u, "content", str, uwhere)
        mid = memory_by_content.get((sid, content.strip()))
        if mid is None:
            result.drop("unresolved_memory", uwhere.example("matches no extracted_memory content"))
        elif mid not in memories:
            memories.append(mid)
    answer_turn = turns.get(f"{session.id}:{answer_at}")  # None: the answer turn was left out (blank)
    if memories and answer_turn is not None:
        answer_turn.memory_tags = memories
    flags = []
    if any(order[s] >= session.index for s in sessions):
        flags.append(EVIDENCE_NOT_EARLIER)
        result.flag(EVIDENCE_NOT_EARLIER, where.example(f"query {qid} names the current or a later session"))
    return build(Query, where, id=str(qid), session_id=session.id, turn_id=f"{session.id}:{j}", question=question,
                 answer=answer_turn.text if answer_turn is not None else "", evidence_sessions=sessions,
                 evidence_memories=memories, category=category, timestamp=session.timestamp,
                 flags=flags)
