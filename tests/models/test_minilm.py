"""The shipped all-MiniLM-L6-v2 encoder loads offline and ranks paraphrases above unrelated text."""

from __future__ import annotations

import numpy as np

from pipelines.models.minilm import EMBEDDING_DIM, load_minilm, minilm_path


def test_shipped_directory():
    path = minilm_path()
    assert (path / "config.json").is_file() and (path / "modules.json").is_file()
    assert any(path.glob("*.safetensors"))


def test_load_minilm_offline_embeddings():
    model = load_minilm("cpu")
    emb = model.encode(["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell."])
    assert emb.shape == (3, EMBEDDING_DIM)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)  # normalised: dot = cosine
    assert emb[0] @ emb[1] > 0.5 > emb[0] @ emb[2]
