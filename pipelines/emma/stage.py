"""EMMA stages (seed 000): task examples, the QLoRA dialogue module, the triplet-loss retriever.

``emma_examples`` writes the three tasks' input/target pairs in the paper's formats (Appendix E), and
summarisation examples from LoCoMo's per-session observations when LoCoMo is one of ``emma.sources``;
``emma_dialogue`` trains one T5 (or, on the small profile, the decoder SmolLM2-135M-Instruct) on all three at
once with QLoRA (4-bit NF4, double quantisation, LoRA r=32, alpha=32, dropout 0.1; plain LoRA where the profile
says so); ``emma_retriever`` trains the dual encoder with a triplet loss
on cosine distance (margin 0.2), and scores Recall@1 / MRR of the untrained and the trained
encoder on the test split. The egocentric memory strategy in the benchmark uses both models.
"""

from __future__ import annotations

import json
from dataclasses import fields

from pipelines.data.stage import training_inputs, training_split
from pipelines.registry import StageResult, stage

EXAMPLES = "data/tasks/emma"
DIALOGUE, RETRIEVER = "models/emma_dialogue", "models/emma_retriever"
CODE = ("pipelines/emma", "pipelines/training", "pipelines/models")
RETRIEVER_EVAL = "retriever_eval.json"


def _episodes(ctx, split: str) -> list:
    """The episodes of ``split`` from every dataset of params.yaml ``emma.sources`` (default: synthetic)."""
    return [episode for _, episodes in training_split(ctx, "emma", split) for episode in episodes]


def _make(cls, section: dict | None):
    """A config dataclass from a params section; unknown keys are a clear error."""
    from pipelines.errors import ConfigError

    names = {f.name for f in fields(cls)}
    unknown = sorted(set(section or {}) - names)
    if unknown:
        raise ConfigError(f"{cls.__name__} has no setting {unknown}; known: {sorted(names)}")
    return cls(**(section or {}))


@stage(name="emma_examples", group="emma", params=("emma",), inputs=training_inputs("emma"),
       outputs=(EXAMPLES,), code=("pipelines/emma",))
def emma_examples(ctx) -> StageResult:
    """EMMA task examples in the paper's formats: generation ([MAIN SPEAKER] ... [NOW] ... [BOT]),
    memory summarisation (summarize [ABOUT WHO]: ... -> [SEP]-separated memories or [NONE]) and
    memory linking (memory sentence 1: ... memory sentence 2: ... -> positive / negative). Episodes with
    per-session observations (LoCoMo) give summarisation examples whose targets are the observations, their
    conversations divided into train / valid / test by ``emma.formats.observation_split``."""
    from pipelines.data.schema import SPLITS
    from pipelines.emma.formats import FormatConfig, build_examples, has_observations, split_by_episode, \
        write_examples

    cfg = ctx.config["emma"]
    fmt = _make(FormatConfig, cfg.get("formats"))
    budget = int(cfg.get("dialogue", {}).get("max_source_length", 1024))
    read = _splits(ctx)
    # episodes with observations (LoCoMo: one published test split) are divided by episode for EMMA
    observed = [(path, e) for split in SPLITS for path, episodes in read[split] for e in episodes
                if has_observations(e)]
    split_of = split_by_episode([e.id for _, e in observed], fmt.observation_split, fmt.seed)
    meta = {}
    for split in SPLITS:
        parts = [(path, [e for e in episodes if not has_observations(e)]) for path, episodes in read[split]]
        parts += [(path, [e]) for path, e in observed if split_of[e.id] == split]
        examples = []
        for path, episodes in parts:
            # Generation inputs are fitted to the source budget in whitespace tokens (the model's own
            # tokenizer is trained in emma_dialogue, after this stage); a longer input is cut there, keeping
            # its head (prefix, speakers, memories, [NOW]) and its latest turns (dialogue.encode_all).
            examples += build_examples(episodes, fmt, file=str(path), count_tokens=lambda s: len(s.split()),
                                       budget=budget)
        write_examples(ctx.path(f"{EXAMPLES}/{split}.jsonl"), examples)
        for task in ("generation", "summarize", "link"):
            meta[f"{split}_{task}"] = sum(e.task == task for e in examples)
        if observed:
            meta[f"{split}_observation_episodes"] = sum(split_of[e.id] == split for _, e in observed)
    return StageResult(metadata=meta, metrics={k: float(v) for k, v in meta.items()})


def _splits(ctx) -> dict[str, list]:
    """(file, episodes) of each split of emma.sources (:func:`training_split`). A configuration without a
    train split is an error unless some episode has observations, which emma_examples divides by episode."""
    from pipelines.errors import ConfigError

    read = {split: training_split(ctx, "emma", split) for split in ("valid", "test")}
    try:
        read["train"] = training_split(ctx, "emma", "train")
    except ConfigError:
        from pipelines.emma.formats import has_observations

        if not any(has_observations(e) for parts in read.values() for _, episodes in parts for e in episodes):
            raise
        read["train"] = []
    return read


@stage(name="emma_dialogue", group="emma", params=("emma",), inputs=(EXAMPLES,), outputs=(DIALOGUE,),
       launcher="accelerate", code=CODE + ("pipelines/llm",))   # a decoder's base and prompt: the LLM layer's
def emma_dialogue(ctx) -> StageResult:
    """EMMA dialogue module: one T5 (or decoder) trained on generation, memory summarisation and memory
    linking at once with QLoRA (4-bit NF4 + double quantisation, LoRA r=32 alpha=32 dropout 0.1), on at most
    ``max_train_examples`` examples; the examples kept per task are in the metadata."""
    from pipelines.emma.dialogue import EMMADialogueConfig, EMMADialogueTask
    from pipelines.emma.formats import iter_examples
    from pipelines.training.stage import run_dir, train_stage

    cfg = _make(EMMADialogueConfig, ctx.config["emma"].get("dialogue"))
    train = list(iter_examples(ctx.path(f"{EXAMPLES}/train.jsonl")))
    valid = list(iter_examples(ctx.path(f"{EXAMPLES}/valid.jsonl")))
    folder = run_dir(ctx)
    task = EMMADialogueTask(cfg, train, valid, work_dir=folder / "base-init")
    knobs = cfg.train_config(folder).to_dict()
    knobs.pop("output_dir")
    knobs.update(ctx.config["emma"].get("dialogue_train", {}))
    result = train_stage(ctx, task, knobs, DIALOGUE, folder=folder)
    result.metadata.update({"arch": task.arch, **{f"examples_{k}": v for k, v in task.counts.items()}})
    return result


@stage(name="emma_retriever", group="emma", params=("emma",), inputs=training_inputs("emma"),
       outputs=(RETRIEVER,), launcher="accelerate", code=CODE)
def emma_retriever(ctx) -> StageResult:
    """EMMA retriever: dual encoder (context <= 512 tokens, memory <= 32), cosine similarity,
    triplet loss with margin 0.2 on cosine distance, negatives mined in the same episode, on the example kinds
    of ``emma.retriever.pairs``; Recall@1 and MRR of the untrained and the trained encoder on the test split's
    episodes it did not train on. With ``emma.retriever_folds``, one more model per fold (see
    :func:`_train_folds`). Every saved model lists the episodes it trained on (``trained_on.json``)."""
    from pipelines.emma.retriever import DualEncoder, RetrieverConfig, RetrieverTask, write_trained_on
    from pipelines.runner import is_rank_zero
    from pipelines.training.stage import run_dir, train_stage

    cfg = _make(RetrieverConfig, ctx.config["emma"].get("retriever"))
    folds = _fold_config(ctx, cfg)
    folder = run_dir(ctx)
    if folds is None:
        train, valid, test = (_episodes(ctx, split) for split in ("train", "valid", "test"))
        plan = None
    else:
        plan = _fold_plan(ctx, folds)
        train, valid, test = plan["train"], plan["valid"], plan["test"]
        fold_scores = _train_folds(ctx, cfg, plan, folder)
    task = RetrieverTask(cfg, train, valid)
    knobs = cfg.train_config(folder).to_dict()
    knobs.pop("output_dir")
    knobs.update(ctx.config["emma"].get("retriever_train", {}))
    result = train_stage(ctx, task, knobs, RETRIEVER, folder=folder)
    if not is_rank_zero():
        return result
    write_trained_on(ctx.path(RETRIEVER), train, valid)
    result.metadata.update({f"examples_{kind}": n for kind, n in task.counts.items()})
    if plan is not None:
        _publish_folds(ctx, plan, folder, fold_scores, result)
    seen = {e.id for e in (*train, *valid)}
    unseen = [e for e in test if e.id not in seen]          # never score an episode the model trained on
    result.metadata["test_episodes_scored"] = len(unseen)
    result.metadata["test_episodes_trained_on"] = len(test) - len(unseen)
    if not unseen:                      # emma.sources without a test split: nothing to score
        result.metadata["test_scores"] = "none: no test episode the model did not train on in emma.sources"
        return result
    scores = {"untrained": _scores(DualEncoder.from_pretrained(cfg), cfg, unseen),
              "trained": _scores(DualEncoder.load(ctx.path(RETRIEVER)), cfg, unseen)}
    (ctx.path(RETRIEVER) / RETRIEVER_EVAL).write_text(json.dumps(scores, indent=2))
    for which, values in scores.items():
        result.metrics.update({f"test/{which}/{k}": float(v) for k, v in values.items()})
        result.metadata.update({f"test_{which}_{k}": v for k, v in values.items()})
    return result


def _scores(model, cfg, episodes) -> dict[str, float]:
    """Recall@1 / MRR of ``model`` on ``episodes``: over the tagged turns (keys as before pairs existed), and over
    the questions of each question kind of ``cfg.pairs`` (keys ``<kind>/recall@1`` ...)."""
    from pipelines.emma.retriever import evaluate_retriever, examples_of

    out = dict(evaluate_retriever(model, episodes))
    for kind in cfg.pairs:
        if kind != "memory_tags":
            out.update({f"{kind}/{k}": v for k, v in evaluate_retriever(model, examples_of(kind, episodes)).items()})
    return out


# --- emma.retriever_folds ------------------------------------------------------------------------------------------

FOLDS = f"{RETRIEVER}/folds"
FOLDS_MANIFEST = "folds.json"


def _fold_config(ctx, cfg):
    """params.yaml ``emma.retriever_folds`` (None when absent), checked against emma.sources and the pairs."""
    from pipelines.data.stage import training_sources
    from pipelines.emma.retriever import RetrieverFolds
    from pipelines.errors import ConfigError

    section = ctx.config["emma"].get("retriever_folds")
    if not section:
        return None
    folds = _make(RetrieverFolds, section)
    sources = training_sources(ctx.config.get("emma"), "emma")
    outside = [s for s in folds.sources if s not in sources]
    if outside:
        raise ConfigError(f"emma.retriever_folds.sources {outside} are not in emma.sources {list(sources)}: the "
                          f"stage reads only those; add them to emma.sources.")
    if not {"questions", "session_questions"} & set(cfg.pairs):
        raise ConfigError("emma.retriever_folds trains and scores on the folds' questions: add 'questions' (or "
                          f"'session_questions') to emma.retriever.pairs, now {list(cfg.pairs)}.")
    return folds


def _fold_plan(ctx, folds) -> dict:
    """Who trains on what. The fold datasets' episodes (every split) are dealt into ``k`` folds
    (:func:`~pipelines.emma.retriever.assign_folds`); the other datasets keep their splits. Fold i's model trains
    on the other datasets' train split and the other folds' episodes, less ``valid_share`` of those, which it
    validates on with the other datasets' valid split. The main model trains the same way on every fold (so the
    benchmark scores a fold dataset's conversation with the fold model that held it out, never with the main
    model); the main model's test episodes are the other datasets' test split."""
    from pipelines.emma.retriever import assign_folds, validation_ids
    from pipelines.errors import ConfigError

    parts = {}
    for split in ("train", "valid", "test"):
        try:
            parts[split] = training_split(ctx, "emma", split)
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


class _FoldTracker:
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


def _train_folds(ctx, cfg, plan: dict, folder) -> list[dict] | None:
    """Train one retriever per fold, each in its own run folder (``<run>-fold-<i>``: a killed run resumes from its
    checkpoints), into ``<run>-folds/fold-<i>`` until the main model is trained too (a fold already there is not
    trained again); returns (rank 0) each fold's Recall@1 / MRR on its held-out episodes, trained and untrained."""
    import dataclasses

    from pipelines.emma.retriever import DualEncoder, RetrieverTask, write_trained_on
    from pipelines.runner import is_rank_zero
    from pipelines.training.stage import train_stage

    staged = folder.with_name(f"{folder.name}-folds")
    scores = []
    for i, fold in enumerate(plan["folds"]):
        out = staged / f"fold-{i}"
        if not (out / "trained_on.json").exists():
            task = RetrieverTask(cfg, fold["train"], fold["valid"])
            knobs = cfg.train_config(folder).to_dict()
            knobs.pop("output_dir")
            knobs.update(ctx.config["emma"].get("retriever_train", {}))
            knobs["model_name"] = f"mnemos-{ctx.stage.name}-fold-{i}"
            tracker = _FoldTracker(ctx.tracker, i) if ctx.tracker is not None else None
            train_stage(dataclasses.replace(ctx, tracker=tracker), task, knobs, str(out.relative_to(ctx.root)),
                        folder=folder.with_name(f"{folder.name}-fold-{i}"))
            if is_rank_zero():
                write_trained_on(out, fold["train"], fold["valid"], held_out=sorted(e.id for e in fold["held_out"]))
        if is_rank_zero():
            scores.append({"trained": _scores(DualEncoder.load(out), cfg, fold["held_out"]),
                           "untrained": _scores(DualEncoder.from_pretrained(cfg), cfg, fold["held_out"])})
    return scores if is_rank_zero() else None


def _publish_folds(ctx, plan: dict, folder, scores: list[dict], result: StageResult) -> None:
    """Move the fold models under models/emma_retriever/folds/, write the manifest ``folds.json`` (per fold: its
    folder, held-out, trained and validation episode ids) and log each fold's scores, and their pooled mean
    (weighted by questions), to the stage result (``folds/fold-<i>/<which>/<kind>/recall@1`` ...)."""
    import shutil

    staged = folder.with_name(f"{folder.name}-folds")
    out = ctx.path(FOLDS)
    out.mkdir(parents=True, exist_ok=True)
    cfg = plan["config"]
    manifest = {"k": cfg.k, "sources": list(cfg.sources), "valid_share": cfg.valid_share,
                "assignment": "episode ids ranked by sha256, dealt round-robin (pipelines.emma.retriever.assign_folds)",
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
    for which in ("trained", "untrained"):
        for key in {k for s in scores for k in s[which] if k.endswith("queries")}:
            prefix = key.removesuffix("queries")
            n = sum(s[which][key] for s in scores)
            result.metrics[f"folds/{which}/{key}"] = float(n)
            for metric in ("recall@1", "mrr"):
                pooled = sum(s[which][prefix + metric] * s[which][key] for s in scores) / n if n else 0.0
                result.metrics[f"folds/{which}/{prefix}{metric}"] = pooled
                result.metadata[f"folds_{which}_{prefix}{metric}"] = pooled
    result.metadata["folds_manifest"] = str(out / FOLDS_MANIFEST)
