"""Dense retrieval with the shipped all-MiniLM-L6-v2 (loaded once for the module)."""

import numpy as np
import pytest

from pipelines.errors import ConfigError
from pipelines.memory import Selector, build_strategy
from pipelines.memory.dense import Dense, DenseConfig
from pipelines.models.embeddings import EmbeddingCache, Embedder, load_encoder


@pytest.fixture(scope="module")
def minilm():
    return load_encoder()  # cached per process: every dense strategy below shares it


class Spy:
    """Wraps the real encoder and records every encode call."""

    def __init__(self, encoder):
        self.encoder, self.calls = encoder, []

    def encode(self, sentences, **kwargs):
        self.calls.append(list(sentences))
        return self.encoder.encode(sentences, **kwargs)

    def __getattr__(self, name):      # backend, quantization: the Embedder's cache key is the wrapped encoder's
        return getattr(self.encoder, name)


def dense(minilm, cache_dir=None):
    spy = Spy(minilm)
    cache = EmbeddingCache(cache_dir) if cache_dir else None
    return Dense(DenseConfig(cache_dir=None), embedder=Embedder(spy, "all-MiniLM-L6-v2", cache)), spy


@pytest.mark.parametrize("question, paraphrased", [
    ("What kind of dog does Ana have?", "e1:S1:T1"),   # "I adopted a greyhound named Biscuit last week."
    ("What is Ana's profession?", "e1:S2:T1"),         # "I started a new job as a pharmacist."
])
def test_dense_ranks_the_paraphrase_first_where_bm25_does_not(minilm, episode, fill, q, question, paraphrased):
    strategy, _ = dense(minilm)
    fill(strategy, episode)
    assert strategy.retrieve(q(question), 1)[0].turn_id == paraphrased
    lexical = build_strategy("bm25")
    fill(lexical, episode)
    assert lexical.retrieve(q(question), 1)[0].turn_id != paraphrased  # no shared content word


def test_scores_are_cosines_of_normalised_embeddings(minilm, episode, fill, q):
    strategy, _ = dense(minilm)
    fill(strategy, episode)
    items = strategy.retrieve(q("Who is learning the cello?"), 9)
    texts = {f"{t.id}": f"{t.speaker}: {t.text}" for s in episode.sessions for t in s.turns}
    vq = minilm.encode(["Who is learning the cello?"], normalize_embeddings=True)[0]
    vd = minilm.encode([texts[i.turn_id] for i in items], normalize_embeddings=True)
    np.testing.assert_allclose([i.score for i in items], vd @ vq, atol=1e-5)
    assert [i.score for i in items] == sorted((i.score for i in items), reverse=True)
    assert items[0].turn_id == "e1:S1:T2"


def test_each_turn_is_embedded_once_per_session_batch(minilm, episode, fill, q):
    strategy, spy = dense(minilm)
    fill(strategy, episode)
    assert [len(c) for c in spy.calls] == [3, 3, 3]  # one batch per observed session
    strategy.retrieve(q("cello"), 3)
    strategy.retrieve(q("dog"), 3)
    assert spy.calls[3:] == [["cello"], ["dog"]]


def test_second_run_hits_the_embedding_cache(minilm, episode, fill, q, tmp_path):
    first, spy1 = dense(minilm, tmp_path)
    fill(first, episode)
    top1 = first.retrieve(q("Where does Ana's sister live?"), 3)
    assert sum(len(c) for c in spy1.calls) == 10  # 9 turns + 1 question

    second, spy2 = dense(minilm, tmp_path)
    fill(second, episode)
    top2 = second.retrieve(q("Where does Ana's sister live?"), 3)
    assert spy2.calls == []
    assert second.embedder.stats.cache_hits == 10
    assert [(i.turn_id, i.score) for i in top2] == [(i.turn_id, i.score) for i in top1]


def test_prepare_embeds_everything_in_one_call_and_adds_nothing_to_memory(minilm, episode, fill, q, tmp_path):
    strategy, spy = dense(minilm, tmp_path)
    strategy.prepare([episode])
    assert len(spy.calls) == 1 and len(spy.calls[0]) == 9 and len(strategy) == 0
    fill(strategy, episode)
    assert len(spy.calls) == 1


def test_forget_removes_the_row_and_its_cached_vector(minilm, episode, fill, q, tmp_path):
    strategy, _ = dense(minilm, tmp_path)
    fill(strategy, episode)
    assert len(strategy.embedder.cache) == 9
    assert strategy.forget(Selector.of(turns=["e1:S1:T1"])) == 1
    assert len(strategy.embedder.cache) == 8
    ids = [i.turn_id for i in strategy.retrieve(q("What kind of dog does Ana have?"), 9)]
    assert len(ids) == 8 and "e1:S1:T1" not in ids


def test_build_strategy_shares_the_loaded_model(minilm, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from pipelines.models.embeddings import cpu_computes_bf16

    strategy = build_strategy("dense", cache_dir=str(tmp_path), batch_size=16)
    assert strategy.embedder.encoder is minilm     # the default encoder on the CPU (OpenVINO, bf16 or fp32)
    assert strategy.embedder.cache.path == tmp_path / "embeddings.sqlite3"
    assert strategy.embedder.batch_size == 16
    variant = "@openvino-bf16" if cpu_computes_bf16() else "@openvino"              # its own cache key
    assert strategy.embedder.model_name == f"sentence-transformers/all-MiniLM-L6-v2{variant}"
    torch_fp32 = build_strategy("dense", cache_dir=str(tmp_path), backend="torch", precision="fp32")
    assert torch_fp32.embedder.encoder is load_encoder(backend="torch")
    assert torch_fp32.embedder.model_name == "sentence-transformers/all-MiniLM-L6-v2"     # unchanged: old caches hold
    assert torch_fp32.embedder.batch_size == 32                                            # None: the CPU's default


@pytest.mark.parametrize("settings, match", [({"batch_size": 0}, "batch_size"), ({"model_name": " "}, "model_name")])
def test_config_checks(settings, match):
    with pytest.raises(ConfigError, match=match):
        DenseConfig(**settings)


@pytest.mark.parametrize("settings, match", [({"index": "flat"}, "index"), ({"ann_min_items": 0}, "ann_min_items"),
                                             ({"hnsw_ef_search": 0}, "hnsw_ef_search")])
def test_index_config_checks(settings, match):
    with pytest.raises(ConfigError, match=match):
        DenseConfig(**settings)


# --- the HNSW index on a large store (a table of clustered vectors, no encoder) ------------------

class Table:
    """An embedder serving fixed vectors by text (what Dense needs of an Embedder)."""

    cache = None

    def __init__(self, table):
        self.table = table

    def embed(self, texts):
        return np.stack([self.table[t] for t in texts])

    def forget(self, texts):
        return 0


def clustered_episode(n_sessions=30, per=10, dim=32, seed=0):
    """One speaker's sessions; session s talks about topic s: its turns' vectors lie near centre s
    (well separated), and the question "topic s?" is centre s."""
    from pipelines.data.schema import Episode, Session, Turn

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_sessions, dim))
    table, sessions = {}, []
    for s in range(n_sessions):
        turns = []
        for t in range(per):
            v = centres[s] / np.linalg.norm(centres[s]) + 0.1 * rng.normal(size=dim)
            table[f"Ana: topic {s} turn {t}"] = (v / np.linalg.norm(v)).astype(np.float32)
            turns.append(Turn(id=f"S{s}:T{t}", speaker="Ana", text=f"topic {s} turn {t}"))
        table[f"topic {s}?"] = (centres[s] / np.linalg.norm(centres[s])).astype(np.float32)
        sessions.append(Session(id=f"S{s}", index=s, partner="Ben", turns=turns))
    return Episode(id="big", source="test", main_speaker="Ana", sessions=sessions), Table(table)


def table_dense(embedder, **settings):
    return Dense(DenseConfig(cache_dir=None, **settings), embedder=embedder)


def test_hnsw_top_k_agrees_with_exact_and_scores_are_the_cosines(fill, q):
    episode, table = clustered_episode()
    exact, ann = table_dense(table), table_dense(table, index="hnsw", ann_min_items=100)
    fill(exact, episode)
    fill(ann, episode)
    for s in (0, 7, 29):
        want, got = exact.retrieve(q(f"topic {s}?"), 5), ann.retrieve(q(f"topic {s}?"), 5)
        assert [i.turn_id for i in got] == [i.turn_id for i in want]
        assert [i.score for i in got] == pytest.approx([i.score for i in want], rel=1e-6)  # their cosines
        assert all(i.session_id == f"S{s}" for i in got)
    assert len(ann._index.ann) == 300
    scores = ann._scores(q("topic 3?"), 5)                               # what the graph did not return: -inf
    assert np.isfinite(scores).sum() == 5 and np.isneginf(scores).sum() == 295


def test_hnsw_is_used_from_ann_min_items_and_follows_observe_and_forget(fill, q):
    from pipelines.memory import Selector

    episode, table = clustered_episode()
    ann = table_dense(table, index="hnsw", ann_min_items=150)
    for session in episode.sessions[:14]:                                # 140 turns: exact
        ann.observe(episode, session)
    assert ann.retrieve(q("topic 3?"), 5)[0].session_id == "S3" and ann._index.ann is None
    for session in episode.sessions[14:]:
        ann.observe(episode, session)
    assert ann.retrieve(q("topic 20?"), 5)[0].session_id == "S20" and len(ann._index.ann) == 300
    assert ann.forget(Selector.of(sessions=["S20"])) == 10
    assert ann._index.ann is None                                        # rebuilt at the next query
    exact = table_dense(table)
    fill(exact, episode)
    exact.forget(Selector.of(sessions=["S20"]))
    for s in (20, 21):
        got = ann.retrieve(q(f"topic {s}?"), 5)
        assert "S20" not in {i.session_id for i in got}
        assert [i.turn_id for i in got] == [i.turn_id for i in exact.retrieve(q(f"topic {s}?"), 5)]
    assert len(ann._index.ann) == 290
    assert len(ann.retrieve(q("topic 1?"), 290)) == 290                  # a full ranking: exact
