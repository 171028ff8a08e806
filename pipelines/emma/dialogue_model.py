"""EMMA's dialogue module, the model: a tokenizer, a frozen (4-bit) base and LoRA adapters (seed 000, E.1).

QLoRA (Dettmers et al., 2023): the base weights are frozen and stored in 4-bit NormalFloat (NF4) with double
quantisation (bitsandbytes, :func:`quantization_config`); only low-rank adapters W + (alpha/r) B A are trained
(peft, :func:`build_dialogue_model`). A T5 gets them on its linear layers (q, k, v, o, wi / wi_0 / wi_1, wo:
:data:`T5_LINEAR`); a decoder-only model on every linear projection but the output head (peft's ``all-linear``).
4-bit or not is ``load_in_4bit`` (the small profile's choice is measured on the CPU, see pipelines/config.py).

The base (:func:`load_base`): a T5 spec (``tiny``, ``t5-small``, ``flan-t5-large``) is initialised at random
(seeded), saved once (:func:`save_random_base`) and loaded back 4-bit quantised (bitsandbytes 4-bit runs on the
CPU); a named T5 or decoder is loaded from its folder or hub name (the shipped ``smollm2-135m-instruct`` from the
LLM layer's models folder, :func:`pipelines.emma.dialogue_config.base_reference`).

The tokenizer (:func:`build_tokenizer`): ``emma.dialogue.tokenizer``; else the named model's own (EMMA's format
tokens are plain text to it: no embedding is added, only the LoRA weights train); else, for a spec, a byte-level
BPE trained on the task texts, EMMA's format tokens ([MEMORY], [LINK], [NOW], [SEP], [NONE], [USER], [BOT]) kept
whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from pipelines.emma.dialogue_config import EMMADialogueConfig, base_reference
from pipelines.emma.formats import SPECIAL_TOKENS
from pipelines.errors import ConfigError

T5_LINEAR = ("q", "k", "v", "o", "wi", "wi_0", "wi_1", "wo")   # every linear layer of a T5 block
ALL_LINEAR = "all-linear"   # peft: every linear projection but the output head (a decoder's LoRA targets)


def build_tokenizer(cfg: EMMADialogueConfig, texts: Sequence[str] = ()):
    """The tokenizer: ``cfg.tokenizer``; else the named model's own; else (a spec) a BPE trained on ``texts``.
    A tokenizer without a padding token pads with its EOS (a decoder's; the masks say which is which)."""
    from pipelines.models.tokenizers import load_tokenizer, train_bpe_tokenizer

    if cfg.tokenizer is not None:
        tokenizer = load_tokenizer(cfg.tokenizer)
    elif not cfg.is_spec:
        tokenizer = load_tokenizer(base_reference(cfg.model))
    elif not texts:
        raise ConfigError(f"emma.dialogue.model {cfg.model!r} is initialised at random and has no tokenizer: give "
                          "emma.dialogue.tokenizer, or training texts to train a BPE tokenizer on.")
    else:
        tokenizer = train_bpe_tokenizer(texts, cfg.tokenizer_vocab_size, special_tokens=SPECIAL_TOKENS,
                                        min_frequency=2)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def quantization_config(cfg: EMMADialogueConfig):
    """BitsAndBytesConfig(load_in_4bit, NF4, double quantisation, compute dtype), or None without 4-bit."""
    if not cfg.load_in_4bit:
        return None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=cfg.bnb_4bit_quant_type,
                              bnb_4bit_use_double_quant=cfg.bnb_4bit_use_double_quant,
                              bnb_4bit_compute_dtype=cfg.torch_compute_dtype())


def save_random_base(cfg: EMMADialogueConfig, tokenizer, out_dir: str | os.PathLike) -> Path:
    """Initialise the spec T5 at random (seeded) for ``tokenizer`` and save it (full precision) to ``out_dir``."""
    from pipelines.models.t5 import build_t5

    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        model = build_t5(cfg.model, len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    model.save_pretrained(out_dir)
    return Path(out_dir)


def load_base(cfg: EMMADialogueConfig, ref: str | os.PathLike, vocab_size: int, arch: str = "seq2seq"):
    """The frozen base: ``ref`` (a saved random init, a name or a path; a decoder: :func:`base_reference`'s
    folder or name), 4-bit when configured."""
    from pipelines.models.t5 import build_t5

    device = cfg.resolved_device()
    kwargs = {}
    bnb = quantization_config(cfg)
    if bnb is not None:
        kwargs = dict(quantization_config=bnb, device_map={"": device})
    if arch == "causal":
        from transformers import AutoModelForCausalLM

        from pipelines.models._hf import hub_offline

        try:
            model = AutoModelForCausalLM.from_pretrained(str(ref), dtype=torch.float32,
                                                         local_files_only=hub_offline() or Path(ref).is_dir(),
                                                         **kwargs)
        except (OSError, ValueError) as err:
            raise ConfigError(f"emma.dialogue.model: cannot load the decoder {ref}: {err}") from err
    else:
        model = build_t5(Path(ref) if Path(ref).is_dir() else str(ref), None, **kwargs)
    if vocab_size > model.get_input_embeddings().num_embeddings:   # a tokenizer with added tokens
        model.resize_token_embeddings(vocab_size)
    return model if bnb is not None else model.to(device)


def build_dialogue_model(cfg: EMMADialogueConfig, tokenizer, base_ref: str | os.PathLike | None = None):
    """The trainable (Q)LoRA model: the base (``base_ref``, default ``cfg.model``; 4-bit when configured),
    k-bit preparation, LoRA on ``cfg.target_modules`` (None: the architecture's linear layers)."""
    from peft import LoraConfig, TaskType, get_peft_model, prepare_model_for_kbit_training

    from pipelines.training.checkpoint import adapter_only_checkpoints
    from pipelines.training.engine import keep_4bit_trainable

    if cfg.is_spec and base_ref is None:
        raise ConfigError(f"emma.dialogue.model {cfg.model!r} is a random-init spec: save it first "
                          "(save_random_base) and pass its directory as base_ref.")
    arch = cfg.arch()
    ref = base_ref or (base_reference(cfg.model) if arch == "causal" else cfg.model)
    model = load_base(cfg, ref, len(tokenizer), arch)
    if cfg.load_in_4bit:
        keep_4bit_trainable(model)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing,
                                                gradient_checkpointing_kwargs={"use_reentrant": False})
    elif cfg.gradient_checkpointing:
        model.activation_checkpointing_enable()  # transformers 5 name; non-reentrant checkpoints
    if cfg.target_modules is None and arch == "causal":
        targets = ALL_LINEAR
    else:
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        targets = [t for t in cfg.target_modules or T5_LINEAR if t in present]
        if not targets:
            raise ConfigError(f"none of emma.dialogue.target_modules {list(cfg.target_modules or T5_LINEAR)} is a "
                              f"layer of {ref}.")
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets,
                      task_type=TaskType.CAUSAL_LM if arch == "causal" else TaskType.SEQ_2_SEQ_LM)
    return adapter_only_checkpoints(get_peft_model(model, lora))
