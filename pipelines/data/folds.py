"""Which episodes a saved model may score: the fold plan's data side (issue #18; the training side, one model per
fold, is pipelines/training/folds.py).

A stage that learns from a one-split dataset (LoCoMo: 10 conversations, all ``test``) deals its episodes into ``k``
folds (:class:`Folds`, :func:`assign_folds`: by a sha256 rank of the ids, so every stage deals the same episodes into
the same folds) and trains one model per fold besides a main model; every saved model lists the episodes that shaped
its weights (``trained_on.json``, :func:`write_trained_on`). At inference a strategy takes, per episode, the main
model when it did not train on the episode, else the fold model that held it out (:class:`HeldOutModels`,
:func:`choose_model`), and refuses when none did. Nothing here trains: the benchmark's strategies read it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from pipelines.errors import ConfigError

TRAINED_ON = "trained_on.json"   # in every saved model's folder: the episodes that shaped its weights
FOLDS_DIR, FOLDS_MANIFEST = "folds", "folds.json"


@dataclass(frozen=True)
class Folds:
    """params.yaml ``<section>.folds`` (absent: no folds): k-fold training over some datasets' episodes."""

    k: int = 5                          # folds; each of them is held out by one model trained on the others
    sources: tuple[str, ...] = ("locomo",)  # datasets cut into folds, whatever their published split
    valid_share: float = 0.1            # share of a model's fold episodes kept for validation (early stopping);
                                        # at least one episode when there are three or more
    where: str = field(default="emma.retriever_folds", compare=False, repr=False)  # the params key, for errors

    def __post_init__(self) -> None:
        sources = (self.sources,) if isinstance(self.sources, str) else tuple(self.sources)
        object.__setattr__(self, "sources", sources)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 2:
            raise ConfigError(f"{self.where}.k must be an integer >= 2 (one fold held out, the others "
                              f"trained on), got {self.k!r}.")
        if not sources or not all(isinstance(s, str) and s for s in sources):
            raise ConfigError(f"{self.where}.sources must list datasets of the stage's sources, got {self.sources!r}.")
        if not 0.0 <= self.valid_share < 1.0:
            raise ConfigError(f"{self.where}.valid_share must lie in [0, 1), got {self.valid_share!r}.")


def _rank(ids: Iterable[str], salt: str) -> list[str]:
    """``ids`` in a stable pseudo-random order: by sha256 of salt + id (the same on every machine and run)."""
    return sorted(dict.fromkeys(ids), key=lambda i: hashlib.sha256(f"{salt}:{i}".encode()).hexdigest())


def assign_folds(ids: Iterable[str], k: int) -> dict[str, int]:
    """Episode id -> fold in [0, k): ids ranked by sha256, dealt round-robin, so folds differ in size by at most
    one (LoCoMo's 10 conversations, k = 5: two each) and a fold depends on the ids only, not on file order."""
    ranked = _rank(ids, "emma-retriever-fold")    # the salt of the first user (EMMA's retriever): same folds
    if len(ranked) < k:
        raise ConfigError(f"folds.k = {k} but the fold datasets hold {len(ranked)} episodes: every fold needs one.")
    return {eid: n % k for n, eid in enumerate(ranked)}


def validation_ids(ids: Iterable[str], share: float) -> set[str]:
    """The ``share`` of ``ids`` (rounded; never all) a model validates on instead of training on, chosen by sha256
    rank. When the share rounds to none, one of three or more: of two episodes (a user's own two histories, each
    one episode) the model trains on both, for the one it kept would be a copy of the fold model trained on the
    other (the same episodes, the same weights)."""
    ranked = _rank(ids, "emma-retriever-valid")
    n = round(share * len(ranked))
    if n == 0 and share > 0 and len(ranked) >= 3:
        n = 1
    return set(ranked[:min(n, max(len(ranked) - 1, 0))])


def write_trained_on(directory: str | os.PathLike, train: Iterable, valid: Iterable, **extra) -> Path:
    """``trained_on.json`` in a saved model's folder: ``episodes`` = every episode that shaped the weights
    (trained on, or chose the early-stopping step), also split into ``train`` and ``valid``, and the ``sources``
    they come from; a strategy using the model refuses to score them."""
    train, valid = list(train), list(valid)
    train_ids, valid_ids = sorted({e.id for e in train}), sorted({e.id for e in valid})
    path = Path(directory) / TRAINED_ON
    sources = sorted({e.source for e in (*train, *valid)})   # what it learnt from, for the report and the card
    body = {"episodes": sorted({*train_ids, *valid_ids}), "train": train_ids, "valid": valid_ids, "sources": sources,
            **extra}
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return path


def read_trained_on(directory: str | os.PathLike, stage: str = "emma_retriever") -> set[str]:
    """The episode ids a saved model trained on (``trained_on.json``); ConfigError when it has none."""
    path = Path(directory) / TRAINED_ON
    if not path.exists():
        raise ConfigError(f"{directory} has no {TRAINED_ON}: it cannot tell which episodes it trained on, so no "
                          f"episode can be scored with it honestly; train it again with the {stage} stage.")
    return set(json.loads(path.read_text(encoding="utf-8"))["episodes"])


# --- the scoring side: which saved model may score an episode ----------------------------------------------------

@dataclass(frozen=True)
class SavedModel:
    """One saved model: its folder, the episodes it trained on, those it held out (folds only)."""

    path: Path
    trained_on: frozenset[str]
    held_out: frozenset[str] | None = None   # None: the main model (it holds out whatever it did not train on)

    def may_score(self, episode_id: str) -> bool:
        return episode_id not in self.trained_on and (self.held_out is None or episode_id in self.held_out)


def saved_models(model_path: str | Path, config_file: str, stage: str, setting: str) -> list[SavedModel]:
    """The main model at ``model_path`` and its fold models (``folds/folds.json``), in the order they are tried;
    ``config_file`` is the file a saved model of ``stage`` always has (``setting`` names the strategy's key)."""
    root = Path(model_path)
    if not (root / config_file).exists():
        raise ConfigError(f"{setting} {str(root)!r} is not a saved model of the {stage} stage (no {config_file}): "
                          f"run the {stage} stage.")
    models = [SavedModel(root, frozenset(read_trained_on(root, stage)))]
    manifest = root / FOLDS_DIR / FOLDS_MANIFEST
    if manifest.exists():
        for fold in json.loads(manifest.read_text(encoding="utf-8"))["folds"]:
            path = root / FOLDS_DIR / fold["path"]
            models.append(SavedModel(path, frozenset(read_trained_on(path, stage)), frozenset(fold["held_out"])))
    return models


def choose_model(models: Sequence[SavedModel], episode_id: str, strategy: str = "trained_dense",
                 folds_key: str = "emma.retriever_folds") -> SavedModel:
    """The first model that may score ``episode_id`` (the main one, else the fold that held it out)."""
    for model in models:
        if model.may_score(episode_id):
            return model
    raise ConfigError(f"{strategy}: every model trained on episode {episode_id!r} "
                      f"({', '.join(str(m.path) for m in models)}) and none held it out: scoring it would score a "
                      f"conversation the model has seen. Hold it out with {folds_key}, or score another split.")


class HeldOutModels:
    """A strategy's view of one stage's saved models: per episode, the model that may score it (:func:`choose_model`),
    chosen once; ``unavailable`` says why a set of episodes cannot be scored honestly (None when it can)."""

    def __init__(self, model_path: str | Path, config_file: str, stage: str, strategy: str, folds_key: str,
                 setting: str = "model_path"):
        self.names = (config_file, stage, strategy, folds_key)
        self.models = saved_models(model_path, config_file, stage, f"{strategy}.{setting}")
        self._chosen: dict[str, SavedModel] = {}

    def choose(self, episode_id: str) -> Path:
        """The folder of the model that scores ``episode_id`` (ConfigError when every model trained on it)."""
        if episode_id not in self._chosen:
            self._chosen[episode_id] = choose_model(self.models, episode_id, self.names[2], self.names[3])
        return self._chosen[episode_id].path

    def chosen(self, episode_id: str) -> Path | None:
        model = self._chosen.get(episode_id)
        return model.path if model is not None else None

    @staticmethod
    def unavailable(model_path, episodes, config_file: str, stage: str, strategy: str, folds_key: str,
                    setting: str = "model_path") -> str | None:
        """Why the saved models at ``model_path`` cannot score ``episodes`` honestly; None when they can, or when
        there is no model folder (the benchmark lists an untrained model as missing)."""
        if not model_path or not Path(str(model_path)).is_dir():
            return None
        try:
            models = saved_models(model_path, config_file, stage, f"{strategy}.{setting}")
            for episode in episodes:
                choose_model(models, episode.id, strategy, folds_key)
        except ConfigError as err:
            return str(err)
        return None
