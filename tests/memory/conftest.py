"""A tiny hand-built episode for the memory-strategy tests (three sessions, three turns each)."""

from __future__ import annotations

from datetime import datetime

import pytest

from pipelines.data.schema import Episode, Query, Session, Turn

TURNS = {
    "S1": [("Ana", "I adopted a greyhound named Biscuit last week."),
           ("Ben", "I am learning to play the cello."),
           ("Ana", "My sister moved to Lisbon.")],
    "S2": [("Ana", "I started a new job as a pharmacist."),
           ("Cleo", "We are renovating the kitchen this spring."),
           ("Ana", "The weather was awful on Tuesday.")],
    "S3": [("Ana", "Biscuit chewed my running shoes."),
           ("Ben", "The cello recital went well."),
           ("Ana", "I booked a trip to Oslo.")],
}
DATES = {"S1": datetime(2023, 1, 5), "S2": datetime(2023, 2, 10), "S3": datetime(2023, 3, 1)}
PARTNER = {"S1": "Ben", "S2": "Cleo", "S3": "Ben"}
SUMMARY = {"S1": "Ana has a greyhound called Biscuit. Ben is learning the cello. Ana's sister lives in Lisbon.",
           "S2": "Ana became a pharmacist. Cleo is renovating her kitchen.",
           "S3": None}


def build_episode(dated: bool = True) -> Episode:
    sessions = []
    for index, (sid, turns) in enumerate(TURNS.items()):
        sessions.append(Session(
            id=f"e1:{sid}", index=index, timestamp=DATES[sid] if dated else None, partner=PARTNER[sid],
            summary=SUMMARY[sid],
            turns=[Turn(id=f"e1:{sid}:T{n}", speaker=who, text=text) for n, (who, text) in enumerate(turns, 1)]))
    return Episode(id="e1", source="test", main_speaker="Ana", sessions=sessions)


@pytest.fixture
def episode() -> Episode:
    return build_episode()


@pytest.fixture
def undated_episode() -> Episode:
    return build_episode(dated=False)


def ask(question: str) -> Query:
    return Query(id="q", question=question)


@pytest.fixture
def q():
    """``q("text")`` -> a Query asked after the last session."""
    return ask


def observe_all(strategy, episode: Episode) -> None:
    for session in episode.sessions:
        strategy.observe(episode, session)


@pytest.fixture
def fill():
    """``fill(strategy, episode)`` observes every session of the episode."""
    return observe_all
