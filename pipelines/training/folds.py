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
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from pipelines.data.folds import (FOLDS_DIR, FOLDS_MANIFEST, TRAINED_ON, Folds, assign_folds, validation_ids,
                                   write_trained_on)
from pipelines.errors import ConfigError


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
    from pipelines.ranks import is_rank_zero
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
