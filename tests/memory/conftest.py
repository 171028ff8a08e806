"""A tiny hand-built episode for the memory-strategy tests (three sessions, three turns each), and a canned language
model behind the LLM layer's real response cache (``fake``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Sequence

import pytest

from pipelines.data.schema import Episode, Query, Session, Turn
from pipelines.llm import LLM, Completion, GenerationSettings
from pipelines.llm import build as llm_build
from pipelines.llm.base import Messages
from pipelines.memory import writers
from pipelines.memory.egocentric import strategy as egocentric_strategy

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


class CannedLLM(LLM):
    """A fake language model: ``answer(messages)`` is its text; it records every conversation asked."""

    backend = "local"

    def __init__(self, answer: Callable[[Messages], str], window: int | None = None):
        self.answer, self.window = answer, window
        self.asked: list[Messages] = []
        self.calls = 0

    @property
    def model(self) -> str:
        return "canned"

    def identity(self) -> dict[str, Any]:
        return {"backend": "fake", "model": "canned"}

    @property
    def context_window(self) -> int | None:
        return self.window

    def generate(self, batch: Sequence[Messages], settings: GenerationSettings, progress=None) -> list[Completion]:
        self.calls += 1
        self.asked += [list(m) for m in batch]
        return [Completion(text=self.answer(m), prompt_tokens=self.count_prompt_tokens(m), completion_tokens=5)
                for m in batch]


@pytest.fixture
def fake(monkeypatch):
    """``fake(answer)`` -> the CannedLLM every writer built from now on (backend local) talks to, behind the real
    response cache; the process's shared writers are fresh for each test."""
    monkeypatch.setattr(writers, "_SHARED", {})
    egocentric_strategy._llm_dialogue.cache_clear()
    made: list[CannedLLM] = []

    def install(answer: Callable[[Messages], str], window: int | None = None) -> CannedLLM:
        llm = CannedLLM(answer, window)
        made.append(llm)
        monkeypatch.setitem(llm_build.BACKENDS, "local", lambda cfg, root: llm)
        return llm

    yield install
    egocentric_strategy._llm_dialogue.cache_clear()
