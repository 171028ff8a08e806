"""The typed contract of the training engine: its config, what a stage provides, what it returns.

``TrainConfig`` is the one resolved config of a training run (logged as params by the
stage's MLflow run); ``TrainTask`` is what a training stage implements (model, data,
loss, final artefacts); ``TrainSummary`` is what :func:`pipelines.training.engine.train`
returns. Defaults follow MDR (seed 001, "Implementation Details"): peak learning rate
1e-4 with linear warm-up, seed 2022.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from pipelines.errors import ConfigError
from pipelines.registry import Base, Section

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# The one sentence refusing ZeRO-3 for a model with quantised (QLoRA) weights: the engine raises it whatever
# asked for ZeRO-3 (TrainConfig.deepspeed, the launcher's accelerate config), EMMA's config validation too.
ZERO3_WITH_QUANTIZED = ("DeepSpeed ZeRO-3 cannot train this model: ZeRO-3 partitions every parameter across GPUs "
                        "and gathers it for each forward pass, but the frozen base weights are bitsandbytes "
                        "4-bit (or 8-bit) tensors (packed integers with their own quantisation state) that ZeRO-3 "
                        "can neither shard nor gather. With QLoRA use DDP or ZeRO-2 (which shards the LoRA "
                        "weights' gradients and optimizer states), or load the base in full precision "
                        "(emma.dialogue.load_in_4bit: false, glong.extractor.quantize_4bit: false) to use ZeRO-3.")
if TYPE_CHECKING:  # torch is imported where a model is built, not by the stage registry (the CLI starts faster)
    import torch

Tokens: TypeAlias = "int | torch.Tensor"  # target tokens of a micro-batch: a count known from shapes, or a 0-d device tensor
SCHEDULES = ("linear", "constant")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the torch.compile modes that record CUDA graphs


@dataclass
class TrainConfig:
    """Everything the engine needs to know about one training run.

    The levers for launch-bound shapes (issue #30: ``compile_mode``, ``length_buckets``, ``pack``,
    ``fused_optimizer``; larger micro-batches are ``batch_size`` x ``grad_accum``) default to the engine's
    choices before them: no GPU measurement yet says another one pays (benchmarks/train_throughput.py
    ``--lever`` measures each beside the plain engine; the fastest measured becomes the CUDA default).
    """

    output_dir: str                       # run folder: checkpoints/step-<n>/ (resumable state), final/ (the model)
    lr: float = 1e-4                      # peak learning rate (MDR: 1e-4), reached at the end of warm-up
    warmup_steps: int = 0                 # optimizer steps of linear warm-up from 0 to ``lr``
    max_steps: int | None = None          # stop after this many optimizer steps (overrides epochs); None: run epochs
    epochs: int = 1                       # passes over the training set (MDR: at most 5 per phase)
    batch_size: int = 8                   # examples per micro-batch per process
    grad_accum: int = 1                   # micro-batches per step (batch of a step = batch_size*grad_accum*processes)
    weight_decay: float = 0.0             # AdamW decoupled weight decay, on matrices only (not biases, norms)
    max_grad_norm: float = 1.0            # clip the global gradient norm to this before each step; 0 disables clipping
    eval_every: int = 50                  # optimizer steps between validation passes (and one at the end)
    save_every: int = 50                  # optimizer steps between checkpoints (and one at the end)
    early_stopping_patience: int | None = 3  # stop after this many validation passes without improvement; None: never
    seed: int = 2022                      # seeds init, data order and per-step dropout RNG (MDR: 2022)
    precision: str = "auto"               # auto: bf16 on CUDA, fp32 on CPU; or fp32 | bf16 | fp16 (fp16: CUDA only)
    deepspeed: str | None = None          # path to deploy/deepspeed/*.json, used through accelerate's DeepSpeedPlugin
    log_every: int = 1                    # optimizer steps between logged train metrics (loss averaged over the window)
    schedule: str = "linear"              # after warm-up: "linear" decay to 0 at the last step, or "constant"
    adam_betas: tuple[float, float] = (0.9, 0.999)  # AdamW (beta1, beta2)
    adam_eps: float = 1e-8                # AdamW epsilon
    min_delta: float = 0.0                # a validation loss improves when it is below best - min_delta
    restore_best: bool = True             # final model = weights of the best validation pass (when validation exists)
    keep_checkpoints: int = 2             # newest checkpoints kept on disk (the best one is kept in addition)
    compile: bool | str = "auto"          # torch.compile the training step: auto = on CUDA, one process or DDP,
                                          # full-precision weights (not DeepSpeed, not 4-bit); or true / false
    compile_backend: str = "inductor"     # torch.compile backend ("aot_eager": capture without code generation)
    compile_mode: str = "default"         # torch.compile mode (inductor only): default | reduce-overhead (CUDA
                                          # graphs: one launch per step, CUDA only) | max-autotune (autotuned
                                          # kernels + CUDA graphs, CUDA only) | max-autotune-no-cudagraphs
    length_buckets: tuple[int, ...] | None = None  # pad each training micro-batch's sequence tensors
                                                   # (task.sequence_pad_values()) up to the next of these
                                                   # lengths (beyond the last: a multiple of it): few shapes
                                                   # for a compiled step / CUDA graphs; None: no padding
    pack: bool = False                    # pack each micro-batch's examples into rows of pack_length tokens with
                                          # block-diagonal causal attention (task.pack_collate(); packing.py)
    pack_length: int | None = None        # tokens per packed row (pack: at least the longest example)
    fused_optimizer: bool | str = "auto"  # AdamW's fused kernels: auto = on CUDA without DeepSpeed; true / false
    group_by_length: bool = False         # micro-batches of similar lengths (task.train_lengths()): less padding
    num_workers: int = 0                  # DataLoader worker processes per rank
    find_unused_parameters: bool = False  # DDP: set when some parameters get no gradient in a step
    model_name: str | None = None         # name in the MLflow model registry; None: the output folder's name

    def __post_init__(self) -> None:
        if not str(self.output_dir):
            raise ConfigError("TrainConfig.output_dir is empty: give the folder for the checkpoints and the model.")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"TrainConfig.lr is {self.lr}: the learning rate must be a positive number.")
        for name in ("batch_size", "grad_accum", "epochs", "eval_every", "save_every", "log_every", "keep_checkpoints"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"TrainConfig.{name} is {getattr(self, name)}: it must be at least 1.")
        if self.warmup_steps < 0:
            raise ConfigError(f"TrainConfig.warmup_steps is {self.warmup_steps}: it cannot be negative.")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"TrainConfig.max_steps is {self.max_steps}: set at least 1 step, or None to run epochs.")
        if self.max_steps is not None and self.warmup_steps > self.max_steps:
            raise ConfigError(f"TrainConfig.warmup_steps ({self.warmup_steps}) exceeds max_steps ({self.max_steps}): "
                              "the learning rate would never reach its peak.")
        if self.weight_decay < 0 or self.max_grad_norm < 0 or self.min_delta < 0 or self.num_workers < 0:
            raise ConfigError("TrainConfig.weight_decay, max_grad_norm, min_delta and num_workers cannot be negative.")
        if self.early_stopping_patience is not None and self.early_stopping_patience < 1:
            raise ConfigError(f"TrainConfig.early_stopping_patience is {self.early_stopping_patience}: "
                              "use at least 1, or None to disable early stopping.")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"TrainConfig.precision is {self.precision!r}: choose one of {', '.join(PRECISIONS)}.")
        if self.compile not in (True, False, "auto"):
            raise ConfigError(f"TrainConfig.compile is {self.compile!r}: use auto, true or false.")
        self._check_speed_levers()
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"TrainConfig.schedule is {self.schedule!r}: choose one of {', '.join(SCHEDULES)}.")
        b1, b2 = self.adam_betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ConfigError(f"TrainConfig.adam_betas is {self.adam_betas}: both betas must lie in [0, 1).")
        self.adam_betas = (float(b1), float(b2))
        if self.deepspeed is not None:
            self._check_deepspeed_file(Path(self.deepspeed))

    def _check_speed_levers(self) -> None:
        """The settings of issue #30's launch-bound levers (compile mode, length buckets, packing, fused AdamW)."""
        if self.compile_mode not in COMPILE_MODES:
            raise ConfigError(f"TrainConfig.compile_mode is {self.compile_mode!r}: choose one of "
                              f"{', '.join(COMPILE_MODES)}.")
        if self.compile_mode != "default" and self.compile_backend != "inductor":
            raise ConfigError(f"TrainConfig.compile_mode {self.compile_mode!r} is a mode of the inductor backend, "
                              f"but compile_backend is {self.compile_backend!r} (which would ignore it): use "
                              "compile_backend inductor, or compile_mode default.")
        if self.fused_optimizer not in (True, False, "auto"):
            raise ConfigError(f"TrainConfig.fused_optimizer is {self.fused_optimizer!r}: use auto, true or false.")
        if self.length_buckets is not None:
            buckets = tuple(int(b) for b in self.length_buckets)
            if not buckets or buckets[0] < 1 or any(a >= b for a, b in zip(buckets, buckets[1:])):
                raise ConfigError(f"TrainConfig.length_buckets is {list(self.length_buckets)}: give increasing "
                                  "positive lengths (e.g. [32, 64, 128]), or None not to pad to buckets.")
            self.length_buckets = buckets
        if self.pack_length is not None and self.pack_length < 1:
            raise ConfigError(f"TrainConfig.pack_length is {self.pack_length}: a packed row needs at least 1 token.")
        if self.pack and self.pack_length is None:
            raise ConfigError("TrainConfig.pack is set but pack_length is not: give the tokens of a packed row "
                              "(at least the longest training example).")
        if self.pack and self.length_buckets is not None:
            raise ConfigError("TrainConfig.pack and length_buckets are both set: packed rows already have the one "
                              "static length pack_length; drop length_buckets.")

    def _check_deepspeed_file(self, path: Path) -> None:
        if not path.is_file():
            raise ConfigError(f"TrainConfig.deepspeed names {path}, which does not exist "
                              "(use one of deploy/deepspeed/*.json).")
        try:
            ds = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ConfigError(f"TrainConfig.deepspeed file {path} is not valid JSON: {err}") from err
        if "optimizer" in ds or "scheduler" in ds:
            raise ConfigError(f"DeepSpeed config {path} defines an optimizer or scheduler: remove them, the engine "
                              "builds AdamW and the warm-up schedule itself so every backend trains the same way.")
        accum = ds.get("gradient_accumulation_steps", "auto")
        if accum != "auto" and int(accum) != self.grad_accum:
            raise ConfigError(f"DeepSpeed config {path} sets gradient_accumulation_steps={accum} but "
                              f"TrainConfig.grad_accum is {self.grad_accum}: set it to \"auto\" in the JSON.")
        micro = ds.get("train_micro_batch_size_per_gpu", "auto")
        if micro != "auto" and int(micro) != self.batch_size:
            raise ConfigError(f"DeepSpeed config {path} sets train_micro_batch_size_per_gpu={micro} but "
                              f"TrainConfig.batch_size is {self.batch_size}: set it to \"auto\" in the JSON.")

    @property
    def deepspeed_stage(self) -> int | None:
        """The ZeRO stage of the DeepSpeed config, or None without DeepSpeed."""
        if self.deepspeed is None:
            return None
        return int(json.loads(Path(self.deepspeed).read_text()).get("zero_optimization", {}).get("stage", 0))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["adam_betas"] = list(self.adam_betas)
        if self.length_buckets is not None:
            out["length_buckets"] = list(self.length_buckets)
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any], **overrides: Any) -> "TrainConfig":
        """Build from a params.yaml section, refusing unknown keys with the list of known ones."""
        merged = {**values, **overrides}
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ConfigError(f"unknown training setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}.")
        if "adam_betas" in merged:
            merged["adam_betas"] = tuple(merged["adam_betas"])
        return cls(**merged)


@runtime_checkable
class TrainTask(Protocol):
    """What a training stage provides to the engine.

    ``compute_loss`` receives the model as prepared by accelerate (DDP / DeepSpeed
    wrapper): call it (``model(...)``), not its submodules, so gradient synchronisation
    hooks run. It returns (loss, target tokens of the micro-batch); the count may be an int
    known from shapes or a 0-d tensor on the device, never a value read back from the device
    (``int(mask.sum())``): such a read waits for the GPU every step, and the CPU can no longer
    queue the next step's kernels while the current ones run. ``save_final`` receives the plain
    (unwrapped) model on rank 0 only.
    """

    paper: str  # reference for the model card, e.g. "MDR (seed 001)"

    def build_model(self) -> torch.nn.Module: ...

    def train_dataset(self) -> torch.utils.data.Dataset: ...

    def valid_dataset(self) -> torch.utils.data.Dataset | None: ...

    def collate(self, items: list) -> dict[str, torch.Tensor]: ...

    def compute_loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Tokens]: ...

    def save_final(self, model: torch.nn.Module, out_dir: Path) -> None: ...

    # Optional: ``train_lengths() -> Sequence[int]``, the length of each training example (e.g.
    # source + target tokens), read when ``TrainConfig.group_by_length`` is set;
    # ``sequence_pad_values() -> Mapping[str, int]``, the batch keys whose last dimension is a sequence and
    # the value padding each (ids: the pad id, masks: 0, labels: -100), read for ``TrainConfig.length_buckets``;
    # ``pack_collate(items, row_tokens) -> batch``, the items packed into rows (pipelines.training.packing)
    # that ``compute_loss`` takes like its padded batches, read for ``TrainConfig.pack``.


@dataclass
class TrainSummary:
    """What a training run did; ``to_metrics()`` gives the scalars a StageResult carries."""

    final_step: int                                   # optimizer steps done in total (across resumes)
    epochs_done: float                                # passes over the training set, fractional mid-epoch
    train_losses: list[tuple[int, float]]             # (step, mean train loss over the log window)
    valid_losses: list[tuple[int, float]]             # (step, token-weighted validation loss)
    best_valid_loss: float | None                     # lowest validation loss seen, None without validation
    stopped_early: bool                               # True when early stopping ended the run
    tokens_per_s: float                               # target tokens per second over all processes (this session)
    peak_memory_bytes: int                            # peak CUDA memory allocated, or peak RSS on CPU (rank 0)
    resumed_from_step: int | None                     # step of the checkpoint this session resumed from
    best_step: int | None = None                      # step of the best validation pass
    total_steps: int = 0                              # planned optimizer steps
    final_dir: str = ""                               # folder save_final wrote (<output_dir>/final)
    num_processes: int = 1                            # processes (ranks) that trained
    train_seconds: float = 0.0                        # wall time spent in training steps (this session)
    registered_version: str | None = None             # model-registry version, when a tracker registered it
    extra: dict[str, Any] = field(default_factory=dict)

    def to_metrics(self) -> dict[str, float]:
        out = {"final_step": float(self.final_step), "epochs_done": float(self.epochs_done),
               "tokens_per_s": float(self.tokens_per_s), "peak_memory_bytes": float(self.peak_memory_bytes),
               "stopped_early": float(self.stopped_early)}
        if self.train_losses:
            out["final_train_loss"] = float(self.train_losses[-1][1])
        if self.best_valid_loss is not None:
            out["best_valid_loss"] = float(self.best_valid_loss)
        return out


class EngineSettings:
    """A model's settings that carry the engine's knobs under the model's own names (``lr``, ``batch_size``,
    ``max_epochs``, ``patience``, ``seed``): EMMA's dialogue module and retriever, the re-ranker."""

    def train_config(self, output_dir: str | Path, **overrides) -> TrainConfig:
        """The engine's TrainConfig with these settings' lr, batch size, epochs and early stopping."""
        values = dict(output_dir=str(output_dir), lr=self.lr, batch_size=self.batch_size, epochs=self.max_epochs,
                      early_stopping_patience=self.patience or None, seed=self.seed)
        return TrainConfig(**{**values, **overrides})


def train_base(config: dict, root: Path) -> dict:
    """What :func:`pipelines.training.stage.train_stage` puts under a training section's knobs."""
    return {"output_dir": str(root / "models" / ".runs"), "seed": config.get("seed", 2022), "model_name": "mnemos"}


def train_section(base: Base | None = None) -> Section:
    """The declaration of a training section (``mdr.teacher``, ``emma.dialogue_train``, ...): TrainConfig's fields
    over ``base`` (default :func:`train_base`; a method's own derives more of them from its model section)."""
    return Section((TrainConfig,), internal=("output_dir",), base=base or train_base)
