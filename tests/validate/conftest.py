"""A small MiSC-shaped dataset built in code: clean under both validation profiles.

Two episodes ("ep-a" train, "ep-b" test), each with main speaker Ana and partners Bob, Cara, Dan
(4 speakers), 6 sessions with partners Bob, Cara, Dan, Bob, Cara, Dan, two turns per session
(Ana, then the partner), two memories per session (Ana about Ana, Ana about the partner), a link
from each memory about a partner in sessions 4-6 to the memory about the same partner three
sessions earlier, a memory tag on Ana's turn in sessions 4-6 to that earlier memory, and two
queries whose evidence lies in sessions 1-3. Nothing outside session 6 refers to session 6.
Ids: session "ep-a:S1", turn "ep-a:S1:T1", memory "ep-a:S1:M2", query "ep-a:Q1".

``fails_alone`` runs one broken-fixture case: mutate the episodes, validate, and check that
exactly the intended rule failed, with the exact count and first example.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pipelines.data.schema import Episode, Memory, MemoryLink, Query, Session, Speaker, Turn
from pipelines.validate import RULES, validate

MAIN = "Ana"
PARTNERS = ("Bob", "Cara", "Dan")
ORDER = ("Bob", "Cara", "Dan", "Bob", "Cara", "Dan")
FILE = "misc/train.jsonl"
RECORDS = {"ep-a": "line 2", "ep-b": "line 3"}  # episode id -> line in FILE


def build_episode(eid: str, split: str, start: datetime) -> Episode:
    sessions = []
    for k, partner in enumerate(ORDER):
        sid = f"{eid}:S{k + 1}"
        turns = [Turn(id=f"{sid}:T1", speaker=MAIN, text=f"Hello {partner}, session {k + 1} starts now."),
                 Turn(id=f"{sid}:T2", speaker=partner, text=f"Hi {MAIN}, glad we talk again in session {k + 1}.")]
        memories = [Memory(id=f"{sid}:M1", owner=MAIN, about=MAIN, text=f"{MAIN} planned a trip in session {k + 1}.",
                           session_id=sid, importance=0.5),
                    Memory(id=f"{sid}:M2", owner=MAIN, about=partner, text=f"{partner} shared news in session {k + 1}.",
                           session_id=sid, importance=1.0)]
        links = []
        if k >= 3:
            earlier = f"{eid}:S{k - 2}:M2"
            links.append(MemoryLink(from_id=f"{sid}:M2", to_id=earlier))
            turns[0].memory_tags = [earlier]
        sessions.append(Session(id=sid, index=k, timestamp=start + timedelta(days=7 * k), partner=partner,
                                turns=turns, memories=memories, links=links))
    queries = [
        Query(id=f"{eid}:Q1", session_id=f"{eid}:S4", question="What did Bob share?", answer="news",
              evidence_turns=[f"{eid}:S1:T2"], evidence_sessions=[f"{eid}:S1"],
              evidence_memories=[f"{eid}:S1:M2"], category="single-session"),
        Query(id=f"{eid}:Q2", question="Who shared news first, Cara or Dan?", answer="Cara",
              evidence_turns=[f"{eid}:S2:T2", f"{eid}:S3:T2"], evidence_sessions=[f"{eid}:S2", f"{eid}:S3"],
              evidence_memories=[f"{eid}:S2:M2"], category="multi-session"),
    ]
    speakers = [Speaker(name=MAIN, role="teacher")] + [Speaker(name=p, role="friend") for p in PARTNERS]
    return Episode(id=eid, source="misc", main_speaker=MAIN, speakers=speakers, sessions=sessions,
                   queries=queries, split=split)


@pytest.fixture
def episodes() -> list[Episode]:
    """Fresh clean episodes for each test (tests mutate them)."""
    return [build_episode("ep-a", "train", datetime(2024, 1, 1, 9, tzinfo=timezone.utc)),
            build_episode("ep-b", "test", datetime(2024, 3, 1, 18))]  # naive timestamps: read as UTC


@pytest.fixture
def fails_alone(episodes):
    """check(profile, rule, mutate, count, example): the mutated fixture fails only ``rule``."""

    def check(profile, rule, mutate, count, example):
        mutate(episodes)
        report = validate(episodes, file=FILE, profile=profile, records=RECORDS)
        assert report.failed() == [rule]
        outcome = report.outcome(rule)
        assert (outcome.passed, outcome.count, outcome.blocking) == (False, count, RULES[rule].blocking)
        assert outcome.examples[0] == example
        assert outcome.metadata["records"][0] == example[len(FILE) + 1:].split(":", 1)[0]
        assert report.passed is (not RULES[rule].blocking)
        return report

    return check
