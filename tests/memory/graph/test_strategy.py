"""Tests of pipelines/memory/graph/ (the ``graph`` memory strategy, G-Long)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import pipelines.memory.graph  # noqa: F401  (registers "graph")
from pipelines.data.schema import Episode, Query, Session, Speaker, Triplet, Turn
from pipelines.errors import ConfigError, DataError
from pipelines.memory.base import STRATEGIES, Selector, build_strategy
from pipelines.memory.graph import GraphConfig, GraphMemory
from pipelines.memory.graph.strategy import to_seconds

T0 = datetime(2022, 3, 1, 10, 0)


def turn(sid, n, speaker, text, *triplets):
    return Turn(id=f"{sid}:T{n}", speaker=speaker, text=text,
                triplets=[Triplet(subject=s, relation=r, object=o) for s, r, o in triplets])


def make_episode() -> Episode:
    s1 = Session(id="e:S1", index=0, timestamp=T0, partner="Wren", turns=[
        turn("e:S1", 1, "Juno", "I collect stamps from all over the world.",
             ("Juno", "collects", "stamps")),
        turn("e:S1", 2, "Wren", "I work at a brewery downtown.", ("Wren", "works_at", "a brewery")),
        turn("e:S1", 3, "Juno", "Nice weather today."),
        turn("e:S1", 4, "Wren", "My son started kindergarten.",
             ("Wren", "has_child", "a son in kindergarten"))])
    s2 = Session(id="e:S2", index=1, timestamp=T0 + timedelta(days=3), partner="Vivek", turns=[
        turn("e:S2", 1, "Vivek", "I'm terrified of snakes.", ("Vivek", "afraid_of", "snakes")),
        turn("e:S2", 2, "Juno", "I moved to Kyoto and I grow sunflowers.",
             ("Juno", "lives_in", "Kyoto"), ("Juno", "grows", "sunflowers"))])
    s3 = Session(id="e:S3", index=2, timestamp=T0 + timedelta(days=10), partner="Wren", turns=[])
    return Episode(id="e", source="test", main_speaker="Juno",
                   speakers=[Speaker(name=n) for n in ("Juno", "Wren", "Vivek")],
                   sessions=[s1, s2, s3])


EP = make_episode()


def q(text, when=T0 + timedelta(days=10)):
    return Query(id="q", session_id="e:S3", question=text, timestamp=when)


SETTINGS = dict(embedder="hashing", hashing_dim=128, cache_dir=None, c=0.0)  # recency off:
# rankings below are by similarity + (uniform) importance, so they follow the words of the query


@pytest.fixture
def memory():
    m = build_strategy("graph", **SETTINGS)
    for s in EP.sessions[:2]:
        m.observe(EP, s)
    return m


def test_registered_and_configured(memory):
    assert STRATEGIES["graph"] is GraphMemory and isinstance(memory, GraphMemory)
    assert memory.bank.index_kind == "auto"
    assert build_strategy("graph", entity_index="hnsw", **SETTINGS).bank.index_kind == "hnsw"
    assert memory.bank.exact_up_to == 10_000
    small = build_strategy("graph", exact_up_to=4, **SETTINGS)
    for s in EP.sessions[:2]:
        small.observe(EP, s)
    assert small.bank.n_entities == 9 and small.bank._index.active == "hnsw"   # 9 > 4: HNSW
    with pytest.raises(ConfigError, match="exact_up_to"):
        build_strategy("graph", exact_up_to=1, **SETTINGS)
    assert len(memory) == 6 and memory.bank.n_entities == 9
    assert [f.importance for f in memory.bank.facts()] == [1.0] * 6        # importance "uniform"
    assert memory.bank.fact(4).created == to_seconds(T0 + timedelta(days=3))
    assert [(f.turn_id, f.speaker) for f in memory.bank.facts()][3:] == [
        ("e:S2:T1", "Vivek"), ("e:S2:T2", "Juno"), ("e:S2:T2", "Juno")]


def test_retrieve_carries_source_ids(memory):
    got = memory.retrieve(q("Does Vivek fear snakes?"), 1)
    assert [(r.text, r.turn_id, r.session_id, r.memory_id, r.speaker, r.order) for r in got] == [
        ("Vivek afraid of snakes", "e:S2:T1", "e:S2", "triplet:3", "Vivek", 3)]
    assert got[0].timestamp == T0 + timedelta(days=3)
    k5 = memory.retrieve(q("Where does Juno live?"), 5)
    assert [r.text for r in k5[:3]] == ["Juno lives in Kyoto", "Juno collects stamps",
                                        "Juno grows sunflowers"]
    assert len(k5) == 5 and all(a.score >= b.score for a, b in zip(k5, k5[1:]))


def test_retrieval_updates_last_access(memory):
    asked = T0 + timedelta(days=10)
    memory.retrieve(q("Does Vivek fear snakes?", asked), 1)
    assert memory.bank.fact(3).last_accessed == to_seconds(asked)
    assert memory.bank.fact(0).last_accessed == to_seconds(T0)


def test_query_without_time_is_asked_at_latest_session(memory):
    memory.retrieve(Query(id="q", question="Does Vivek fear snakes?"), 1)
    assert memory.bank.fact(3).last_accessed == to_seconds(T0 + timedelta(days=3))


def test_context_is_one_memory_block(memory):
    text = memory.context(q("What does Juno collect?"), 100)
    assert text.splitlines()[0] == "MEMORY:"
    assert text.splitlines()[1] == "Juno collects stamps"
    assert len(text.splitlines()) == 1 + 3                                 # context_k = 3
    # budget: header (2 tokens "MEMORY", ":") + "Juno collects stamps" (3 tokens) = 5
    assert memory.context(q("What does Juno collect?"), 5) == "MEMORY:\nJuno collects stamps"
    assert memory.context(q("What does Juno collect?"), 4) == ""
    with pytest.raises(ValueError, match="budget_tokens"):
        memory.context(q("x"), -1)
    empty = build_strategy("graph", embedder="hashing", cache_dir=None)
    assert empty.context(q("What does Juno collect?"), 100) == ""


def _all_texts(memory, probes):
    return {r.text for p in probes for r in memory.retrieve(q(p), 5)}


PROBES = ["What does Juno collect?", "Where does Wren work?", "Does Vivek fear snakes?",
          "Tell me about Wren's son", "Where does Juno live?", "What does Juno grow?", "stamps",
          "a brewery", "Kyoto", "sunflowers", "snakes", "kindergarten"]


@pytest.mark.parametrize("selector, gone", [
    (Selector.of(sessions=["e:S2"]), {"Vivek afraid of snakes", "Juno lives in Kyoto",
                                      "Juno grows sunflowers"}),
    (Selector.of(turns=["e:S1:T2"]), {"Wren works at a brewery"}),
    (Selector.of(speakers=["Wren"]), {"Wren works at a brewery",      # said by Wren,
                                      "Wren has child a son in kindergarten",
                                      "Juno collects stamps"}),             # said to Wren (S1 is with Wren)
    (Selector.of(memories=["triplet:0", "triplet:5", "not-a-triplet"]),
     {"Juno collects stamps", "Juno grows sunflowers"}),
])
def test_forget_cascades(memory, selector, gone):
    before = _all_texts(memory, PROBES)
    assert gone <= before
    assert memory.forget(selector) == len(gone)
    assert not _all_texts(memory, PROBES) & gone
    assert memory.bank.integrity_errors() == []
    assert len(memory) == 6 - len(gone)


def test_forget_entities(memory):
    assert memory.forget_entities(["Juno"]) == 3
    assert "juno" not in memory.bank.graph
    assert not any("Juno" in t for t in _all_texts(memory, PROBES))


def test_observe_once_and_after_forgetting(memory):
    with pytest.raises(DataError, match="observed twice"):
        memory.observe(EP, EP.sessions[0])
    memory.forget(Selector.of(sessions=["e:S1"]))
    memory.observe(EP, EP.sessions[0])
    assert len(memory) == 6


def test_reset(memory):
    memory.reset()
    assert len(memory) == 0 and memory.retrieve(q("What does Juno collect?"), 3) == []
    memory.observe(EP, EP.sessions[0])
    assert len(memory) == 3


def test_model_importance_is_scored_per_session():
    calls = []

    def scorer(triplets):
        calls.append([t.serialise() for t in triplets])
        return [1.0 / (i + 1) for i in range(len(triplets))]

    m = GraphMemory(GraphConfig(importance="model", embedder="hashing", cache_dir=None),
                    scorer=scorer)
    for s in EP.sessions:
        m.observe(EP, s)
    assert calls == [["Juno collects stamps", "Wren works at a brewery",
                      "Wren has child a son in kindergarten"],
                     ["Vivek afraid of snakes", "Juno lives in Kyoto", "Juno grows sunflowers"]]
    assert [f.importance for f in m.bank.facts()] == [1.0, 0.5, 1 / 3, 1.0, 0.5, 1 / 3]


def test_model_extraction_uses_the_extractor():
    seen = []

    def extractor(pairs):
        seen.extend(pairs)
        return [[Triplet(subject=spk, relation="said", object=text.split()[-1].strip(".?!"))]
                for spk, text in pairs]

    m = GraphMemory(GraphConfig(extraction="model", embedder="hashing", cache_dir=None),
                    extractor=extractor)
    m.observe(EP, EP.sessions[0])
    assert seen[0] == ("Juno", "I collect stamps from all over the world.")
    assert [f.text for f in m.bank.facts()] == ["Juno said world", "Wren said downtown",
                                                 "Juno said today", "Wren said kindergarten"]
    bad = GraphMemory(GraphConfig(extraction="model", embedder="hashing", cache_dir=None),
                      extractor=lambda pairs: [])
    with pytest.raises(DataError, match="one_list_per_turn"):
        bad.observe(EP, EP.sessions[0])


def test_missing_timestamps_use_the_session_index():
    s = EP.sessions[1].model_copy(update={"timestamp": None})
    m = GraphMemory(GraphConfig(embedder="hashing", cache_dir=None, missing_time_hours=12.0))
    m.observe(EP, s)
    assert m.bank.fact(0).created == 12.0 * 3600.0                         # index 1 x 12 h


@pytest.mark.parametrize("settings, message", [
    (dict(importance="model"), "neither a scorer"),
    (dict(extraction="model"), "no triplet extractor"),
    (dict(importance="attention"), "importance must be one of"),
    (dict(entity_index="ivf"), "entity_index must be one of"),
    (dict(context_k=6), "cannot exceed coarse_n"),
    (dict(a=0, b=0, c=0), "all 0"),
    (dict(importance="model", importance_model="/nonexistent/dir"), "not a local directory"),
])
def test_config_errors(settings, message):
    with pytest.raises(ConfigError, match=message):
        build_strategy("graph", embedder="hashing", cache_dir=None, **settings)


def test_retrieval_settings_and_deep_rankings(memory):
    cfg = GraphConfig(coarse_n=4, context_k=2)
    assert (cfg.retrieval.coarse_n, cfg.retrieval.final_k) == (4, 2)
    asked = T0 + timedelta(days=10)
    deep = memory.retrieve(q("Where does Juno live?", asked), 6)
    assert len(deep) == 6                                                   # every triplet
    touched = [f.tid for f in memory.bank.facts() if f.last_accessed == to_seconds(asked)]
    assert sorted(touched) == sorted(r.order for r in deep[:3])            # context_k = 3


def test_save_and_load(memory, tmp_path):
    before = [memory.retrieve(q(p), 3) for p in PROBES]
    memory.save(tmp_path / "g")
    other = build_strategy("graph", **SETTINGS)
    other.load(tmp_path / "g")
    assert other.bank.facts() == memory.bank.facts()
    assert [other.retrieve(q(p), 3) for p in PROBES] == \
        [memory.retrieve(q(p), 3) for p in PROBES]
    assert before[0][0].text == "Juno collects stamps"
    with pytest.raises(DataError, match="observed twice"):
        other.observe(EP, EP.sessions[1])


def test_prepare_warms_the_cache_without_adding_memory():
    from pipelines.glong.embedding import HashingEmbedder

    class Cached(HashingEmbedder):
        cache = {}  # any non-None cache: prepare only runs when there is one to warm

        def __init__(self):
            super().__init__(64)
            self.calls = []

        def embed(self, texts):
            self.calls.append(list(texts))
            return super().embed(texts)

    emb = Cached()
    m = GraphMemory(GraphConfig(cache_dir=None), embedder=emb)
    ep = EP.model_copy(update={"queries": [q("Where does Juno live?")]})
    m.prepare([ep])
    assert len(m) == 0 and len(emb.calls) == 1
    assert emb.calls[0][:3] == ["Juno", "stamps", "Juno collects stamps"]
    assert "Where does Juno live?" in emb.calls[0] and len(set(emb.calls[0])) == len(emb.calls[0])
    plain = HashingEmbedder(64)                                   # no cache: nothing to warm
    GraphMemory(GraphConfig(cache_dir=None), embedder=plain).prepare([ep])
