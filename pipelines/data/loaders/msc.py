"""Multi-Session Chat (MSC) and Conversation Chronicles (CC); G-Long (seed 003) evaluates on both.

Two published layouts, detected per record:

1. Session columns (CC, and the common MSC conversions): ``{dataID, relationship?,
   time_interval?: [5 strings], summary?: [5 strings], first_session_dialogue:
   [utterances], first_session_speakers: [names], second_..., third_..., fourth_...,
   fifth_...}``. Session k is built from ``<ordinal>_session_dialogue`` and
   ``<ordinal>_session_speakers`` (paired by position); ``time_interval[k]`` is the gap
   before session k ("Start", "A few hours after", "A couple of years after"),
   ``summary[k]`` its summary; ``relationship`` becomes both speakers' role.
2. ParlAI's original MSC (jsonl per session file, e.g. ``msc_dialogue/session_4/test.txt``):
   ``{dialog: [{id, text}], personas: [[...], [...]], init_personas?, metadata?,
   previous_dialogs: [{dialog: [{text}], personas?, time_num, time_unit}]}``. The
   previous dialogs are sessions 1..k-1 and ``dialog`` is session k. In a previous
   dialog the speakers alternate starting with ``Speaker 1``; ``time_num``/``time_unit``
   of previous dialog i is the time that passed after it, before the next session
   (as ParlAI's MSC teacher renders it). ``init_personas`` (the PersonaChat persona
   lines) become the speakers' personas; ``personas`` (crowdworkers' summaries of what
   each speaker revealed so far) become Memory(kind="persona_summary", owner = about =
   that speaker) of the latest session before ``dialog``, or of the previous dialog
   whose own ``personas`` list them; a sentence already remembered about a speaker is
   not repeated.

Timestamps: neither layout has calendar dates, so session 1 is placed at
:data:`~pipelines.data.loaders.dates.EPOCH` and each gap is added in order (see
``dates.parse_gap``). A gap that cannot be read makes that session's timestamp None
(``dropped["unparsed_date"]``, or ``missing_date`` when the list is too short), and
the later sessions of the episode have no timestamp either
(``dropped["timestamp_lost_after_unparsed_gap"]``): their distance from the first
session is unknown. A record without ``time_interval`` has no
timestamps (nothing is counted: there was nothing to read).

Mapping: one Episode per record (id = ``dataID``, ``metadata.initial_data_id`` or
``<file stem>:<line>``; split from the file name, default ``train``); the main speaker
is the first speaker of the first session and every session's partner is the other
one; turn ids ``s<k>:<j>``; a summary becomes Session.summary and
Memory(kind="session_summary", owner = main speaker, about = partner).

Drop reasons: ``bad_session``, ``bad_turn``, ``speaker_count_mismatch`` (utterances
without a speaker are left out), ``unparsed_date``, ``missing_date``,
``timestamp_lost_after_unparsed_gap``, ``bad_summary``, ``bad_persona``, ``empty_episode``
(a record with no turn at all: no episode).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from pipelines.data.loaders.registry import register
from pipelines.data.loaders.base import (LoadResult, Where, build, check, get, iter_records,
                                         split_from_name, str_list)
from pipelines.data.loaders.dates import EPOCH, parse_gap
from pipelines.data.schema import Episode, Memory, Session, Speaker, Turn
from pipelines.errors import DataError, MissingInput

ORDINALS = ("first", "second", "third", "fourth", "fifth")
PARLAI_SPEAKERS = ("Speaker 1", "Speaker 2")
_PATTERNS = ("*.jsonl", "*.json", "*.txt")


def _load(source: str, path: str | Path) -> LoadResult:
    result = LoadResult()
    for file in _files(Path(path)):
        split = split_from_name(file, "train")
        for record_name, record in iter_records(file):
            where = Where(str(file), record_name)
            if isinstance(record, dict) and "dialog" in record and "first_session_dialogue" not in record:
                episode = _parlai_episode(record, where, source, file, record_name, result)
            else:
                episode = _column_episode(record, where, source, file, record_name, result)
            if episode is not None:
                episode.split = split
                result.episodes.append(episode)
    return result


def _files(path: Path) -> list[Path]:
    """The file given, or the .jsonl / .json / .txt files of the folder given, by name."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise MissingInput("path does not exist", file=str(path))
    files = sorted({p for pattern in _PATTERNS for p in path.glob(pattern) if p.is_file()})
    if not files:
        raise DataError(f"no file matching {' or '.join(_PATTERNS)} in this folder", file=str(path))
    return files


@register("msc")
def load_msc(path: str | Path) -> LoadResult:
    return _load("msc", path)


@register("cc")
def load_cc(path: str | Path) -> LoadResult:
    return _load("cc", path)


# --- shared -------------------------------------------------------------------------

class _Clock:
    """Timestamps from gaps: EPOCH for session 1, then the running sum of the gaps."""

    def __init__(self) -> None:
        self.now: datetime | None = EPOCH
        self.lost = False

    def advance(self, gap: timedelta | None, where: Where, raw: object,
                result: LoadResult) -> datetime | None:
        if self.lost:
            result.drop("timestamp_lost_after_unparsed_gap", where.example("an earlier gap was unreadable"))
            return None
        if gap is None:
            if raw is None:
                result.drop("missing_date", where.example("no time gap for this session"))
            else:
                result.drop("unparsed_date", where.example(f"time gap {raw!r}"))
            self.lost, self.now = True, None
            return None
        self.now = self.now + gap
        return self.now


def _episode(source: str, episode_id: str, where: Where, sessions: list[Session],
             speakers: list[Speaker]) -> Episode:
    names = [s.name for s in speakers]
    main = names[0]
    for session in sessions:
        session.partner = next((n for n in names if n != main), None)
    return build(Episode, where, id=episode_id, source=source, main_speaker=main, speakers=speakers,
                 sessions=sessions)


def _summary(session: Session, text: object, main: str, partner: str | None, where: Where,
             result: LoadResult) -> None:
    if text is None or (isinstance(text, str) and not text.strip()):
        return
    if not isinstance(text, str):
        result.drop("bad_summary", where.example(f"summary of {session.id} is not a string"))
        return
    session.summary = text
    session.memories.append(Memory(id=f"{session.id}:summary", owner=main, about=partner or main,
                                   text=text, session_id=session.id, kind="session_summary"))


# --- layout 1: session columns (CC, MSC conversions) ----------------------------------

def _column_episode(record: object, where: Where, source: str, file: Path, record_name: str,
                    result: LoadResult) -> Episode | None:
    check(record, dict, where, "<record>")
    data_id = get(record, "dataID", (str, int), where, required=False)
    episode_id = str(data_id) if data_id is not None else f"{file.stem}:{record_name.split()[-1]}"
    where = Where(where.file, f"{where.record} ({episode_id})")
    if not any(f"{o}_session_dialogue" in record for o in ORDINALS):
        raise where.error("missing required field", field="first_session_dialogue")
    intervals = get(record, "time_interval", list, where, required=False, default=[])
    summaries = get(record, "summary", list, where, required=False, default=[])
    relationship = get(record, "relationship", str, where, required=False)

    clock = _Clock()
    sessions: list[Session] = []
    names: list[str] = []
    for k, ordinal in enumerate(ORDINALS):
        key = f"{ordinal}_session_dialogue"
        if not record.get(key):  # absent, null or empty: the record has fewer sessions
            continue
        swhere = where.at(f"{ordinal} session")
        with result.dropping("bad_session"):
            utterances = str_list(record, key, swhere)
            speakers = str_list(record, f"{ordinal}_session_speakers", swhere)
            if len(utterances) > len(speakers):
                result.drop("speaker_count_mismatch",
                            swhere.example(f"{len(utterances)} utterances, {len(speakers)} speakers"),
                            n=len(utterances) - len(speakers))
            sid = f"s{k + 1}"
            turns = []
            for j, (text, speaker) in enumerate(zip(utterances, speakers)):
                with result.dropping("bad_turn"):
                    turns.append(build(Turn, swhere.at(f"turn {j}"), id=f"{sid}:{j}", speaker=speaker,
                                       text=text))
                    if speaker not in names:
                        names.append(speaker)
            timestamp = None
            if intervals:  # no time_interval at all (some MSC conversions): no timestamps
                raw_gap = intervals[k] if k < len(intervals) else None
                # Whatever session 1's label says ("Start"), it starts the clock.
                gap = timedelta(0) if k == 0 else parse_gap(raw_gap)
                timestamp = clock.advance(gap, swhere, raw_gap, result)
            sessions.append(build(Session, swhere, id=sid, index=len(sessions), timestamp=timestamp,
                                  turns=turns))
    if not names:
        result.drop("empty_episode", where.example("no session has a turn"))
        return None
    episode = _episode(source, episode_id, where, sessions,
                       [Speaker(name=n, role=relationship) for n in names])
    for session in episode.sessions:
        k = int(session.id[1:]) - 1
        if k < len(summaries):
            _summary(session, summaries[k], episode.main_speaker, session.partner, where, result)
    return episode


# --- layout 2: ParlAI's original MSC ----------------------------------------------------

def _parlai_episode(record: dict, where: Where, source: str, file: Path, record_name: str,
                    result: LoadResult) -> Episode | None:
    meta = get(record, "metadata", dict, where, required=False, default={})
    data_id = get(meta, "initial_data_id", (str, int), where, required=False, name="metadata.initial_data_id")
    episode_id = str(data_id) if data_id is not None else f"{file.stem}:{record_name.split()[-1]}"
    where = Where(where.file, f"{where.record} ({episode_id})")
    dialog = get(record, "dialog", list, where)
    previous = get(record, "previous_dialogs", list, where, required=False, default=[])

    clock = _Clock()
    sessions: list[Session] = []
    remembered: set[tuple[str, str]] = set()
    gap: timedelta | None = timedelta(0)
    gap_raw: object = "start"
    for k, raw in enumerate([*previous, {"dialog": dialog}]):
        swhere = where.at("dialog" if k == len(previous) else f"previous_dialogs[{k}]")
        sid = f"s{k + 1}"
        with result.dropping("bad_session"):
            items = get(raw, "dialog", list, swhere)
            turns = []
            for j, item in enumerate(items):
                twhere = swhere.at(f"turn {j}")
                with result.dropping("bad_turn"):
                    text = get(item, "text", str, twhere)
                    speaker = get(item, "id", str, twhere, required=False, default=PARLAI_SPEAKERS[j % 2])
                    if speaker not in PARLAI_SPEAKERS:  # ParlAI task ids, e.g. "msc_dialogue_2"
                        speaker = PARLAI_SPEAKERS[j % 2]
                    turns.append(build(Turn, twhere, id=f"{sid}:{j}", speaker=speaker, text=text))
            timestamp = clock.advance(gap, swhere, gap_raw, result)
            session = build(Session, swhere, id=sid, index=len(sessions), timestamp=timestamp, turns=turns)
            sessions.append(session)
            if k < len(previous):
                _persona_memories(raw.get("personas"), session, swhere, remembered, result)
        if k < len(previous):
            num = raw.get("time_num") if isinstance(raw, dict) else None
            unit = raw.get("time_unit") if isinstance(raw, dict) else None
            gap, gap_raw = parse_gap(num, unit), f"{num} {unit}"
    if len(sessions) > 1:
        _persona_memories(record.get("personas"), sessions[-2], where.at("personas"), remembered, result)

    init = record.get("init_personas")
    personas: list[list[str]] = [[], []]
    if init is not None:
        with result.dropping("bad_persona"):
            check(init, list, where, "init_personas")
            for i, sentences in enumerate(init[:2]):
                check(sentences, list, where, f"init_personas[{i}]")
                personas[i] = [check(s, str, where, f"init_personas[{i}][{n}]")
                               for n, s in enumerate(sentences)]
    if not any(s.turns for s in sessions):
        result.drop("empty_episode", where.example("no session has a turn"))
        return None
    return _episode(source, episode_id, where, sessions,
                    [Speaker(name=n, persona=p) for n, p in zip(PARLAI_SPEAKERS, personas)])


def _persona_memories(personas: object, session: Session, where: Where,
                      remembered: set[tuple[str, str]], result: LoadResult) -> None:
    """``personas = [[speaker 1 sentences], [speaker 2 sentences]]`` -> persona_summary memories."""
    if personas is None:
        return
    if not isinstance(personas, list):
        result.drop("bad_persona", where.example("personas is not an array"))
        return
    for i, sentences in enumerate(personas[:2]):
        if not isinstance(sentences, list):
            result.drop("bad_persona", where.example(f"personas[{i}] is not an array"))
            continue
        speaker = PARLAI_SPEAKERS[i]
        for n, sentence in enumerate(sentences):
            if not isinstance(sentence, str) or not sentence.strip():
                result.drop("bad_persona", where.example(f"personas[{i}][{n}] is not a sentence"))
                continue
            if (speaker, sentence) in remembered:
                continue
            remembered.add((speaker, sentence))
            session.memories.append(Memory(id=f"{session.id}:persona:{len(session.memories)}",
                                           owner=speaker, about=speaker,
                                           text=sentence, session_id=session.id, kind="persona_summary"))
