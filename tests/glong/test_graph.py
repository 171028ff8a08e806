"""Tests of pipelines/glong/graph.py: the graph memory bank, its persistence and its deletion."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines.data.schema import Triplet
from pipelines.errors import DataError
from pipelines.glong.config import RetrievalConfig
from pipelines.glong.embedding import HashingEmbedder
from pipelines.glong.graph import GraphMemoryBank, NewFact, entity_key
from pipelines.glong.retrieve import retrieve
from tests.glong.helpers import RecordingEmbedder

H = 3600.0
# (subject, relation, object, importance, hours, turn, session, speaker)
ROWS = [
    ("Juno", "collects", "stamps", 0.4, 0, "S1:T1", "S1", "Juno"),
    ("Wren", "works_at", "a brewery", 1.0, 0, "S1:T2", "S1", "Wren"),
    ("Juno", "saving_for", "a piano", 0.7, 0, "S1:T3", "S1", "Juno"),
    ("Wren", "has_child", "a son in kindergarten", 0.2, 0, "S1:T4", "S1", "Wren"),
    ("Vivek", "afraid_of", "snakes", 0.9, 5, "S2:T2", "S2", "Vivek"),
    ("Juno", "saving_for", "a new laptop", 1.0, 5, "S2:T3", "S2", "Juno"),
    ("Vivek", "volunteers_at", "a soup kitchen", 0.5, 5, "S2:T6", "S2", "Vivek"),
    ("Vivek", "friend_of", "Juno", 0.3, 5, "S2:T7", "S2", "Vivek"),
    ("Juno", "collects", "stamps", 0.8, 30, "S3:T1", "S3", "Juno"),
    ("Wren", "plays", "chess", 0.6, 30, "S3:T2", "S3", "Wren"),
]
ORIGINAL_TEXTS = [Triplet(subject=s, relation=r, object=o).serialise() for s, r, o, *_ in ROWS]
NOW = 40 * H
WIDE = RetrievalConfig(k_anchor=50, hops=1, coarse_n=50, final_k=50, update_access=False,
                       dedupe=False)


def facts(rows=ROWS):
    return [NewFact(Triplet(subject=s, relation=r, object=o), importance=i, time=h * H,
                    turn_id=t, session_id=sid, speaker=sp, episode_id="e1")
            for s, r, o, i, h, t, sid, sp in rows]


@pytest.fixture(params=["auto", "flat", "hnsw"])
def bank(request):
    b = GraphMemoryBank(RecordingEmbedder(HashingEmbedder(64)), entity_index=request.param)
    assert b.add(facts()) == list(range(10))
    return b


def queries(bank):
    """Every fact text, every entity name and a few questions: the probes of the deletion tests."""
    return ([f.text for f in bank.facts()] + bank.entity_names()
            + ["What does Juno collect?", "Where does Wren work?", "What is Vivek afraid of?"])


def test_structure(bank):
    g = bank.graph
    assert len(bank) == 10 and bank.n_entities == 11
    assert g.number_of_edges("juno", "stamps") == 2                  # a multigraph
    assert g.nodes["a brewery"] == {"name": "a brewery", "vid": 3}
    assert g.edges["vivek", "juno", 7] == {
        "subject": "Vivek", "relation": "friend_of", "object": "Juno", "text": "Vivek friend of Juno",
        "importance": 0.3, "created": 5 * H, "last_accessed": 5 * H, "turn_id": "S2:T7",
        "session_id": "S2", "speaker": "Vivek", "episode_id": "e1"}
    assert bank.fact(7).triplet == Triplet(subject="Vivek", relation="friend_of", object="Juno")
    assert bank.integrity_errors() == []


def test_entities_are_normalised():
    b = GraphMemoryBank(HashingEmbedder(32))
    b.add([NewFact(Triplet(subject="Juno", relation="likes", object="Green  Tea")),
           NewFact(Triplet(subject="JUNO", relation="drinks", object="green tea"))])
    assert sorted(b.graph.nodes) == ["green tea", "juno"]
    assert b.graph.nodes["green tea"]["name"] == "Green Tea"        # first surface form kept
    assert entity_key("  A \t Brewery ") == "a brewery"


def test_nearest_entities_are_cosines(bank):
    emb = bank.embedder
    q = bank.embed_query("stamps")
    got = bank.nearest_entities(q, 2)
    assert got[0] == ("stamps", pytest.approx(1.0, abs=1e-6))
    vec = emb.embed([bank.graph.nodes[got[1][0]]["name"]])[0]
    assert got[1][1] == pytest.approx(float(vec @ q), abs=1e-6)


@pytest.mark.parametrize("bad, field", [(dict(importance=1.5), "importance"),
                                        (dict(importance=float("nan")), "importance"),
                                        (dict(time=float("inf")), "time")])
def test_bad_facts_raise_data_error(bad, field):
    b = GraphMemoryBank(HashingEmbedder(32))
    with pytest.raises(DataError) as err:
        b.add([NewFact(Triplet(subject="a", relation="r", object="b"), turn_id="S1:T9", **bad)])
    assert err.value.field == field and err.value.record == "S1:T9"
    assert len(b) == 0


def test_save_and_load_identical(bank, tmp_path):
    probes = queries(bank)
    for q in probes[:5]:   # give some triplets a later last-accessed time before saving
        retrieve(bank, q, NOW, RetrievalConfig())
    before = [retrieve(bank, q, NOW + H, WIDE) for q in probes]
    bank.save(tmp_path / "bank")
    index_files = {"auto": ["entities.auto", "entities.faiss"], "flat": ["entities.faiss"],
                   "hnsw": ["entities.hnsw"]}[bank.index_kind]
    assert sorted(p.name for p in (tmp_path / "bank").iterdir()) == sorted(
        index_files + ["graph.json", "triplet_ids.npy", "triplet_vectors.npy"])
    loaded = GraphMemoryBank.load(tmp_path / "bank", HashingEmbedder(64))
    assert loaded.index_kind == bank.index_kind
    assert loaded.facts() == bank.facts()
    assert dict(loaded.graph.nodes(data=True)) == dict(bank.graph.nodes(data=True))
    assert sorted(loaded.graph.edges(keys=True, data=True), key=lambda e: e[2]) == \
        sorted(bank.graph.edges(keys=True, data=True), key=lambda e: e[2])
    live = sorted(bank._ends)
    for name in ("_vec", "_imp", "_acc", "_tkey"):
        assert np.array_equal(getattr(loaded, name)[live], getattr(bank, name)[live]), name
    after = [retrieve(loaded, q, NOW + H, WIDE) for q in probes]
    assert after == before
    assert loaded.integrity_errors() == []
    assert loaded.add(facts(ROWS[:1])) == [10]                       # ids are never reused


def test_save_and_load_after_deletion_and_empty(tmp_path):
    b = GraphMemoryBank(HashingEmbedder(64))
    b.save(tmp_path / "empty")
    assert len(GraphMemoryBank.load(tmp_path / "empty", HashingEmbedder(64))) == 0
    b.add(facts())
    b.remove_session("S2")
    b.save(tmp_path / "b")
    loaded = GraphMemoryBank.load(tmp_path / "b", HashingEmbedder(64))
    assert [f.tid for f in loaded.facts()] == [0, 1, 2, 3, 8, 9]
    assert loaded.facts() == b.facts() and loaded.integrity_errors() == []


def test_load_rejects_bad_folders(bank, tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        GraphMemoryBank.load(tmp_path / "nothing", HashingEmbedder(64))
    bank.save(tmp_path / "b")
    with pytest.raises(DataError, match="embedded with 'hashing-64'") as err:
        GraphMemoryBank.load(tmp_path / "b", HashingEmbedder(32))
    assert err.value.field == "embedder"
    (tmp_path / "b" / "graph.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(DataError, match="not a saved graph memory bank"):
        GraphMemoryBank.load(tmp_path / "b", HashingEmbedder(64))


# --- deletion: nothing of a forgotten fact can be retrieved afterwards -------------------------

def _retrieved_texts(bank, probes):
    return {f.fact.text for q in probes for f in retrieve(bank, q, NOW, WIDE)}


def _assert_forgotten(bank, removed_texts, removed_entities, probes):
    assert bank.integrity_errors() == []
    leaked = _retrieved_texts(bank, probes) & set(removed_texts)
    assert not leaked, f"retrievable after deletion: {leaked}"
    names = {entity_key(n) for n in bank.entity_names()}
    assert not names & {entity_key(e) for e in removed_entities}
    for q in probes:
        anchors = {n for n, _ in bank.nearest_entities(bank.embed_query(q), 100)}
        assert not anchors & {entity_key(e) for e in removed_entities}
    assert set(removed_texts) <= set(bank.embedder.forgotten)       # cached vectors purged


@pytest.mark.parametrize("mode, arg, texts, entities", [
    ("entity", "stamps", ["Juno collects stamps"], ["stamps"]),
    ("entity", "Vivek", ["Vivek afraid of snakes", "Vivek volunteers at a soup kitchen",
                         "Vivek friend of Juno"], ["Vivek", "snakes", "a soup kitchen"]),
    ("triplet", [1, 9], ["Wren works at a brewery", "Wren plays chess"], ["a brewery", "chess"]),
    ("session", "S2", ["Vivek afraid of snakes", "Juno saving for a new laptop",
                       "Vivek volunteers at a soup kitchen", "Vivek friend of Juno"],
     ["Vivek", "snakes", "a new laptop", "a soup kitchen"]),
    ("turns", ["S1:T4"], ["Wren has child a son in kindergarten"], ["a son in kindergarten"]),
    ("speaker", "Wren", ["Wren works at a brewery", "Wren has child a son in kindergarten",
                         "Wren plays chess"], ["Wren", "a brewery", "chess"]),
])
def test_deletion_cascades(bank, mode, arg, texts, entities):
    probes = queries(bank)
    before = _retrieved_texts(bank, probes)
    assert set(texts) <= before                                     # all were retrievable
    removed = {"entity": bank.remove_entity, "triplet": bank.remove_triplets,
               "session": bank.remove_session, "turns": bank.remove_turns,
               "speaker": bank.remove_speaker}[mode](arg)
    remaining = [f.text for f in bank.facts()]
    assert remaining == [t for t in ORIGINAL_TEXTS if t not in texts]
    assert len(removed) == len(ORIGINAL_TEXTS) - len(remaining)
    _assert_forgotten(bank, texts, entities, probes)
    assert not any(t in bank for t in removed)


def test_entity_deletion_keeps_shared_entities(bank):
    bank.remove_entity("stamps")
    assert "juno" in bank.graph and len(bank) == 8                  # both stamp facts went
    bank.remove_session("S3")
    assert "wren" in bank.graph                                     # Wren still has S1 facts
    assert "chess" not in bank.graph


def test_speaker_deletion_removes_facts_about_them(bank):
    removed = bank.remove_speaker("Juno")
    assert sorted(removed) == [0, 2, 5, 7, 8]                       # said by Juno, or about Juno
    assert "juno" not in bank.graph and bank.integrity_errors() == []


def test_clear(bank):
    texts = [f.text for f in bank.facts()]
    bank.clear()
    assert len(bank) == 0 and bank.n_entities == 0 and bank.integrity_errors() == []
    assert set(texts) <= set(bank.embedder.forgotten)
    assert retrieve(bank, "What does Juno collect?", NOW) == []


def test_minilm_bank_end_to_end(tmp_path):
    """The real all-MiniLM-L6-v2 (shipped package), with its on-disk cache purged on deletion."""
    from pipelines.glong.embedding import minilm_embedder
    from pipelines.models.embeddings import text_hash

    emb = minilm_embedder(cache_dir=str(tmp_path / "cache"))
    b = GraphMemoryBank(emb)
    b.add(facts())
    assert b.dim == 384 and len(b._index) == 11
    got = retrieve(b, "What hobby does Juno collect things for?", NOW,
                   RetrievalConfig(update_access=False))
    assert got[0].fact.text == "Juno collects stamps"
    got = retrieve(b, "Where is Wren employed?", NOW, RetrievalConfig(update_access=False))
    assert got[0].fact.text == "Wren works at a brewery"
    b.remove_entity("stamps")
    assert emb.cache.get(emb.model_name, [text_hash("Juno collects stamps"),
                                          text_hash("stamps")]) == {}
    assert emb.cache.get(emb.model_name, [text_hash("Wren plays chess")]) != {}
    assert "Juno collects stamps" not in {
        f.fact.text for f in retrieve(b, "What does Juno collect?", NOW, WIDE)}


def test_auto_bank_keeps_its_threshold_through_save_and_load(tmp_path):
    """A bank past ``exact_up_to`` entities searches with HNSW; loading restores kind and threshold."""
    b = GraphMemoryBank(HashingEmbedder(64), "auto", exact_up_to=5)
    b.add(facts())
    assert b.n_entities == 11 and b._index.active == "hnsw"
    b.save(tmp_path / "bank")
    loaded = GraphMemoryBank.load(tmp_path / "bank", HashingEmbedder(64))
    assert loaded.exact_up_to == 5 and loaded._index.active == "hnsw"
    assert loaded.integrity_errors() == []
    probes = queries(b)
    assert [retrieve(loaded, q, NOW, WIDE) for q in probes] == [retrieve(b, q, NOW, WIDE) for q in probes]
    b.clear()
    assert b.exact_up_to == 5 and len(b) == 0
