"""Canonical tables: episodes flattened into one pandas DataFrame per record type.

The canonical model (``pipelines.data.schema``) is a tree (Episode > Session > Turn, Memory,
MemoryLink; Episode > Query). Validation (great-expectations suites, referential-integrity
rules) and dataset statistics work on flat tables instead, one row per record:

    episodes     one row per episode
    speakers     one row per (episode, speaker)
    sessions     one row per (episode, session)
    turns        one row per (episode, session, turn)
    memories     one row per (episode, session, memory)
    links        one row per (episode, session, memory link)
    queries      one row per (episode, query)
    evidence     one row per (episode, query, granularity, evidence id); granularity is
                 "turn", "session" or "memory"
    triplets     one row per (episode, session, turn, triplet)
    memory_tags  one row per (episode, session, turn, tagged memory id)

Every row carries three locator columns so that a failing row can be traced back to its file:
``episode_pos`` (0-based position of the episode in the input list: the key that groups rows of
one episode even when an episode id is duplicated), ``episode_id`` and ``record`` (a
human-readable locator such as ``"line 3"``; given by the loader through ``records``, default
``"episode <i>"`` with the 0-based position i). Rows of nested records also carry
``session_pos`` (0-based position of the session in its episode, i.e. its place in time order)
and, where useful, ``session_index`` (the ``Session.index`` as given).

Timestamps are kept as Python ``datetime`` objects (object columns), exactly as the model holds
them, so that naive and timezone-aware values and far dates survive unchanged.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pandas as pd

from pipelines.data.schema import Episode

LOCATOR = ["episode_pos", "episode_id", "record"]

# Column order of every table (also used to build empty tables with the right columns).
COLUMNS: dict[str, list[str]] = {
    "episodes": LOCATOR + ["source", "split", "main_speaker", "n_speakers", "n_sessions",
                           "n_queries"],
    "speakers": LOCATOR + ["name", "role", "n_persona", "is_main"],
    "sessions": LOCATOR + ["session_pos", "session_id", "session_index", "timestamp", "partner",
                           "n_turns", "n_memories", "n_links", "summary"],
    "turns": LOCATOR + ["session_pos", "session_id", "session_index", "turn_pos", "turn_id",
                        "speaker", "text", "n_triplets", "n_memory_tags", "has_answer"],
    # session_id is Memory.session_id as declared; listed_in is the id of the session listing it
    "memories": LOCATOR + ["session_pos", "listed_in", "session_index", "memory_id", "session_id",
                           "owner", "about", "text", "importance", "kind"],
    "links": LOCATOR + ["session_pos", "session_id", "session_index", "link_pos", "from_id",
                        "to_id"],
    "queries": LOCATOR + ["query_pos", "query_id", "session_id", "question", "answer", "category",
                          "abstention", "timestamp", "n_evidence", "flags"],
    "evidence": LOCATOR + ["query_id", "granularity", "evidence_id"],
    "triplets": LOCATOR + ["session_pos", "session_id", "turn_id", "subject", "relation",
                           "object"],
    "memory_tags": LOCATOR + ["session_pos", "session_id", "session_index", "turn_id",
                              "memory_id"],
}
TABLES = tuple(COLUMNS)
EVIDENCE_GRANULARITIES = ("turn", "session", "memory")
_OBJECT_COLUMNS = ("timestamp",)  # kept as Python objects, never converted to datetime64


def record_locator(position: int, episode_id: str, records: Mapping[str, str] | None) -> str:
    """The human-readable locator of an episode: ``records[episode_id]`` or ``"episode <i>"``."""
    if records is not None and episode_id in records:
        return str(records[episode_id])
    return f"episode {position}"


def _frame(name: str, rows: list[dict]) -> pd.DataFrame:
    columns = COLUMNS[name]
    frame = pd.DataFrame.from_records(rows, columns=columns) if rows else pd.DataFrame(
        {c: pd.Series([], dtype=object) for c in columns})
    for column in _OBJECT_COLUMNS:
        if column in frame.columns:
            frame[column] = pd.Series([r[column] for r in rows], dtype=object, index=frame.index)
    return frame.reset_index(drop=True)


def empty_rows() -> dict[str, list[dict]]:
    """One empty row list per table, in :data:`TABLES` order (to fill with :func:`add_episode_rows`)."""
    return {name: [] for name in COLUMNS}


def add_episode_rows(rows: dict[str, list[dict]], ep: Episode, e_pos: int, record: str) -> None:
    """Append the rows of one episode (at position ``e_pos``, located as ``record``) to ``rows``."""
    loc = {"episode_pos": e_pos, "episode_id": ep.id, "record": record}
    rows["episodes"].append({**loc, "source": ep.source, "split": ep.split,
                             "main_speaker": ep.main_speaker, "n_speakers": len(ep.speakers),
                             "n_sessions": len(ep.sessions), "n_queries": len(ep.queries)})
    for sp in ep.speakers:
        rows["speakers"].append({**loc, "name": sp.name, "role": sp.role,
                                 "n_persona": len(sp.persona),
                                 "is_main": sp.name == ep.main_speaker})
    for s_pos, ses in enumerate(ep.sessions):
        at = {**loc, "session_pos": s_pos}
        rows["sessions"].append({**at, "session_id": ses.id, "session_index": ses.index,
                                 "timestamp": ses.timestamp, "partner": ses.partner,
                                 "n_turns": len(ses.turns), "n_memories": len(ses.memories),
                                 "n_links": len(ses.links), "summary": ses.summary})
        for t_pos, turn in enumerate(ses.turns):
            rows["turns"].append({**at, "session_id": ses.id, "session_index": ses.index,
                                  "turn_pos": t_pos, "turn_id": turn.id,
                                  "speaker": turn.speaker, "text": turn.text,
                                  "n_triplets": len(turn.triplets),
                                  "n_memory_tags": len(turn.memory_tags),
                                  "has_answer": turn.has_answer})
            for tri in turn.triplets:
                rows["triplets"].append({**at, "session_id": ses.id, "turn_id": turn.id,
                                         "subject": tri.subject, "relation": tri.relation,
                                         "object": tri.object})
            for mem_id in turn.memory_tags:
                rows["memory_tags"].append({**at, "session_id": ses.id,
                                            "session_index": ses.index, "turn_id": turn.id,
                                            "memory_id": mem_id})
        for mem in ses.memories:
            rows["memories"].append({**at, "listed_in": ses.id, "session_index": ses.index,
                                     "memory_id": mem.id, "session_id": mem.session_id,
                                     "owner": mem.owner, "about": mem.about,
                                     "text": mem.text, "importance": mem.importance,
                                     "kind": mem.kind})
        for l_pos, link in enumerate(ses.links):
            rows["links"].append({**at, "session_id": ses.id, "session_index": ses.index,
                                  "link_pos": l_pos, "from_id": link.from_id,
                                  "to_id": link.to_id})
    for q_pos, query in enumerate(ep.queries):
        evidence = (("turn", query.evidence_turns), ("session", query.evidence_sessions),
                    ("memory", query.evidence_memories))
        rows["queries"].append({**loc, "query_pos": q_pos, "query_id": query.id,
                                "session_id": query.session_id, "question": query.question,
                                "answer": query.answer, "category": query.category,
                                "abstention": query.abstention,
                                "timestamp": query.timestamp,
                                "n_evidence": sum(len(ids) for _, ids in evidence),
                                "flags": list(query.flags)})
        for granularity, ids in evidence:
            for evidence_id in ids:
                rows["evidence"].append({**loc, "query_id": query.id,
                                         "granularity": granularity,
                                         "evidence_id": evidence_id})


def frames(rows: Mapping[str, list[dict]]) -> dict[str, pd.DataFrame]:
    """The tables of rows collected by :func:`add_episode_rows` (a table without rows keeps its columns)."""
    return {name: _frame(name, rows.get(name) or []) for name in COLUMNS}


def to_tables(episodes: Iterable[Episode], records: Mapping[str, str] | None = None
              ) -> dict[str, pd.DataFrame]:
    """Flatten ``episodes`` into the canonical tables (see the module docstring).

    ``records`` maps an episode id to its locator in the source file (e.g. ``"line 3"``);
    episodes it does not name are located as ``"episode <i>"`` (0-based position).
    Returns a dict table name -> DataFrame with the columns of :data:`COLUMNS`, in input order.
    """
    rows = empty_rows()
    for e_pos, ep in enumerate(episodes):
        add_episode_rows(rows, ep, e_pos, record_locator(e_pos, ep.id, records))
    return frames(rows)


def table_counts(tables: Mapping[str, pd.DataFrame]) -> dict[str, int]:
    """Row count of every table, in :data:`TABLES` order (the dataset counts of a report)."""
    return {name: int(len(tables[name])) for name in TABLES if name in tables}
