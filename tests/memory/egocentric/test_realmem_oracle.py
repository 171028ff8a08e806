"""``egocentric_gold`` on RealMem (issue 15, part 6): the oracle reads the memories the dataset has.

RealMem's memories (each session's ``extracted_memory``) are the Assistant's, about the User, the main
speaker: the User asks, the Assistant answers from them. The oracle used to keep the main speaker's memories
only, found none, and retrieved nothing for every query. A persona file in the published shape is loaded by
the realmem loader and run through the temporal protocol.
"""

from __future__ import annotations

import json

import pytest

from pipelines.data.loaders import get_loader
from pipelines.evaluate.protocol import ProtocolConfig, run_protocol
from pipelines.memory.egocentric import EgocentricGold, EgocentricGoldConfig, memory_keeper

from tests.memory.egocentric.conftest import KeywordRetriever


def _memory(index, content, uuid):
    return {"index": index, "type": "Dynamic", "content": content, "source_turn": 0,
            "source_content_snapshot": content, "source_role_snapshot": "User", "session_uuid": uuid}


PERSONA = {
    "_metadata": {"person_name": "Rui Costa", "total_sessions": 3, "total_tokens": 321},
    "dialogues": [
        {"session_identifier": "Running_1:S1_01", "session_uuid": "r1", "current_time": "2024-01-01 09:00:00",
         "extracted_memory": [_memory("P1-DM-S1_01-01", "The user adopted a puppy named Biscuit.", "r1"),
                              _memory("P1-DM-S1_01-02", "The user moved to Lisbon in May.", "r1")],
         "dialogue_turns": [
             {"speaker": "User", "content": "I adopted a puppy named Biscuit and moved to Lisbon in May.",
              "is_query": False},
             {"speaker": "Assistant", "content": "Congratulations on both!", "is_query": False}]},
        {"session_identifier": "Running_1:S2_01", "session_uuid": "r2", "current_time": "2024-01-08 09:00:00",
         "extracted_memory": [_memory("P1-DM-S2_01-01", "The user wants to visit friends soon.", "r2")],
         "dialogue_turns": [
             {"speaker": "User", "content": "How is my puppy called again?", "is_query": True, "query_id": "Q1",
              "category_name": "Pets"},
             {"speaker": "Assistant", "content": "Your puppy is Biscuit.", "is_query": False,
              "memory_used": [{"session_uuid": "r1", "content": "The user adopted a puppy named Biscuit."}],
              "memory_session_uuids": ["r1"]},
             {"speaker": "User", "content": "I want to visit friends soon.", "is_query": False},
             {"speaker": "Assistant", "content": "That sounds nice.", "is_query": False}]},
        {"session_identifier": "Running_1:S3_01", "session_uuid": "r3", "current_time": "2024-01-15 09:00:00",
         "extracted_memory": [],
         "dialogue_turns": [
             {"speaker": "User", "content": "Which city have I moved to?", "is_query": True, "query_id": "Q2",
              "category_name": "Home"},
             {"speaker": "Assistant", "content": "You moved to Lisbon.", "is_query": False,
              "memory_used": [{"session_uuid": "r1", "content": "The user moved to Lisbon in May."}],
              "memory_session_uuids": ["r1"]}]},
    ],
}


@pytest.fixture
def persona(tmp_path):
    (tmp_path / "Rui_Costa_dialogues_256k.json").write_text(json.dumps(PERSONA), encoding="utf-8")
    episodes = get_loader("realmem")(tmp_path).episodes
    assert len(episodes) == 1
    return episodes


def test_the_oracle_retrieves_the_assistants_memories_the_evidence_names(persona):
    episode = persona[0]
    assert (episode.main_speaker, memory_keeper(episode)) == ("User", "Assistant")
    retriever = KeywordRetriever()    # "puppy", "biscuit", "lisbon", "visit", "moved": one dimension each
    result = run_protocol(persona, lambda: EgocentricGold(EgocentricGoldConfig(), retriever=retriever),
                          ProtocolConfig(ks=(1, 3), show_progress=False), name="egocentric_gold")
    memory = {s.query_id: s for s in result.scores if s.granularity == "memory"}
    assert sorted(memory) == ["Q1", "Q2"]
    evidence = {q.id: q.evidence_memories for q in episode.queries}
    assert evidence == {"Q1": ["P1-DM-S1_01-01"], "Q2": ["P1-DM-S1_01-02"]}
    # the Assistant's memories are held and retrieved; the question's own words rank the evidence first
    assert all(s.context_tokens > 0 for s in result.scores)
    assert memory["Q1"].metrics["recall@1"] == 1.0 and memory["Q2"].metrics["recall@1"] == 1.0
    assert result.aggregate()["overall"]["memory"]["mrr"] == 1.0


def test_the_oracle_answers_as_the_assistant_to_the_users_question(persona):
    episode = persona[0]
    oracle = EgocentricGold(EgocentricGoldConfig(memory_provenance=False), retriever=KeywordRetriever())
    for session in episode.sessions[:2]:
        oracle.observe(episode, session)
    assert oracle.keeper == "Assistant" and "User" not in oracle.agents and len(oracle) == 3
    q2 = next(q for q in episode.queries if q.id == "Q2")
    context = oracle.context(q2, 1000)
    # the generation sequence of the Assistant's turn: the User's question, the Assistant's tag last
    assert context.endswith("[User] Which city have I moved to? [Assistant]")
    assert "[MEMORY] The user moved to Lisbon in May." in context
