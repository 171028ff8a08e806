"""Referential-integrity rules and quality warnings, in plain pandas/Python over the tables.

great-expectations checks one table at a time and has no foreign-key expectation, so every rule
that joins two tables (evidence -> turns/sessions/memories, memory tags -> memories, links ->
memories, queries -> sessions) or follows time order within an episode lives here. Rows are
grouped by ``episode_pos`` (the episode's position in the input), so a duplicated episode id
never mixes the records of two episodes. "Earlier" means an earlier position in the episode's
session list (its time order); ``Session.index`` itself is checked by ``session_order``. In a
source whose time order is its file order (``rules.FILE_ORDER_SOURCES``: RealMem) a timestamp
going back is not a broken order, so ``timestamps_non_decreasing`` skips its episodes and the
warning ``file_order_timestamps`` reports them instead.
Rule names, descriptions and blocking flags are declared in ``pipelines.validate.rules.RULES``.
"""

from __future__ import annotations

from datetime import datetime

from pipelines.validate.rules import (FILE_ORDER_SOURCES, SHORT_UTTERANCE_CHARS, Check, Failure, Tables, check,
                                      ids, utc, written_in)


# --- integrity ----------------------------------------------------------------------------------

@check("splits_disjoint")
def splits_disjoint(t: Tables) -> list[Failure]:
    episodes = t["episodes"]
    out = []
    for episode_id, group in episodes.groupby("episode_id", sort=False):
        splits = list(dict.fromkeys(group["split"]))
        if len(splits) > 1:
            out.append(Failure(", ".join(dict.fromkeys(group["record"])),
                               f"episode {episode_id!r} is in splits {', '.join(map(str, splits))}"))
    return out


@check("main_speaker_listed")
def main_speaker_listed(t: Tables) -> list[Failure]:
    names = ids(t["speakers"], "name")
    return [Failure(r.record, f"episode {r.episode_id!r}: main speaker {r.main_speaker!r} is not among "
                              f"its {r.n_speakers} speakers")
            for r in t["episodes"].itertuples() if r.n_speakers > 0 and (r.episode_pos, r.main_speaker) not in names]


@check("session_order")
def session_order(t: Tables) -> list[Failure]:
    out, last = [], {}
    for r in t["sessions"].itertuples():
        prev = last.get(r.episode_pos)
        if prev is not None and r.session_index <= prev[1]:
            out.append(Failure(r.record, f"session {r.session_id!r} has index {r.session_index} after session "
                                         f"{prev[0]!r} with index {prev[1]}"))
        last[r.episode_pos] = (r.session_id, r.session_index)
    return out


def _file_order(t: Tables) -> set[int]:
    """Positions of the episodes whose source keeps its sessions in file order (FILE_ORDER_SOURCES)."""
    episodes = t["episodes"]
    return set(episodes.loc[episodes["source"].isin(FILE_ORDER_SOURCES), "episode_pos"])


@check("timestamps_non_decreasing", applies=lambda t: len(_file_order(t)) < len(t["episodes"]))
def timestamps_non_decreasing(t: Tables) -> list[Failure]:
    out, latest = [], {}  # episode_pos -> (session id, latest timestamp so far)
    skip = _file_order(t)  # their time order is the file order: file_order_timestamps warns
    for r in t["sessions"].itertuples():
        if not isinstance(r.timestamp, datetime) or r.episode_pos in skip:
            continue
        prev = latest.get(r.episode_pos)
        if prev is not None and utc(r.timestamp) < utc(prev[1]):
            out.append(Failure(r.record, f"session {r.session_id!r} at {r.timestamp.isoformat()} is earlier "
                                         f"than session {prev[0]!r} at {prev[1].isoformat()}"))
            continue
        latest[r.episode_pos] = (r.session_id, r.timestamp)
    return out


@check("memory_session_matches")
def memory_session_matches(t: Tables) -> list[Failure]:
    m = t["memories"]
    return [Failure(r.record, f"memory {r.memory_id!r} is listed in session {r.listed_in!r} but names "
                              f"session {r.session_id!r}")
            for r in m[m["session_id"] != m["listed_in"]].itertuples()]


@check("memory_tags_resolve")
def memory_tags_resolve(t: Tables) -> list[Failure]:
    memories = ids(t["memories"], "memory_id")
    return [Failure(r.record, f"turn {r.turn_id!r} tags memory {r.memory_id!r}, which is not a memory of "
                              f"episode {r.episode_id!r}")
            for r in t["memory_tags"].itertuples() if (r.episode_pos, r.memory_id) not in memories]


@check("memory_tags_not_future")
def memory_tags_not_future(t: Tables) -> list[Failure]:
    written = written_in(t["memories"], "memory_id")
    sessions = {(r.episode_pos, r.session_pos): r.session_id for r in t["sessions"].itertuples()}
    out = []
    for r in t["memory_tags"].itertuples():
        pos = written.get((r.episode_pos, r.memory_id))
        if pos is not None and pos > r.session_pos:
            out.append(Failure(r.record, f"turn {r.turn_id!r} in session {r.session_id!r} tags memory "
                                         f"{r.memory_id!r}, written later in session "
                                         f"{sessions[(r.episode_pos, pos)]!r}"))
    return out


@check("link_endpoints_resolve")
def link_endpoints_resolve(t: Tables) -> list[Failure]:
    memories = ids(t["memories"], "memory_id")
    out = []
    for r in t["links"].itertuples():
        missing = [m for m in dict.fromkeys((r.from_id, r.to_id)) if (r.episode_pos, m) not in memories]
        if missing:
            out.append(Failure(r.record, f"link {r.from_id!r} -> {r.to_id!r} in session {r.session_id!r}: "
                                         f"{', '.join(map(repr, missing))} not a memory of episode "
                                         f"{r.episode_id!r}"))
    return out


@check("links_point_backwards")
def links_point_backwards(t: Tables) -> list[Failure]:
    written = written_in(t["memories"], "memory_id")
    out = []
    for r in t["links"].itertuples():
        src, dst = written.get((r.episode_pos, r.from_id)), written.get((r.episode_pos, r.to_id))
        if src is None or dst is None:
            continue  # reported by link_endpoints_resolve
        if r.from_id == r.to_id:
            out.append(Failure(r.record, f"link {r.from_id!r} -> {r.to_id!r} links a memory to itself"))
        elif dst > src:
            out.append(Failure(r.record, f"link {r.from_id!r} -> {r.to_id!r} points forward in time: memory "
                                         f"{r.to_id!r} is written after memory {r.from_id!r}"))
    return out


@check("query_session_resolves")
def query_session_resolves(t: Tables) -> list[Failure]:
    sessions = ids(t["sessions"], "session_id")
    q = t["queries"]
    return [Failure(r.record, f"query {r.query_id!r} is asked in session {r.session_id!r}, which is not a "
                              f"session of episode {r.episode_id!r}")
            for r in q[q["session_id"].notna()].itertuples() if (r.episode_pos, r.session_id) not in sessions]


def _evidence_check(granularity: str, table: str, id_column: str) -> Check:
    def fn(t: Tables) -> list[Failure]:
        known = ids(t[table], id_column)
        ev = t["evidence"]
        ev = ev[ev["granularity"] == granularity]
        return [Failure(r.record, f"query {r.query_id!r} cites {granularity} {r.evidence_id!r}, which is not a "
                                  f"{granularity} of episode {r.episode_id!r}")
                for r in ev.itertuples() if (r.episode_pos, r.evidence_id) not in known]

    return fn


check("evidence_turns_resolve")(_evidence_check("turn", "turns", "turn_id"))
check("evidence_sessions_resolve")(_evidence_check("session", "sessions", "session_id"))
check("evidence_memories_resolve")(_evidence_check("memory", "memories", "memory_id"))


# --- quality ------------------------------------------------------------------------------------

def short_turns(t: Tables, min_chars: int) -> list[Failure]:
    """Turns with 1 to ``min_chars - 1`` visible characters (surrounding whitespace stripped)."""
    out = []
    for r in t["turns"].itertuples():
        n = len(r.text.strip()) if isinstance(r.text, str) else 0
        if 0 < n < min_chars:  # blank texts are turn_text_nonempty's failures
            out.append(Failure(r.record, f"turn {r.turn_id!r} has {n} characters (< {min_chars}): "
                                         f"{r.text.strip()!r}"))
    return out


@check("short_utterances")
def short_utterances(t: Tables) -> list[Failure]:
    return short_turns(t, SHORT_UTTERANCE_CHARS)


@check("file_order_timestamps", applies=lambda t: bool(_file_order(t)))
def file_order_timestamps(t: Tables) -> list[Failure]:
    """Consecutive sessions (in file order) whose time goes back, in the file-order sources."""
    out, previous = [], {}  # episode_pos -> (session id, timestamp) of the previous dated session
    keep = _file_order(t)
    for r in t["sessions"].itertuples():
        if not isinstance(r.timestamp, datetime) or r.episode_pos not in keep:
            continue
        prev = previous.get(r.episode_pos)
        if prev is not None and utc(r.timestamp) < utc(prev[1]):
            out.append(Failure(r.record, f"session {r.session_id!r} at {r.timestamp.isoformat()} is earlier "
                                         f"than the session before it in the file, {prev[0]!r} at "
                                         f"{prev[1].isoformat()} (kept in file order)"))
        previous[r.episode_pos] = (r.session_id, r.timestamp)
    return out
