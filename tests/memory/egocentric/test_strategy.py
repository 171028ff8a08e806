"""Egocentric memory: per-agent, per-partner stores; links; top-1 plus links; isolation; forgetting."""

from __future__ import annotations

import pytest

from pipelines.data.schema import Memory, Query
from pipelines.errors import ConfigError, DataError
from pipelines.memory import STRATEGIES, Selector
from pipelines.memory.egocentric import Egocentric, EgocentricConfig


def observed(episode, retriever, upto, **settings):
    strategy = Egocentric(EgocentricConfig(**settings), retriever=retriever)
    for session in episode.sessions[:upto]:
        strategy.observe(episode, session)
    return strategy


def ask(question, session_id="E1:S3"):
    return Query(id="q", session_id=session_id, question=question)


def test_registered():
    assert STRATEGIES["egocentric"] is Egocentric
    assert Egocentric.granularities == ("memory", "session")


def test_gold_memories_per_agent_and_partner(mia, keywords):
    s = observed(mia, keywords, 3)
    mem = s.memory_of("Mia")
    assert [m.id for m in mem.with_partner("Leo")] == ["E1:S1:M1", "E1:S1:M2", "E1:S3:M1"]
    assert [m.id for m in mem.with_partner("Ana")] == ["E1:S2:M1", "E1:S2:M2"]
    assert [m.about for m in mem.with_partner("Leo")] == ["Mia", "Leo", "Leo"]
    assert mem.items["E1:S1:M2"].rendered == "Leo is moving to Lisbon in May. (about Leo, from first session)"
    assert [m.id for m in mem.linked("E1:S1:M2")] == ["E1:S2:M2", "E1:S3:M1"]   # both directions, in time order
    assert len(s) == 5 and "Leo" not in s.agents                                  # agents: main


def test_an_update_is_added_and_linked_never_overwritten(mia, keywords):
    s = observed(mia, keywords, 3)
    mem = s.memory_of("Mia")
    assert mem.items["E1:S1:M2"].text == "Leo is moving to Lisbon in May."          # the old memory stays
    assert "E1:S1:M2" in mem.links["E1:S3:M1"]
    mia.sessions[2].memories.append(Memory(id="E1:S1:M1", owner="Mia", about="Mia", text="changed",
                                           session_id="E1:S3"))
    fresh = observed(mia, keywords, 2)
    with pytest.raises(DataError, match="rule 'memory_never_overwritten'"):
        fresh.observe(mia, mia.sessions[2])


def test_observe_once(mia, keywords):
    s = observed(mia, keywords, 1)
    with pytest.raises(DataError, match="observe_once"):
        s.observe(mia, mia.sessions[0])


def test_retrieve_top1_then_its_links_then_the_rest(mia, keywords):
    s = observed(mia, keywords, 2)
    q = ask("Is Lisbon nice?")
    assert [r.memory_id for r in s.retrieve(q, 1)] == ["E1:S1:M2"]
    # S1:M2 scores 1, its linked S2:M2 (written in session 2, 1/sqrt 2) follows it with S1:M2's score;
    # then the tie at 0 in time order, S1:M1 bringing its link S2:M1
    items = s.retrieve(q, 10)
    assert [r.memory_id for r in items] == ["E1:S1:M2", "E1:S2:M2", "E1:S1:M1", "E1:S2:M1"]
    assert [round(r.score, 4) for r in items] == [1.0, 1.0, 0.0, 0.0]
    assert [r.session_id for r in items] == ["E1:S1", "E1:S2", "E1:S1", "E1:S2"]
    assert all(r.speaker == "Mia" for r in items)


def test_context_is_the_generation_format_with_top1_and_links(mia, keywords):
    s = observed(mia, keywords, 2, memory_provenance=False)
    q = ask("Is Lisbon nice?")
    full = ("generation: [Mia] nurse [Leo] her brother [MEMORY] Leo is moving to Lisbon in May. "
            "[LINK] Mia plans to visit Leo in Lisbon. [NOW] third session [Leo] Is Lisbon nice? [Mia]")
    assert s.context(q, 1000) == full
    no_link = ("generation: [Mia] nurse [Leo] her brother [MEMORY] Leo is moving to Lisbon in May. "
               "[NOW] third session [Leo] Is Lisbon nice? [Mia]")
    bare = "generation: [Mia] nurse [Leo] her brother [NOW] third session [Leo] Is Lisbon nice? [Mia]"
    count = s.counter.count
    assert s.context(q, count(full) - 1) == no_link
    assert s.context(q, count(no_link) - 1) == bare
    assert s.context(q, count(bare) - 1) == ""


def test_query_after_the_last_session_has_no_partner(mia, keywords):
    s = observed(mia, keywords, 3, memory_provenance=False)
    text = s.context(Query(id="q", question="Where does Leo live now?"), 1000)
    assert text.startswith("generation: [Mia] nurse [MEMORY] ")
    assert text.endswith("[NOW] fourth session [USER] Where does Leo live now? [Mia]")


def test_agents_are_isolated(mia, keywords):
    s = observed(mia, keywords, 3, agents="all")
    leo, mine = s.memory_of("Leo"), s.memory_of("Mia")
    assert list(leo.items) == ["E1:S1:L1"] and "E1:S1:L1" not in mine.items
    assert [m.id for m in leo.with_partner("Mia")] == ["E1:S1:L1"]
    # Leo's memory matches the query best ("puppy", "happy", "lisbon"), yet Mia never sees it ...
    q = ask("Is the puppy happy in Lisbon?")
    for k in (1, 3, 10):
        assert "E1:S1:L1" not in {r.memory_id for r in s.retrieve(q, k)}
        assert all(r.speaker == "Mia" for r in s.retrieve(q, k))
    assert "seems happy" not in s.context(q, 1000)
    # ... and Leo only ever sees his own
    assert [r.memory_id for r in s.retrieve_for("Leo", "[Leo] Is the puppy happy? [Mia]", 10)] == ["E1:S1:L1"]
    # Ana (partner in S2) keeps a memory of her own, empty here: nothing of Mia's leaks into it
    assert len(s.memory_of("Ana")) == 0 and s.retrieve_for("Ana", "puppy", 5) == []


def test_forget_removes_from_every_index(mia, keywords):
    s = observed(mia, keywords, 3)
    mem = s.memory_of("Mia")
    assert s.forget(Selector.of(memories=["E1:S1:M2"])) == 1
    assert "E1:S1:M2" not in mem.items and "E1:S1:M2" not in mem.vectors
    assert [m.id for m in mem.with_partner("Leo")] == ["E1:S1:M1", "E1:S3:M1"]
    assert mem.linked("E1:S3:M1") == [] and mem.linked("E1:S2:M2") == []
    assert "E1:S1:M2" not in {r.memory_id for r in s.retrieve(ask("Lisbon?"), 10)}
    assert s.forget(Selector.of(turns=["E1:S2:T1"])) == 2              # the memories written from that session
    assert s.forget(Selector.of(speakers=["Leo"])) == 1                # about Leo: S3:M1
    assert list(mem.items) == ["E1:S1:M1"] and mem.linked("E1:S1:M1") == []
    assert s.forget(Selector.of(sessions=["E1:S1"])) == 1 and len(s) == 0
    assert s.retrieve(ask("puppy"), 3) == [] and s.context(ask("puppy"), 100) == ""


def fake_dialogue(calls):
    """The dialogue module as a text-to-text double: fixed summaries, "positive" for two puppy memories."""
    def run(sources, max_new_tokens):
        calls.append(list(sources))
        out = []
        for src in sources:
            if src.startswith("summarize [ABOUT_Mia]: ") and "first session" in src:
                out.append("Mia adopted a puppy. [SEP] Mia is glad Leo visits.")
            elif src.startswith("summarize [ABOUT_Mia]: "):
                out.append("Mia walks the puppy daily.")
            elif src.startswith("summarize "):
                out.append("[NONE]")
            else:
                out.append("positive" if src.count("puppy") == 2 else "negative")
        return out
    return run


def test_model_written_memories_and_links(mia, keywords):
    calls = []
    s = Egocentric(EgocentricConfig(memory_source="model", link_source="model", memory_provenance=False),
                   retriever=keywords, dialogue=fake_dialogue(calls))
    s.observe(mia, mia.sessions[0])
    assert calls[0] == [
        "summarize [ABOUT_Mia]: [Mia] nurse [Leo] her brother [NOW] first session [Mia] Hi Leo, I adopted a puppy "
        "last week. [Leo] Congratulations! I am moving to Lisbon in May.",
        "summarize [ABOUT_Leo]: [Mia] nurse [Leo] her brother [NOW] first session [Mia] Hi Leo, I adopted a puppy "
        "last week. [Leo] Congratulations! I am moving to Lisbon in May."]
    assert calls[1] == ["memory sentence 1: Mia adopted a puppy. memory sentence 2: Mia is glad Leo visits."]
    mem = s.memory_of("Mia")
    assert [(m.id, m.about, m.text) for m in mem.ordered()] == [
        ("E1:S1:Mia:M1", "Mia", "Mia adopted a puppy."), ("E1:S1:Mia:M2", "Mia", "Mia is glad Leo visits.")]
    assert mem.linked("E1:S1:Mia:M1") == []
    s.observe(mia, mia.sessions[1])
    # the new memory against the earlier ones (no other new memory in this session)
    assert calls[3] == ["memory sentence 1: Mia adopted a puppy. memory sentence 2: Mia walks the puppy daily.",
                        "memory sentence 1: Mia is glad Leo visits. memory sentence 2: Mia walks the puppy daily."]
    assert [m.id for m in mem.linked("E1:S2:Mia:M1")] == ["E1:S1:Mia:M1"]
    assert [m.id for m in mem.with_partner("Ana")] == ["E1:S2:Mia:M1"]


@pytest.mark.parametrize("settings, message", [
    ({"memory_source": "model", "link_source": "model"}, "no dialogue module was given"),
    ({"memory_source": "model"}, "set link_source: model"),
    ({"memory_source": "silver"}, "memory_source"),
    ({"agents": "some"}, "agents"),
    ({"retriever": " "}, "retriever"),
])
def test_config_checks(settings, message):
    with pytest.raises(ConfigError, match=message):
        Egocentric(EgocentricConfig(**settings))


@pytest.fixture(scope="module")
def minilm_retriever():
    from pipelines.emma.retriever import DualEncoder, RetrieverConfig

    return DualEncoder.from_pretrained(RetrieverConfig()).eval()


def test_temporal_protocol_with_the_minilm_retriever(minilm_retriever):
    """RealMem's loop over a synthetic episode: no leak, memory-level scores, full rankings are permutations."""
    from pipelines.data.synthetic import SyntheticConfig, generate
    from pipelines.evaluate.protocol import ProtocolConfig, evaluate_episode

    episode = generate(SyntheticConfig(episodes=1, sessions=4, turns=8, partners=2, queries_per_session=2))[0]
    strategy = Egocentric(EgocentricConfig(), retriever=minilm_retriever)
    scores, excluded = evaluate_episode(episode, strategy, ProtocolConfig(ks=(1, 3), show_progress=False))
    assert {s.granularity for s in scores} == {"memory", "session"}
    assert len([s for s in scores if s.granularity == "memory"]) + len(excluded) == len(episode.queries)
    assert all(0.0 <= s.metrics["recall@3"] <= 1.0 for s in scores)
    held = {m.id for m in episode.memories() if m.owner == episode.main_speaker}
    ranking = strategy.retrieve(episode.queries[-1], len(strategy))
    assert sorted(r.memory_id for r in ranking) == sorted(held) and len(strategy) == len(held)
    top = ranking[0]
    linked = [m.id for m in strategy.memory_of(episode.main_speaker).linked(top.memory_id)]
    assert [r.memory_id for r in ranking[1:1 + len(linked)]] == linked
    text = strategy.context(episode.queries[-1], 1024)
    assert text.startswith(f"generation: [{episode.main_speaker}] ") and "[MEMORY] " + top.text in text
