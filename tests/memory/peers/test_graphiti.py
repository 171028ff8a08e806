"""Graphiti as a strategy (pipelines/memory/peers/graphiti.py), against the real ``graphiti-core`` package on its
embedded Kuzu database: the shipped MiniLM as its embedder, its language model a canned one behind the layer's real
response cache (answers in Graphiti's JSON that write facts, answers it cannot read, a window too small) or the tiny
Llama served by ``transformers serve``. The conformance kit runs on it in tests/memory/test_conformance.py."""

from __future__ import annotations

import json
from datetime import datetime

from pipelines.data.schema import Query, Session
from pipelines.memory import Selector, build_strategy
from pipelines.memory.peers.graphiti import Graphiti
from tests.memory.peers.test_mem0 import episode, observe, served_run, settings, two_users
from tests.memory.test_conformance import graph_of
from tests.memory.test_writers import cached_files


def titles(llm) -> list[str]:
    """The response model each request asked for (the title of the schema Graphiti appends to the prompt)."""
    return [json.loads(m[-1]["content"].split("following format:\n\n", 1)[1])["title"] for m in llm.asked]


def graph_rows(memory, query: str) -> list[dict]:
    records, _, _ = memory.run(memory.product.driver.execute_query(query))
    return records


def test_graphiti_writes_facts_through_the_layer_dated_by_the_session_and_forgets_from_every_cache(fake, tmp_path):
    llm = fake(graph_of)
    memory = build_strategy("graphiti", **settings(tmp_path, turns_per_add=1))
    observe(memory, episode())
    assert len(memory) == 3 and {i.text for i in memory._items.values()} == {
        "I adopted a greyhound named Biscuit.", "I am learning the cello.", "My sister moved to Lisbon."}
    asked = titles(llm)
    assert asked[:2] == ["ExtractedEntities", "ExtractedEdges"] and llm.calls == len(asked)
    system, user = llm.asked[0]
    assert system["role"] == "system" and "<CURRENT MESSAGE>\nAna: I adopted a greyhound named Biscuit.\n" in \
        user["content"]
    edges = [m[-1]["content"] for m in llm.asked if "<CURRENT_MESSAGE>\nAna: My sister" in m[-1]["content"]]
    assert edges and "2023-06-01 09:00:00+00:00" in edges[0]          # the session's date, not today's
    top = memory.retrieve(Query(id="q", question="Where did the sister move?"), 1)[0]
    assert (top.text, top.turn_id, top.session_id, top.memory_id) == ("My sister moved to Lisbon.", "S2:1", "S2",
                                                                      "S2/m0")
    assert top.speaker == "Ana" and top.timestamp == datetime(2023, 6, 1, 9)
    report = memory.chat.report()
    assert report["model"] == "local:canned" and report["misses"] == llm.calls and report["memories_written"] == 3
    assert report["longest_prompt"] < 8192 - 512          # fits SmolLM2-135M's window beside 512 new tokens
    assert {r["group_id"] for r in graph_rows(memory, "MATCH (n:Episodic) RETURN n.group_id AS group_id")} == \
        {"episode-e1"}

    again = build_strategy("graphiti", **settings(tmp_path, turns_per_add=1))   # a rerun: the cache answers
    observe(again, episode())
    assert llm.calls == len(asked) and len(again) == 3

    # forgetting Bo's turn: its fact, its episode in Graphiti, its requests in the response cache
    assert again.forget(Selector.of(turns=["S1:3"])) == 1
    assert not [s for s in again.held_texts() if "cello" in s]
    assert [s for s in again.held_texts() if "greyhound" in s]                      # the other turns stay
    assert not [f for f in cached_files(tmp_path / "llm") if "cello" in json.dumps(f)]
    assert len(again) == 2 and not [i for i in again.retrieve(Query(id="q", question="cello"), 5)
                                    if "cello" in i.text]


def test_a_whole_session_in_one_episode_gives_facts_of_the_session_and_forgets_with_it(fake, tmp_path):
    llm = fake(graph_of)
    memory = build_strategy("graphiti", **settings(tmp_path))
    observe(memory, episode())
    assert titles(llm).count("ExtractedEntities") == 2 and len(memory) == 3      # one episode a session
    bodies = {r["name"]: r["content"] for r in graph_rows(memory, "MATCH (n:Episodic) RETURN n.name AS name, "
                                                                  "n.content AS content")}
    assert bodies == {"S1": "Ana: I adopted a greyhound named Biscuit.\nBo: I am learning the cello.",   # no blank
                      "S2": "Ana: My sister moved to Lisbon."}
    items = memory.retrieve(Query(id="q", question="cello"), 3)
    assert {i.session_id for i in items} == {"S1", "S2"}
    assert {i.turn_id for i in items if i.session_id == "S1"} == {None}
    assert memory.forget(Selector.of(turns=["S1:3"])) == 2        # made from the forgotten turn's episode: both
    held = memory.held_texts()
    assert not [s for s in held if "cello" in s or "greyhound" in s] and [s for s in held if "Lisbon" in s]
    assert [r["name"] for r in graph_rows(memory, "MATCH (n:Episodic) RETURN n.name AS name")] == ["S2"]


def test_a_forgotten_fact_goes_by_graphitis_delete_with_the_summaries_written_from_it(fake, tmp_path):
    fake(graph_of)
    memory = build_strategy("graphiti", **settings(tmp_path, turns_per_add=1))
    observe(memory, episode())
    summaries = [r["s"] for r in graph_rows(memory, "MATCH (n:Entity) RETURN n.summary AS s")]
    assert any("greyhound" in s for s in summaries)                # Graphiti appends a fact to its entities
    item = next(i for i in memory._items.values() if "greyhound" in i.text)
    assert memory.forget(Selector.of(memories=[item.key])) == 1
    facts = [r["f"] for r in graph_rows(memory, "MATCH (n:RelatesToNode_) RETURN n.fact AS f")]
    summaries = [r["s"] for r in graph_rows(memory, "MATCH (n:Entity) RETURN n.summary AS s")]
    assert len(facts) == 2 and not [s for s in facts + summaries if "greyhound" in s]
    assert [s for s in memory.held_texts() if s.startswith("Ana: I adopted")]      # the turn (its episode) stays
    assert "greyhound" not in " ".join(i.text for i in memory.retrieve(Query(id="q", question="dog"), 5))


def test_episodes_of_two_users_are_two_graphiti_groups(fake, tmp_path):
    memory, first = two_users("graphiti", graph_of, fake, tmp_path, ("conv 1:a", "conv 1/a"))
    groups = sorted({r["g"] for r in graph_rows(memory, "MATCH (n:Episodic) RETURN n.group_id AS g")})
    assert len(groups) == 2 and all(g.startswith("episode-conv_1_a-") for g in groups)   # Graphiti's characters
    memory.forget(Selector.of(sessions=["S1", "S2"]))
    assert len(memory) == 0 and len(graph_rows(memory, "MATCH (n:Episodic) RETURN n.uuid")) == 2   # only its own
    memory.enter(first)
    assert len(memory) == 3


def test_answers_graphiti_cannot_read_are_counted_and_the_run_goes_on(fake, tmp_path):
    llm = fake(lambda m: "Sure! Ana has a dog." if llm.calls % 2 else '{"extracted_entities": [{"nom": "Ana"}]}')
    memory = build_strategy("graphiti", **settings(tmp_path))
    observe(memory, episode())
    assert len(memory) == 0 and memory.retrieve(Query(id="q", question="dog"), 5) == []
    report = memory.chat.report()
    assert titles(llm) == ["ExtractedEntities", "ExtractedEdges"] * 2     # per episode, whatever the first found
    assert report["unreadable"] == llm.calls and report.get("memories_written", 0) == 0   # no retry, no crash
    assert "product_errors" not in report
    assert len(graph_rows(memory, "MATCH (n:Episodic) RETURN n.uuid")) == 2    # the episodes, with nothing found


def test_a_product_error_is_counted_per_call(fake, tmp_path, monkeypatch):
    fake(graph_of)
    memory = build_strategy("graphiti", **settings(tmp_path))

    async def broken(*args, **kwargs):
        raise RuntimeError("graph down")

    monkeypatch.setattr(type(memory.product), "add_episode", broken)
    observe(memory, episode())
    assert len(memory) == 0 and memory.chat.report()["product_errors"] == 2


def test_an_undated_session_is_dated_by_its_order():
    memory = Graphiti()
    s = Session(id="s", index=3, turns=[])
    assert memory.reference_time(s).isoformat() == "2000-01-04T00:00:00+00:00"
    assert memory.reference_time(s.model_copy(update={"timestamp": datetime(2023, 5, 7)})).isoformat() == \
        "2023-05-07T00:00:00+00:00"


def test_graphiti_through_a_served_model_counts_what_it_cannot_read(tiny_llama, tmp_path, monkeypatch):
    memory, ep, report, model = served_run("graphiti", tiny_llama, tmp_path, monkeypatch)
    assert report["model"] == f"openai:{model}"
    assert report["misses"] >= len(ep.sessions) and report["completion_tokens"] > 0   # each episode asked the server
    assert report.get("refused_too_long", 0) == 0          # the server tells no window: nothing refused on this side
    assert report.get("unreadable", 0) == report["misses"] and len(memory) == 0       # gibberish, counted
