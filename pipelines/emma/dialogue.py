"""EMMA's dialogue module: one T5 model fine-tuned with QLoRA on three tasks at once (seed 000, 4.1, E.1).

The tasks (generation, memory summarisation, memory linking; formats in :mod:`pipelines.emma.formats`)
share one FLAN-T5 and are told apart by their prefix; training minimises the token cross-entropy of the
target given the source over the mixed examples,

    L = -(1/N) sum_examples sum_t log p(y_t | y_<t, x)        (N = target tokens in the batch)

QLoRA (Dettmers et al., 2023): the base weights are frozen and stored in 4-bit NormalFloat (NF4) with
double quantisation (bitsandbytes); only low-rank adapters W + (alpha/r) B A on the T5 linear layers
(q, k, v, o, wi / wi_0 / wi_1, wo) are trained (peft). Appendix E.1: r = 32, alpha = 32, dropout 0.1,
4-bit, max input 1024, max target 64, lr 1e-3, batch 52, at most 3 epochs with early stopping, trained
"on 8 NVIDIA RTX A6000 GPUs". The paper does not say whether 52 is per GPU or in all; 52 is not a multiple
of 8, so a global batch could not be split evenly over its 8 GPUs: it is read as the batch of each GPU
(Hugging Face Trainer's ``per_device_train_batch_size``), which is what ``batch_size`` is here (the
engine's ``TrainConfig.batch_size``: examples per micro-batch per process). An optimizer step then takes
``batch_size x grad_accum x processes`` examples: 52 with one process, 416 on 8 GPUs as the authors ran.
The engine stops early on the validation cross-entropy (the paper names no criterion).

Profiles: ``paper`` names FLAN-T5-Large (``google/flan-t5-large`` or a local path) with its tokenizer;
``tiny`` initialises a small T5 at random (pipelines.models.t5 spec "tiny"), saves it and loads it back
4-bit quantised (bitsandbytes 4-bit runs on the CPU), with a byte-level BPE tokenizer trained here on the
task texts, EMMA's format tokens ([MEMORY], [LINK], [NOW], [SEP], [NONE], [USER], [BOT]) kept whole;
``small`` adapts SmolLM2-135M-Instruct, a decoder-only model, on the CPU.

Architecture: read from the model's config (``is_encoder_decoder``, :func:`model_arch`), never set by hand.
A T5 (seq2seq) reads the source in its encoder and writes the target in its decoder. A decoder-only model
(causal) reads one sequence: the prompt, then the target and EOS. The prompt is the source as
pipelines/llm's local backend lays out a conversation of one user message holding it (``prompt_format: auto``:
the tokenizer's chat template with its generation prompt, else the plain ``### User:`` layout;
:func:`prompt_frame`), so that the trained adapter answers the same inputs when served through the LLM layer
(``llm.adapter``). The loss is the same cross-entropy over the target tokens only: the prompt and the padding
are labelled -100. The tokenizer is the model's own (EMMA's format tokens are plain text to it: no embedding
is added, only the LoRA weights train), LoRA goes on every linear projection but the output head (peft's
``all-linear``), and generation is greedy from left-padded prompts. 4-bit or not is ``load_in_4bit`` (the small
profile's choice is measured on the CPU, see pipelines/config.py).

CPU caps: ``max_train_examples`` / ``max_valid_examples`` keep at most that many examples, spread evenly over
the tasks (:func:`cap_examples`, seeded), so that a profile's stage fits its time on a few cores.

Multi-GPU: DDP or DeepSpeed ZeRO-1/2 (launcher settings). ZeRO-3 is refused with quantised weights: here at
config validation (``zero_stage`` / ``deepspeed``), and by the training engine whatever asked for it (an
accelerate DeepSpeed config at launch, a ``dialogue_train.deepspeed`` override), before any training.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from bisect import bisect_left
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import torch

from pipelines.emma.formats import SPECIAL_TOKENS, TASKS, Example, GenerationInput, SourceLayout, link_source, \
    parse_link, parse_summary, source_layout, summarize_source
from pipelines.errors import ConfigError
from pipelines.training.config import ZERO3_WITH_QUANTIZED

CONFIG_FILE = "emma_dialogue.json"
BASE_DIR = "base"            # the random-init base weights of a spec model, saved beside the adapter
ADAPTER_DIR = "adapter"
TOKENIZER_DIR = "tokenizer"
T5_LINEAR = ("q", "k", "v", "o", "wi", "wi_0", "wi_1", "wo")   # every linear layer of a T5 block
ALL_LINEAR = "all-linear"   # peft: every linear projection but the output head (a decoder's LoRA targets)
ZERO3_WITH_4BIT = ZERO3_WITH_QUANTIZED  # the engine refuses the same way, whatever asked for ZeRO-3
IGNORE = -100               # label of a position without loss (prompt, padding)

log = logging.getLogger("mnemos")


@dataclass(frozen=True)
class EMMADialogueConfig:
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
            raise ConfigError(ZERO3_WITH_4BIT)

    @property
    def is_spec(self) -> bool:
        from pipelines.models.t5 import T5_SPECS

        return self.model in T5_SPECS

    def arch(self) -> str:
        """"seq2seq" or "causal", from the model's config (:func:`model_arch`)."""
        return "seq2seq" if self.is_spec else model_arch(self.model)

    def resolved_device(self) -> str:
        return ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device

    def torch_compute_dtype(self) -> torch.dtype:
        if self.compute_dtype == "auto":
            return torch.bfloat16 if self.resolved_device().startswith("cuda") else torch.float32
        return getattr(torch, self.compute_dtype)

    def train_config(self, output_dir: str | os.PathLike, **overrides):
        """The engine's TrainConfig with Appendix E.1's lr, batch, epochs and early stopping."""
        from pipelines.training.config import TrainConfig

        values = dict(output_dir=str(output_dir), lr=self.lr, batch_size=self.batch_size, epochs=self.max_epochs,
                      early_stopping_patience=self.patience or None, seed=self.seed, deepspeed=self.deepspeed,
                      group_by_length=self.group_by_length)
        return TrainConfig(**{**values, **overrides})


# --- tokenizer and model --------------------------------------------------------------------------

def base_reference(model: str) -> str:
    """What ``from_pretrained`` loads for a named (not spec) model: the shipped ``smollm2-135m-instruct`` and any
    ``.gguf`` file are converted once into a folder (:func:`pipelines.llm.config.pretrained_folder`, the LLM
    layer's models folder: ``MNEMOS_LLM_MODELS`` or ``.cache/llm/models``); a folder or a hub name is itself."""
    from pipelines.llm.config import DEFAULT_MODEL, pretrained_folder

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


def encode(tokenizer, text: str, max_length: int) -> list[int]:
    """Token ids ending in EOS, at most ``max_length`` (the EOS kept: T5 reads and writes it); see
    :func:`encode_all` for what an over-long source keeps."""
    return encode_all(tokenizer, [text], max_length)[0]


def encode_all(tokenizer, texts: Sequence[str], max_length: int, *, eos: bool = True) -> list[list[int]]:
    """:func:`encode` of each text, the texts tokenised in one batched call. ``eos=False``: the text's own
    tokens only, at most ``max_length``, tokenised without added special tokens (a decoder's prompt part).

    A text over ``max_length`` tokens (Appendix E.1: 1024 input, 64 target) is cut where it loses least:

    - a generation source keeps its head (prefix, speakers, memory block, ``[NOW] <ordinal> session``) and
      its most recent tokens, so the latest turns and the closing ``[Main]`` slot the target fills survive;
      the oldest turns go, cut on a turn boundary when at least one whole turn fits (else inside the latest
      turn). emma_examples already drops the oldest turns to fit, but counting whitespace words: a subword
      tokenizer makes ~1.6 tokens of a word, so the cut is needed here too.
    - a summarisation source is cut the same way. The paper summarises "the entire session history"
      (section 4.1), so any cut departs from it; this one keeps what says whom to summarise ([ABOUT_X],
      the speakers), drops whole turns rather than a turn's end, and keeps the latest turns, which carry the
      newest state of what the session changed (the memories that link to and update older ones).
    - any other text (a link source, a target) keeps its first tokens.

    A head longer than half the budget (a huge memory block) keeps its first half-budget tokens and the
    tail the rest. Only over-long texts are looked at again (a second tokenizer call for their offsets).
    """
    if not texts:
        return []
    end, keep = tokenizer.eos_token_id, max_length - 1 if eos else max_length
    rows = []
    for ids in tokenizer(list(texts), add_special_tokens=eos)["input_ids"]:
        rows.append(ids[:-1] if eos and ids and ids[-1] == end else ids)
    long = [i for i, ids in enumerate(rows) if len(ids) > keep]
    layouts = {i: source_layout(texts[i]) for i in long}
    shaped = [i for i in long if layouts[i] is not None]
    for i, (head, turns) in zip(shaped, _token_layouts(tokenizer, [texts[i] for i in shaped],
                                                       [layouts[i] for i in shaped], [rows[i] for i in shaped],
                                                       special=eos)):
        rows[i] = _cut_middle(rows[i], head, turns, keep)
    for i in long:
        if layouts[i] is None:
            rows[i] = rows[i][:keep]
    return [ids + [end] for ids in rows] if eos else rows


def _token_layouts(tokenizer, texts: Sequence[str], layouts: Sequence[SourceLayout],
                   rows: Sequence[list[int]], special: bool = True) -> list[tuple[int, list[int]]]:
    """(head tokens, token index of each turn start) of each text, from its tokens' character offsets.

    A token belongs to the head when it starts before ``head_end``; a turn starts at the first token that
    starts at or after the space before its tag. A tokenizer without offsets (a slow one) gives the head
    length by tokenising the head alone (the common prefix with the whole) and no turn boundaries.
    """
    if not texts:
        return []
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(list(texts), add_special_tokens=special, return_offsets_mapping=True)
        out = []
        for offsets, layout, row in zip(enc["offset_mapping"], layouts, rows):
            starts = [start for start, _ in offsets[: len(row)]]       # the trailing EOS (if any) dropped
            out.append((bisect_left(starts, layout.head_end), [bisect_left(starts, c) for c in layout.turn_starts]))
        return out
    heads = tokenizer([t[: layout.head_end] for t, layout in zip(texts, layouts)], add_special_tokens=special)
    out = []
    for head, row in zip(heads["input_ids"], rows):
        n = 0
        while n < min(len(head), len(row)) and head[n] == row[n]:
            n += 1
        out.append((n, []))
    return out


def _cut_middle(ids: list[int], head: int, turns: Sequence[int], keep: int) -> list[int]:
    """``ids`` cut to ``keep`` tokens: the first ``head`` (at most ``keep // 2``), then the latest tokens,
    from the oldest turn start that leaves them within ``keep`` when the cut falls among the turns."""
    kept_head = min(head, keep // 2)
    start = len(ids) - (keep - kept_head)                   # the first tail token a plain middle cut keeps
    if start >= head:                                       # the cut falls after the head: snap to a turn
        start = next((t for t in turns if t >= start), start)
    return ids[:kept_head] + ids[start:]


@dataclass(frozen=True)
class EncodedExample:
    """One example as the model reads it: source and target token ids, the target ending in EOS (a T5's source
    too; a decoder's source is its whole prompt, :func:`prompt_frame` around the cut source)."""

    task: str
    source_ids: list[int]     # (S,) S <= max_source_length (a decoder: plus the prompt frame)
    target_ids: list[int]     # (T,) T <= max_target_length


def encode_examples(tokenizer, items: Sequence[Example], max_source: int, max_target: int) -> list[EncodedExample]:
    """Tokenise each example once (the training task does it before training, not in every batch)."""
    sources = encode_all(tokenizer, [ex.source for ex in items], max_source)
    targets = encode_all(tokenizer, [ex.target for ex in items], max_target)
    return [EncodedExample(ex.task, s, t) for ex, s, t in zip(items, sources, targets)]


def pad_batch(items: Sequence[EncodedExample], pad: int) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask (B, S) right-padded, labels (B, T) padded with -100 (ignored by the loss)."""
    s_len = max(len(ex.source_ids) for ex in items)
    t_len = max(len(ex.target_ids) for ex in items)
    input_ids = torch.full((len(items), s_len), pad, dtype=torch.long)
    labels = torch.full((len(items), t_len), -100, dtype=torch.long)
    for b, ex in enumerate(items):
        input_ids[b, : len(ex.source_ids)] = torch.tensor(ex.source_ids)
        labels[b, : len(ex.target_ids)] = torch.tensor(ex.target_ids)
    return {"input_ids": input_ids, "attention_mask": (input_ids != pad).long(), "labels": labels}


def collate_examples(tokenizer, items: Sequence[Example], max_source: int, max_target: int) -> dict[str, torch.Tensor]:
    """Tokenise and pad text examples (:func:`encode_examples` then :func:`pad_batch`)."""
    return pad_batch(encode_examples(tokenizer, items, max_source, max_target), tokenizer.pad_token_id)


# --- decoder-only (causal) ------------------------------------------------------------------------

SOURCE_SLOT = "\u0000"   # stands for the source while the prompt frame is laid out


def prompt_frame(tokenizer) -> tuple[list[int], list[int]]:
    """(token ids before, token ids after) the source in a decoder's prompt: the conversation
    ``[{"role": "user", "content": source}]`` as pipelines/llm's local backend lays it out under
    ``prompt_format: auto`` (the tokenizer's chat template with the generation prompt; without one, the plain
    layout :func:`pipelines.llm.base.plain_prompt`), tokenised without added special tokens, as the backend
    tokenises it. The source is tokenised on its own between them (the frame ends and starts at pre-token
    boundaries: a newline, a special token), so an over-long source can be cut as a T5's is."""
    from pipelines.llm.base import plain_prompt

    messages = [{"role": "user", "content": SOURCE_SLOT}]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = plain_prompt(messages)
    before, after = text.split(SOURCE_SLOT)
    ids = [tokenizer(part, add_special_tokens=False)["input_ids"] if part else [] for part in (before, after)]
    return ids[0], ids[1]


def encode_causal_examples(tokenizer, items: Sequence[Example], max_source: int, max_target: int,
                           frame: tuple[list[int], list[int]]) -> list[EncodedExample]:
    """A decoder's examples: the prompt (``frame`` around the source cut to ``max_source`` tokens as
    :func:`encode_all` cuts it) and the target (at most ``max_target`` tokens, the last one EOS)."""
    sources = encode_all(tokenizer, [ex.source for ex in items], max_source, eos=False)
    targets = encode_all(tokenizer, [ex.target for ex in items], max_target, eos=True)
    return [EncodedExample(ex.task, frame[0] + s + frame[1], t) for ex, s, t in zip(items, sources, targets)]


def pad_causal(items: Sequence[EncodedExample], pad: int) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask (B, L): prompt then target, right-padded; labels (B, L): the target tokens,
    -100 on the prompt and the padding. The mask comes from the lengths, not from the ids (a decoder's padding
    token is often its EOS, which the prompt and the target hold too)."""
    width = max(len(ex.source_ids) + len(ex.target_ids) for ex in items)
    input_ids = torch.full((len(items), width), pad, dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for b, ex in enumerate(items):
        n, m = len(ex.source_ids), len(ex.target_ids)
        input_ids[b, : n + m] = torch.tensor(ex.source_ids + ex.target_ids)
        labels[b, n: n + m] = torch.tensor(ex.target_ids)
        mask[b, : n + m] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def causal_loss(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean token cross-entropy of the targets (the model shifts: position t predicts label t+1) and the
    target tokens as a 0-d tensor (the first label, never predicted, is a prompt token)."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    return out.loss, (batch["labels"][:, 1:] != IGNORE).sum()


def cap_examples(items: Sequence[Example], cap: int | None, seed: int) -> list[Example]:
    """At most ``cap`` of ``items``, spread evenly over their tasks: each task keeps all its examples or its
    share of what is left (a task with fewer than its share leaves the rest to the others), drawn at random
    (seeded) within the task; the kept examples in their original order. ``cap`` None: all of them."""
    if cap is None or len(items) <= cap:
        return list(items)
    by_task: dict[str, list[int]] = {}
    for i, ex in enumerate(items):
        by_task.setdefault(ex.task, []).append(i)
    left, quota = cap, {}
    tasks = sorted(by_task, key=lambda t: (len(by_task[t]), t))
    for k, task in enumerate(tasks):
        quota[task] = min(len(by_task[task]), left // (len(tasks) - k))
        left -= quota[task]
    rng = random.Random(f"emma-dialogue-cap:{seed}")
    keep = sorted(i for task in sorted(by_task) for i in rng.sample(by_task[task], quota[task]))
    return [items[i] for i in keep]


def seq2seq_loss(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean token cross-entropy of the targets (T5's loss over labels != -100), and the target tokens
    as a 0-d tensor (no host sync in the training step)."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    return out.loss, (batch["labels"] != -100).sum()


# --- the training task ----------------------------------------------------------------------------

class EMMADialogueTask:
    """``emma_dialogue`` for the training engine: the three tasks' examples mixed (capped by
    ``max_train_examples`` / ``max_valid_examples``), (Q)LoRA over a T5 or a decoder, target cross-entropy."""

    paper = "EMMA (arXiv 2410.02503), section 4.1 and Appendix E.1: FLAN-T5 with QLoRA on three tasks"

    def __init__(self, config: EMMADialogueConfig, train_examples: Sequence[Example],
                 valid_examples: Sequence[Example] = (), tokenizer=None, work_dir: str | os.PathLike | None = None):
        self.config = config
        train = [ex for ex in train_examples if ex.task in config.tasks]
        valid = [ex for ex in valid_examples if ex.task in config.tasks]
        self.train_examples = cap_examples(train, config.max_train_examples, config.seed)
        self.valid_examples = cap_examples(valid, config.max_valid_examples, config.seed)
        self.counts = {f"{split}_{task}": sum(ex.task == task for ex in kept)
                       for split, kept in (("train", self.train_examples), ("valid", self.valid_examples))
                       for task in config.tasks}
        if len(self.train_examples) < len(train) or len(self.valid_examples) < len(valid):
            log.info("emma_dialogue: %d of %d training and %d of %d validation examples kept (caps %s / %s): %s",
                     len(self.train_examples), len(train), len(self.valid_examples), len(valid),
                     config.max_train_examples, config.max_valid_examples, self.counts)
        self.arch = config.arch()
        texts = [t for ex in self.train_examples for t in (ex.source, ex.target)]
        self.tokenizer = tokenizer or build_tokenizer(config, texts)
        self.frame = prompt_frame(self.tokenizer) if self.arch == "causal" else None
        self._encoded_cache: dict[str, list[EncodedExample]] = {}
        self.base_ref: str | None = None
        if config.is_spec:   # one random init, saved once: every build_model (and the final model) uses it
            self._work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="emma-dialogue-base-"))
            self.base_ref = str(save_random_base(config, self.tokenizer, self._work / BASE_DIR))

    def build_model(self):
        return build_dialogue_model(self.config, self.tokenizer, self.base_ref)

    def train_dataset(self) -> list[EncodedExample]:
        return self._encoded("train")

    def valid_dataset(self) -> list[EncodedExample]:
        return self._encoded("valid")

    def _encoded(self, split: str) -> list[EncodedExample]:
        """The split's examples tokenised once, on first use (collate then only pads)."""
        if split not in self._encoded_cache:
            c = self.config
            examples = self.train_examples if split == "train" else self.valid_examples
            if self.arch == "causal":
                encoded = encode_causal_examples(self.tokenizer, examples, c.max_source_length, c.max_target_length,
                                                 self.frame)
            else:
                encoded = encode_examples(self.tokenizer, examples, c.max_source_length, c.max_target_length)
            self._encoded_cache[split] = encoded
        return self._encoded_cache[split]

    def train_lengths(self) -> list[int]:
        """Source + target tokens of each training example (as collate pads them), for length grouping."""
        return [len(ex.source_ids) + len(ex.target_ids) for ex in self.train_dataset()]

    def collate(self, items: Sequence[EncodedExample]) -> dict[str, torch.Tensor]:
        if self.arch == "causal":
            return pad_causal(items, self.tokenizer.pad_token_id)
        return pad_batch(items, self.tokenizer.pad_token_id)

    def compute_loss(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return causal_loss(model, batch) if self.arch == "causal" else seq2seq_loss(model, batch)

    def save_final(self, model, out_dir: str | os.PathLike) -> Path:
        """``adapter/`` (LoRA weights), ``tokenizer/``, ``base/`` (a spec's random init), ``emma_dialogue.json``
        (the config, the base: ``base`` or the model's name, resolved again at load, and the architecture)."""
        out = Path(out_dir)
        model.save_pretrained(out / ADAPTER_DIR)
        self.tokenizer.save_pretrained(out / TOKENIZER_DIR)
        base = self.config.model
        if self.base_ref is not None:
            shutil.copytree(self.base_ref, out / BASE_DIR, dirs_exist_ok=True)
            base = BASE_DIR
        saved = asdict(self.config) | {"base": base, "arch": self.arch}
        (out / CONFIG_FILE).write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
        return out


# --- inference ------------------------------------------------------------------------------------

class EMMADialogue:
    """A trained dialogue module: ``generate``, ``summarize``, ``link``, and ``generate_text`` (the
    text-to-text function the egocentric memory calls for its summariser and linker)."""

    def __init__(self, model, tokenizer, config: EMMADialogueConfig, arch: str = "seq2seq"):
        self.model, self.tokenizer, self.config, self.arch = model.eval(), tokenizer, config, arch
        self.frame = prompt_frame(tokenizer) if arch == "causal" else None

    @classmethod
    def load(cls, directory: str | os.PathLike, **overrides) -> "EMMADialogue":
        from peft import PeftModel

        d = Path(directory)
        if not (d / CONFIG_FILE).exists():
            raise ConfigError(f"{d} is not a saved EMMA dialogue module (no {CONFIG_FILE}).")
        saved = json.loads((d / CONFIG_FILE).read_text(encoding="utf-8"))
        base, arch = saved.pop("base"), saved.pop("arch", "seq2seq")   # modules saved before decoders: T5s
        saved.update(zero_stage=None, deepspeed=None)
        config = EMMADialogueConfig(**{**saved, **overrides})
        from pipelines.models.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(d / TOKENIZER_DIR)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        if base == BASE_DIR:
            ref = d / base
        else:
            ref = base_reference(base) if arch == "causal" else base
        model = load_base(config, ref, len(tokenizer), arch)
        return cls(PeftModel.from_pretrained(model, d / ADAPTER_DIR), tokenizer, config, arch)

    @torch.no_grad()
    def generate_text(self, sources: Sequence[str], max_new_tokens: int | None = None) -> list[str]:
        """Decode one output per source (greedy, or nucleus sampling when configured)."""
        if not sources:
            return []
        if self.arch == "causal":
            return self._generate_causal(sources, max_new_tokens or self.config.max_new_tokens)
        batch = collate_examples(self.tokenizer, [Example("generation", s, "", "", "") for s in sources],
                                 self.config.max_source_length, 1)
        device = next(p for p in self.model.parameters()).device
        kwargs = dict(do_sample=True, top_p=self.config.top_p) if self.config.do_sample else dict(do_sample=False)
        out = self.model.generate(input_ids=batch["input_ids"].to(device),
                                  attention_mask=batch["attention_mask"].to(device),
                                  max_new_tokens=max_new_tokens or self.config.max_new_tokens, **kwargs)
        drop = {self.tokenizer.pad_token, self.tokenizer.eos_token, self.tokenizer.bos_token} - {None}
        texts = []
        for row in out.tolist():
            tokens = [t for t in self.tokenizer.convert_ids_to_tokens(row) if t not in drop]
            texts.append(self.tokenizer.convert_tokens_to_string(tokens).strip())
        return texts

    def _generate_causal(self, sources: Sequence[str], max_new_tokens: int) -> list[str]:
        """A decoder continues each prompt (:func:`prompt_frame` around the source cut as in training), left-padded
        so that every row continues from its last position; the text is the new tokens up to EOS."""
        from pipelines.llm.local import left_pad

        prompts = [ex.source_ids for ex in encode_causal_examples(
            self.tokenizer, [Example("generation", s, "", "", "") for s in sources], self.config.max_source_length, 1,
            self.frame)]
        input_ids, mask = left_pad(prompts, self.tokenizer.pad_token_id)
        device = next(p for p in self.model.parameters()).device
        kwargs = dict(do_sample=True, top_p=self.config.top_p) if self.config.do_sample else dict(do_sample=False)
        out = self.model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                                  max_new_tokens=max_new_tokens, eos_token_id=self.tokenizer.eos_token_id,
                                  pad_token_id=self.tokenizer.pad_token_id, **kwargs)
        new = out[:, input_ids.shape[1]:].tolist()
        return [self.tokenizer.decode(row, skip_special_tokens=True).strip() for row in new]

    def generate(self, inp: GenerationInput) -> str:
        """The main speaker's next utterance."""
        return self.generate_text([inp.render()])[0]

    def summarize(self, about: str, final_sequence: str) -> list[str]:
        """Memories about ``about`` from a finished session ([] for "[NONE]")."""
        return parse_summary(self.generate_text([summarize_source(about, final_sequence)])[0])

    def link(self, memory_1: str, memory_2: str) -> bool:
        """True when the newer ``memory_2`` refers to or updates ``memory_1``."""
        return parse_link(self.generate_text([link_source(memory_1, memory_2)])[0])
