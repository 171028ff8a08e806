"""k-fold training over a one-split dataset, so that a trained model never scores a conversation it saw (issue #18).

LoCoMo is published as one test split of 10 conversations. A model trained on some of them can score only the
others, so a stage that learns from such a dataset trains one model per fold (``<section>.folds``: k folds of the
named datasets' episodes, :func:`assign_folds`) plus a main model on every episode, and every saved model lists
the episodes that shaped its weights (``trained_on.json``). The strategy using the models picks, per episode, the
main model when it did not train on the episode, else the fold model that held the episode out
(:func:`choose_model`), and refuses when none did.

Used by the emma_retriever stage (EMMA's dual encoder, ``emma.retriever_folds``) and the reranker stage (the
cross-encoder, ``rerank.folds``); both deal the same episodes into the same folds (the assignment depends on the
ids only), so a conversation held out by one is held out by the other.

Layout of a stage's output folder ``<out>``::

    <out>/                      the main model, trained_on.json
    <out>/folds/folds.json      k, sources, per fold: path, held_out, trained_on, valid, scores
    <out>/folds/fold-<i>/       fold i's model, trained_on.json (with held_out)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from pipelines.errors import ConfigError

TRAINED_ON = "trained_on.json"   # in every saved model's folder: the episodes that shaped its weights
FOLDS_DIR, FOLDS_MANIFEST = "folds", "folds.json"


@dataclass(frozen=True)
class Folds:
    """params.yaml ``<section>.folds`` (absent: no folds): k-fold training over some datasets' episodes."""

    k: int = 5                          # folds; each of them is held out by one model trained on the others
    sources: tuple[str, ...] = ("locomo",)  # datasets cut into folds, whatever their published split
    valid_share: float = 0.1            # share of a model's fold episodes kept for validation (early stopping);
                                        # at least one episode when there are two or more
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
    """The ``share`` of ``ids`` (rounded; at least one of two or more when share > 0, never all) a model
    validates on instead of training on, chosen by sha256 rank."""
    ranked = _rank(ids, "emma-retriever-valid")
    n = min(max(round(share * len(ranked)), 1 if share > 0 else 0), max(len(ranked) - 1, 0))
    return set(ranked[:n])


def write_trained_on(directory: str | os.PathLike, train: Iterable, valid: Iterable, **extra) -> Path:
    """``trained_on.json`` in a saved model's folder: ``episodes`` = every episode that shaped the weights
    (trained on, or chose the early-stopping step), also split into ``train`` and ``valid``; a strategy using the
    model refuses to score them."""
    train_ids, valid_ids = sorted({e.id for e in train}), sorted({e.id for e in valid})
    path = Path(directory) / TRAINED_ON
    body = {"episodes": sorted({*train_ids, *valid_ids}), "train": train_ids, "valid": valid_ids, **extra}
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return path


def read_trained_on(directory: str | os.PathLike, stage: str = "emma_retriever") -> set[str]:
    """The episode ids a saved model trained on (``trained_on.json``); ConfigError when it has none."""
    path = Path(directory) / TRAINED_ON
    if not path.exists():
        raise ConfigError(f"{directory} has no {TRAINED_ON}: it cannot tell which episodes it trained on, so no "
                          f"episode can be scored with it honestly; train it again with the {stage} stage.")
    return set(json.loads(path.read_text(encoding="utf-8"))["episodes"])


# --- the training side: who trains on what, one model per fold, the manifest -------------------------------------

def fold_plan(ctx, section: str, folds: Folds) -> dict:
    """Who trains on what. The fold datasets' episodes (every split) are dealt into ``k`` folds
    (:func:`assign_folds`); the other datasets of ``<section>.sources`` keep their splits. Fold i's model trains
    on the other datasets' train split and the other folds' episodes, less ``valid_share`` of those, which it
    validates on with the other datasets' valid split. The main model trains the same way on every fold (so a
    fold dataset's conversation is scored by the fold model that held it out, never by the main model); the main
    model's test episodes are the other datasets' test split."""
    from pipelines.data.stage import training_split

    parts = {}
    for split in ("train", "valid", "test"):
        try:
            parts[split] = training_split(ctx, section, split)
        except ConfigError:             # only the fold datasets have episodes: they are the training data
            parts[split] = []
    own = {split: [e for path, eps in read if path.parent.name not in folds.sources for e in eps]
           for split, read in parts.items()}
    pooled = {e.id: e for read in parts.values() for path, eps in read if path.parent.name in folds.sources
              for e in eps}
    fold_of = assign_folds(pooled, folds.k)
    plans = []
    for i in range(folds.k):
        others = [eid for eid in pooled if fold_of[eid] != i]
        held = validation_ids(others, folds.valid_share)
        plans.append({"held_out": [pooled[e] for e in pooled if fold_of[e] == i],
                      "train": own["train"] + [pooled[e] for e in others if e not in held],
                      "valid": own["valid"] + [pooled[e] for e in others if e in held]})
    held = validation_ids(pooled, folds.valid_share)
    return {"folds": plans, "config": folds, "test": own["test"],
            "train": own["train"] + [e for eid, e in pooled.items() if eid not in held],
            "valid": own["valid"] + [e for eid, e in pooled.items() if eid in held]}


class FoldTracker:
    """The stage's tracker as one fold's training sees it: metrics prefixed ``fold-<i>/``, the model card under
    ``folds/fold-<i>``, and no registered model version (the registry holds the main model only)."""

    def __init__(self, tracker, fold: int):
        self._tracker, self._prefix = tracker, f"fold-{fold}/"

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self._tracker.log_metrics({f"{self._prefix}{k}": v for k, v in metrics.items()}, step=step)

    def log_model_card(self, text: str, artifact_path: str = "model") -> None:
        self._tracker.log_model_card(text, artifact_path=f"folds/{self._prefix.rstrip('/')}")

    def register_model(self, path, name: str, description: str = "") -> None:
        return None

    def __getattr__(self, name: str):
        return getattr(self._tracker, name)


def train_folds(ctx, plan: dict, folder: Path, make_task: Callable[[list, list], Any], knobs: dict,
                score: Callable[[Path | None, list], dict], untrained: bool = True) -> list[dict] | None:
    """Train one model per fold, each in its own run folder (``<run>-fold-<i>``: a killed run resumes from its
    checkpoints), into ``<run>-folds/fold-<i>`` until the main model is trained too (a fold already there is not
    trained again); returns (rank 0) ``{"trained": score(path, held_out), "untrained": score(None, held_out)}``
    per fold: the trained and (``untrained``) the untrained model's figures on the episodes the fold held out."""
    from pipelines.runner import is_rank_zero
    from pipelines.training.stage import train_stage

    staged = folder.with_name(f"{folder.name}-folds")
    scores = []
    for i, fold in enumerate(plan["folds"]):
        out = staged / f"fold-{i}"
        if not (out / TRAINED_ON).exists():
            tracker = FoldTracker(ctx.tracker, i) if ctx.tracker is not None else None
            train_stage(dataclasses.replace(ctx, tracker=tracker), make_task(fold["train"], fold["valid"]),
                        {**knobs, "model_name": f"mnemos-{ctx.stage.name}-fold-{i}"},
                        str(out.relative_to(ctx.root)), folder=folder.with_name(f"{folder.name}-fold-{i}"))
            if is_rank_zero():
                write_trained_on(out, fold["train"], fold["valid"], held_out=sorted(e.id for e in fold["held_out"]))
        if is_rank_zero():
            scores.append({"trained": score(out, fold["held_out"]),
                           **({"untrained": score(None, fold["held_out"])} if untrained else {})})
    return scores if is_rank_zero() else None


def publish_folds(ctx, plan: dict, folder: Path, scores: list[dict], result, out_rel: str,
                  metrics: Sequence[str] = ("recall@1", "mrr")) -> None:
    """Move the fold models under ``<out_rel>/folds/``, write the manifest ``folds.json`` (per fold: its folder,
    held-out, trained and validation episode ids, scores) and log each fold's scores, and their pooled mean
    (weighted by the ``...queries`` count beside each metric), to the stage result
    (``folds/fold-<i>/<which>/<kind>/recall@1`` ...)."""
    staged = folder.with_name(f"{folder.name}-folds")
    out = ctx.path(f"{out_rel}/{FOLDS_DIR}")
    out.mkdir(parents=True, exist_ok=True)
    cfg = plan["config"]
    manifest = {"k": cfg.k, "sources": list(cfg.sources), "valid_share": cfg.valid_share,
                "assignment": "episode ids ranked by sha256, dealt round-robin (pipelines.training.folds.assign_folds)",
                "folds": []}
    for i, fold in enumerate(plan["folds"]):
        shutil.rmtree(out / f"fold-{i}", ignore_errors=True)
        shutil.move(str(staged / f"fold-{i}"), str(out / f"fold-{i}"))
        manifest["folds"].append({"fold": i, "path": f"fold-{i}", "held_out": sorted(e.id for e in fold["held_out"]),
                                  "trained_on": sorted(e.id for e in fold["train"]),
                                  "valid": sorted(e.id for e in fold["valid"]), "scores": scores[i]})
    shutil.rmtree(staged, ignore_errors=True)
    (out / FOLDS_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    for i, fold_scores in enumerate(scores):
        for which, values in fold_scores.items():
            result.metrics.update({f"folds/fold-{i}/{which}/{k}": float(v) for k, v in values.items()})
    for which in sorted({w for s in scores for w in s}):
        for key in {k for s in scores for k in s[which] if k.endswith("queries")}:
            prefix = key.removesuffix("queries")
            n = sum(s[which][key] for s in scores)
            result.metrics[f"folds/{which}/{key}"] = float(n)
            for metric in metrics:
                pooled = sum(s[which].get(prefix + metric, 0.0) * s[which][key] for s in scores) / n if n else 0.0
                result.metrics[f"folds/{which}/{prefix}{metric}"] = pooled
                result.metadata[f"folds_{which}_{prefix}{metric}"] = pooled
    result.metadata["folds_manifest"] = str(out / FOLDS_MANIFEST)


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
