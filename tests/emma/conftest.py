"""A small hand-built MiSC-like episode shared by the EMMA tests.

Mia (nurse) talks with her brother Leo (session 1), her coworker Ana (session 2), Leo again
(session 3). Her memories: S1:M1 "Mia adopted a puppy." (about Mia), S1:M2 "Leo is moving to
Lisbon in May." (about Leo); S2:M1 "Mia named her puppy Biscuit." -> S1:M1, S2:M2 "Mia plans to
visit Leo in Lisbon." -> S1:M2 (across speakers); S3:M1 "Leo moved to Lisbon." -> S1:M2.
"""

from __future__ import annotations

import pytest
import torch

from pipelines.data.schema import Episode, Memory, MemoryLink, Session, Speaker, Turn


def _turns(sid, rows):
    return [Turn(id=f"{sid}:T{i + 1}", speaker=s, text=t, memory_tags=list(tags))
            for i, (s, t, tags) in enumerate(rows)]


def mia_episode() -> Episode:
    s1 = Session(id="E1:S1", index=0, partner="Leo", turns=_turns("E1:S1", [
        ("Mia", "Hi Leo, I adopted a puppy last week.", ()),
        ("Leo", "Congratulations! I am moving to Lisbon in May.", ()),
        ("Mia", "Lisbon sounds lovely, I will miss you.", ()),
    ]), memories=[
        Memory(id="E1:S1:M1", owner="Mia", about="Mia", text="Mia adopted a puppy.", session_id="E1:S1"),
        Memory(id="E1:S1:M2", owner="Mia", about="Leo", text="Leo is moving to Lisbon in May.",
               session_id="E1:S1"),
    ])
    s2 = Session(id="E1:S2", index=1, partner="Ana", turns=_turns("E1:S2", [
        ("Ana", "How is the new puppy doing?", ()),
        ("Mia", "Biscuit is great, and my brother is moving to Lisbon soon.", ("E1:S1:M1",)),
        ("Ana", "You must be sad about your brother.", ()),
        ("Mia", "A little, but I will visit him.", ("E1:S1:M2",)),
    ]), memories=[
        Memory(id="E1:S2:M1", owner="Mia", about="Mia", text="Mia named her puppy Biscuit.",
               session_id="E1:S2"),
        Memory(id="E1:S2:M2", owner="Mia", about="Mia", text="Mia plans to visit Leo in Lisbon.",
               session_id="E1:S2"),
    ], links=[MemoryLink(from_id="E1:S2:M1", to_id="E1:S1:M1"),
              MemoryLink(from_id="E1:S2:M2", to_id="E1:S1:M2")])
    s3 = Session(id="E1:S3", index=2, partner="Leo", turns=_turns("E1:S3", [
        ("Leo", "I finally moved to Lisbon!", ()),
        ("Mia", "I know, and I am coming to visit you with Biscuit.", ("E1:S1:M2",)),
    ]), memories=[
        Memory(id="E1:S3:M1", owner="Mia", about="Leo", text="Leo moved to Lisbon.", session_id="E1:S3"),
    ], links=[MemoryLink(from_id="E1:S3:M1", to_id="E1:S1:M2")])
    return Episode(id="E1", source="misc", main_speaker="Mia", speakers=[
        Speaker(name="Mia", role="nurse"), Speaker(name="Leo", role="her brother"),
        Speaker(name="Ana", role="coworker")], sessions=[s1, s2, s3], split="test")


@pytest.fixture
def episode() -> Episode:
    return mia_episode()


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread while an EMMA test runs: on a shared 2-core machine, two spinning OpenMP
    threads per process slow a MiniLM step by 3-5x; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
