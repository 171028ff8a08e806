"""G-Long stages (seed 003): the QLoRA triplet extractor and the T5 importance summariser.

``glong_extractor`` instruction-tunes a small LM (4-bit NF4 or full precision, LoRA on all linear
projections) on utterance -> JSON triplets from the datasets of ``glong.sources``: the synthetic data's
ground-truth triplets, PersonaExt (``sources.personaext``) split by utterance; then scores triplet precision /
recall / F1 on each dataset's held-back utterances, of the fine-tuned model and of its pretrained base prompted
zero-shot (the same prompt and parser), into ``extraction_eval.json``, MLflow and the Dagster metadata.
``glong_importance`` trains the T5 dialogue summariser whose last-layer cross-attention
gives each triplet its importance (Eqs. 1-3); on the small profile, a decoder-only summariser adapted from
SmolLM2 whose self-attention from the summary to the triplets stands in for it (pipelines/glong/summariser.py),
both trained on the session summaries of ``glong.summariser.sources``. The graph memory strategy in the benchmark
reads the summariser.
"""

from __future__ import annotations

import json

from pipelines.data.stage import canonical_dir, training_inputs
from pipelines.glong.extractor import EVAL_FILE, extraction_table
from pipelines.glong.config import ExtractorTrainConfig, GLongStageSettings, SummariserTrainConfig
from pipelines.registry import Section, StageResult, config_section, stage
from pipelines.training.config import train_section

EXTRACTOR, IMPORTANCE = "models/glong_extractor", "models/glong_importance"
CODE = ("pipelines/glong", "pipelines/training", "pipelines/models")

config_section("glong", Section((GLongStageSettings,), sections={
    "extractor": Section((ExtractorTrainConfig,)), "extractor_train": train_section(),
    "summariser": Section((SummariserTrainConfig,)), "summariser_train": train_section()}))


def _extractor_examples(ctx, include_empty: bool) -> dict[str, dict[str, list]]:
    """Dataset -> split -> extraction examples of every dataset of ``glong.sources`` (default: synthetic).

    synthetic keeps its split by episode; any other dataset (PersonaExt, whose training split is not published) is
    pooled and split by utterance (the same normalised utterance never in two splits). Fact-free utterances are
    left out of train and valid unless ``include_empty``; the test split keeps them (they score precision).
    """
    from pipelines.data.stage import training_split
    from pipelines.glong.extractor import SPLITS, extraction_examples, split_by_utterance

    cfg = ctx.config["glong"]
    out: dict[str, dict[str, list]] = {}
    for split in SPLITS:
        for path, episodes in training_split(ctx, "glong", split):     # path: data/canonical/<source>/<split>.jsonl
            out.setdefault(path.parent.name, {}).setdefault(split, []).extend(extraction_examples(episodes))
    for source, splits in out.items():
        if source != "synthetic":
            splits = split_by_utterance([e for split in SPLITS for e in splits.get(split, [])],
                                        valid_share=cfg.get("valid_share", 0.05), test_share=cfg.get("test_share", 0.1))
        out[source] = {split: [e for e in splits.get(split, []) if split == "test" or include_empty or e.triplets]
                       for split in SPLITS}
    return out


def extraction_scores_by_source(extractor, held_back: dict[str, list], zero_shot: bool) -> dict[str, float]:
    """Triplet P/R/F1 and parse counts of the fine-tuned extractor on the held-back examples of every dataset
    together (unprefixed keys), and of the same base without its adapter (``zero_shot/``: the same prompt and
    parser) when ``zero_shot``; per dataset too (``<dataset>/...``) when there are several."""
    from pipelines.glong.extractor import extraction_scores

    examples = [e for part in held_back.values() for e in part]
    pairs, gold = [(e.speaker, e.text) for e in examples], [e.triplets for e in examples]
    outputs = {"": extractor.parse(pairs)}
    if zero_shot:
        with extractor.model.disable_adapter():
            outputs["zero_shot/"] = extractor.parse(pairs)
    scores: dict[str, float] = {}
    for prefix, parsed in outputs.items():
        scores.update({f"{prefix}{k}": v for k, v in extraction_scores(parsed, gold).items()})
    if len(held_back) > 1:
        start = 0
        for source, part in held_back.items():
            end = start + len(part)
            for prefix, parsed in outputs.items():
                scores.update({f"{source}/{prefix}{k}": v
                               for k, v in extraction_scores(parsed[start:end], gold[start:end]).items()})
            start = end
    return scores


@stage(name="glong_extractor", group="glong", params=("glong",), inputs=training_inputs("glong"),
       outputs=(EXTRACTOR,), launcher="accelerate", code=CODE + ("pipelines/llm",))
def glong_extractor(ctx) -> StageResult:
    """G-Long triplet extractor: QLoRA instruction tuning (4-bit NF4, LoRA on all linear layers).

    Utterance -> JSON list of {"subject", "relation", "object"}; greedy decoding, strict parsing
    (invalid JSON repaired or dropped, counted). Trained on ``glong.sources`` (synthetic; PersonaExt split by
    utterance), at most ``glong.max_train_examples`` of them shared equally by the datasets; triplet P/R/F1 on
    the held-back utterances of each dataset, and of the pretrained base prompted zero-shot beside it (a
    random-init base has no zero-shot).
    """
    from pipelines.glong.config import ExtractorTrainConfig
    from pipelines.glong.extractor import SPLITS, evaluation_examples, sample_datasets
    from pipelines.glong.tasks import GLongExtractorTask, load_extractor
    from pipelines.ranks import is_rank_zero
    from pipelines.training.stage import run_dir, train_stage

    cfg = ctx.config["glong"]
    ecfg = ExtractorTrainConfig.from_dict(cfg.get("extractor"))
    datasets = _extractor_examples(ctx, ecfg.include_empty)
    seed = int(ctx.config.get("seed", 2022))
    train = sample_datasets([d["train"] for d in datasets.values()], cfg.get("max_train_examples"), seed)
    valid = sample_datasets([d["valid"] for d in datasets.values()], cfg.get("max_valid_examples"), seed)
    folder = run_dir(ctx)
    task = GLongExtractorTask(train, valid, ecfg, base_dir=folder / "base")
    result = train_stage(ctx, task, dict(cfg.get("extractor_train", {})), EXTRACTOR, folder=folder)
    if not is_rank_zero():
        return result
    # Score on the held-back utterances of each dataset: those with facts, plus as many fact-free ones (precision).
    limit = int(cfg.get("eval_examples", 64))
    held_back = {source: evaluation_examples(d["test"], limit) for source, d in datasets.items() if d["test"]}
    scores = extraction_scores_by_source(load_extractor(ctx.path(EXTRACTOR)), held_back, zero_shot=not task.own_base)
    (ctx.path(EXTRACTOR) / EVAL_FILE).write_text(json.dumps(scores, indent=2))
    counts = {f"examples/{source}/{split}": len(d[split]) for source, d in datasets.items() for split in SPLITS}
    counts.update({"examples/trained": len(train), "examples/validated": len(valid),
                   "examples/scored": sum(map(len, held_back.values()))})
    result.metrics.update({f"extraction/{k}": float(v) for k, v in scores.items()})
    result.metrics.update({k: float(v) for k, v in counts.items()})
    result.metadata.update({f"extraction_{k}": v for k, v in scores.items()})
    result.metadata.update(counts)
    result.metadata["extraction_table_md"] = extraction_table(scores)
    return result


def _summariser_sources(glong: dict | None) -> tuple[str, ...]:
    """The datasets of ``glong.summariser.sources`` (default: synthetic)."""
    from pipelines.data.stage import training_sources

    return training_sources((glong or {}).get("summariser"), "glong.summariser")


def _summariser_inputs() -> tuple[str, ...]:
    """The canonical folders of params.yaml ``glong.summariser.sources``: the stage inputs (Dagster, dvc.yaml)."""
    from pipelines.config import load_params

    return tuple(canonical_dir(s) for s in _summariser_sources(load_params().get("glong")))


def _summariser_episodes(ctx) -> dict[str, dict[str, list]]:
    """Dataset -> split -> episodes of every source of ``glong.summariser.sources``."""
    from pipelines.data.schema import read_episodes
    from pipelines.errors import ConfigError

    out = {}
    for source in _summariser_sources(ctx.config["glong"]):
        folder = ctx.path(canonical_dir(source))
        if not folder.is_dir():
            how = ("run the synthetic and ingest_synthetic stages" if source == "synthetic" else
                   f"set params.yaml sources.{source} to its published files and run ingest_{source}")
            raise ConfigError(f"glong.summariser.sources names {source!r}, but {folder} does not exist: {how}.")
        out[source] = {split: read_episodes(folder / f"{split}.jsonl") for split in ("train", "valid", "test")
                       if (folder / f"{split}.jsonl").exists()}
    return out


@stage(name="glong_importance", group="glong", params=("glong",), inputs=_summariser_inputs(),
       outputs=(IMPORTANCE,), launcher="accelerate", code=CODE + ("pipelines/llm",))
def glong_importance(ctx) -> StageResult:
    """G-Long importance summariser: the paper's T5 dialogue summariser, whose last-layer cross-attention
    scores triplet importance, or on the small profile a decoder-only summariser adapted from SmolLM2
    (LoRA on its top blocks), whose self-attention from the summary to the triplets stands in for it;
    trained on the session summaries of ``glong.summariser.sources`` (synthetic; LoCoMo's when configured).
    The decoder-only one then summarises the held-out pairs greedily: ROUGE-L against their reference summaries."""
    from pipelines.glong.config import SummariserTrainConfig
    from pipelines.glong.summariser import CausalSummariserTask, summariser_pairs
    from pipelines.glong.tasks import GLongImportanceTask
    from pipelines.ranks import is_rank_zero
    from pipelines.training.stage import train_stage

    cfg = ctx.config["glong"]
    scfg = SummariserTrainConfig.from_dict(cfg.get("summariser"))
    sources = _summariser_episodes(ctx)
    train, valid = summariser_pairs(sources, scfg)
    task = (CausalSummariserTask if scfg.arch == "causal" else GLongImportanceTask)(train, valid, scfg)
    result = train_stage(ctx, task, dict(cfg.get("summariser_train", {})), IMPORTANCE)
    counts = {"summary_pairs_train": len(train), "summary_pairs_valid": len(valid),
              "summary_sources": ",".join(sources)}
    result.metadata.update(counts)
    result.metrics.update({k: float(v) for k, v in counts.items() if isinstance(v, int)})
    if scfg.arch == "causal" and valid and is_rank_zero():   # what the held-out sessions' summaries look like
        from pipelines.text_metrics import rouge_l
        from pipelines.glong.summariser import generate_summaries, load_causal_summariser

        model, tokenizer, _ = load_causal_summariser(ctx.path(IMPORTANCE))
        written = generate_summaries(model, tokenizer, valid, scfg.max_source_tokens, scfg.max_target_tokens)
        result.metrics["summary_rouge_l"] = rouge_l(written, [p.summary for p in valid])
        result.metadata["summary_rouge_l"] = result.metrics["summary_rouge_l"]
        result.metadata["summary_example"] = f"{valid[0].id}: {written[0]}"
    return result
