"""LongMemEval (``longmemeval_s*.json``, ``longmemeval_m*.json``, ``longmemeval_oracle.json``).

Wu et al. 2025; G-Long (seed 003) reports Recall@k on the S variant. Published shape
(FORMATS.md): a JSON list of questions ``{question_id, question_type, question,
question_date, answer, answer_session_ids, haystack_dates, haystack_session_ids,
haystack_sessions}``; each haystack session is a list of ``{role, content, has_answer?}``.

Mapping: one Episode per question (id = ``question_id``, split ``test``, speakers
``user`` and ``assistant``, main speaker ``user``), its haystack sessions in date
order (Session id = haystack session id, timestamp = ``haystack_dates[i]``, e.g.
"2023/05/20 (Sat) 02:21", Session.index = the position in that order), and one Query
asked after the last session:

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

The M file (about 2.7 GB, about 500 sessions a question, mostly distinct between questions)
does not fit in memory as Episodes: :func:`stream` (the streaming reader registered for
``pipelines.data.ingest.stream_and_validate``) yields the same episodes one question at a
time and keeps nothing of a session but a 16-byte digest of its turn texts under its id
(to flag a recurring id with other content as :func:`load` does), so its memory is one
question plus about 100 bytes per unique session; its episodes do not share Turn objects.

Quirks of the published S file (FORMATS.md), normalised here:

* ``haystack_dates`` out of order (210 of the 499 questions): the sessions are put in
  date order, a stable sort (equal dates keep their file order; a session without a
  date keeps its place and the dated ones fill the other places in date order), so
  that the temporal protocol's "earlier" is earlier in time. The official retrieval
  code asks every question after the whole haystack, so its scores do not change.
  Each question reordered is counted in ``flagged["sessions_sorted_by_date"]``. The
  shared turns are untouched: only the question's own Session shells move (their
  index follows), and the turn ids (``<session id>:<position in the file>``) keep the
  evidence mapping of ``has_answer`` exact.
* blank ``content`` (12 of the S file's turns): the turn is left out
  (``dropped["blank_turn"]``, once per question holding its session); the other turns
  keep their ids.

Drop reasons: ``bad_turn``, ``blank_turn``, ``bad_session`` (not a list, or a blank id),
``duplicate_session_in_haystack``, ``missing_date`` / ``unparsed_date``,
``unresolved_evidence`` (an answer_session_id not in the haystack), ``bad_evidence``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterator

from pydantic import ValidationError

from pipelines.data.loaders.registry import register, register_stream
from pipelines.data.loaders.base import (BLANK_TURN, LoadResult, Where, blank, build, check, get, str_list,
                                         stream_json_array)
from pipelines.data.loaders.dates import parse_datetime
from pipelines.data.schema import Episode, Query, Session, Speaker, Turn

SPEAKERS = ("user", "assistant")
SORTED_BY_DATE = "sessions_sorted_by_date"


class _SessionCache:
    """haystack session id -> what its first listing held: each session built once, or recognised.

    ``share=True`` (:func:`load`): the turn texts and the Turn list, shared by every question that
    lists the session with the same texts. ``share=False`` (:func:`stream`): a digest of the texts
    only; each question gets its own (equal) Turns.
    """

    def __init__(self, share: bool = True) -> None:
        self.share = share
        self.by_id: dict[str, tuple[tuple[tuple[str, str], ...], list[Turn]] | bytes] = {}

    def turns(self, sid: str, raw: list, where: Where, result: LoadResult) -> tuple[list[Turn], list[bool]]:
        """The session's turns (shared when ``share``) and this question's has_answer flags (one per turn)."""
        parsed: list[tuple[int, str, str, bool]] = []
        for j, item in enumerate(raw):
            if type(item) is dict:  # the usual turn, checked without building its address (the M file: 2.5M turns)
                role, content, has_answer = item.get("role"), item.get("content"), item.get("has_answer")
                if has_answer is None:
                    has_answer = False
                if (type(role) is str and type(content) is str and type(has_answer) is bool and role.strip()
                        and not blank(content)):
                    parsed.append((j, role, content, has_answer))
                    continue
            twhere = where.at(f"turn {j}")  # anything else: the checks that name the field and the turn
            with result.dropping("bad_turn"):
                role = get(item, "role", str, twhere)
                if not role.strip():
                    raise twhere.error("blank role", field="role")
                content = get(item, "content", str, twhere)
                has_answer = get(item, "has_answer", bool, twhere, required=False, default=False)
                if blank(content):
                    result.drop(BLANK_TURN, twhere.example(f"turn {sid}:{j} has a blank content {content!r}"))
                    continue
                parsed.append((j, role, content, has_answer))
        key = tuple((role, content) for _, role, content, _ in parsed)
        flags = [h for *_, h in parsed]
        cached = self.by_id.get(sid)
        seen = key if self.share else _digest(key)
        if self.share and cached is not None and cached[0] == key:
            return cached[1], flags
        turns = [_turn(f"{sid}:{j}", role, content, where, j) for j, role, content, _ in parsed]
        if cached is None:
            self.by_id[sid] = (key, turns) if self.share else seen
        elif self.share or cached != seen:
            result.flag("session_id_reused_with_other_content", where.example(f"session {sid}"))
        return turns, flags


def _turn(tid: str, speaker: str, text: str, where: Where, j: int) -> Turn:
    """A Turn; a rejection becomes the DataError of ``build`` (its address made only then)."""
    try:
        return Turn(id=tid, speaker=speaker, text=text)
    except ValidationError:
        return build(Turn, where.at(f"turn {j}"), id=tid, speaker=speaker, text=text)


def _digest(key: tuple[tuple[str, str], ...]) -> bytes:
    """16 bytes naming a session's (role, text) pairs (lengths included: no two lists give the same bytes)."""
    h = hashlib.blake2b(digest_size=16)
    for role, content in key:
        for text in (role, content):
            data = text.encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.digest()


@register("longmemeval")
def load(path: str | Path) -> LoadResult:
    """Every question of the file as an Episode, sessions shared between questions built once."""
    result = LoadResult()
    for record, episode in _episodes(Path(path), result, _SessionCache(share=True)):
        result.episodes.append(episode)
        result.records[episode.id] = record
    return result


@register_stream("longmemeval")
def stream(path: str | Path, result: LoadResult) -> Iterator[tuple[str, Episode]]:
    """``("item <i>", Episode)`` one question at a time, equal to :func:`load`'s episodes, in file order;
    drops and flags are counted into ``result`` as the file is read. Holds one question (its JSON and
    its Episode) and a digest per session id seen, never an earlier Episode."""
    yield from _episodes(Path(path), result, _SessionCache(share=False))


def _episodes(path: Path, result: LoadResult, cache: _SessionCache) -> Iterator[tuple[str, Episode]]:
    for i, record in stream_json_array(path):
        episode = _episode(record, Where(str(path), f"item {i}"), cache, result)
        del record  # the question's JSON goes before the caller works on its Episode
        yield f"item {i}", episode


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
    answers: dict[str, list[str]] = {}  # session id -> ids of its turns with has_answer (this question's)
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
            answers[sid] = [t.id for t, h in zip(turns, has_answer) if h]
    sessions = _date_order(sessions, where, result)
    evidence_turns = [t for s in sessions for t in answers[s.id]]

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


def _date_order(sessions: list[Session], where: Where, result: LoadResult) -> list[Session]:
    """The sessions in date order (stable; undated ones keep their place), re-indexed; flagged if moved."""
    dated = [k for k, s in enumerate(sessions) if s.timestamp is not None]
    by_date = sorted(dated, key=lambda k: sessions[k].timestamp)  # parse_datetime: naive UTC, all comparable
    if by_date == dated:
        return sessions
    moved = [(slot, k) for slot, k in zip(dated, by_date) if slot != k]
    slots = iter(by_date)
    ordered = [sessions[next(slots)] if s.timestamp is not None else s for s in sessions]
    for index, session in enumerate(ordered):
        session.index = index
    slot, k = moved[0]
    result.flag(SORTED_BY_DATE, where.example(
        f"{len(moved)} of {len(sessions)} haystack sessions moved into date order (first: session "
        f"{sessions[k].id} from position {k} to {slot})"))
    return ordered
