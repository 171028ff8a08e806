"""Memory writers through the LLM layer (pipelines/memory/writers.py): G-Long's extractor (``graph``, extraction
llm), EMMA's summarise and link (``egocentric``, memory_source / link_source llm) and session summaries
(``session_summary``, summaries llm), each with a fake language model that returns canned texts behind the layer's
real response cache: the prompts, the parsing, the tally, the cache hits of a rerun, forgetting; then the graph
strategy through the real openai backend against ``transformers serve`` of the tiny Llama; the config errors."""

from __future__ import annotations

import json
import re
import pytest

from pipelines.data.schema import Episode, Query, Triplet
from pipelines.emma.formats import SEP
from pipelines.errors import ConfigError
from pipelines.glong.extractor import SYSTEM_INSTRUCTION, user_message
from pipelines.llm import LLMConfig
from pipelines.llm.base import Messages, plain_prompt
from pipelines.memory import Selector, build_strategy
from pipelines.memory import writers
from pipelines.memory.egocentric import Egocentric, EgocentricConfig
from pipelines.memory.egocentric import strategy as egocentric_strategy
from pipelines.memory.session_summary import SessionSummary
from pipelines.memory.writers import (DIALOGUE_INSTRUCTIONS, SUMMARY_INSTRUCTION, LLMExtractor, answer_text,
                                      as_memories, writer_reports)
from tests.memory.conftest import CannedLLM, build_episode
from pipelines.memory.conformance import FORGOTTEN, held_strings, juno_episode
from tests.memory.test_conformance import HashRetriever, summariser

GRAPH = dict(embedder="hashing", hashing_dim=128, cache_dir=None)   # no MiniLM, no embedding cache
LOCAL = {"backend": "local", "model": "canned"}                       # never loaded: the fake stands in


def rerun(monkeypatch):
    """A new process, as far as the writers go: nothing shared, the response cache on disk kept."""
    monkeypatch.setattr(writers, "_SHARED", {})
    egocentric_strategy._llm_dialogue.cache_clear()


def cached_files(folder) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / "responses").glob("??/*.json"))]


def observe_all(strategy, episode: Episode) -> None:
    strategy.prepare([episode])
    for session in episode.sessions:
        strategy.observe(episode, session)


# --- graph: extraction llm -----------------------------------------------------------------------------------------

EXTRACTED = {   # utterance -> the canned answer: valid JSON, JSON inside text (repaired), prose (dropped)
    "I adopted a greyhound named Biscuit last week.":
        '[{"subject": "Ana", "relation": "has_pet", "object": "greyhound named Biscuit"}]',
    "I am learning to play the cello.":
        'Sure! Here are the triplets: [{"subject": "Ben", "relation": "learns", "object": "cello"},]',
    "My sister moved to Lisbon.": "<think>Ana's sister moved.</think>"
                                  '[{"subject": "Ana\'s sister", "relation": "lives_in", "object": "Lisbon"}]',
    "I booked a trip to Oslo.": "Ana is travelling to Oslo.",
}


def extractor_answer(messages: Messages) -> str:
    text = re.search(r': (.*)"$', messages[1]["content"]).group(1)
    return EXTRACTED.get(text, "[]")


def test_graph_extraction_by_an_llm_uses_the_papers_prompt_parses_counts_and_reruns_from_the_cache(
        fake, episode, tmp_path, monkeypatch, q):
    llm = fake(extractor_answer)
    memory = build_strategy("graph", extraction="llm", extractor_llm=LOCAL, llm_cache_dir=str(tmp_path), **GRAPH)
    observe_all(memory, episode)

    turns = [t for s in episode.sessions for t in s.turns]
    assert llm.calls == 1                                      # prepare asked every turn at once; observe nothing
    assert llm.asked == [[{"role": "system", "content": SYSTEM_INSTRUCTION},
                          {"role": "user", "content": user_message(t.speaker, t.text)}] for t in turns]
    facts = {(f.subject, f.relation, f.object, f.turn_id) for f in memory.bank.facts()}
    assert facts == {("Ana", "has_pet", "greyhound named Biscuit", "e1:S1:T1"), ("Ben", "learns", "cello", "e1:S1:T2"),
                     ("Ana's sister", "lives_in", "Lisbon", "e1:S1:T3")}
    assert memory.retrieve(q("Where does Ana's sister live?"), 1)[0].turn_id == "e1:S1:T3"
    report = memory.extractor.report()
    assert report["parse"] == {"valid": 7, "repaired": 1, "dropped": 1, "items_dropped": 0}   # 6 "[]" are valid
    assert (report["calls"], report["hits"], report["misses"], report["utterances"], report["triplets"]) == \
        (9, 0, 9, 9, 3)
    assert report["role"] == "graph.extractor_llm" and report in writer_reports()
    assert len(cached_files(tmp_path)) == 9

    rerun(monkeypatch)                                         # the same settings in a new process
    again_llm = fake(extractor_answer)
    again = build_strategy("graph", extraction="llm", extractor_llm=LOCAL, llm_cache_dir=str(tmp_path), **GRAPH)
    observe_all(again, episode)
    assert again_llm.calls == 0                                # every answer from the response cache
    assert {(f.subject, f.object) for f in again.bank.facts()} == {(s, o) for s, _, o, _ in facts}
    assert (again.extractor.report()["hits"], again.extractor.report()["misses"]) == (9, 0)


def test_one_extractor_serves_every_episode_and_asks_each_utterance_once(fake, tmp_path):
    llm = fake(lambda m: "[]")
    settings = dict(extraction="llm", extractor_llm={**LOCAL, "max_new_tokens": 40}, llm_cache_dir=str(tmp_path),
                    **GRAPH)
    first, second = build_strategy("graph", **settings), build_strategy("graph", **settings)
    assert first.extractor is second.extractor                 # a fresh strategy per episode shares the writer
    assert first.extractor([("Ana", "Hi."), ("Ana", "Hi."), ("Ben", "Hi.")]) == [[], [], []]
    assert second.extractor([("Ana", "Hi.")]) == [[]] and len(llm.asked) == 2
    other = build_strategy("graph", **{**settings, "extractor_llm": {**LOCAL, "max_new_tokens": 41}})
    assert other.extractor is not first.extractor


def test_a_prompt_longer_than_the_window_is_cut_to_fit(fake, tmp_path):
    llm = fake(lambda m: "[]", window=200)
    extractor = build_strategy("graph", extraction="llm", extractor_llm={**LOCAL, "max_new_tokens": 40},
                               llm_cache_dir=str(tmp_path), **GRAPH).extractor
    extractor([("Ana", "word " * 400), ("Ana", "short")])
    assert [llm.count_prompt_tokens(m) <= 200 - 40 for m in llm.asked] == [True, True]
    assert llm.asked[0][1]["content"].startswith(user_message("Ana", "word word")[:40])
    assert extractor.report()["truncated"] == 1


def test_a_reasoning_block_is_cut_before_parsing():
    assert answer_text('<think>maybe [1]</think>\n[{"a": 1}]') == '[{"a": 1}]'
    assert answer_text("<think>still thinking when the tokens ran out [") == ""
    assert answer_text("  positive\n") == "positive"


def test_forgetting_a_speaker_removes_the_extractors_answers_from_its_memo_and_the_cache(fake, tmp_path):
    episode = juno_episode()
    fake(lambda m: json.dumps([{"subject": "x", "relation": "said", "object": m[1]["content"][47:-1]}]))
    memory = build_strategy("graph", extraction="llm", extractor_llm=LOCAL, llm_cache_dir=str(tmp_path), **GRAPH)
    observe_all(memory, episode)
    assert any(FORGOTTEN.search(json.dumps(f)) for f in cached_files(tmp_path))

    memory.forget(Selector.of(speakers=["Wren"]))

    assert not [s for s in held_strings(memory) if FORGOTTEN.search(s)]
    left = [f["messages"][1]["content"] for f in cached_files(tmp_path)]
    assert left and not [t for t in left if FORGOTTEN.search(t)]   # what was said with Vivek, not naming Wren
    assert all("Vivek" in t or "Kyoto" in t for t in left)


# --- egocentric: memory_source / link_source llm --------------------------------------------------------------------

def dialogue_answer(messages: Messages) -> str:
    """An instruction model's ways: a bullet list of memories (nothing about Wren), a one-word link verdict."""
    source = messages[-1]["content"]
    if source.startswith("summarize [ABOUT_"):
        about = source[len("summarize [ABOUT_"):].split("]")[0]
        return "[NONE]" if about != "Juno" else "- Juno collects old stamps.\n- Juno moved to Kyoto.\n"
    return "Positive." if "Kyoto" in source and "stamps" in source else "negative"


def test_egocentric_memories_written_and_linked_by_an_instructed_llm(fake, tmp_path):
    llm = fake(dialogue_answer)
    episode = juno_episode()
    config = EgocentricConfig(memory_source="llm", link_source="llm", dialogue_llm=LOCAL, llm_cache_dir=str(tmp_path))
    memory = Egocentric(config, retriever=HashRetriever())
    observe_all(memory, episode)

    systems = {m[0]["content"] for m in llm.asked}
    assert systems == {DIALOGUE_INSTRUCTIONS["summarize"], DIALOGUE_INSTRUCTIONS["link"]}
    assert all(m[1]["content"].startswith(("summarize [ABOUT_", "memory sentence 1: ")) for m in llm.asked)
    juno = memory.memory_of("Juno")
    assert [m.text for m in juno.ordered()][:2] == ["Juno collects old stamps.", "Juno moved to Kyoto."]
    first = juno.ordered()[:2]
    assert first[0].id in juno.links[first[1].id]              # "Positive." links them; "negative" never does:
    texts = {m.id: m.text for m in juno.ordered()}             # no two "stamps" (or two "Kyoto") memories linked
    assert all({"stamps" in texts[a], "stamps" in texts[b]} == {True, False}
               for a, linked in juno.links.items() for b in linked)
    report = memory.dialogue.fn.report()
    assert report["role"] == "egocentric.dialogue_llm" and report["misses"] == len(llm.asked) == report["calls"]
    assert memory.granularities == ("session",)


def test_a_fine_tuned_dialogue_llm_reads_the_bare_input_and_its_answer_is_kept_as_written(fake, tmp_path):
    llm = fake(lambda m: f"Juno likes tea. {SEP} Juno has a cat." if "summarize" in m[-1]["content"] else "negative")
    config = EgocentricConfig(memory_source="llm", link_source="llm", dialogue_llm=LOCAL, llm_cache_dir=str(tmp_path),
                              dialogue_llm_instructed=False)
    memory = Egocentric(config, retriever=HashRetriever())
    observe_all(memory, juno_episode())
    assert all(len(m) == 1 and m[0]["role"] == "user" for m in llm.asked)
    assert {m.text for m in memory.memory_of("Juno").ordered()} == {"Juno likes tea.", "Juno has a cat."}
    assert as_memories("1. a\n2) b\n\n* c") == f"a {SEP} b {SEP} c" and as_memories("x [NONE]") == "x [NONE]"


def test_egocentric_forget_removes_the_llms_answers_from_the_cache(fake, tmp_path, monkeypatch):
    fake(lambda m: summariser([m[-1]["content"]], 64)[0])     # a memory per turn of X; a link on a shared word
    config = EgocentricConfig(memory_source="llm", link_source="llm", dialogue_llm=LOCAL, llm_cache_dir=str(tmp_path))
    memory = Egocentric(config, retriever=HashRetriever())
    observe_all(memory, juno_episode())
    memory.forget(Selector.of(speakers=["Wren"]))
    assert not [s for s in held_strings(memory) if FORGOTTEN.search(s)]
    assert not [f for f in cached_files(tmp_path) if FORGOTTEN.search(json.dumps(f))]


# --- session_summary: summaries llm ----------------------------------------------------------------------------------

def summary_answer(messages: Messages) -> str:
    lines = [line for line in messages[-1]["content"].splitlines() if ": " in line and not line.startswith("Session")]
    return " ".join(f"{line.split(': ', 1)[0]} said {line.split(': ', 1)[1]}" for line in lines)


def test_session_summaries_written_by_an_llm_for_data_without_any(fake, tmp_path, q):
    llm = fake(summary_answer)
    episode = build_episode()
    bare = episode.model_copy(update={"sessions": [s.model_copy(update={"summary": None}) for s in episode.sessions]})
    assert "has no session summaries" in SessionSummary.unavailable([bare], {})
    settings = {"summaries": "llm", "summary_llm": LOCAL, "llm_cache_dir": str(tmp_path)}
    assert SessionSummary.unavailable([bare], settings) is None
    memory = build_strategy("session_summary", **settings)
    observe_all(memory, bare)

    assert len(memory) == 3 and llm.calls == 1                 # every session, one batch in prepare
    assert llm.asked[0] == [{"role": "system", "content": SUMMARY_INSTRUCTION},
                            {"role": "user", "content": "Session date: 2023-01-05\nAna: I adopted a greyhound named "
                             "Biscuit last week.\nBen: I am learning to play the cello.\nAna: My sister moved to "
                             "Lisbon."}]
    top = memory.retrieve(q("Who plays the cello?"), 1)[0]
    assert top.session_id == "e1:S3" and top.text.startswith("Ana said Biscuit chewed")   # "cello recital", S3
    assert memory.summariser.report()["misses"] == 3


def test_a_fine_tuned_summariser_reads_the_prompt_of_g_longs_small_summariser(fake, tmp_path):
    from pipelines.glong.prompts import DIALOGUE_INSTRUCTION, summary_prompt
    from pipelines.glong.tasks import session_summary_pairs

    llm = fake(lambda m: "A summary.")
    memory = build_strategy("session_summary", summaries="llm", summary_llm=LOCAL, llm_cache_dir=str(tmp_path),
                            summary_llm_instructed=False)
    episode = build_episode()
    observe_all(memory, episode)
    assert llm.asked[0] == [{"role": "user", "content": f"{DIALOGUE_INSTRUCTION}\n\nAna: I adopted a greyhound named "
                             "Biscuit last week.\nBen: I am learning to play the cello.\nAna: My sister moved to "
                             "Lisbon."}]

    class Plain:   # a tokenizer without a chat template: the summariser's prompt is the plain layout
        chat_template = None
    pair = session_summary_pairs([episode])[0]
    assert plain_prompt(llm.asked[0]) == summary_prompt(Plain(), DIALOGUE_INSTRUCTION, pair.dialogue)   # as trained


def test_session_summary_forget_removes_the_llms_summary_from_the_cache(fake, tmp_path):
    fake(lambda m: summary_answer([{"role": "user", "content": m[-1]["content"].splitlines()[1]}]))  # 1st turn
    memory = build_strategy("session_summary", summaries="llm", summary_llm=LOCAL, llm_cache_dir=str(tmp_path))
    observe_all(memory, juno_episode())
    assert memory.forget(Selector.of(speakers=["Wren"])) == 2
    assert not [s for s in held_strings(memory) if FORGOTTEN.search(s)]
    assert [i.text for i in memory._items] == ["Vivek said I am terrified of snakes."]   # kept: names no Wren
    assert cached_files(tmp_path) == []     # its request went all the same: S2's dialogue says Wren plays the violin


# --- the real openai backend against a served model -------------------------------------------------------------------

def test_graph_extraction_through_a_served_model_and_again_from_the_cache_once_the_server_is_gone(
        tiny_llama, tmp_path, monkeypatch, episode):
    from pipelines.llm.serve import TransformersServer

    monkeypatch.setattr(writers, "_SHARED", {})
    with TransformersServer(tiny_llama, log=tmp_path / "serve.log") as server:
        served = {"backend": "openai", "base_url": server.base_url, "model": server.model, "max_new_tokens": 6,
                  "max_retries": 3}   # the layer's retries: a loaded machine's server may drop a connection
        memory = build_strategy("graph", extraction="llm", extractor_llm=served, llm_cache_dir=str(tmp_path), **GRAPH)
        observe_all(memory, episode)
        report = memory.extractor.report()
    assert report["model"] == f"openai:{server.model}" and report["misses"] == 9 and report["completion_tokens"] > 0
    assert sum(report["parse"][k] for k in ("valid", "repaired", "dropped")) == 9   # gibberish, counted
    assert {f["identity"]["backend"] for f in cached_files(tmp_path)} == {"openai"}

    monkeypatch.setattr(writers, "_SHARED", {})                # the server is stopped: the cache answers alone
    again = build_strategy("graph", extraction="llm", extractor_llm=served, llm_cache_dir=str(tmp_path), **GRAPH)
    observe_all(again, episode)
    assert (again.extractor.report()["hits"], again.extractor.report()["misses"]) == (9, 0)
    assert len(again) == len(memory)


# --- settings --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, settings, message", [
    ("graph", {"extraction": "llm"}, "graph.extraction is 'llm' but graph.extractor_llm is not set"),
    ("graph", {"extractor_llm": LOCAL}, "graph.extractor_llm is set but graph.extraction is 'ground_truth'"),
    ("graph", {"extraction": "llm", "extractor_llm": {"modle": "x"}},
     r"graph.extractor_llm.modle is not a setting of a language model"),
    ("graph", {"extraction": "llm", "extractor_llm": {"backend": "openai", "model": "m"}},
     r"graph.extractor_llm.base_url is None: the openai backend needs the server's URL"),
    ("graph", {"extraction": "llm", "extractor_llm": "qwen"}, "graph.extractor_llm must be a mapping"),
    ("graph", {"extraction": "silver"}, r"graph.extraction must be one of \['ground_truth', 'model', 'llm'\]"),
    ("egocentric", {"memory_source": "llm", "link_source": "llm"},
     "memory_source/link_source is 'llm' but egocentric.dialogue_llm is not set"),
    ("egocentric", {"memory_source": "llm", "link_source": "model", "dialogue_llm": LOCAL}, "mix 'model' and 'llm'"),
    ("egocentric", {"memory_source": "llm", "link_source": "gold", "dialogue_llm": LOCAL}, "set link_source: llm"),
    ("egocentric", {"dialogue_llm": LOCAL}, "egocentric.dialogue_llm is set but neither"),
    ("egocentric", {"memory_source": "llm", "link_source": "llm", "dialogue_llm": {"api_key": "sk-1"}},
     "egocentric.dialogue_llm.api_key: the API key is never configured"),
    ("session_summary", {"summaries": "llm"}, "summaries is 'llm' but session_summary.summary_llm is not set"),
    ("session_summary", {"summary_llm": LOCAL}, "summary_llm is set but session_summary.summaries is 'dataset'"),
    ("session_summary", {"summaries": "model"}, "summaries must be 'dataset' or 'llm'"),
])
def test_writer_settings_are_checked_naming_the_key(name, settings, message):
    with pytest.raises(ConfigError, match=message):
        build_strategy(name, **settings)


def test_a_suite_file_sets_an_llm_writer_and_an_adapter_not_trained_yet_lists_the_strategy_as_missing(tmp_path):
    from pipelines.errors import ModelNotTrained
    from pipelines.evaluate.suite import load_suite
    from pipelines.evaluate.suite_run import evaluate_suite

    absent = str(tmp_path / "models" / "glong_extractor" / "adapter")
    llm = {"backend": "local", "model": "smollm2-135m-instruct", "adapter": absent}
    suite_file = tmp_path / "locomo_llm.yaml"
    suite_file.write_text(json.dumps({   # YAML: the suite's settings of the example
        "name": "locomo_llm", "version": 1, "source": "synthetic", "strategies": ["bm25", "graph"],
        "strategy_settings": {"graph": {"extraction": "llm", "extractor_llm": llm}}}))
    suite = load_suite(suite_file)
    with pytest.raises(ModelNotTrained, match=rf"graph.extractor_llm.adapter = '{absent}' holds no LoRA adapter"):
        build_strategy("graph", **suite.strategy_settings["graph"])
    asked = build_episode().model_copy(update={"queries": [
        Query(id="q1", question="Where did Ana's sister move?", evidence_turns=["e1:S1:T3"],
              evidence_sessions=["e1:S1"])]})
    run = evaluate_suite(suite, [asked], {"graph": GRAPH}, show_progress=False)
    assert "holds no LoRA adapter" in run.missing["graph"] and "bm25" in run.results


def test_the_benchmark_gives_the_writers_the_projects_llm_cache(tmp_path):
    from pipelines.evaluate.suite import strategy_defaults

    defaults = strategy_defaults(["graph", "egocentric", "session_summary", "bm25"], tmp_path)
    assert {k: v["llm_cache_dir"] for k, v in defaults.items()} == {
        k: str(tmp_path / ".cache" / "llm") for k in ("graph", "egocentric", "session_summary")}


def test_an_llm_extractor_is_the_graphs_extractor_interface():
    llm = CannedLLM(lambda m: '[{"subject": "a", "relation": "b", "object": "c"}]')
    extractor = LLMExtractor(llm, LLMConfig(max_new_tokens=9))
    assert extractor([("A", "x"), ("B", "y")]) == [[Triplet(subject="a", relation="b", object="c")]] * 2
    assert extractor.report()["model"] == "local:canned" and "calls" not in extractor.report()   # no cache, no stats


def test_the_benchmark_reports_what_each_writer_did_in_its_run(fake, episode, tmp_path, monkeypatch):
    """run_protocol records each LLM writer's figures for its own run (a second run: every answer from the cache,
    no new utterance parsed twice), and the suite report prints them as a table and writer/... metrics."""
    from pipelines.evaluate.protocol import ProtocolConfig, run_protocol
    from pipelines.evaluate.report import writers_markdown
    from pipelines.evaluate.suite import Suite
    from pipelines.evaluate.suite_run import SuiteRun, writer_rows
    from pipelines.memory.tokens import DEFAULT_COUNTER

    fake(extractor_answer)
    settings = dict(extraction="llm", extractor_llm=LOCAL, llm_cache_dir=str(tmp_path), **GRAPH)
    config = ProtocolConfig(show_progress=False)
    first = run_protocol([episode], "graph", config, settings)
    [w] = first.writers
    assert (w["role"], w["calls"], w["misses"], w["utterances"], w["triplets"]) == ("graph.extractor_llm", 9, 9, 9, 3)
    assert w["parse"] == {"valid": 7, "repaired": 1, "dropped": 1, "items_dropped": 0}
    # the same writer again: its memo answers every utterance, so this run asked nothing and parsed nothing
    assert run_protocol([episode], "graph", config, settings).writers == []
    assert run_protocol([episode], "bm25", config).writers == []

    suite = Suite(name="t", version=1, source="synthetic", strategies=("graph",))
    run = SuiteRun(suite, 1, {"graph": first}, {}, DEFAULT_COUNTER)
    [row] = writer_rows(run).values()
    assert (row["requests"], row["asked"], row["triplets"], row["parsed"], row["repaired"], row["unparseable"]) == \
        (9.0, 9.0, 3.0, 7.0, 1.0, 1.0)
    md = "\n".join(writers_markdown(run))
    assert "### Language-model writers" in md and "graph: graph.extractor_llm (" in md
    assert run.metrics()["graph"]["writer/graph.extractor_llm/unparseable"] == 1.0

    # a new process (a resumed shard, a rerun): every answer from the response cache, the same token figures
    monkeypatch.setattr(writers, "_SHARED", {})
    again = run_protocol([episode], "graph", config, settings)
    [w2] = again.writers
    assert (w2["calls"], w2["hits"], w2["misses"], w2["prompt_tokens"], w2["completion_tokens"]) == (9, 9, 0, 0, 0)
    [row2] = writer_rows(SuiteRun(suite, 1, {"graph": again}, {}, DEFAULT_COUNTER)).values()
    assert row["prompt tokens"] > 0 and row["completion tokens"] > 0
    assert (row2["prompt tokens"], row2["completion tokens"], row2["cache hits"], row2["asked"]) == \
        (row["prompt tokens"], row["completion tokens"], 9.0, 0.0)
