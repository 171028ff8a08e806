"""to_tables: one row per record, locators on every row, exact values."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from pipelines.data.schema import Episode, Memory, MemoryLink, Query, Session, Speaker, Triplet, Turn
from pipelines.data.tables import COLUMNS, TABLES, record_locator, table_counts, to_tables

AWARE = datetime(2023, 5, 8, 13, 56, tzinfo=timezone(timedelta(hours=2)))
NAIVE = datetime(1850, 1, 1)  # outside datetime64[ns]: must survive as a Python object


def _episodes() -> list[Episode]:
    s1 = Session(id="e1:S1", index=0, timestamp=AWARE, partner="Bo", turns=[
        Turn(id="e1:S1:T1", speaker="Al", text="I work as a nurse.",
             triplets=[Triplet(subject="Al", relation="works_as", object="nurse")]),
        Turn(id="e1:S1:T2", speaker="Bo", text="Nice, I moved to Oslo.",
             triplets=[Triplet(subject="Bo", relation="lives_in", object="Oslo"),
                       Triplet(subject="Bo", relation="moved", object="recently")])],
        memories=[Memory(id="e1:M1", owner="Al", about="Al", text="Al is a nurse.", session_id="e1:S1"),
                  Memory(id="e1:M2", owner="Al", about="Bo", text="Bo lives in Oslo.", session_id="e1:S1",
                         importance=0.25, kind="fact")])
    s2 = Session(id="e1:S2", index=1, partner="Bo", summary="They talk about Oslo.", turns=[
        Turn(id="e1:S2:T1", speaker="Al", text="How is Oslo?", memory_tags=["e1:M2", "e1:M1"], has_answer=True)],
        memories=[Memory(id="e1:M3", owner="Al", about="Bo", text="Bo likes Oslo.", session_id="e1:S2")],
        links=[MemoryLink(from_id="e1:M3", to_id="e1:M2")])
    e1 = Episode(id="e1", source="misc", main_speaker="Al", split="valid",
                 speakers=[Speaker(name="Al", role="nurse", persona=["I am a nurse.", "I like tea."]),
                           Speaker(name="Bo")],
                 sessions=[s1, s2],
                 queries=[Query(id="e1:Q1", session_id="e1:S2", question="Where does Bo live?", answer="Oslo",
                                evidence_turns=["e1:S1:T2"], evidence_sessions=["e1:S1"],
                                evidence_memories=["e1:M2"], category="single-session"),
                          Query(id="e1:Q2", question="Job?", answer="nurse", evidence_turns=["e1:S1:T1"],
                                abstention=False, timestamp=AWARE, flags=["evidence_not_earlier"])])
    e2 = Episode(id="e2", source="locomo", main_speaker="Cy",
                 sessions=[Session(id="e2:S1", index=3, timestamp=NAIVE)])
    return [e1, e2]


def test_columns_and_row_counts():
    tables = to_tables(_episodes(), records={"e1": "line 2"})
    assert tuple(tables) == TABLES
    for name, frame in tables.items():
        assert list(frame.columns) == COLUMNS[name]
    assert table_counts(tables) == {"episodes": 2, "speakers": 2, "sessions": 3, "turns": 3, "memories": 3,
                                    "links": 1, "queries": 2, "evidence": 4, "triplets": 3, "memory_tags": 2}


def test_locators_use_records_then_positions():
    tables = to_tables(_episodes(), records={"e1": "line 2"})
    assert tables["sessions"][["episode_pos", "episode_id", "record", "session_pos"]].values.tolist() == [
        [0, "e1", "line 2", 0], [0, "e1", "line 2", 1], [1, "e2", "episode 1", 0]]
    assert record_locator(4, "x", None) == "episode 4"
    assert record_locator(4, "x", {"x": "test.jsonl line 7"}) == "test.jsonl line 7"


def test_row_values():
    t = to_tables(_episodes())
    assert t["episodes"].iloc[0].to_dict() == {
        "episode_pos": 0, "episode_id": "e1", "record": "episode 0", "source": "misc", "split": "valid",
        "main_speaker": "Al", "n_speakers": 2, "n_sessions": 2, "n_queries": 2}
    assert t["speakers"][["name", "role", "n_persona", "is_main"]].values.tolist() == [
        ["Al", "nurse", 2, True], ["Bo", None, 0, False]]
    assert t["turns"][["session_id", "session_index", "turn_pos", "turn_id", "speaker", "n_triplets",
                       "n_memory_tags", "has_answer"]].values.tolist() == [
        ["e1:S1", 0, 0, "e1:S1:T1", "Al", 1, 0, False], ["e1:S1", 0, 1, "e1:S1:T2", "Bo", 2, 0, False],
        ["e1:S2", 1, 0, "e1:S2:T1", "Al", 0, 2, True]]
    assert t["memories"][["session_pos", "listed_in", "memory_id", "session_id", "about", "kind"]].values.tolist() == [
        [0, "e1:S1", "e1:M1", "e1:S1", "Al", None], [0, "e1:S1", "e1:M2", "e1:S1", "Bo", "fact"],
        [1, "e1:S2", "e1:M3", "e1:S2", "Bo", None]]
    assert t["memories"]["importance"].tolist()[1] == 0.25 and pd.isna(t["memories"]["importance"].tolist()[0])
    assert t["links"][["session_id", "session_index", "link_pos", "from_id", "to_id"]].values.tolist() == [
        ["e1:S2", 1, 0, "e1:M3", "e1:M2"]]
    assert t["memory_tags"][["session_pos", "turn_id", "memory_id"]].values.tolist() == [
        [1, "e1:S2:T1", "e1:M2"], [1, "e1:S2:T1", "e1:M1"]]
    assert t["triplets"][["turn_id", "subject", "relation", "object"]].values.tolist() == [
        ["e1:S1:T1", "Al", "works_as", "nurse"], ["e1:S1:T2", "Bo", "lives_in", "Oslo"],
        ["e1:S1:T2", "Bo", "moved", "recently"]]
    assert t["evidence"][["query_id", "granularity", "evidence_id"]].values.tolist() == [
        ["e1:Q1", "turn", "e1:S1:T2"], ["e1:Q1", "session", "e1:S1"], ["e1:Q1", "memory", "e1:M2"],
        ["e1:Q2", "turn", "e1:S1:T1"]]
    assert t["queries"][["query_pos", "query_id", "session_id", "category", "n_evidence", "flags"]].values.tolist() == [
        [0, "e1:Q1", "e1:S2", "single-session", 3, []], [1, "e1:Q2", None, None, 1, ["evidence_not_earlier"]]]


def test_timestamps_stay_python_datetimes():
    t = to_tables(_episodes())
    assert t["sessions"]["timestamp"].dtype == object
    assert t["sessions"]["timestamp"].tolist() == [AWARE, None, NAIVE]
    assert t["queries"]["timestamp"].tolist() == [None, AWARE]


@pytest.mark.parametrize("episodes", [[], [Episode(id="solo", source="x", main_speaker="Al")]])
def test_empty_tables_keep_their_columns(episodes):
    tables = to_tables(episodes)
    assert len(tables["episodes"]) == len(episodes)
    for name in TABLES[1:]:
        assert tables[name].empty and list(tables[name].columns) == COLUMNS[name]
