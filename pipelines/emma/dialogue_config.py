"""EMMA's dialogue module, its settings: params.yaml ``emma.dialogue`` (seed 000, section 4.1, Appendix E.1).

One model is fine-tuned with QLoRA on EMMA's three tasks at once (generation, memory summarisation, memory
linking; :mod:`pipelines.emma.dialogue` says how the modules fit together). :class:`EMMADialogueConfig`'s
defaults are Appendix E.1's: r = 32, alpha = 32, dropout 0.1, 4-bit, max input 1024, max target 64, lr 1e-3,
batch 52, at most 3 epochs with early stopping, trained "on 8 NVIDIA RTX A6000 GPUs". The paper does not say
whether 52 is per GPU or in all; 52 is not a multiple of 8, so a global batch could not be split evenly over its
8 GPUs: it is read as the batch of each GPU (Hugging Face Trainer's ``per_device_train_batch_size``), which is
what ``batch_size`` is here (the engine's ``TrainConfig.batch_size``: examples per micro-batch per process). An
optimizer step then takes ``batch_size x grad_accum x processes`` examples: 52 with one process, 416 on 8 GPUs as
the authors ran. The engine stops early on the validation cross-entropy (the paper names no criterion).

Profiles: ``paper`` names FLAN-T5-Large (``google/flan-t5-large`` or a local path) with its tokenizer;
``tiny`` initialises a small T5 at random (pipelines.models.t5 spec "tiny"); ``small`` adapts
SmolLM2-135M-Instruct, a decoder-only model, on the CPU. The architecture is read from the model's config
(``is_encoder_decoder``, :func:`model_arch`), never set by hand: "seq2seq" (a T5) or "causal" (a decoder).

CPU caps: ``max_train_examples`` / ``max_valid_examples`` keep at most that many examples, spread evenly over
the tasks (:func:`pipelines.emma.dialogue_training.cap_examples`, seeded), so that a profile's stage fits its
time on a few cores.

Multi-GPU: DDP or DeepSpeed ZeRO-1/2 (launcher settings). ZeRO-3 is refused with quantised weights: here at
config validation (``zero_stage`` / ``deepspeed``), and by the training engine whatever asked for it.

This module imports no torch and no transformers (the config checks and the stage's config resolution stay
cheap); a trained module's folder holds :data:`CONFIG_FILE` (this config, the base and the architecture),
:data:`ADAPTER_DIR`, :data:`TOKENIZER_DIR` and, for a random-init spec, :data:`BASE_DIR`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.emma.formats import TASKS
from pipelines.errors import ConfigError
from pipelines.training.config import EngineSettings

if TYPE_CHECKING:
    import torch

CONFIG_FILE = "emma_dialogue.json"
BASE_DIR = "base"            # the random-init base weights of a spec model, saved beside the adapter
ADAPTER_DIR = "adapter"
TOKENIZER_DIR = "tokenizer"


@dataclass(frozen=True)
class EMMADialogueConfig(EngineSettings):
    """The dialogue module (params.yaml ``emma.dialogue``); defaults are Appendix E.1's."""

    model: str = "tiny"                     # T5 spec ("tiny", "t5-small", "flan-t5-large": random init), a name
                                            # or path (T5 or decoder-only), or smollm2-135m-instruct (shipped)
    tokenizer: str | None = None            # tokenizer name/path; None: the model's own, or a BPE trained here (specs)
    tokenizer_vocab_size: int = 2000        # vocabulary of the BPE trained for a spec model
    load_in_4bit: bool = True               # QLoRA: frozen base weights in 4-bit (bitsandbytes)
    bnb_4bit_quant_type: str = "nf4"        # 4-bit data type: NormalFloat4 ("nf4") or "fp4"
    bnb_4bit_use_double_quant: bool = True  # quantise the quantisation constants too (QLoRA's double quantisation)
    compute_dtype: str = "auto"             # matmul dtype of the 4-bit layers: auto = bf16 on CUDA, fp32 on CPU
    lora_r: int = 32                        # LoRA rank r
    lora_alpha: int = 32                    # LoRA scaling alpha (update scaled by alpha / r)
    lora_dropout: float = 0.1               # dropout on the LoRA input
    target_modules: tuple[str, ...] | None = None  # layers with adapters (absent names are skipped); None: the
                                            # architecture's: T5_LINEAR for a T5, peft's all-linear for a decoder
    max_source_length: int = 1024           # max input tokens
    max_target_length: int = 64             # max target tokens
    tasks: tuple[str, ...] = TASKS          # tasks mixed in training
    lr: float = 1e-3                        # learning rate
    batch_size: int = 52                    # examples per micro-batch PER PROCESS (TrainConfig.batch_size; E.1's
                                            # 52 read as per GPU, see the module docstring); a step takes
                                            # batch_size x grad_accum x processes examples
    max_epochs: int = 3                     # at most this many epochs
    patience: int = 2                       # validation passes (every eval_every steps) without a lower
                                            # validation loss before early stopping; 0: never stop early
    gradient_checkpointing: bool = False    # recompute activations in backward (memory for time)
    group_by_length: bool = True            # batches of similar source + target lengths (the three tasks differ
                                            # tenfold in length: random batches are mostly padding)
    zero_stage: int | None = None           # DeepSpeed ZeRO stage when launched with DeepSpeed; None: DDP / one process
    deepspeed: str | None = None            # DeepSpeed JSON (deploy/deepspeed/*.json); its stage checked too
    max_new_tokens: int = 64                # generation length at inference
    do_sample: bool = False                 # inference decoding: greedy, or nucleus sampling with top_p
    top_p: float = 0.95                     # nucleus mass when sampling (the authors' demo samples with 0.95)
    device: str = "auto"                    # "auto" (cuda if available), "cpu", "cuda", "cuda:1"
    seed: int = 2024                        # random init of a spec model; the draw of capped examples
    max_train_examples: int | None = None   # CPU cap: at most this many training examples, spread evenly over the
                                            # tasks (cap_examples); None: all
    max_valid_examples: int | None = None   # the same for the validation examples

    def __post_init__(self) -> None:
        for name in ("lora_r", "lora_alpha", "max_source_length", "max_target_length", "batch_size", "max_epochs",
                     "max_new_tokens", "tokenizer_vocab_size", "max_train_examples", "max_valid_examples"):
            value = getattr(self, name)
            if value is None and name.startswith("max_") and name.endswith("_examples"):
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"emma.dialogue.{name} must be a positive integer, got {value!r}.")
        if self.target_modules is not None:
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        object.__setattr__(self, "tasks", tuple(self.tasks))
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"emma.dialogue.lora_dropout must lie in [0, 1), got {self.lora_dropout!r}.")
        if not self.lr > 0:
            raise ConfigError(f"emma.dialogue.lr must be positive, got {self.lr!r}.")
        if self.bnb_4bit_quant_type not in ("nf4", "fp4"):
            raise ConfigError(f"emma.dialogue.bnb_4bit_quant_type must be 'nf4' or 'fp4', "
                              f"got {self.bnb_4bit_quant_type!r}.")
        if self.compute_dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"emma.dialogue.compute_dtype must be auto, float32, bfloat16 or float16, "
                              f"got {self.compute_dtype!r}.")
        if self.target_modules is not None and not self.target_modules:
            raise ConfigError("emma.dialogue.target_modules is empty: LoRA needs at least one linear layer to adapt "
                              "(null: every linear layer of the architecture).")
        if not self.tasks or any(t not in TASKS for t in self.tasks):
            raise ConfigError(f"emma.dialogue.tasks must be a non-empty subset of {TASKS}, got {self.tasks!r}.")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"emma.dialogue.top_p must lie in (0, 1], got {self.top_p!r}.")
        stage = self.zero_stage
        if self.deepspeed is not None:
            path = Path(self.deepspeed)
            if not path.is_file():
                raise ConfigError(f"emma.dialogue.deepspeed names {path}, which does not exist.")
            stage = int(json.loads(path.read_text()).get("zero_optimization", {}).get("stage", 0))
            if self.zero_stage is not None and stage != self.zero_stage:
                raise ConfigError(f"emma.dialogue.zero_stage is {self.zero_stage} but {path} sets ZeRO stage {stage}.")
        if stage is not None and stage not in (0, 1, 2, 3):
            raise ConfigError(f"emma.dialogue.zero_stage must be 0, 1, 2 or 3, got {stage!r}.")
        if stage == 3 and self.load_in_4bit:
            from pipelines.training.config import ZERO3_WITH_QUANTIZED  # the engine refuses with the same words

            raise ConfigError(ZERO3_WITH_QUANTIZED)

    @property
    def is_spec(self) -> bool:
        from pipelines.models.t5 import T5_SPECS

        return self.model in T5_SPECS

    def arch(self) -> str:
        """"seq2seq" or "causal", from the model's config (:func:`model_arch`)."""
        return "seq2seq" if self.is_spec else model_arch(self.model)

    def resolved_device(self) -> str:
        """``device``, with "auto" resolved: cuda when torch sees a GPU, else cpu."""
        import torch

        return ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device

    def torch_compute_dtype(self) -> torch.dtype:
        """The 4-bit layers' matmul dtype: ``compute_dtype``, "auto" being bf16 on CUDA and fp32 on the CPU."""
        import torch

        if self.compute_dtype == "auto":
            return torch.bfloat16 if self.resolved_device().startswith("cuda") else torch.float32
        return getattr(torch, self.compute_dtype)

    def train_config(self, output_dir: str | os.PathLike, **overrides):
        """The engine's TrainConfig with Appendix E.1's lr, batch, epochs and early stopping, and this module's
        DeepSpeed config and length grouping."""
        return super().train_config(output_dir, **{"deepspeed": self.deepspeed,
                                                   "group_by_length": self.group_by_length, **overrides})


# --- the base model a name stands for ---------------------------------------------------------------

def base_reference(model: str) -> str:
    """What ``from_pretrained`` loads for a named (not spec) model: the shipped ``smollm2-135m-instruct`` and any
    ``.gguf`` file are converted once into a folder (:func:`pipelines.llm.config.pretrained_folder`, the LLM
    layer's models folder: ``MNEMOS_LLM_MODELS`` or ``.cache/llm/models``); a folder or a hub name is itself."""
    from pipelines.llm.build import pretrained_folder
    from pipelines.llm.config import DEFAULT_MODEL

    if model == DEFAULT_MODEL or model.endswith(".gguf"):
        from pipelines.llm.base import LLMError

        try:
            return str(pretrained_folder(model))
        except LLMError as err:
            raise ConfigError(f"emma.dialogue.model {model!r}: {err}") from err
    return model


@lru_cache(maxsize=16)
def model_arch(model: str) -> str:
    """"seq2seq" when the named model's config is an encoder-decoder (T5), else "causal" (a decoder-only model);
    T5 specs are seq2seq. Reads config.json only (a hub name from the local cache when HF_HUB_OFFLINE is set)."""
    from pipelines.models.t5 import T5_SPECS

    if model in T5_SPECS:
        return "seq2seq"
    from transformers import AutoConfig

    from pipelines.models._hf import hub_offline

    ref = base_reference(model)
    try:
        config = AutoConfig.from_pretrained(ref, local_files_only=hub_offline() or Path(ref).is_dir())
    except (OSError, ValueError) as err:
        raise ConfigError(f"emma.dialogue.model {model!r}: cannot read its config ({ref}): {err}") from err
    return "seq2seq" if getattr(config, "is_encoder_decoder", False) else "causal"
