"""Egocentric memory: per-agent, per-partner stores; links; top-1 plus links; isolation; forgetting."""

from __future__ import annotations

import pytest

from pipelines.data.schema import Memory, Query
from pipelines.errors import ConfigError, DataError, ModelNotTrained
from pipelines.memory import STRATEGIES, Selector, build_strategy, missing_models
from pipelines.memory.egocentric import (Egocentric, EgocentricConfig, EgocentricGold, EgocentricGoldConfig,
                                         MemoSeq2Seq)


def observed(episode, retriever, upto, **settings):
    """The oracle (the dataset's memories and links) after ``upto`` sessions."""
    strategy = EgocentricGold(EgocentricGoldConfig(**settings), retriever=retriever)
    for session in episode.sessions[:upto]:
        strategy.observe(episode, session)
    return strategy


def ask(question, session_id="E1:S3"):
    return Query(id="q", session_id=session_id, question=question)


def test_registered_egocentric_is_emma_and_egocentric_gold_the_oracle(tmp_path):
    assert STRATEGIES["egocentric"] is Egocentric and STRATEGIES["egocentric_gold"] is EgocentricGold
    assert (EgocentricConfig().memory_source, EgocentricConfig().link_source) == ("model", "model")
    assert (EgocentricGoldConfig().memory_source, EgocentricGoldConfig().link_source) == ("gold", "gold")
    # a model-written memory has no dataset id: session level only; the oracle also at memory level
    assert Egocentric.granularities == ("session",) and EgocentricGold.granularities == ("memory", "session")
    assert Egocentric.oracle is None and "gold" in EgocentricGold.oracle
    # the dialogue module is a required model of egocentric, not of the oracle (unless it links)
    settings = {"retriever": str(tmp_path / "retriever"), "dialogue": str(tmp_path / "dialogue")}
    missing = missing_models("egocentric", settings)
    assert sorted(e.stage for e in missing) == ["emma_dialogue", "emma_retriever"]
    assert [e.stage for e in missing_models("egocentric_gold", settings)] == ["emma_retriever"]
    assert [e.stage for e in missing_models("egocentric_gold", {**settings, "link_source": "model"})] == [
        "emma_retriever", "emma_dialogue"]
    # built from settings, a missing dialogue module is ModelNotTrained (the benchmark lists it as missing)
    with pytest.raises(ModelNotTrained, match="run stage 'emma_dialogue' first"):
        build_strategy("egocentric", dialogue=str(tmp_path / "dialogue"))
    assert build_strategy("egocentric_gold").granularities == ("memory", "session")


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
    assert s.forget(Selector.of(sessions=["E1:S3"])) == 1              # S3:M1
    assert list(mem.items) == ["E1:S1:M1"] and mem.linked("E1:S1:M1") == []
    # "Mia adopted a puppy." is about Mia, but written from S1, a session with Leo: what was said to him goes
    assert s.forget(Selector.of(speakers=["Leo"])) == 1 and len(s) == 0
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
    s = Egocentric(EgocentricConfig(memory_provenance=False), retriever=keywords, dialogue=fake_dialogue(calls))
    assert s.granularities == ("session",)
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
    # a model memory is never a dataset memory: retrieval ids are the model's own
    assert {r.memory_id for r in s.retrieve(ask("puppy?"), 10)} == {"E1:S1:Mia:M1", "E1:S1:Mia:M2", "E1:S2:Mia:M1"}


def test_prepare_batches_every_summary_then_every_link_and_observe_reuses_them(mia, keywords):
    """prepare() decodes all summaries in one batch, then all link questions in one; observe() then asks the
    memoised module (no decoding) and holds what an unprepared strategy holds."""
    calls = []
    s = Egocentric(EgocentricConfig(memory_provenance=False), retriever=keywords, dialogue=fake_dialogue(calls))
    s.prepare([mia])
    assert len(s) == 0 and s.agents == {}                                   # nothing entered memory
    # 3 sessions x 2 summaries; 1 + 2 + 3 link pairs, 2 of session 3's the very questions of session 2
    # (provenance off: "Mia walks the puppy daily." twice), asked once
    assert [len(c) for c in calls] == [6, 4]
    assert all(src.startswith("summarize [ABOUT_") for src in calls[0])
    assert all(src.startswith("memory sentence 1: ") for src in calls[1])
    for session in mia.sessions:
        s.observe(mia, session)
    assert len(calls) == 2 and s.dialogue.decoded == 10                     # observe decoded nothing more
    plain = Egocentric(EgocentricConfig(memory_provenance=False), retriever=keywords, dialogue=fake_dialogue([]))
    for session in mia.sessions:
        plain.observe(mia, session)
    held = lambda st: [(m.id, m.text, sorted(st.memory_of("Mia").links[m.id])) for m in st.memory_of("Mia").ordered()]
    assert held(s) == held(plain) and len(held(s)) == 4


def test_memo_batches_by_length_and_decodes_each_input_once():
    seen = []

    def echo(sources, max_new_tokens):
        seen.append(list(sources))
        return [f"{len(x)}:{max_new_tokens}" for x in sources]

    memo = MemoSeq2Seq(echo, batch_size=2)          # budget: 2 x 2048 characters per batch
    long, short = "x" * 2000, "y" * 10
    assert memo([short, long, short], 4) == ["10:4", "2000:4", "10:4"]
    assert seen == [[short, long]]                   # one batch, in order, each input once
    assert memo([long, short], 4) == ["2000:4", "10:4"] and len(seen) == 1     # memoised
    assert memo([short], 5) == ["10:5"] and len(seen) == 2                    # another length is another input
    texts = [c * n for c, n in (("a", 1500), ("b", 100), ("c", 1800), ("d", 50), ("e", 1600))]
    assert memo(texts, 1) == [f"{len(t)}:1" for t in texts]
    # longest first; a batch holds as many as 2 inputs of its longest one would take (2 x 2048 characters)
    assert [[len(t) for t in b] for b in seen[2:]] == [[1800, 1600], [1500, 100], [50]]


def test_real_dialogue_module_writes_and_links_per_agent(tiny_dialogue, mia, keywords):
    """EMMA's summariser and linker are the trained dialogue module's summarize() and link(): every agent's
    memories are its answers to summarize [ABOUT_X] on the finished session seen from that agent, linked where
    link(earlier, newer) says positive; each agent holds only its own."""
    from pipelines.emma.formats import GenerationInput

    n = tiny_dialogue.config.max_new_tokens
    s = Egocentric(EgocentricConfig(agents="all", max_new_tokens=n, link_max_new_tokens=n), retriever=keywords,
                   dialogue=tiny_dialogue.generate_text)
    for session in mia.sessions:
        s.observe(mia, session)
    jobs = {"Mia": "nurse", "Leo": "her brother", "Ana": "coworker"}
    expected = {}
    for session in mia.sessions:
        for agent, partner in (("Mia", session.partner), (session.partner, "Mia")):
            final = GenerationInput(agent, jobs[agent], partner, jobs[partner], session.index + 1, [],
                                    [(t.speaker, t.text) for t in session.turns]).final_sequence()
            expected.setdefault(agent, []).extend(
                (session.id, about, text) for about in (agent, partner)
                for text in dict.fromkeys(tiny_dialogue.summarize(about, final)))
    for agent in ("Mia", "Leo", "Ana"):
        mem = s.memory_of(agent)
        held = mem.ordered()
        assert [(m.session_id, m.about, m.text) for m in held] == expected[agent]
        assert all(m.owner == agent and f":{agent}:M" in m.id for m in held)
        links = {(a.id, b.id) for i, b in enumerate(held) for a in held[:i]
                 if tiny_dialogue.link(a.rendered, b.rendered)}
        assert {(a, b) for a in mem.links for b in mem.links[a] if mem.items[a].order < mem.items[b].order} == links
        for m in held:                     # retrieval and the memory block come from the agent's own store only
            assert {r.speaker for r in s.retrieve_for(agent, m.rendered, 10)} == {agent}
    assert len(s.memory_of("Mia")) >= 3 and any(s.memory_of("Mia").links.values())   # the module wrote and linked
    ids = [set(s.memory_of(a).items) for a in ("Mia", "Leo", "Ana")]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert {r.speaker for r in s.retrieve(ask("puppy Lisbon?"), 10)} == {"Mia"}


def test_misc_memory_tag_queries_are_read_as_the_retrievers_training_context(mia, keywords):
    """A MiSC memory-tag query asks with its session's turns so far: the retriever reads them in the
    generation format it is trained on (each turn after its speaker's tag, [Mia] last), exactly the context
    of the tagged turn in pipelines.emma.retriever.retrieval_examples; not one "Leo: ...\nMia: ..." utterance."""
    from pipelines.emma.retriever import retrieval_examples
    from pipelines.evaluate.suite import memory_tag_queries

    class Recording(type(keywords)):
        def __init__(self):
            self.contexts = []

        def encode_context(self, texts):
            self.contexts += list(texts)
            return super().encode_context(texts)

    s3 = mia.sessions[2]
    s3.turns.append(s3.turns[0].model_copy(update={"id": "E1:S3:T3", "text": "Great,\nsee you soon!"}))
    s3.turns.append(s3.turns[1].model_copy(update={"id": "E1:S3:T4", "text": "Bring the map.",
                                                   "memory_tags": ["E1:S1:M2"]}))
    mia.sessions[1].turns[1] = mia.sessions[1].turns[1].model_copy(update={"memory_tags": ["E1:S1:M1"]})
    episode = memory_tag_queries(mia)
    queries = {q.id: q for q in episode.queries}
    assert set(queries) == {"E1:S2:T2:memory_tags", "E1:S3:T4:memory_tags"}
    assert queries["E1:S3:T4:memory_tags"].question == ("Leo: I finally moved to Lisbon!\nMia: I know, and I am "
                                                        "coming to visit you with Biscuit.\nLeo: Great, see you soon!")
    # a line break inside a turn is whitespace to the encoders' tokenizers: compared with whitespace normalised
    words = " ".join
    trained_on = {ex.turn_id: words(ex.context.split()) for ex in retrieval_examples([mia])}
    assert trained_on["E1:S3:T4"] == ("[Mia] nurse [Leo] her brother [NOW] third session [Leo] I finally moved to "
                                      "Lisbon! [Mia] I know, and I am coming to visit you with Biscuit. [Leo] Great, "
                                      "see you soon! [Mia]")
    retriever = Recording()
    s = observed(episode, retriever, 2)
    for turn_id in ("E1:S2:T2", "E1:S3:T4"):
        retriever.contexts.clear()
        s.retrieve(queries[f"{turn_id}:memory_tags"], 3)
        assert [words(c.split()) for c in retriever.contexts] == [trained_on[turn_id]]
    # a question that is not a dialogue excerpt stays one utterance of the session's partner
    retriever.contexts.clear()
    s.retrieve(Query(id="q", session_id="E1:S3", question="Mia: where is Leo?\nWhat about Lisbon?"), 3)
    assert retriever.contexts == ["[Mia] nurse [Leo] her brother [NOW] third session [Leo] Mia: where is Leo?\n"
                                  "What about Lisbon? [Mia]"]


@pytest.mark.parametrize("settings, message", [
    ({}, "no dialogue module was given"),
    ({"memory_source": "model", "link_source": "gold"}, "set link_source: model"),
    ({"memory_source": "silver"}, "memory_source"),
    ({"agents": "some", "memory_source": "gold", "link_source": "gold"}, "agents"),
    ({"retriever": " "}, "retriever"),
    ({"link_max_new_tokens": 0}, "link_max_new_tokens"),
])
def test_config_checks(settings, message):
    with pytest.raises(ConfigError, match=message):
        Egocentric(EgocentricConfig(**settings))


def test_the_oracle_keeps_the_datasets_memories():
    with pytest.raises(ConfigError, match="use the 'egocentric' strategy"):
        EgocentricGoldConfig(memory_source="model", link_source="model")


@pytest.fixture(scope="module")
def minilm_retriever():
    from pipelines.emma.retriever import DualEncoder, RetrieverConfig

    return DualEncoder.from_pretrained(RetrieverConfig()).eval()


def test_temporal_protocol_with_the_minilm_retriever(minilm_retriever):
    """RealMem's loop over a synthetic episode: no leak, memory-level scores, full rankings are permutations."""
    from pipelines.data.synthetic import SyntheticConfig, generate
    from pipelines.evaluate.protocol import ProtocolConfig, evaluate_episode

    episode = generate(SyntheticConfig(episodes=1, sessions=4, turns=8, partners=2, queries_per_session=2))[0]
    strategy = EgocentricGold(EgocentricGoldConfig(), retriever=minilm_retriever)
    scores, excluded = evaluate_episode(episode, strategy, ProtocolConfig(ks=(1, 3), show_progress=False))
    assert {s.granularity for s in scores} == {"memory", "session"}
    memory_scores = [s for s in scores if s.granularity == "memory"]
    assert len(memory_scores) + len(excluded) == len(episode.queries) and len(memory_scores) >= 4
    # each recall@3 is the share of the query's evidence memories among the top 3 that a memory of the
    # sessions before the query's own ranks: replayed by hand, with a fresh memory
    sessions = sorted(episode.sessions, key=lambda x: x.index)
    queries = {q.id: q for q in episode.queries}
    for score in memory_scores:
        query = queries[score.query_id]
        replay = EgocentricGold(EgocentricGoldConfig(), retriever=minilm_retriever)
        for session in sessions:
            if session.id == query.session_id:
                break
            replay.observe(episode, session)
        top3 = {r.memory_id for r in replay.retrieve(query, 3)}
        evidence = set(query.evidence_memories)
        assert score.metrics["recall@3"] == pytest.approx(len(top3 & evidence) / len(evidence))
        assert score.metrics["recall@3"] >= score.metrics["recall@1"]
    assert any(s.metrics["recall@3"] > 0 for s in memory_scores)      # the retriever finds some evidence
    held = {m.id for m in episode.memories() if m.owner == episode.main_speaker}
    ranking = strategy.retrieve(episode.queries[-1], len(strategy))
    assert sorted(r.memory_id for r in ranking) == sorted(held) and len(strategy) == len(held)
    top = ranking[0]
    linked = [m.id for m in strategy.memory_of(episode.main_speaker).linked(top.memory_id)]
    assert [r.memory_id for r in ranking[1:1 + len(linked)]] == linked
    text = strategy.context(episode.queries[-1], 1024)
    assert text.startswith(f"generation: [{episode.main_speaker}] ") and "[MEMORY] " + top.text in text
