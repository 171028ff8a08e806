"""MDR stages (seed 001): examples + tokenizer, teacher, student, token-weighted decoder.

Each training stage runs through the one engine (``pipelines.training.stage.train_stage``) and,
under Dagster, in a subprocess launched through Dagster Pipes (``launcher="accelerate"``), so one
process, N GPUs or N nodes is a launcher setting; an interrupted run resumes from its checkpoint.
"""

from __future__ import annotations

from dataclasses import fields

from pipelines.data.stage import training_inputs, training_split
from pipelines.mdr.config import MDRConfig, MDRGenerationSettings, MDRStageSettings
from pipelines.registry import Section, StageResult, config_section, stage
from pipelines.training.config import train_section

EXAMPLES = "data/tasks/mdr"
TOKENIZER = "models/mdr_tokenizer"
TEACHER, STUDENT, DECODER = "models/mdr_teacher", "models/mdr_student", "models/mdr_decoder"
CODE = ("pipelines/mdr", "pipelines/training", "pipelines/models", "pipelines/data/tasks.py")

config_section("mdr", Section((MDRConfig, MDRStageSettings), sections={
    "teacher": train_section(), "student": train_section(), "decoder": train_section(),
    "generation": Section((MDRGenerationSettings,))}))
PAPER_CARD = ("MDR: Memory Distillation and Reproduction for Personalized Dialogue Generation "
              "(seed 001 of this project)")


def mdr_config(ctx):
    from pipelines.mdr.config import MDRConfig

    section = ctx.config["mdr"]
    names = {f.name for f in fields(MDRConfig)}
    return MDRConfig(**{k: v for k, v in section.items() if k in names})


@stage(name="mdr_examples", group="mdr", params=("mdr",), inputs=training_inputs("mdr"),
       outputs=(EXAMPLES, TOKENIZER), code=CODE)
def mdr_examples(ctx) -> StageResult:
    """(P, H, Q, R) examples for MDR from the canonical data, and the tokenizer of the MDR models.

    Q is the partner's last utterance, R the main speaker's reply, H the earlier rounds, P the
    persona; from the canonical datasets of params.yaml ``mdr.sources`` (default: the synthetic
    data; ConvAI2 / PersonaChat, MSC, CC once ingested). Tokenizer: byte-level BPE trained on the
    training text (tiny profile) or the named one (paper profile: gpt2).
    """
    from pipelines.data.tasks import build_mdr_examples, write_mdr_examples
    from pipelines.errors import DataError
    from pipelines.models.tokenizers import load_tokenizer, train_bpe_tokenizer

    cfg = mdr_config(ctx)
    section = ctx.config["mdr"]
    meta = {}
    splits = {}
    for split in ("train", "valid", "test"):
        examples, seen = [], set()
        for path, episodes in training_split(ctx, "mdr", split):
            for example in build_mdr_examples(episodes, max_history_rounds=cfg.max_history_rounds,
                                              memory_persona=cfg.memory_persona, source=str(path)):
                if example.id in seen:
                    raise DataError(f"example id {example.id!r} repeats across mdr.sources", file=str(path),
                                    record=example.id, field="id", rule="ids_unique")
                seen.add(example.id)
                examples.append(example)
        write_mdr_examples(ctx.path(f"{EXAMPLES}/{split}.jsonl"), examples)
        splits[split] = examples
        meta[f"examples_{split}"] = len(examples)
    tok_dir = ctx.path(TOKENIZER)
    if section.get("tokenizer", "train") == "train":
        texts = [t for e in splits["train"] for t in (e.query, e.response, *e.persona)]
        train_bpe_tokenizer(texts, section.get("vocab_size", 2000), tok_dir, source=str(ctx.path(EXAMPLES)))
    else:
        load_tokenizer(section["tokenizer"]).save_pretrained(tok_dir)
    return StageResult(metadata=meta, metrics={k: float(v) for k, v in meta.items()})


def _train(ctx, task, phase: str, out_rel: str) -> StageResult:
    from pipelines.training.stage import train_stage

    return train_stage(ctx, task, dict(ctx.config["mdr"].get(phase, {})), out_rel)


def _examples(ctx, split: str):
    from pipelines.data.tasks import read_mdr_examples

    return read_mdr_examples(ctx.path(f"{EXAMPLES}/{split}.jsonl"))


def _factory(ctx, codec):
    from pipelines.mdr.tasks import gpt2_factory

    return gpt2_factory(ctx.config["mdr"].get("model", "tiny"), codec)


def _codec(ctx, cfg):
    from pipelines.mdr.text import load_codec

    return load_codec(ctx.path(TOKENIZER), eos_token=cfg.eos_token, sep_token=cfg.sep_token)


@stage(name="mdr_teacher", group="mdr", params=("mdr",), inputs=(EXAMPLES, TOKENIZER), outputs=(TEACHER,),
       launcher="accelerate", code=CODE)
def mdr_teacher(ctx) -> StageResult:
    """MDR stage A: teacher pretraining. R_TE = Enc_teacher(R); L_teacher = -log p(R | Q, R_TE).

    The teacher decoder reads R_TE as a prefix embedding and Q as tokens; frozen afterwards.
    """
    from pipelines.mdr.tasks import MDRTeacherTask

    cfg = mdr_config(ctx)
    codec = _codec(ctx, cfg)
    task = MDRTeacherTask(cfg, _examples(ctx, "train"), _examples(ctx, "valid"), codec, _factory(ctx, codec))
    return _train(ctx, task, "teacher", TEACHER)


@stage(name="mdr_student", group="mdr", params=("mdr",), inputs=(EXAMPLES, TOKENIZER, TEACHER),
       outputs=(STUDENT,), launcher="accelerate", code=CODE)
def mdr_student(ctx) -> StageResult:
    """MDR stage B: student distillation. Memory Net P-/R-Update (K hops) over Q_E and P_E;
    L_sentence = MSE(R^(K), R_TE). The distilled R^(K) of every example is cached."""
    from pipelines.mdr.tasks import MDRStudentTask
    from pipelines.mdr.teacher import MDRTeacher

    cfg = mdr_config(ctx)
    codec = _codec(ctx, cfg)
    teacher = MDRTeacher.load(ctx.path(TEACHER))
    train, valid, test = (_examples(ctx, s) for s in ("train", "valid", "test"))
    task = MDRStudentTask(cfg, train, valid, codec, teacher, _factory(ctx, codec),
                          cache_examples=[*train, *valid, *test])
    return _train(ctx, task, "student", STUDENT)


@stage(name="mdr_decoder", group="mdr", params=("mdr",), inputs=(EXAMPLES, TOKENIZER, TEACHER, STUDENT),
       outputs=(DECODER,), launcher="accelerate", code=CODE)
def mdr_decoder(ctx) -> StageResult:
    """MDR stage C: token-weighted decoder fine-tuning on (R^(K), Q) -> R.

    w_i = exp(-(W_i - max_j W_j)^2 / (2 sigma^2)) with W_i = cos(teacher token feature_i, R_TE);
    L_token = -(1/N) sum_i w_i log p(R_i | R_<i, Q, R^(K)).
    """
    from pipelines.mdr.student import load_response_features
    from pipelines.mdr.tasks import FEATURES_FILE, MDRDecoderTask
    from pipelines.mdr.teacher import MDRTeacher

    cfg = mdr_config(ctx)
    codec = _codec(ctx, cfg)
    teacher = MDRTeacher.load(ctx.path(TEACHER))
    features_path = ctx.path(STUDENT) / FEATURES_FILE
    features = load_response_features(features_path)
    task = MDRDecoderTask(cfg, _examples(ctx, "train"), _examples(ctx, "valid"), codec, teacher, features,
                          gpt2=_factory(ctx, codec), features_source=str(features_path))
    return _train(ctx, task, "decoder", DECODER)
