"""LangMem as a strategy (pipelines/memory/peers/langmem.py), against the real ``langmem`` package: its store manager
over LangGraph's InMemoryStore, the shipped MiniLM as the store's embedder, its language model a canned one behind the
layer's real response cache (tool calls in the JSON the bridge reads, answers it cannot read, a window too small) or
the tiny Llama served by ``transformers serve``. The conformance kit runs on it in tests/memory/test_conformance.py."""

from __future__ import annotations

import json
import sys

from pipelines.data.schema import Query
from pipelines.memory import Selector, build_strategy
from pipelines.memory.peers.langmem import TOOLS_HEADER, read_tool_calls
from tests.memory.peers.test_mem0 import episode, observe, served_run, settings, two_users
from tests.memory.test_conformance import langmem_of
from tests.memory.test_writers import cached_files


def existing_ids(messages) -> list[str]:
    """The ids of the existing memories LangMem's prompt shows (``<instance id=...``)."""
    return [part.split(" ", 1)[0] for part in messages[0]["content"].split("<instance id=")[1:]]


def patching(messages) -> str:
    """A canned model that, once memories exist, rewrites the first one with the new message instead of adding."""
    ids = existing_ids(messages)
    if not ids:
        return langmem_of(messages)
    text = json.loads(langmem_of(messages))["tool_calls"][0]["arguments"]["content"]
    return json.dumps({"tool_calls": [{"name": "PatchDoc", "arguments": {
        "json_doc_id": ids[0], "planned_edits": "replace the content",
        "patches": [{"op": "replace", "path": "/content", "value": text}]}}]})


def test_langmem_writes_memories_through_the_layer_and_forgets_from_every_cache(fake, tmp_path):
    llm = fake(langmem_of)
    memory = build_strategy("langmem", **settings(tmp_path, turns_per_add=1))
    observe(memory, episode())
    assert llm.calls == 3 and len(memory) == 3                     # one manager call (one request) a fed turn
    assert TOOLS_HEADER in llm.asked[0][-1]["content"]             # the tools written into the prompt
    assert "<session_" in llm.asked[0][-1]["content"] and "Ana: I adopted a greyhound" in llm.asked[0][-1]["content"]
    assert len(existing_ids(llm.asked[2])) == 2                    # LangMem showed the held memories to its model
    top = memory.retrieve(Query(id="q", question="Where did the sister move?"), 1)[0]
    assert (top.text, top.turn_id, top.session_id, top.memory_id) == ("My sister moved to Lisbon.", "S2:1", "S2",
                                                                      "S2/m0")
    assert {ns for ns in memory.store._data} == {("memories", "episode-e1")}
    report = memory.chat.report()
    assert report["model"] == "local:canned" and report["misses"] == 3 and report["memories_written"] == 3

    again = build_strategy("langmem", **settings(tmp_path, turns_per_add=1))   # a rerun: the same prompts, cached
    observe(again, episode())
    assert llm.calls == 3 and len(again) == 3

    assert again.forget(Selector.of(turns=["S1:3"])) == 1           # the store's delete, and the caches
    assert not [s for s in again.held_texts() if "cello" in s] and [s for s in again.held_texts() if "Lisbon" in s]
    assert not [f for f in cached_files(tmp_path / "llm") if "cello" in json.dumps(f)]
    assert "cello" not in " ".join(i.text for i in again.retrieve(Query(id="q", question="cello"), 5))


def test_a_whole_session_per_call_gives_memories_of_the_session(fake, tmp_path):
    llm = fake(langmem_of)
    memory = build_strategy("langmem", **settings(tmp_path))
    observe(memory, episode())
    assert llm.calls == 2 and len(memory) == 3
    items = memory.retrieve(Query(id="q", question="cello"), 3)
    assert {i.turn_id for i in items if i.session_id == "S1"} == {None}
    assert memory.forget(Selector.of(turns=["S1:3"])) == 2          # made from the forgotten turn's call: both


def test_a_memory_langmem_updates_takes_the_turns_of_the_call_that_updated_it(fake, tmp_path):
    fake(patching)
    memory = build_strategy("langmem", **settings(tmp_path, turns_per_add=1))
    observe(memory, episode())
    assert len(memory) == 1                                         # one memory, rewritten by each later call
    (item,) = memory._items.values()
    assert item.text == "My sister moved to Lisbon." and item.turn_ids == {"S1:1", "S1:3", "S2:1"}
    assert memory.forget(Selector.of(turns=["S1:1"])) == 1 and memory.held_texts() == []


def test_episodes_of_two_users_are_two_namespaces(fake, tmp_path):
    memory, first = two_users("langmem", langmem_of, fake, tmp_path, ("conv.1", "conv_1"))
    names = sorted(ns[1] for ns, items in memory.store._data.items() if items)
    assert len(names) == 2 and names[0].startswith("episode-conv_1") and "." not in "".join(names)
    memory.forget(Selector.of(sessions=["S1", "S2"]))
    assert len(memory) == 0 and len(memory.held_texts()) == 3       # only its own namespace emptied
    memory.enter(first)
    assert len(memory) == 3 and memory.retrieve(Query(id="q", question="Lisbon"), 1)[0].text.endswith("Lisbon.")


def test_answers_the_bridge_cannot_read_and_the_products_errors_are_counted_per_call(fake, tmp_path, monkeypatch):
    llm = fake(lambda m: "Sure! Ana has a dog.")
    memory = build_strategy("langmem", **settings(tmp_path))
    observe(memory, episode())
    assert len(memory) == 0 and memory.retrieve(Query(id="q", question="dog"), 5) == []
    report = memory.chat.report()
    assert llm.calls == 2 and report["unreadable"] == 2 and "product_errors" not in report   # never retried

    async def store_down(*args, **kwargs):
        raise RuntimeError("store down")

    fake(langmem_of)
    memory = build_strategy("langmem", **settings(tmp_path / "again"))
    monkeypatch.setattr(type(memory.store), "aput", store_down)    # LangMem's own write fails
    observe(memory, episode())
    assert len(memory) == 0 and memory.chat.report()["product_errors"] == 2


def test_the_bridge_reads_tool_calls_in_the_forms_models_write():
    names = ["Memory"]
    assert read_tool_calls('```json\n{"tool_calls": [{"name": "Memory", "arguments": {"content": "x"}}]}\n```',
                           names) == [{"name": "Memory", "args": {"content": "x"}}]
    assert read_tool_calls('Here: [{"name": "Memory", "args": "{\\"content\\": \\"y\\"}"}]', names) == \
        [{"name": "Memory", "args": {"content": "y"}}]
    assert read_tool_calls('{"tool_calls": []}', names) == []       # "nothing to remember": readable
    assert read_tool_calls('{"name": "Forget", "arguments": {}}', names) is None
    assert read_tool_calls("no JSON at all", names) is None


def test_nothing_on_the_path_reaches_the_network(fake, tmp_path, monkeypatch):
    """No tiktoken (it downloads its files), no LangSmith tracing, no provider's client."""
    import os

    monkeypatch.setitem(sys.modules, "tiktoken", None)             # any import of it fails
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    fake(langmem_of)
    memory = build_strategy("langmem", **settings(tmp_path))
    observe(memory, episode())
    assert len(memory) == 3 and os.environ["LANGSMITH_TRACING"] == "false"


def test_langmem_through_a_served_model_counts_what_it_cannot_read(tiny_llama, tmp_path, monkeypatch):
    memory, ep, report, model = served_run("langmem", tiny_llama, tmp_path, monkeypatch)
    assert report["model"] == f"openai:{model}" and report["completion_tokens"] > 0
    assert report["misses"] == len(ep.sessions)                     # a request per call: nothing read, no retry
    assert report.get("unreadable", 0) == report["misses"] and len(memory) == 0
