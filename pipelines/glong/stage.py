"""G-Long stages (seed 003): the QLoRA triplet extractor and the T5 importance summariser.

``glong_extractor`` instruction-tunes a small LM (4-bit NF4, LoRA on all linear projections) on
utterance -> JSON triplets from the synthetic data's ground-truth triplets (and PersonaExt when
``sources.personaext`` is configured), then scores triplet precision / recall / F1 on the test
split. ``glong_importance`` trains the T5 dialogue summariser whose last-layer cross-attention
gives each triplet its importance (Eqs. 1-3). The graph memory strategy in the benchmark reads
the summariser.
"""

from __future__ import annotations

import json

from pipelines.data.stage import canonical_dir
from pipelines.registry import StageResult, stage

EXTRACTOR, IMPORTANCE = "models/glong_extractor", "models/glong_importance"
CODE = ("pipelines/glong", "pipelines/training", "pipelines/models")
EVAL_FILE = "extraction_eval.json"


def _episodes(ctx, split: str):
    from pipelines.data.schema import read_episodes

    return read_episodes(ctx.path(f"{canonical_dir('synthetic')}/{split}.jsonl"))


@stage(name="glong_extractor", group="glong", params=("glong",), inputs=(canonical_dir("synthetic"),),
       outputs=(EXTRACTOR,), launcher="accelerate", code=CODE)
def glong_extractor(ctx) -> StageResult:
    """G-Long triplet extractor: QLoRA instruction tuning (4-bit NF4, LoRA on all linear layers).

    Utterance -> JSON list of {"subject", "relation", "object"}; greedy decoding, strict parsing
    (invalid JSON repaired or dropped, counted). Triplet P/R/F1 on the synthetic test split.
    """
    from pipelines.glong.config import ExtractorTrainConfig
    from pipelines.glong.extractor import evaluate_extractor, extraction_examples
    from pipelines.glong.tasks import GLongExtractorTask, load_extractor
    from pipelines.runner import is_rank_zero
    from pipelines.training.stage import run_dir, train_stage

    cfg = ctx.config["glong"]
    ecfg = ExtractorTrainConfig.from_dict(cfg.get("extractor"))
    train = extraction_examples(_episodes(ctx, "train"), include_empty=ecfg.include_empty)
    valid = extraction_examples(_episodes(ctx, "valid"), include_empty=ecfg.include_empty)
    folder = run_dir(ctx)
    task = GLongExtractorTask(train, valid, ecfg, base_dir=folder / "base")
    result = train_stage(ctx, task, dict(cfg.get("extractor_train", {})), EXTRACTOR, folder=folder)
    if not is_rank_zero():
        return result
    # Score on the test utterances that carry facts, plus as many fact-free ones (precision).
    test = extraction_examples(_episodes(ctx, "test"), include_empty=True)
    limit = int(cfg.get("eval_examples", 64))
    with_facts = [e for e in test if e.triplets][: limit // 2]
    without = [e for e in test if not e.triplets][: limit - len(with_facts)]
    scores = evaluate_extractor(load_extractor(ctx.path(EXTRACTOR)), with_facts + without)
    (ctx.path(EXTRACTOR) / EVAL_FILE).write_text(json.dumps(scores, indent=2))
    result.metrics.update({f"extraction/{k}": float(v) for k, v in scores.items()})
    result.metadata.update({f"extraction_{k}": v for k, v in scores.items()})
    return result


@stage(name="glong_importance", group="glong", params=("glong",), inputs=(canonical_dir("synthetic"),),
       outputs=(IMPORTANCE,), launcher="accelerate", code=CODE)
def glong_importance(ctx) -> StageResult:
    """G-Long importance summariser: a T5 dialogue summariser (SAMSum-style pairs; the synthetic
    sessions' summaries in the tiny profile) whose cross-attention scores triplet importance."""
    from pipelines.glong.config import SummariserTrainConfig
    from pipelines.glong.tasks import GLongImportanceTask, session_summary_pairs
    from pipelines.training.stage import train_stage

    cfg = ctx.config["glong"]
    task = GLongImportanceTask(session_summary_pairs(_episodes(ctx, "train")),
                               session_summary_pairs(_episodes(ctx, "valid")),
                               SummariserTrainConfig.from_dict(cfg.get("summariser")))
    return train_stage(ctx, task, dict(cfg.get("summariser_train", {})), IMPORTANCE)
