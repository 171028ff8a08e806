"""mem0 as a strategy (pipelines/memory/peers/mem0.py), against the real ``mem0ai`` package: its Memory with an
in-process Qdrant, the shipped MiniLM as its embedder, its language model a canned one behind the layer's real response
cache (the answers mem0 reads, the ones it cannot, a window too small) or the tiny Llama served by ``transformers
serve``. The conformance kit runs on both in tests/memory/test_conformance.py."""

from __future__ import annotations

import json
import re
from datetime import datetime

from pipelines.data.schema import Episode, Query, Session, Speaker, Turn
from pipelines.memory import Selector, build_strategy
from pipelines.memory import writers
from pipelines.memory.conformance import juno_episode
from tests.memory.test_conformance import facts_of
from tests.memory.test_writers import cached_files

def settings(tmp_path, **extra):
    return dict(cache_dir=str(tmp_path / "emb"), llm_cache_dir=str(tmp_path / "llm"), **extra)


def episode() -> Episode:
    s1 = Session(id="S1", index=0, timestamp=datetime(2023, 5, 7, 9), partner="Bo", turns=[
        Turn(id="S1:1", speaker="Ana", text="I adopted a greyhound named Biscuit."),
        Turn(id="S1:2", speaker="Bo", text="   "),                          # a blank turn: not fed
        Turn(id="S1:3", speaker="Bo", text="I am learning the cello.")])
    s2 = Session(id="S2", index=1, timestamp=datetime(2023, 6, 1, 9), partner="Bo", turns=[
        Turn(id="S2:1", speaker="Ana", text="My sister moved to Lisbon.")])
    return Episode(id="e1", source="test", main_speaker="Ana", speakers=[Speaker(name="Ana"), Speaker(name="Bo")],
                   sessions=[s1, s2])


def observe(memory, ep):
    for s in ep.sessions:
        memory.observe(ep, s)


def test_mem0_raw_stores_each_message_as_one_memory_of_its_turn(tmp_path):
    memory = build_strategy("mem0_raw", **settings(tmp_path))
    observe(memory, episode())
    assert len(memory) == 3                                        # one memory per (non-blank) message
    top = memory.retrieve(Query(id="q", question="Which instrument is Bo learning?"), 3)
    assert top[0].text == "Bo: I am learning the cello." and top[0].turn_id == "S1:3" and top[0].session_id == "S1"
    assert top[0].memory_id == "S1/m1" and top[0].speaker == "Bo" and top[0].timestamp == datetime(2023, 5, 7, 9)
    assert [i.score for i in top] == sorted((i.score for i in top), reverse=True)
    assert writers.writer_reports() == [] or all(r["role"] != "mem0_raw.llm" for r in writers.writer_reports())


def test_mem0_extracts_through_the_layer_dated_by_the_session_and_forgets_from_every_cache(fake, tmp_path):
    llm = fake(facts_of)
    memory = build_strategy("mem0", **settings(tmp_path, turns_per_add=1))
    observe(memory, episode())
    assert llm.calls == 3 and len(memory) == 3                     # one add (one request) a fed turn
    system, user = llm.asked[0]
    assert system["role"] == "system" and "Memory Extractor" in system["content"]
    assert "## Observation Date\n2023-05-07" in user["content"] and "## Current Date\n2023-05-07" in user["content"]
    assert "## Current Date\n2023-06-01" in llm.asked[2][1]["content"]   # the session's date, not today's
    top = memory.retrieve(Query(id="q", question="Where did the sister move?"), 1)[0]
    assert (top.text, top.turn_id, top.session_id) == ("Ana: My sister moved to Lisbon.", "S2:1", "S2")
    report = memory.chat.report()
    assert report["model"] == "local:canned" and report["misses"] == 3 and report["memories_written"] == 3
    assert len(cached_files(tmp_path / "llm")) == 3

    again = build_strategy("mem0", **settings(tmp_path, turns_per_add=1))   # a rerun: the cache answers
    observe(again, episode())
    assert llm.calls == 3 and len(again) == 3

    # forgetting Bo's turn: its memory, its request in the response cache, its text in the embedding cache
    assert again.forget(Selector.of(turns=["S1:3"])) == 1
    assert not [s for s in again.held_texts() if "cello" in s]
    assert not [f for f in cached_files(tmp_path / "llm") if "cello" in json.dumps(f)]


def test_a_whole_session_in_one_add_gives_memories_of_the_session_not_of_a_turn(fake, tmp_path):
    llm = fake(facts_of)
    memory = build_strategy("mem0", **settings(tmp_path))
    observe(memory, episode())
    assert llm.calls == 2 and len(memory) == 3                     # one add a session
    items = memory.retrieve(Query(id="q", question="cello"), 3)
    assert {i.session_id for i in items} == {"S1", "S2"}
    assert {i.turn_id for i in items if i.session_id == "S1"} == {None}
    assert memory.forget(Selector.of(turns=["S1:3"])) == 2        # made from the forgotten turn: both S1 memories


def test_answers_mem0_cannot_read_are_counted_and_the_run_goes_on(fake, tmp_path):
    fake(lambda m: "Sure! Ana has a dog.")
    memory = build_strategy("mem0", **settings(tmp_path))
    observe(memory, episode())
    assert len(memory) == 0 and memory.retrieve(Query(id="q", question="dog"), 5) == []
    report = memory.chat.report()
    assert report["unreadable"] == 2 and report.get("memories_written", 0) == 0


def test_a_product_error_is_counted_per_call(fake, tmp_path, monkeypatch):
    fake(facts_of)
    memory = build_strategy("mem0", **settings(tmp_path))

    def broken(*args, **kwargs):
        raise RuntimeError("vector store down")

    monkeypatch.setattr(type(memory.product), "add", broken)
    observe(memory, episode())
    assert len(memory) == 0 and memory.chat.report()["product_errors"] == 2


def two_users(name: str, answers, fake, tmp_path, ids: tuple[str, str]):
    """The product ``name`` fed two copies of the test episode (the same speakers) under the episode ids ``ids``,
    its model the canned ``answers``: (the memory, the first episode)."""
    fake(answers)
    memory = build_strategy(name, **settings(tmp_path))
    first, second = (episode().model_copy(update={"id": eid}) for eid in ids)
    observe(memory, first)
    observe(memory, second)
    return memory, first


def served_run(name: str, tiny_llama, tmp_path, monkeypatch):
    """The product ``name`` fed the Juno episode with the tiny Llama served by ``transformers serve`` on loopback as
    its model: (the memory, the episode, the writer's report, the served model's name)."""
    from pipelines.llm.serve import TransformersServer

    monkeypatch.setattr(writers, "_SHARED", {})
    with TransformersServer(tiny_llama, log=tmp_path / "serve.log") as server:
        served = {"backend": "openai", "base_url": server.base_url, "model": server.model, "max_new_tokens": 8,
                  "max_retries": 3}
        memory = build_strategy(name, **settings(tmp_path, llm=served))
        ep = juno_episode()
        observe(memory, ep)
        return memory, ep, memory.chat.report(), server.model


def test_mem0_through_a_served_model_counts_what_it_cannot_read(tiny_llama, tmp_path, monkeypatch):
    memory, ep, report, model = served_run("mem0", tiny_llama, tmp_path, monkeypatch)
    assert report["model"] == f"openai:{model}"
    assert report["misses"] == len(ep.sessions) and report["completion_tokens"] > 0   # each add asked the server once
    assert report.get("refused_too_long", 0) == 0          # the server tells no window: nothing refused on this side
    assert report.get("unreadable", 0) == len(ep.sessions) and len(memory) == 0       # gibberish, counted


def test_mem0_beside_the_built_ins_in_the_benchmark_says_why_it_wrote_nothing(tmp_path, smollm2_models, monkeypatch):
    """``python -m pipelines benchmark`` on LoCoMo with the shipped SmolLM2 as mem0's model: ``mem0_raw`` is scored
    beside ``bm25``; ``mem0`` ran, every extraction prompt over SmolLM2's window, and the report says so."""
    from tests._cli import LOCOMO_FIXTURE, run_cli, tmp_project

    monkeypatch.setenv("MNEMOS_LLM_MODELS", str(smollm2_models))
    root = tmp_project(tmp_path / "p")
    out = tmp_path / "report"
    proc = run_cli(["benchmark", "--suite", "locomo", "--path", str(LOCOMO_FIXTURE), "--strategies",
                    "bm25,mem0_raw,mem0", "--out", str(out), "--no-answers", "-q"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())["locomo"]
    assert {"bm25", "mem0_raw", "mem0"} <= set(metrics)
    assert metrics["mem0_raw"]["turn/recall@5"] > 0
    report = (out / "benchmark.md").read_text()
    assert re.search(r"`mem0` returned no item for any of its \d+ scored queries \(local:smollm2-135m-instruct: \d+ "
                     r"prompts over the model's window\)", report), report
    assert "mem0: mem0.llm (local:smollm2-135m-instruct)" in report                 # the writers table names the model
