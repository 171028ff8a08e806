"""``trained_dense``: turn retrieval with EMMA's trained dual encoder (issue #18), never on a conversation it saw.

The emma_retriever stage trains a dual encoder on question -> evidence pairs (``emma.retriever.pairs``:
"questions", pipelines.emma.retriever.question_examples); this strategy uses it as the ``dense`` strategy uses
MiniLM, but with two towers: the question goes through the context encoder E_c, each held turn, indexed
``"speaker: text"`` exactly as in training (:func:`pipelines.emma.retriever.turn_text`), through the memory
encoder E_m, and a turn scores their cosine (EMMA's eq. 1),

    score(q, d) = cos(E_c(q), E_m(d))

Honest evaluation: every saved retriever lists the episodes that shaped its weights (``trained_on.json``). Per
episode (``enter``, which ``observe`` calls) the strategy takes the main model (``model_path``) unless the
episode is in its ``trained_on``; then the fold model (``<model_path>/folds/``, listed in ``folds.json``) that
held the episode out (LoCoMo's conversations, ``emma.retriever_folds``); when no model held it out, it raises a
ConfigError naming the episode and the models: a conversation is never scored by a model that trained on it.

Embeddings: the turns of an observed session are encoded in one batch; every vector is kept in memory per model
and tower, and, with ``cache_dir``, in the project's :class:`~pipelines.models.embeddings.EmbeddingCache` keyed
by the tower's weights (sha256 of its safetensors file) and the text's hash, so a retrained model never reads
another model's vectors. ``forget`` drops the forgotten turns' vectors from both (unless another held turn has the
same text), as ``dense`` does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pipelines.data.schema import Episode, Query
from pipelines.errors import ConfigError
from pipelines.memory.base import StrategyConfig, register_strategy
from pipelines.models.embeddings import EmbeddingCache, text_hash
from pipelines.memory.turn_store import TurnItem, TurnStrategy
from pipelines.data.folds import HeldOutModels



@dataclass(frozen=True)
class TrainedDenseConfig(StrategyConfig):
    """Settings of the trained dual-encoder retriever."""

    model_path: str | None = None     # a saved emma_retriever (models/emma_retriever, the benchmark's default)
    cache_dir: str | None = None      # on-disk embedding cache folder; None: vectors kept in memory only
    batch_size: int = 64              # texts per forward pass of a tower
    device: str = "auto"              # auto (a CUDA GPU when torch sees one, else cpu) | cpu | cuda | cuda:N

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise ConfigError(f"trained_dense.batch_size must be a positive integer, got {self.batch_size!r}.")


def _held_out(model_path) -> HeldOutModels:
    from pipelines.emma.retriever import CONFIG_FILE

    return HeldOutModels(model_path, CONFIG_FILE, "emma_retriever", "trained_dense", "emma.retriever_folds")


class _Towers:
    """A loaded DualEncoder with its vectors: per tower, text -> unit vector (D,), in memory and on disk."""

    def __init__(self, path: Path, config: TrainedDenseConfig):
        from pipelines.emma.retriever import DualEncoder
        from pipelines.models.embeddings import resolve_device

        self.model = DualEncoder.load(path).to(resolve_device(config.device)).eval()   # cuda asked, none: ConfigError
        self.batch_size = config.batch_size
        self.cache = EmbeddingCache(config.cache_dir) if config.cache_dir else None
        self.keys = {tower: f"trained_dense:{tower}:{_weights_hash(path / f'{tower}_encoder')}"
                     for tower in ("context", "memory")}
        self.vectors: dict[str, dict[str, np.ndarray]] = {"context": {}, "memory": {}}

    def embed(self, texts: list[str], tower: str) -> np.ndarray:
        """(N, D) float32 unit rows of ``texts`` through ``tower`` ("context" = E_c, "memory" = E_m)."""
        import torch
        import torch.nn.functional as F

        known = self.vectors[tower]
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing and self.cache is not None:
            found = self.cache.get(self.keys[tower], [text_hash(t) for t in missing])
            known.update({t: found[text_hash(t)] for t in missing if text_hash(t) in found})
            missing = [t for t in missing if t not in known]
        if missing:
            encode = self.model.encode_context if tower == "context" else self.model.encode_memory
            with torch.no_grad():
                rows = torch.cat([encode(missing[i:i + self.batch_size])
                                  for i in range(0, len(missing), self.batch_size)])      # (M, D)
            new = dict(zip(missing, F.normalize(rows.float(), dim=-1).cpu().numpy()))
            known.update(new)
            if self.cache is not None:
                self.cache.put(self.keys[tower], {text_hash(t): v for t, v in new.items()})
        return np.stack([known[t] for t in texts]).astype(np.float32)

    def forget(self, texts: set[str], tower: str = "memory") -> None:
        """Drop the vectors of ``texts`` from memory and from the on-disk cache (a forgotten turn leaves none)."""
        for text in texts:
            self.vectors[tower].pop(text, None)
        if self.cache is not None and texts:
            self.cache.delete(self.keys[tower], {text_hash(t) for t in texts})


def _weights_hash(folder: Path) -> str:
    """sha256 (16 hex digits) of a tower's weight files: the cache key of its vectors."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin")):
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


@register_strategy("trained_dense")
class TrainedDense(TurnStrategy):
    """Cosine of EMMA's trained question (E_c) and turn (E_m) encoders over the held turns."""

    config_class = TrainedDenseConfig
    model_settings = {"model_path": "emma_retriever"}
    ingredient = "a dual encoder trained on question -> evidence turns"

    def __init__(self, config=None, counter=None):
        super().__init__(config, counter)
        if not self.config.model_path:
            raise ConfigError("trained_dense.model_path is not set: give the folder of a trained emma_retriever "
                              "(the benchmark's default is models/emma_retriever).")
        self.models = _held_out(self.config.model_path)
        self._loaded: dict[Path, _Towers] = {}

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        """Why the trained models cannot score ``episodes`` honestly (every model trained on one of them)."""
        from pipelines.emma.retriever import CONFIG_FILE

        return HeldOutModels.unavailable(settings.get("model_path"), episodes, CONFIG_FILE, "emma_retriever",
                                         "trained_dense", "emma.retriever_folds")

    def _empty_scope(self) -> dict:
        return {**super()._empty_scope(), "_matrix": np.zeros((0, 0), dtype=np.float32)}  # (N, D) held turns

    def enter(self, episode: Episode) -> None:
        """Enter ``episode`` after choosing its model (ConfigError when every model trained on it)."""
        self.models.choose(episode.id)
        super().enter(episode)

    def model_for(self, episode_id: str) -> Path:
        """The folder of the model that scores ``episode_id`` (after ``enter``)."""
        return self.models.choose(episode_id)

    def _towers(self) -> _Towers:
        path = self.models.chosen(self.episode_id)
        if path is None:
            raise ConfigError("trained_dense: no episode entered; call enter(episode) or observe first.")
        if path not in self._loaded:
            self._loaded[path] = _Towers(path, self.config)
        return self._loaded[path]

    def _on_add(self, new: list[TurnItem]) -> None:
        if not new:
            return
        rows = self._towers().embed([item.indexed_text(True) for item in new], "memory")   # (n, D), one batch
        self._matrix = rows if not self._matrix.size else np.concatenate([self._matrix, rows])

    def _on_remove(self, removed: list[TurnItem], keep: np.ndarray) -> None:
        """Drop the rows, and the vectors of the texts no held turn (of any episode) still has."""
        self._matrix = self._matrix[keep]
        gone = {item.indexed_text(True) for item in removed} - self.held_texts(lambda i: i.indexed_text(True))
        for towers in self._loaded.values():
            towers.forget(gone)

    def _scores(self, query: Query) -> np.ndarray:
        """cos(E_c(question), E_m(turn)) for every held turn: (N,)."""
        q = self._towers().embed([query.question], "context")[0]   # (D,)
        return self._matrix @ q                                       # (N,)
