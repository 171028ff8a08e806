"""Dense retrieval with the shipped all-MiniLM-L6-v2 (loaded once for the module)."""

import numpy as np
import pytest

from pipelines.errors import ConfigError
from pipelines.memory import Selector, build_strategy
from pipelines.memory.dense import Dense, DenseConfig
from pipelines.memory.embeddings import EmbeddingCache, Embedder, load_encoder


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


def test_build_strategy_shares_the_loaded_model(minilm, tmp_path):
    strategy = build_strategy("dense", cache_dir=str(tmp_path), batch_size=16)
    assert strategy.embedder.encoder is minilm
    assert strategy.embedder.cache.path == tmp_path / "embeddings.sqlite3"
    assert strategy.embedder.batch_size == 16


@pytest.mark.parametrize("settings, match", [({"batch_size": 0}, "batch_size"), ({"model_name": " "}, "model_name")])
def test_config_checks(settings, match):
    with pytest.raises(ConfigError, match=match):
        DenseConfig(**settings)
