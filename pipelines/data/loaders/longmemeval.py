"""LongMemEval (``longmemeval_s*.json``, ``longmemeval_m*.json``, ``longmemeval_oracle.json``).

Wu et al. 2025; G-Long (seed 003) reports Recall@k on the S variant. Published shape
(FORMATS.md): a JSON list of questions ``{question_id, question_type, question,
question_date, answer, answer_session_ids, haystack_dates, haystack_session_ids,
haystack_sessions}``; each haystack session is a list of ``{role, content, has_answer?}``.

Mapping: one Episode per question (id = ``question_id``, split ``test``, speakers
``user`` and ``assistant``, main speaker ``user``), its haystack sessions in file
order (Session id = haystack session id, timestamp = ``haystack_dates[i]``, e.g.
"2023/05/20 (Sat) 02:21"), and one Query asked after the last session:

| published              | Query field                                                        |
| ---------------------- | ------------------------------------------------------------------ |
| ``question``/``answer``| question / answer (integer answers become strings)                 |
| ``question_date``      | timestamp                                                          |
| ``question_type``      | category                                                           |
| ``answer_session_ids`` | evidence_sessions (those present in the haystack)                  |
| ``has_answer: true``   | evidence_turns (turn ids ``<session id>:<turn index>``)             |
| id ends in ``_abs``    | abstention = True (left out of retrieval metrics)                  |

Scale. The S file is about 260 MB: it is parsed incrementally (ijson), one question at
a time. A haystack session id recurs across questions (about 19k unique sessions for
24k haystack slots in S), so the turns of each session are built once and the same
Turn objects are shared by every episode that holds the session; each episode gets
its own light Session shell (its own index and date). ``has_answer`` can differ
between two questions holding the same session, so it is never written on the shared
turns: the turn-level ground truth of a question lives on its Query (evidence_turns).
If a recurring id arrives with different turn texts, that question keeps its own
copy (counted in ``flagged["session_id_reused_with_other_content"]``).

Drop reasons: ``bad_turn``, ``bad_session`` (not a list, or a blank id), ``duplicate_session_in_haystack``,
``missing_date`` / ``unparsed_date``, ``unresolved_evidence`` (an answer_session_id
not in the haystack), ``bad_evidence``.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.data.loaders import register
from pipelines.data.loaders.base import (LoadResult, Where, build, check, get, str_list,
                                         stream_json_array)
from pipelines.data.loaders.dates import parse_datetime
from pipelines.data.schema import Episode, Query, Session, Speaker, Turn

SPEAKERS = ("user", "assistant")


class _SessionCache:
    """haystack session id -> (turn texts, shared Turn list): each session built once."""

    def __init__(self) -> None:
        self.by_id: dict[str, tuple[tuple[tuple[str, str], ...], list[Turn]]] = {}

    def turns(self, sid: str, raw: list, where: Where, result: LoadResult) -> tuple[list[Turn], list[bool]]:
        """The session's shared turns and this question's has_answer flags (one per turn)."""
        parsed: list[tuple[int, str, str, bool]] = []
        for j, item in enumerate(raw):
            twhere = where.at(f"turn {j}")
            with result.dropping("bad_turn"):
                role = get(item, "role", str, twhere)
                if not role.strip():
                    raise twhere.error("blank role", field="role")
                content = get(item, "content", str, twhere)
                has_answer = get(item, "has_answer", bool, twhere, required=False, default=False)
                parsed.append((j, role, content, has_answer))
        key = tuple((role, content) for _, role, content, _ in parsed)
        flags = [h for *_, h in parsed]
        cached = self.by_id.get(sid)
        if cached is not None and cached[0] == key:
            return cached[1], flags
        turns = [build(Turn, where.at(f"turn {j}"), id=f"{sid}:{j}", speaker=role, text=content)
                 for j, role, content, _ in parsed]
        if cached is None:
            self.by_id[sid] = (key, turns)
        else:
            result.flag("session_id_reused_with_other_content", where.example(f"session {sid}"))
        return turns, flags


@register("longmemeval")
def load(path: str | Path) -> LoadResult:
    path = Path(path)
    result = LoadResult()
    cache = _SessionCache()
    for i, record in stream_json_array(path):
        result.episodes.append(_episode(record, Where(str(path), f"item {i}"), cache, result))
    return result


def _episode(record: object, where: Where, cache: _SessionCache, result: LoadResult) -> Episode:
    qid = get(record, "question_id", str, where)
    where = Where(where.file, f"{where.record} ({qid})")
    question = get(record, "question", str, where)
    answer = get(record, "answer", (str, int, float), where)
    qtype = get(record, "question_type", str, where, required=False)
    sessions_raw = get(record, "haystack_sessions", list, where)
    ids = str_list(record, "haystack_session_ids", where)
    dates = get(record, "haystack_dates", list, where, required=False, default=[])
    if len(ids) != len(sessions_raw):
        raise where.error(f"{len(ids)} haystack_session_ids for {len(sessions_raw)} haystack_sessions",
                          field="haystack_session_ids")

    sessions: list[Session] = []
    seen: set[str] = set()
    evidence_turns: list[str] = []
    for i, (sid, raw) in enumerate(zip(ids, sessions_raw)):
        swhere = where.at(f"haystack_sessions[{i}]")
        if sid in seen:
            result.drop("duplicate_session_in_haystack", swhere.example(f"session {sid} repeated"))
            continue
        with result.dropping("bad_session"):
            check(raw, list, swhere, f"haystack_sessions[{i}]")
            turns, has_answer = cache.turns(sid, raw, swhere, result)
            timestamp = None
            if i >= len(dates) or dates[i] is None:
                result.drop("missing_date", swhere.example(f"no haystack_dates[{i}]"))
            else:
                timestamp = parse_datetime(dates[i])
                if timestamp is None:
                    result.drop("unparsed_date", swhere.example(f"haystack_dates[{i}] = {dates[i]!r}"))
            sessions.append(build(Session, swhere, id=sid, index=len(sessions), timestamp=timestamp,
                                  partner="assistant", turns=turns))
            seen.add(sid)
            evidence_turns.extend(t.id for t, h in zip(turns, has_answer) if h)

    present = {s.id for s in sessions}
    evidence_sessions: list[str] = []
    for k, sid in enumerate(get(record, "answer_session_ids", list, where, required=False, default=[])):
        with result.dropping("bad_evidence"):
            check(sid, str, where, f"answer_session_ids[{k}]")
            if sid not in present:
                result.drop("unresolved_evidence", where.example(f"answer session {sid} not in the haystack"))
            elif sid not in evidence_sessions:
                evidence_sessions.append(sid)

    date = get(record, "question_date", str, where, required=False)
    qtime = parse_datetime(date) if date is not None else None
    if date is not None and qtime is None:
        result.drop("unparsed_date", where.example(f"question_date = {date!r}"))
    query = build(Query, where, id=qid, question=question, answer=answer, category=qtype,
                  evidence_turns=evidence_turns, evidence_sessions=evidence_sessions,
                  abstention=qid.endswith("_abs"), timestamp=qtime)
    return build(Episode, where, id=qid, source="longmemeval", main_speaker="user",
                 speakers=[Speaker(name=n) for n in SPEAKERS], sessions=sessions,
                 queries=[query], split="test")
