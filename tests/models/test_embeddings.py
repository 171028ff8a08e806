import numpy as np
import pytest

from pipelines.errors import ConfigError
from pipelines.models.embeddings import EmbeddingCache, Embedder, load_encoder, text_hash


class FakeEncoder:
    """Deterministic encoder: (count of 'a', count of 'b', 1), L2-normalised; records its calls."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def encode(self, sentences, **kwargs):
        assert kwargs["normalize_embeddings"] is True and kwargs["convert_to_numpy"] is True
        self.calls.append(list(sentences))
        v = np.asarray([[s.count("a"), s.count("b"), 1.0] for s in sentences], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_each_distinct_text_is_encoded_once_in_one_batch():
    enc = FakeEncoder()
    emb = Embedder(enc, "fake", cache=None, batch_size=8)
    out = emb.embed(["ab", "ab", "b"])
    assert enc.calls == [["ab", "b"]]
    np.testing.assert_allclose(out, [[1 / np.sqrt(3)] * 3, [1 / np.sqrt(3)] * 3, [0, 1 / np.sqrt(2), 1 / np.sqrt(2)]],
                               rtol=1e-6)
    assert (emb.stats.encode_calls, emb.stats.encoded_texts, emb.stats.cache_hits) == (1, 2, 0)
    assert emb.embed([]).shape == (0, 0)


def test_second_run_is_served_from_the_disk_cache(tmp_path):
    first = Embedder(FakeEncoder(), "fake", EmbeddingCache(tmp_path))
    vectors = first.embed(["ab", "b", "aab"])
    assert len(first.cache) == 3 and (tmp_path / "embeddings.sqlite3").exists()

    enc = FakeEncoder()
    second = Embedder(enc, "fake", EmbeddingCache(tmp_path))  # a new process would see the same file
    again = second.embed(["aab", "ab", "b"])
    assert enc.calls == []
    assert (second.stats.encode_calls, second.stats.cache_hits) == (0, 3)
    np.testing.assert_array_equal(again, vectors[[2, 0, 1]])

    other_model = Embedder(FakeEncoder(), "other", EmbeddingCache(tmp_path))
    other_model.embed(["ab"])
    assert other_model.stats.encode_calls == 1  # the cache key includes the model name


def test_forget_deletes_cached_vectors(tmp_path):
    enc = FakeEncoder()
    emb = Embedder(enc, "fake", EmbeddingCache(tmp_path))
    emb.embed(["ab", "b"])
    assert emb.forget(["ab", "never seen"]) == 1
    assert len(emb.cache) == 1
    assert emb.cache.get("fake", [text_hash("ab"), text_hash("b")]).keys() == {text_hash("b")}
    emb.embed(["ab", "b"])
    assert enc.calls[-1] == ["ab"]


def test_batch_size_and_model_path_are_checked(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        Embedder(FakeEncoder(), batch_size=0)
    with pytest.raises(ConfigError, match="not a local directory"):
        load_encoder(str(tmp_path / "missing"))


def test_chunks_are_encoded_and_cached_one_by_one(tmp_path):
    enc = FakeEncoder()
    cache = EmbeddingCache(tmp_path)
    emb = Embedder(enc, "fake", cache=cache, batch_size=8, chunk_size=2)
    emb.embed(["a", "b", "ab", "aab", "abb"])
    assert [len(c) for c in enc.calls] == [2, 2, 1] and len(cache) == 5
    assert emb.stats.encode_calls == 3


def test_bf16_precision_is_cached_apart_and_close_to_fp32(tmp_path):
    from pipelines.models.embeddings import resolve_precision

    texts = ["I keep my grandmother's recipe box on the top shelf.", "We adopted a greyhound named Juno."]
    encoder = load_encoder(backend="torch")
    fp32 = Embedder(encoder, "minilm", EmbeddingCache(tmp_path), precision="fp32")
    bf16 = Embedder(encoder, "minilm", EmbeddingCache(tmp_path), precision="bf16")
    assert bf16.model_name == "minilm@bf16" and fp32.model_name == "minilm"
    a, b = fp32.embed(texts), bf16.embed(texts)
    assert bf16.stats.cache_hits == 0                       # not served the fp32 vectors
    assert (a * b).sum(1).min() > 0.99                      # same model, bf16 arithmetic
    assert resolve_precision("auto") in ("fp32", "bf16")
    with pytest.raises(ConfigError, match="precision"):
        resolve_precision("int4")


def test_a_source_digest_is_computed_once_per_unchanged_folder(tmp_path, monkeypatch):
    import os

    from pipelines.models import embeddings as E

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "config.json").write_text("{}")
    first = E.source_digest(tmp_path)
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: reads.append(f) or real_open(f, *a, **k))
    assert E.source_digest(tmp_path) == first and reads == []           # the same files: nothing read again
    (tmp_path / "model.safetensors").write_bytes(b"other weights")     # new contents (size and mtime move)
    os.utime(tmp_path / "model.safetensors", ns=(1, 1))
    assert E.source_digest(tmp_path) != first and reads                  # read and hashed anew
