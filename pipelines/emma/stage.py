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
import logging
from dataclasses import dataclass
from pathlib import Path

from pipelines.config_schema import build_config, dataset_names, positive_int
from pipelines.data.folds import Folds
from pipelines.data.stage import training_episodes, training_inputs, training_sources, training_split
from pipelines.emma.dialogue_config import EMMADialogueConfig
from pipelines.emma.formats import FormatConfig
from pipelines.emma.retriever_check import BEATS, BEATS_RULE, beats_untrained
from pipelines.emma.retriever_config import EVAL_FILE as RETRIEVER_EVAL
from pipelines.emma.retriever_config import RetrieverConfig
from pipelines.registry import Section, StageResult, config_section, stage
from pipelines.training.config import train_section

EXAMPLES = "data/tasks/emma"
DIALOGUE, RETRIEVER = "models/emma_dialogue", "models/emma_retriever"
CODE = ("pipelines/emma", "pipelines/training", "pipelines/models")
log = logging.getLogger("mnemos")


def _episodes(ctx, split: str) -> list:
    """The episodes of ``split`` from every dataset of params.yaml ``emma.sources`` (default: synthetic)."""
    return training_episodes(ctx, "emma", split)


@dataclass(frozen=True)
class EMMAStageSettings:
    """params.yaml ``emma`` keys the EMMA stages and the benchmark read beside their sections."""

    sources: list[str] | str | None = None  # datasets to learn from (pipelines.data.stage.training_sources)
    eval_examples: int = 64                 # generation test turns the benchmark answers (pipelines/evaluate/stage.py)

    def __post_init__(self) -> None:
        dataset_names("emma.sources", self.sources)
        positive_int("emma.eval_examples", self.eval_examples)


def _train_base(part: str):
    """emma.<part>_train goes over the TrainConfig that emma.<part> derives."""
    def base(config: dict, root: Path) -> dict:
        cls = EMMADialogueConfig if part == "dialogue" else RetrieverConfig
        return cls(**config["emma"].get(part, {})).train_config(root / "models" / ".runs").to_dict()
    return base


config_section("emma", Section((EMMAStageSettings,), sections={
    "formats": Section((FormatConfig,)),
    "dialogue": Section((EMMADialogueConfig,)), "dialogue_train": train_section(_train_base("dialogue")),
    "retriever": Section((RetrieverConfig,)), "retriever_train": train_section(_train_base("retriever")),
    "retriever_folds": Section((Folds,), internal=("where",))}))


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
    fmt = build_config(FormatConfig, cfg.get("formats"))
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
    from pipelines.emma.dialogue_training import EMMADialogueTask
    from pipelines.emma.formats import iter_examples
    from pipelines.training.stage import run_dir, train_stage

    cfg = build_config(EMMADialogueConfig, ctx.config["emma"].get("dialogue"))
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
       outputs=(RETRIEVER,), launcher="accelerate", code=CODE, checks=((BEATS, BEATS_RULE, False),))
def emma_retriever(ctx) -> StageResult:
    """EMMA retriever: dual encoder (context <= 512 tokens, memory <= 32), cosine similarity,
    triplet loss with margin 0.2 on cosine distance, negatives mined in the same episode, on the example kinds
    of ``emma.retriever.pairs``; Recall@1 and MRR of the untrained and the trained encoder on the test split's
    episodes it did not train on. With ``emma.retriever_folds``, one more model per fold (see
    :func:`_train_folds`). Every saved model lists the episodes it trained on (``trained_on.json``)."""
    from pipelines.emma.retriever import DualEncoder, RetrieverConfig, RetrieverTask
    from pipelines.ranks import is_rank_zero
    from pipelines.data.folds import write_trained_on
    from pipelines.training.folds import fold_plan, publish_folds
    from pipelines.training.stage import run_dir, train_stage

    cfg = build_config(RetrieverConfig, ctx.config["emma"].get("retriever"))
    folds = _fold_config(ctx, cfg)
    folder = run_dir(ctx)
    if folds is None:
        train, valid, test = (_episodes(ctx, split) for split in ("train", "valid", "test"))
        plan = None
    else:
        plan = fold_plan(ctx, "emma", folds)
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
        publish_folds(ctx, plan, folder, fold_scores, result, RETRIEVER)
    seen = {e.id for e in (*train, *valid)}
    unseen = [e for e in test if e.id not in seen]          # never score an episode the model trained on
    result.metadata["test_episodes_scored"] = len(unseen)
    result.metadata["test_episodes_trained_on"] = len(test) - len(unseen)
    if not unseen:                      # emma.sources without a test split: nothing to score
        result.metadata["test_scores"] = "none: no test episode the model did not train on in emma.sources"
    else:
        scores = {"untrained": _scores(DualEncoder.from_pretrained(cfg), cfg, unseen),
                  "trained": _scores(DualEncoder.load(ctx.path(RETRIEVER)), cfg, unseen)}
        (ctx.path(RETRIEVER) / RETRIEVER_EVAL).write_text(json.dumps(scores, indent=2))
        for which, values in scores.items():
            result.metrics.update({f"test/{which}/{k}": float(v) for k, v in values.items()})
            result.metadata.update({f"test_{which}_{k}": v for k, v in values.items()})
    check = beats_untrained(result.metadata, training_sources(ctx.config.get("emma"), "emma"))
    if not check.passed:
        log.warning("stage emma_retriever: %s", check.examples[0])
    result.checks.append(check)
    return result


def _scores(model, cfg, episodes) -> dict[str, float]:
    """Recall@1 / MRR of ``model`` on ``episodes``: over the tagged turns (keys as before pairs existed; none when
    the episodes have no tagged turn, as a user's RealMem files: a figure over no query is no figure), and over the
    questions of each question kind of ``cfg.pairs`` (keys ``<kind>/recall@1`` ...). The kinds share their
    candidates (the episodes' turns): each is encoded once."""
    from pipelines.emma.retriever import evaluate_retriever, examples_of

    vectors: dict = {}                  # memory text -> E_m(text), across the kinds
    tagged = evaluate_retriever(model, episodes, memory_vectors=vectors)
    out = dict(tagged) if tagged["queries"] else {}
    for kind in cfg.pairs:
        if kind != "memory_tags":
            figures = evaluate_retriever(model, examples_of(kind, episodes), memory_vectors=vectors)
            out.update({f"{kind}/{k}": v for k, v in figures.items()})
    return out


# --- emma.retriever_folds (pipelines.training.folds) --------------------------------------------------------------

FOLDS = f"{RETRIEVER}/folds"


def _fold_config(ctx, cfg):
    """params.yaml ``emma.retriever_folds`` (None when absent), checked against emma.sources and the pairs."""
    from pipelines.errors import ConfigError

    section = ctx.config["emma"].get("retriever_folds")
    if not section:
        return None
    folds = build_config(Folds, section)
    sources = training_sources(ctx.config.get("emma"), "emma")
    outside = [s for s in folds.sources if s not in sources]
    if outside:
        raise ConfigError(f"emma.retriever_folds.sources {outside} are not in emma.sources {list(sources)}: the "
                          f"stage reads only those; add them to emma.sources.")
    if not {"questions", "session_questions"} & set(cfg.pairs):
        raise ConfigError("emma.retriever_folds trains and scores on the folds' questions: add 'questions' (or "
                          f"'session_questions') to emma.retriever.pairs, now {list(cfg.pairs)}.")
    return folds


def _train_folds(ctx, cfg, plan: dict, folder) -> list[dict] | None:
    """One retriever per fold (:func:`pipelines.training.folds.train_folds`), scored by Recall@1 / MRR on the
    episodes it held out, trained and untrained."""
    from pipelines.emma.retriever import DualEncoder, RetrieverTask
    from pipelines.training.folds import train_folds

    knobs = cfg.train_config(folder).to_dict()
    knobs.pop("output_dir")
    knobs.update(ctx.config["emma"].get("retriever_train", {}))
    return train_folds(ctx, plan, folder, lambda train, valid: RetrieverTask(cfg, train, valid), knobs,
                       lambda path, held_out: _scores(DualEncoder.load(path) if path is not None
                                                      else DualEncoder.from_pretrained(cfg), cfg, held_out))
