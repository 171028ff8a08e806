"""The reranker stage (issue #18): the cross-encoder re-ranker trained on question -> evidence pairs.

params.yaml ``rerank``: ``sources`` (the datasets it learns from, as every training stage's), ``model`` (the
:class:`~pipelines.rerank.cross_encoder_config.CrossEncoderConfig`), ``train`` (the engine's knobs over those it
derives), ``folds`` (absent: none; :mod:`pipelines.training.folds`: one model per fold of a one-split dataset, the
same folds as ``emma.retriever_folds``). The ``rerank`` strategy of the benchmark uses the saved models, each
conversation scored by a model that never saw it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from pipelines.config_schema import build_config, dataset_names
from pipelines.data.folds import Folds
from pipelines.data.stage import training_inputs, training_sources
from pipelines.registry import CheckOutcome, Section, StageResult, config_section, stage
from pipelines.rerank.cross_encoder_config import CrossEncoderConfig
from pipelines.training.config import train_section

log = logging.getLogger("mnemos")

RERANKER = "models/reranker"
RERANKER_EVAL = "reranker_eval.json"
SECTION = "rerank"
BEATS = "beats_first_stage"
BEATS_RULE = ("on questions it never trained on (the test split's, else those each fold model held out), the trained "
              "re-ranker puts an evidence turn first at least as often as BM25's order of the same candidates does")


@dataclass(frozen=True)
class RerankStageSettings:
    """params.yaml ``rerank`` keys the reranker stage reads beside its sections (pipelines/rerank/stage.py)."""

    sources: list[str] | str | None = None  # datasets to learn from (pipelines.data.stage.training_sources)

    def __post_init__(self) -> None:
        dataset_names("rerank.sources", self.sources)


def _train_base(config: dict, root: Path) -> dict:
    """rerank.train goes over the TrainConfig that rerank.model derives."""
    return CrossEncoderConfig(**config.get(SECTION, {}).get("model", {})).train_config(root / "models" / ".runs").to_dict()


config_section(SECTION, Section((RerankStageSettings,), sections={
    "model": Section((CrossEncoderConfig,)), "train": train_section(_train_base),
    "folds": Section((Folds,), internal=("where",))}))


def _config(ctx):
    return build_config(CrossEncoderConfig, ctx.config.get(SECTION, {}).get("model"))


def _folds(ctx):
    """params.yaml ``rerank.folds`` (None when absent), its sources checked against rerank.sources."""
    from pipelines.errors import ConfigError

    section = ctx.config.get(SECTION, {}).get("folds")
    if not section:
        return None
    unknown = sorted(set(section) - {"k", "sources", "valid_share"})
    if unknown:
        raise ConfigError(f"rerank.folds has no setting {unknown}; known: ['k', 'sources', 'valid_share']")
    folds = Folds(**section, where="rerank.folds")
    outside = [s for s in folds.sources if s not in training_sources(ctx.config.get(SECTION), SECTION)]
    if outside:
        raise ConfigError(f"rerank.folds.sources {outside} are not in rerank.sources: the stage reads only those; "
                          f"add them to rerank.sources.")
    return folds


def _scores(path, cfg, episodes) -> dict[str, float]:
    """Re-ranking figures (:func:`~pipelines.rerank.cross_encoder.evaluate_reranker`) of the saved model at
    ``path`` (None: the untrained one, MiniLM with a new head) on ``episodes``' questions. A saved model scores as
    the benchmark's ``rerank`` strategy runs it (:func:`~pipelines.rerank.cross_encoder.load_scorer`, ``auto``: its
    ONNX export on a CPU, by OpenVINO in bf16 where the CPU computes bf16, else by ONNX Runtime in fp32; torch on a
    GPU): about half the time of torch fp32 on the CPU, and the export made here is the one the benchmark reuses."""
    from pipelines.data.sampling import seeded_sample
    from pipelines.emma.retriever import examples_of
    from pipelines.rerank.cross_encoder import CrossEncoder, evaluate_reranker, load_scorer

    model = load_scorer(path) if path is not None else CrossEncoder.from_pretrained(cfg)
    examples = seeded_sample([ex for kind in cfg.pairs for ex in examples_of(kind, episodes)], cfg.max_eval_examples,
                             f"rerank-eval:{cfg.seed}")
    return evaluate_reranker(model, examples, cfg.negative_depth)


def beats_first_stage(metadata: dict, sources: list[str]) -> CheckOutcome:
    """The non-blocking check :data:`BEATS` over the stage's held-out figures (issue #47, point 4: a model that
    makes retrieval worse is said to, in the CLI's ``failed_checks``, MLflow's ``mnemos.checks`` tag and Dagster's
    asset check). Passed, with ``measured_on: none``, when no held-out question was scored."""
    held_out = (("test_trained_", "the test split"), ("folds_trained_", "the episodes each fold model held out"))
    for prefix, where in held_out:
        if f"{prefix}recall@1" not in metadata:
            continue
        model, first = float(metadata[f"{prefix}recall@1"]), float(metadata[f"{prefix}bm25_recall@1"])
        figures = {"recall@1": model, "bm25_recall@1": first, "measured_on": where, "trained_on": list(sources)}
        if model >= first:
            return CheckOutcome(BEATS, True, BEATS_RULE, blocking=False, metadata=figures)
        message = (f"on {where}, the re-ranker puts an evidence turn first for {model:.1%} of the questions, BM25's "
                   f"order for {first:.1%}: it learnt from {', '.join(sources)} and re-ranking with it makes such "
                   f"retrieval worse; train it on data like what it will rank (rerank.sources)")
        return CheckOutcome(BEATS, False, BEATS_RULE, blocking=False, count=1, examples=[message], metadata=figures)
    return CheckOutcome(BEATS, True, BEATS_RULE, blocking=False, metadata={"measured_on": "none"})


@stage(name="reranker", group="retrieval", params=(SECTION,), inputs=training_inputs(SECTION), outputs=(RERANKER,),
       launcher="accelerate", code=("pipelines/rerank", "pipelines/training", "pipelines/models"),
       checks=((BEATS, BEATS_RULE, False),))
def reranker(ctx) -> StageResult:
    """Cross-encoder re-ranker (MiniLM + a one-logit head) trained with LCE on question -> evidence turns.

    Pairs from ``rerank.sources``, BM25's top non-evidence turns of the same conversation as hard negatives; with
    ``rerank.folds``, one more model per fold. Reports recall@1 / MRR re-ranking BM25's top candidates, against
    BM25's order, on the episodes each model did not train on. Every saved model lists them (``trained_on.json``)."""
    from pipelines.data.stage import training_episodes
    from pipelines.rerank.cross_encoder import RerankerTask
    from pipelines.ranks import is_rank_zero
    from pipelines.data.folds import write_trained_on
    from pipelines.training.folds import fold_plan, publish_folds, train_folds
    from pipelines.training.stage import run_dir, train_stage

    cfg = _config(ctx)
    folds = _folds(ctx)
    folder = run_dir(ctx)
    knobs = cfg.train_config(folder).to_dict()
    knobs.pop("output_dir")
    knobs.update(ctx.config.get(SECTION, {}).get("train", {}))
    if folds is None:
        train, valid, test = (training_episodes(ctx, SECTION, split) for split in ("train", "valid", "test"))
        plan = None
    else:
        plan = fold_plan(ctx, SECTION, folds)
        train, valid, test = plan["train"], plan["valid"], plan["test"]
        fold_scores = train_folds(ctx, plan, folder, lambda tr, va: RerankerTask(cfg, tr, va), knobs,
                                  lambda path, held_out: _scores(path, cfg, held_out), untrained=False)
    task = RerankerTask(cfg, train, valid)
    result = train_stage(ctx, task, knobs, RERANKER, folder=folder)
    if not is_rank_zero():
        return result
    write_trained_on(ctx.path(RERANKER), train, valid, pairs=list(cfg.pairs))
    result.metadata.update({f"examples_{kind}": n for kind, n in task.counts.items()})
    if plan is not None:
        publish_folds(ctx, plan, folder, fold_scores, result, RERANKER,
                      metrics=("recall@1", "mrr", "bm25_recall@1", "bm25_mrr", "in_depth"))
    seen = {e.id for e in (*train, *valid)}
    unseen = [e for e in test if e.id not in seen]          # never score an episode the model trained on
    result.metadata["test_episodes_scored"] = len(unseen)
    if not unseen:
        result.metadata["test_scores"] = "none: no test episode the model did not train on in rerank.sources"
    else:
        # the trained model only: an untrained one is MiniLM with a random head (its order is noise); the first
        # stage's figures (bm25_recall@1, bm25_mrr) are the baseline
        scores = {"trained": _scores(ctx.path(RERANKER), cfg, unseen)}
        (ctx.path(RERANKER) / RERANKER_EVAL).write_text(json.dumps(scores, indent=2))
        for which, values in scores.items():
            result.metrics.update({f"test/{which}/{k}": float(v) for k, v in values.items()})
            result.metadata.update({f"test_{which}_{k}": v for k, v in values.items()})
    check = beats_first_stage(result.metadata, training_sources(ctx.config.get(SECTION), SECTION))
    if not check.passed:
        log.warning("stage reranker: %s", check.examples[0])
    result.checks.append(check)
    return result
