"""LoCoMo (``locomo10.json``, Maharana et al. 2024; G-Long seed 003 evaluates on it).

Published shape (FORMATS.md): a JSON list of ``{sample_id, conversation, qa,
observation, session_summary, event_summary}``; ``conversation`` holds ``speaker_a``,
``speaker_b`` and, per session N, ``session_N`` (turns ``{speaker, dia_id, text}``,
image turns add ``img_url``, ``blip_caption``, ``query``) and ``session_N_date_time``.

Mapping to the canonical model:

| published                                  | canonical                                                    |
| ------------------------------------------ | ------------------------------------------------------------ |
| one conversation                           | one Episode (id = ``sample_id``, split ``test``)              |
| ``speaker_a`` / ``speaker_b``              | ``main_speaker`` = speaker_a; Session.partner = speaker_b     |
| ``session_N`` (keys iterated, sorted by N) | Session id ``session_N``, index in order of N                 |
| ``session_N_date_time``                    | Session.timestamp ("1:56 pm on 8 May, 2023")                 |
| turn ``dia_id`` / ``text``                 | Turn.id = dia_id; image turns get ``" and shared <blip_caption>"`` appended, as LoCoMo's own QA prompts render them |
| ``qa[i]``                                  | Query ``<sample_id>:q<i>`` asked after the last session       |
| ``evidence``                               | every ``D<n>:<k>`` extracted (packed strings split); resolving ones -> evidence_turns, their sessions -> evidence_sessions |
| ``category`` (int)                         | Query.category = the published int as a string (see :data:`CATEGORY_NAMES`) |
| category 5 (``adversarial_answer``)        | abstention=True, answer = ``answer`` if present else :data:`ADVERSARIAL_ANSWER`, flag ``adversarial`` |
| ``observation.session_N_observation``      | Memory(kind="observation", owner = about = the speaker) in session N |
| ``session_summary.session_N_summary``      | Session.summary and Memory(kind="session_summary", owner = speaker_a, about = speaker_b) |
| ``event_summary``                          | not mapped: it is the generation scaffold (events planned for each speaker), not something said in the dialogue |

Category 5 questions ask about something never said (their ``adversarial_answer`` is
the trap answer the question suggests); LoCoMo scores them as correct when the model
says the information is not available, so they are abstention questions and, like
LongMemEval's, stay out of retrieval metrics.

Drop reasons: ``bad_turn``, ``duplicate_turn_id``, ``bad_qa``, ``malformed_evidence``
(a string with no ``D<n>:<k>`` in it), ``unresolved_evidence`` (an id naming no turn),
``missing_date``, ``unparsed_date``, ``date_without_session``
(a ``session_N_date_time`` with no ``session_N``), ``bad_observation``, ``bad_summary``.
Flagged (kept): ``qa_without_evidence``.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.data.loaders.registry import register
from pipelines.data.loaders.base import LoadResult, Where, build, check, get, load_json
from pipelines.data.loaders.dates import parse_datetime
from pipelines.data.schema import Episode, Memory, Query, Session, Speaker, Turn

# Published category ints and the names LoCoMo's evaluation reports use for them.
# The file itself only has the int, which is what Query.category keeps.
CATEGORY_NAMES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop",
                  "5": "adversarial"}
ADVERSARIAL = 5
ADVERSARIAL_ANSWER = "Not mentioned in the conversation"

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE_KEY = re.compile(r"^session_(\d+)_date_time$")
_DIA_ID = re.compile(r"D\d+:\d+")


@register("locomo")
def load(path: str | Path) -> LoadResult:
    path = Path(path)
    data = load_json(path)
    result = LoadResult()
    if not isinstance(data, list):
        raise Where(str(path), "top level").error("expected a JSON array of conversations")
    for i, record in enumerate(data):
        result.episodes.append(_episode(record, Where(str(path), f"item {i}"), result))
    return result


def _episode(record: object, where: Where, result: LoadResult) -> Episode:
    sample_id = get(record, "sample_id", (str, int), where)
    sample_id = str(sample_id)
    where = Where(where.file, f"{where.record} ({sample_id})")
    conv = get(record, "conversation", dict, where)
    speaker_a = get(conv, "speaker_a", str, where, name="conversation.speaker_a")
    speaker_b = get(conv, "speaker_b", str, where, name="conversation.speaker_b")

    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.match(k)))
    for key in conv:
        m = _DATE_KEY.match(key)
        if m and f"session_{m.group(1)}" not in conv:
            result.drop("date_without_session", where.example(f"'{key}' has no session_{m.group(1)}"))

    sessions: list[Session] = []
    turn_session: dict[str, str] = {}  # dia_id -> session id
    for n in numbers:
        sid = f"session_{n}"
        swhere = where.at(sid)
        turns_raw = get(conv, sid, list, where, name=f"conversation.{sid}")
        timestamp = None
        date = conv.get(f"{sid}_date_time")
        if date is None:
            result.drop("missing_date", swhere.example(f"no {sid}_date_time"))
        else:
            timestamp = parse_datetime(date)
            if timestamp is None:
                result.drop("unparsed_date", swhere.example(f"{sid}_date_time = {date!r}"))
        turns: list[Turn] = []
        for j, raw in enumerate(turns_raw):
            twhere = swhere.at(f"turn {j}")
            with result.dropping("bad_turn"):
                turn = _turn(raw, twhere)
                if turn.id in turn_session:
                    result.drop("duplicate_turn_id", twhere.example(f"dia_id {turn.id} repeated"))
                    continue
                turn_session[turn.id] = sid
                turns.append(turn)
        sessions.append(build(Session, swhere, id=sid, index=len(sessions), timestamp=timestamp,
                              partner=speaker_b, turns=turns))

    by_id = {s.id: s for s in sessions}
    _observations(record, where, by_id, result)
    _summaries(record, where, by_id, speaker_a, speaker_b, result)

    queries: list[Query] = []
    qa = get(record, "qa", list, where, required=False, default=[])
    for k, item in enumerate(qa):
        with result.dropping("bad_qa"):
            queries.append(_query(item, where.at(f"qa[{k}]"), f"{sample_id}:q{k}", turn_session, result))

    return build(Episode, where, id=sample_id, source="locomo", main_speaker=speaker_a,
                 speakers=[Speaker(name=speaker_a), Speaker(name=speaker_b)],
                 sessions=sessions, queries=queries, split="test")


def _turn(raw: object, where: Where) -> Turn:
    speaker = get(raw, "speaker", str, where)
    dia_id = get(raw, "dia_id", str, where)
    text = get(raw, "text", str, where)
    caption = get(raw, "blip_caption", str, where, required=False)
    if caption:
        text = f"{text} and shared {caption}"
    return build(Turn, where, id=dia_id, speaker=speaker, text=text)


def _query(item: object, where: Where, qid: str, turn_session: dict[str, str],
           result: LoadResult) -> Query:
    question = get(item, "question", str, where)
    category = get(item, "category", int, where)
    answer = get(item, "answer", (str, int, float), where, required=category != ADVERSARIAL,
                 default=ADVERSARIAL_ANSWER)
    evidence = get(item, "evidence", list, where, required=False, default=[])
    turns: list[str] = []
    for e, raw in enumerate(evidence):
        check(raw, str, where, f"evidence[{e}]")
        ids = _DIA_ID.findall(raw)
        if not ids:
            result.drop("malformed_evidence", where.example(f"evidence {raw!r}"))
        for dia_id in ids:
            if dia_id not in turn_session:
                result.drop("unresolved_evidence", where.example(f"{dia_id} names no turn"))
            elif dia_id not in turns:
                turns.append(dia_id)
    if not evidence:
        result.flag("qa_without_evidence", where.example(f"question {question!r}"))
    sessions = list(dict.fromkeys(turn_session[t] for t in turns))
    adversarial = category == ADVERSARIAL
    return build(Query, where, id=qid, question=question, answer=answer, evidence_turns=turns,
                 evidence_sessions=sessions, category=str(category), abstention=adversarial,
                 flags=["adversarial"] if adversarial else [])


def _observations(record: dict, where: Where, sessions: dict[str, Session], result: LoadResult) -> None:
    observation = get(record, "observation", dict, where, required=False, default={})
    for key, per_speaker in observation.items():
        owhere = where.at(f"observation.{key}")
        m = re.match(r"^session_(\d+)_observation$", key)
        session = sessions.get(f"session_{m.group(1)}") if m else None
        if session is None or not isinstance(per_speaker, dict):
            result.drop("bad_observation", owhere.example("names no session or is not an object"))
            continue
        for speaker, facts in per_speaker.items():
            if not isinstance(facts, list):
                result.drop("bad_observation", owhere.example(f"{speaker}: expected an array"))
                continue
            for f, fact in enumerate(facts):
                with result.dropping("bad_observation"):
                    fwhere = owhere.at(f"{speaker}[{f}]")
                    check(fact, list, fwhere, "fact")
                    if not fact:
                        raise fwhere.error("empty [fact, dia_id] pair", field="fact")
                    text = check(fact[0], str, fwhere, "fact[0]")
                    mid = f"{session.id}:obs:{len(session.memories)}"
                    session.memories.append(build(Memory, fwhere, id=mid, owner=speaker, about=speaker,
                                                  text=text, session_id=session.id, kind="observation"))


def _summaries(record: dict, where: Where, sessions: dict[str, Session], speaker_a: str,
               speaker_b: str, result: LoadResult) -> None:
    summaries = get(record, "session_summary", dict, where, required=False, default={})
    for key, text in summaries.items():
        m = re.match(r"^session_(\d+)_summary$", key)
        session = sessions.get(f"session_{m.group(1)}") if m else None
        if session is None or not isinstance(text, str) or not text.strip():
            result.drop("bad_summary", where.example(f"session_summary.{key}"))
            continue
        session.summary = text
        session.memories.append(Memory(id=f"{session.id}:summary", owner=speaker_a, about=speaker_b,
                                       text=text, session_id=session.id, kind="session_summary"))
