"""The one training engine of the project: every training stage calls :func:`train`.

Backends come from the launcher, never from code: one process, ``accelerate launch``
with N processes (DDP; gloo on CPU, NCCL on GPU) or N nodes, and DeepSpeed ZeRO-2/3
(with CPU offload) through accelerate's DeepSpeedPlugin (``TrainConfig.deepspeed`` or
an accelerate config of ``deploy/accelerate/``). bf16 autocast on CUDA, fp32 on CPU.
ZeRO-3 is refused, before any training or output, for a model holding bitsandbytes
4/8-bit weights (QLoRA: EMMA's dialogue module, G-Long's extractor), whichever of those
routes asked for it (:func:`refuse_zero3_with_quantized`).

ZeRO-3 for models larger than one GPU (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models"): the model is built partitioned, each rank holding
1/N of every parameter from the start (:func:`build_partitioned`: transformers' ``from_pretrained``
and ``from_config`` under DeepSpeed's ``zero.Init``, pretrained weights read straight into the
partitions); a checkpoint holds every rank's shards and nothing gathered, and resumes with the same
number of processes (:func:`refuse_zero3_resharding`); the final model is consolidated once, on
rank 0's CPU, from the shards of the final weights (deepspeed's zero_to_fp32, checkpoint.py).
DeepSpeed on a CPU with several processes runs over gloo (the tests' two processes).

One optimizer step s (0-based) over micro-batches b = 1..A (A = ``grad_accum``) is

    lr_s = lr * m(s)                                     (schedule.py: linear warm-up)
    g    = (1/A) sum_b grad L_b,  averaged over ranks    (accelerate.accumulate + DDP all-reduce)
    g   <- g * min(1, max_grad_norm / ||g||)              (global norm clipping)
    theta <- AdamW(theta, g, lr_s)                        (decoupled weight decay on matrices)

(an epoch's last, shorter window is also divided by A, as accelerate does).

Reproducibility: the data order is a pure function of (seed, epoch) (data.py) and the
global RNG is re-seeded from (seed, step, rank) before every step, as fairseq does, so
dropout does not depend on what happened before a resume. A checkpoint (checkpoint.py)
holds model, AdamW, RNG and the loop state (step, position in the epoch, loss history,
early-stopping state); ``train`` resumes from the newest complete one, so a run killed
by SIGKILL and restarted reproduces the loss curve of an uninterrupted run. (ZeRO-3 draws
from the RNG itself, so its dropout masks differ from DDP's; without dropout they agree.)

MLflow across a resume: a checkpoint records the MLflow run of its session, and a resumed session
continues that run (``Tracker.continue_run``: same run id, status back to RUNNING, tag
``mnemos.resumed_at_step``) rather than opening a new one. The killed session may have logged steps
after its last checkpoint; the resumed session computes them again and the tracker drops each metric's
points at steps the run already holds. So each metric's history has every step once, live as the run
goes: the values of those few steps are the killed session's, which the resume reproduces (the resume
test checks the whole curve). Buffering the metrics until each checkpoint would keep MLflow behind the
last checkpoint by construction, but leave the charts up to ``save_every`` steps behind the run (500 in
the paper profile); MLflow has no call to delete logged points, so the tail cannot be cut instead.

Speed on a GPU: bf16 autocast, fused AdamW, the training step compiled (``compile: auto``),
no host synchronisation inside a step (token counts stay on the device, pinned batches are
copied without blocking; the device is synchronised only when a window of ``log_every`` steps
is logged), and optionally micro-batches of similar lengths (``group_by_length``).
The levers for launch-bound shapes (issue #30: MDR's batch 32 x 64-128 tokens leaves the GPU waiting
on kernel launches) are settings, each off or at today's choice until a measurement on the GPU says
another one pays: ``compile_mode`` (reduce-overhead: CUDA graphs), ``length_buckets`` (few static
shapes for the graphs, data.py), ``pack`` (several short examples per row with block-diagonal
attention, packing.py), ``fused_optimizer``, and larger micro-batches with the same effective batch
through ``batch_size`` x ``grad_accum``. benchmarks/train_throughput.py ``--lever`` measures each.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import shutil
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.utils.data import DataLoader

from pipelines.errors import ConfigError
from pipelines.training.checkpoint import (TrainerState, adapter_only_checkpoints, checkpoint_root,
                                           latest_checkpoint, load_zero3_checkpoint, prune_checkpoints, read_state,
                                           remove_partial, save_checkpoint)
from pipelines.training.config import CUDA_GRAPH_MODES, ZERO3_WITH_QUANTIZED, TrainConfig, TrainSummary, TrainTask
from pipelines.training.data import dataset_length, evaluate, training_collate, training_sampler
from pipelines.training.jit_locks import refuse_stale_build_locks
from pipelines.training.model_card import render_model_card
from pipelines.training.schedule import lr_multiplier, set_lr

__all__ = ["TrainConfig", "TrainSummary", "TrainTask", "train", "build_accelerator", "build_optimizer",
           "resolve_precision", "step_seed", "zero_stage", "refuse_zero3_with_quantized", "build_partitioned",
           "refuse_zero3_resharding"]

log = logging.getLogger("mnemos.training")


def resolve_precision(precision: str, cuda: bool) -> str:
    """accelerate's mixed_precision for ``TrainConfig.precision``: auto is bf16 on CUDA, fp32 ("no") on CPU."""
    if precision == "auto":
        return "bf16" if cuda else "no"
    if precision == "fp16" and not cuda:
        raise ConfigError("TrainConfig.precision is fp16 but no CUDA device is visible: use fp32 or bf16 on CPU.")
    return {"fp32": "no"}.get(precision, precision)


def step_seed(seed: int, step: int, rank: int) -> int:
    """Seed of the global RNG for optimizer step ``step`` on ``rank`` (fits numpy's 32 bits)."""
    return (seed * 1_000_003 + step * 65_537 + rank) % (2**32)


def _single_process_env() -> bool:
    """DeepSpeed outside a launcher needs the torch.distributed variables (STACK-NOTES); returns whether it set them."""
    if "WORLD_SIZE" in os.environ:
        return False
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    return True


@contextmanager
def _provisional_single_process_env() -> Iterator[None]:
    """:func:`_single_process_env` for a block that may start torch.distributed (zero.Init): when the block fails
    before a process group started, the variables it set go again (a refused run leaves the process as it was)."""
    own = _single_process_env()
    try:
        yield
    except BaseException:
        if own and not torch.distributed.is_initialized():
            for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
                del os.environ[key]
        raise


def _launcher_deepspeed() -> bool:
    """True when the launcher asked for DeepSpeed (``accelerate launch`` with a DeepSpeed accelerate config,
    or ``--use_deepspeed``): it sets ACCELERATE_USE_DEEPSPEED=true, as accelerate's Accelerator reads it."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def _deepspeed_plugin(config: TrainConfig):
    """The DeepSpeedPlugin of a run, or None without DeepSpeed: ``TrainConfig.deepspeed``'s JSON, else the
    launcher's settings, which accelerate's DeepSpeedPlugin() reads from the environment
    (ACCELERATE_DEEPSPEED_CONFIG_FILE, ACCELERATE_DEEPSPEED_ZERO_STAGE, ...), as the Accelerator itself does.
    Building the plugin only reads configuration: it starts no process group."""
    from accelerate.utils import DeepSpeedPlugin

    if config.deepspeed is not None:
        return DeepSpeedPlugin(hf_ds_config=str(config.deepspeed), gradient_accumulation_steps=config.grad_accum,
                               gradient_clipping=config.max_grad_norm)
    return DeepSpeedPlugin() if _launcher_deepspeed() else None


def zero_stage(config: TrainConfig) -> int | None:
    """The DeepSpeed ZeRO stage the run will use (None without DeepSpeed), known before the Accelerator exists.

    ``TrainConfig.deepspeed`` (e.g. ``emma.dialogue_train.deepspeed: deploy/deepspeed/zero3.json``) wins;
    otherwise the launcher's: ``accelerate launch --config_file deploy/accelerate/deepspeed_zero3.yaml``
    exports ACCELERATE_USE_DEEPSPEED=true and ACCELERATE_DEEPSPEED_CONFIG_FILE=deploy/deepspeed/zero3.json,
    ``--use_deepspeed --zero_stage 3`` exports ACCELERATE_DEEPSPEED_ZERO_STAGE=3 (accelerate's default: 2).
    """
    plugin = _deepspeed_plugin(config)
    return None if plugin is None else int(plugin.zero_stage)


def _select_process_gpu() -> None:
    """Make this process's GPU (LOCAL_RANK under a launcher) the current CUDA device, as accelerate's state does
    when the Accelerator is built. The engine builds the model first: a task that places weights on "cuda"
    while building them (a 4-bit base loaded with a device_map) must find its own rank's GPU there."""
    from pipelines.training.launch import process_device

    if _use_cuda():
        torch.cuda.set_device(process_device())


def _use_cuda() -> bool:
    """Whether the run trains on CUDA: a GPU is visible and the launcher did not ask for the CPU."""
    return torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "false").lower() != "true"


def refuse_zero3_with_quantized(quantized: bool, stage: int | None) -> None:
    """Raise ConfigError (:data:`ZERO3_WITH_QUANTIZED`) when ZeRO-3 would train bitsandbytes 4/8-bit weights."""
    if quantized and stage == 3:
        raise ConfigError(ZERO3_WITH_QUANTIZED)


def refuse_zero3_resharding(checkpoint: Path, world: int) -> None:
    """Raise ConfigError when ZeRO-3 ``checkpoint`` holds the partitions of another number of processes than
    ``world``: DeepSpeed loads ZeRO-3 shards only into as many ranks as wrote them (no elastic checkpoint)."""
    saved = read_state(checkpoint).world_size
    if saved != world:
        raise ConfigError(f"checkpoint {checkpoint} holds the DeepSpeed ZeRO-3 partitions of {saved} processes but "
                          f"this run has {world}: ZeRO-3 shards load only into as many processes. Resume with "
                          f"{saved} processes (the launcher's num_processes), or train into another "
                          f"TrainConfig.output_dir from the weights deepspeed's zero_to_fp32.py consolidates there.")


@contextmanager
def _transformers_zero3(plugin) -> Iterator[None]:
    """transformers' ZeRO-3 switch (``is_deepspeed_zero3_enabled()``) on inside the block, off after it.

    It is the switch accelerate's ``zero3_init_flag`` turns on (the plugin's HfDeepSpeedConfig): with it,
    ``from_pretrained`` and ``from_config`` construct the model under DeepSpeed's ``zero.Init``, initialise
    its weights on gathered parameters and load pretrained weights straight into the partitions. The engine
    turns it on whatever ``zero3_init_flag`` says (deploy/accelerate/deepspeed_zero3.yaml: false): accelerate
    1.15 itself turns it on for every ZeRO-3 plugin it selects, flag or not (``set_deepspeed_weakref``).
    """
    from transformers.integrations import unset_hf_deepspeed_config

    plugin.set_deepspeed_weakref()
    try:
        yield
    finally:
        unset_hf_deepspeed_config()


def build_partitioned(task: TrainTask, config: TrainConfig) -> torch.nn.Module:
    """``task.build_model()`` under ZeRO-3: each rank holds only its partition of the parameters from the start.

    ZeRO-3 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
    Models", stage P_os+g+p) partitions the parameters themselves over the N data-parallel ranks: rank r
    stores 1/N of each one, and a layer's full weights exist only while its forward or backward runs. A
    model built whole on every rank first (partitioned only by ``accelerator.prepare``) cannot start when it
    is larger than one GPU; built under DeepSpeed's ``zero.Init``, every parameter is partitioned as soon
    as its module is constructed (rank 0's values broadcast, then cut), one module at a time.

    transformers enters ``zero.Init`` itself in ``from_pretrained`` and ``from_config`` when its ZeRO-3
    switch is on (:func:`_transformers_zero3`), loading a local folder's weights into the partitions, and
    leaves bitsandbytes-quantised models whole. The engine does not wrap the build in a bare ``zero.Init``:
    a transformers model constructed as ``Model(config)`` inside one initialises its weights on the empty
    partitions (``_init_weights`` does not gather them; checked: GPT-2's embedding keeps nn.Embedding's
    N(0, 1) instead of N(0, 0.02)). Parameters built another way (``Model(config)``, plain torch modules)
    are held whole by every rank until ``accelerator.prepare`` partitions them, as before; the engine
    warns with their count.

    A quantised model is refused (:data:`ZERO3_WITH_QUANTIZED`) before anything is written. A 4-bit
    ``from_pretrained`` takes a ``device_map``, which transformers refuses under ZeRO-3 (a ValueError
    naming ``device_map``): the engine then builds the model with the switch off and refuses it as
    quantised when it is, else raises transformers' error.
    """
    plugin = _deepspeed_plugin(config)
    plugin.set_mixed_precision(resolve_precision(config.precision, _use_cuda()))  # zero.Init's dtype, as prepare's
    with _provisional_single_process_env():  # zero.Init starts torch.distributed (DeepSpeed's init_distributed)
        try:
            with _transformers_zero3(plugin):
                model = task.build_model()
        except ValueError as err:
            if "device_map" not in str(err):
                raise
            refuse_zero3_with_quantized(is_quantized(task.build_model()), 3)
            raise
        refuse_zero3_with_quantized(is_quantized(model), 3)
    whole = sum(p.numel() for p in model.parameters() if not hasattr(p, "ds_id"))
    if whole:
        log.warning("ZeRO-3: %d parameters of %s were built whole on every rank (partitioned only at prepare): "
                    "build transformers models with from_pretrained or from_config, not Model(config), to build "
                    "them partitioned", whole, type(model).__name__)
    return model


def build_accelerator(config: TrainConfig):
    """The Accelerator of a run: DDP/single process, or DeepSpeed from the config or the launcher."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration, DistributedDataParallelKwargs, InitProcessGroupKwargs

    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        # A second run in the same process (tests, notebooks) may use another precision/backend.
        AcceleratorState._reset_state()
        GradientState._reset_state()
    cuda = _use_cuda()
    use_deepspeed = config.deepspeed is not None or _launcher_deepspeed()
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=config.find_unused_parameters)]
    if use_deepspeed and not cuda and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # accelerate finds no backend for DeepSpeed processes on a CPU: it would count 1 process where DeepSpeed
        # counts all of them (train_batch_size then fails DeepSpeed's check); gloo is the one it can use there
        handlers.append(InitProcessGroupKwargs(backend="gloo"))
    kwargs = dict(
        cpu=not cuda and not use_deepspeed,  # without CUDA: gloo processes (MULTI_CPU) under torchrun
        mixed_precision=resolve_precision(config.precision, cuda),
        gradient_accumulation_steps=config.grad_accum,
        kwargs_handlers=handlers,
        # pinned batches copied without blocking: a blocking copy waits for the GPU's queued work every
        # step, so the CPU could not prepare the next step while the current one runs
        dataloader_config=DataLoaderConfiguration(even_batches=True, non_blocking=cuda),
    )
    if config.deepspeed is not None:
        _single_process_env()
        kwargs["deepspeed_plugin"] = _deepspeed_plugin(config)
    accelerator = Accelerator(**kwargs)
    if _is_deepspeed(accelerator):  # also when the launcher's accelerate config chose DeepSpeed
        ds = accelerator.state.deepspeed_plugin.deepspeed_config
        for key, value in (("train_micro_batch_size_per_gpu", config.batch_size),
                           ("gradient_accumulation_steps", config.grad_accum),
                           ("gradient_clipping", config.max_grad_norm)):
            if ds.get(key, "auto") == "auto":
                ds[key] = value
    return accelerator


def keep_4bit_trainable(model: torch.nn.Module) -> int:
    """Stop bitsandbytes from repacking 4-bit weights for CPU inference; returns the layers changed.

    On a CPU with AVX512-BF16, a ``Linear4bit`` in eval mode under no_grad converts its weight in place
    to a CPU-only packed layout, and from then on every forward (training too) takes a kernel without
    autograd: the gradient to the layer's input is silently dropped (the LoRA weights below it stop
    learning), or, for a layer with a bias, the next training forward fails on an in-place add. A
    validation pass in the middle of training triggers it, so the engine opts every model it trains
    out (EMMA's dialogue module, G-Long's extractor); models loaded for inference keep the fast path.
    """
    bnb = sys.modules.get("bitsandbytes")
    if bnb is None:  # never imported, so no 4-bit layer exists (and importing it here would cost seconds)
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
            changed += 1
    return changed


def is_quantized(model: torch.nn.Module) -> bool:
    """True when some weights are bitsandbytes 4/8-bit (QLoRA): their kernels are not compiled here."""
    return any(type(p).__name__ in ("Params4bit", "Int8Params") for p in model.parameters())


def resolve_compile(config: TrainConfig, cuda: bool, deepspeed: bool, quantized: bool) -> bool:
    """Whether the run compiles its training step (``TrainConfig.compile``).

    auto: on CUDA, for one process or DDP, with full-precision weights. Not on CPU (compiling
    costs more than it saves on small models), not under DeepSpeed (its engine wraps the
    forward and the optimizer itself), not for 4-bit QLoRA (bitsandbytes dequantises in its
    own kernels). true / false force it either way. A step compiled off CUDA with a mode that
    records CUDA graphs (``compile_mode`` reduce-overhead, max-autotune) is refused: torch would
    compile it and silently skip the graphs (inductor records them for CUDA devices only).
    """
    compiled = (cuda and not deepspeed and not quantized) if config.compile == "auto" else bool(config.compile)
    if compiled and not cuda and config.compile_mode in CUDA_GRAPH_MODES:
        raise ConfigError(f"TrainConfig.compile_mode is {config.compile_mode!r}, which records CUDA graphs, but "
                          "this run compiles its step without a CUDA device: use compile_mode default (or "
                          "max-autotune-no-cudagraphs), or train on CUDA.")
    return compiled


def compiled_step(task: TrainTask, model, config: TrainConfig, world: int):
    """The function computing (loss, tokens) of a micro-batch, compiled when the run compiles.

    One process: the whole of ``task.compute_loss`` (the model's forward and the stage's loss,
    e.g. MDR's token-weighted cross-entropy over (B, T, V) logits, fused without a float32
    copy of the logits). Several processes: the DDP-wrapped model itself (torch's DDP-aware
    graph splitting at gradient buckets), the loss eagerly. Returns (model to call, step function);
    the prepared ``model`` itself stays what accumulation, clipping and checkpoints see. Under
    ``compile: auto`` a backend failure falls back to eager execution; under ``true`` it raises.

    ``TrainConfig.compile_mode`` is torch.compile's mode: ``reduce-overhead`` replays the step's
    kernels as CUDA graphs (one launch instead of one per kernel: the lever for launch-bound shapes
    such as MDR's batch 32 x 64-128 tokens, recorded once per input shape, so ``length_buckets``
    keeps the shapes few), ``max-autotune`` adds autotuned kernels. The default stays ``default``:
    no measurement yet shows another mode paying on the MDR shapes (benchmarks/train_throughput.py
    ``--lever mode=...`` measures them side by side).
    """
    if world == 1:
        model_to_call = model
        step = torch.compile(task.compute_loss, backend=config.compile_backend, mode=config.compile_mode)
    else:
        model_to_call = torch.compile(model, backend=config.compile_backend, mode=config.compile_mode)
        step = task.compute_loss
    if config.compile != "auto":
        return model_to_call, step

    def best_effort(m, batch):
        """compile: auto is best effort: a graph the backend fails to compile runs eagerly (with a warning)."""
        with torch._dynamo.config.patch(suppress_errors=True):
            return step(m, batch)

    return model_to_call, best_effort


def _is_deepspeed(accelerator) -> bool:
    from accelerate.utils import DistributedType

    return accelerator.distributed_type == DistributedType.DEEPSPEED


def build_optimizer(model: torch.nn.Module, config: TrainConfig, fused: bool = False) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (ndim >= 2) only.

    ``fused`` is the run's default for its fused kernels (one kernel per step for all parameters instead of
    torch's multi-tensor ``foreach`` ones): train() passes "on CUDA without DeepSpeed".
    ``TrainConfig.fused_optimizer`` true / false overrides it (torch also has a fused AdamW for the CPU);
    auto keeps it: the default stays until a measurement (``--lever fused=false``) says otherwise.
    """
    decay, no_decay = [], []
    for _, p in model.named_parameters():  # named_parameters yields tied weights once
        if p.requires_grad:  # a ZeRO-3 partition is an empty 1-D tensor: its shape is ds_shape
            (decay if len(getattr(p, "ds_shape", p.shape)) >= 2 else no_decay).append(p)
    groups = [g for g in ({"params": decay, "weight_decay": config.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    if not groups:
        raise ConfigError("the task's model has no trainable parameter: nothing to train.")
    if config.fused_optimizer != "auto":
        fused = bool(config.fused_optimizer)
    extra = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.adam_betas, eps=config.adam_eps, **extra)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak CUDA memory allocated on ``device``, or the process's peak resident set size on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


class _Stopwatch:
    """Wall time spent training, excluding validation and checkpoints (paused around them)."""

    def __init__(self, device: torch.device):
        self.device, self.total, self._since = device, 0.0, None

    def start(self) -> None:
        self._since = time.perf_counter()

    def pause(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self._since is not None:
            self.total += time.perf_counter() - self._since
            self._since = None
        return self.total


def _unwrapped_for_saving(accelerator, model, task: TrainTask, zero3_checkpoint: Path | None):
    """The full model on rank 0, None on the other ranks (every rank calls): the unwrapped model, or under
    ZeRO-3 a model rank 0 builds whole and fills from ``zero3_checkpoint``, the sharded checkpoint of the
    final weights (:func:`~pipelines.training.checkpoint.load_zero3_checkpoint`: deepspeed's zero_to_fp32
    reads every rank's fp32 partitions on the CPU, so no GPU ever holds the whole model). transformers'
    ZeRO-3 switch goes off first on every rank: rank 0's rebuild is whole (a ``from_pretrained`` under the
    switch would start zero.Init, whose broadcasts wait for ranks that never join), and so is any model the
    caller loads after ``train`` returns."""
    if zero3_checkpoint is not None:
        from transformers.integrations import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
        if not accelerator.is_main_process:
            return None
        full = task.build_model()
        load_zero3_checkpoint(full, zero3_checkpoint)
        return full
    if not accelerator.is_main_process:
        return None
    return accelerator.unwrap_model(model, keep_fp32_wrapper=False, keep_torch_compile=False)


def _open_tracked_run(tracker, latest: Path | None) -> str:
    """Open ``tracker``'s MLflow run: the run of the session that wrote checkpoint ``latest`` when that
    session recorded one (a resume continues it), else a new run. Returns the run id."""
    earlier = read_state(latest) if latest is not None else None
    if earlier is not None and earlier.mlflow_run_id:
        tracker.continue_run(earlier.mlflow_run_id, at_step=earlier.step)
    return tracker.run_id


def train(task: TrainTask, config: TrainConfig, tracker=None, progress: bool = True,
          callback: Callable[[int, dict[str, float]], None] | None = None) -> TrainSummary:
    """Train ``task`` under ``config``, resuming from the newest checkpoint in ``config.output_dir``.

    ``tracker`` (pipelines.tracking.Tracker or a double; used on rank 0 only) receives
    per-step metrics, the model card and the final model's registration, and continues the MLflow
    run of the session a resume continues (module docstring); ``callback(step,
    metrics)`` (rank 0) sees the same metrics, e.g. to forward them through Dagster Pipes.
    """
    from accelerate.utils import set_seed

    missing = [name for name in ("paper", "build_model", "train_dataset", "valid_dataset", "collate", "compute_loss",
                                 "save_final") if not hasattr(task, name)]
    if missing:
        raise ConfigError(f"{type(task).__name__} is not a TrainTask: it lacks {', '.join(missing)}.")
    stage = zero_stage(config)  # from TrainConfig.deepspeed or the launcher's environment
    if stage is not None:
        refuse_stale_build_locks()  # a killed build's lock would make DeepSpeed wait forever for its ops

    # The model is built before the Accelerator so that a refused backend fails here, before DeepSpeed's engine
    # starts and before anything is written; under ZeRO-3 it is built partitioned (zero.Init, build_partitioned).
    _select_process_gpu()
    set_seed(config.seed)  # same initial weights on every rank
    model = build_partitioned(task, config) if stage == 3 else task.build_model()  # the former refuses 4-bit
    keep_4bit_trainable(model)  # a validation pass must not turn 4-bit layers into inference-only ones
    quantized = is_quantized(model)
    if quantized:               # a 4-bit base does not reload from a full state dict: checkpoint the adapters
        adapter_only_checkpoints(model)

    accelerator = build_accelerator(config)
    main = accelerator.is_main_process
    tracker = tracker if main else None
    device, rank, world = accelerator.device, accelerator.process_index, accelerator.num_processes
    deepspeed = _is_deepspeed(accelerator)
    zero3 = deepspeed and accelerator.state.deepspeed_plugin.zero_stage == 3
    refuse_zero3_with_quantized(quantized, 3 if zero3 else None)  # whatever plugin the Accelerator ended up with
    out = Path(config.output_dir)
    root = checkpoint_root(out)
    if main:
        out.mkdir(parents=True, exist_ok=True)
        remove_partial(root)
        if tracker is not None:
            _open_tracked_run(tracker, latest_checkpoint(root))
    accelerator.wait_for_everyone()
    train_ds, valid_ds = task.train_dataset(), task.valid_dataset()
    n_train = dataset_length(train_ds, "training")
    has_valid = valid_ds is not None and dataset_length(valid_ds, "validation") > 0
    sampler = training_sampler(task, n_train, config.batch_size, config.seed, config.group_by_length)
    loader = DataLoader(train_ds, batch_size=config.batch_size, sampler=sampler,
                        collate_fn=training_collate(task, config),  # the task's, bucket-padded or packed
                        num_workers=config.num_workers, pin_memory=device.type == "cuda",
                        generator=torch.Generator().manual_seed(config.seed))
    optimizer = build_optimizer(model, config, fused=device.type == "cuda" and not deepspeed)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    step_model, step_loss = model, task.compute_loss  # what each micro-batch calls (compiled or not)
    compiled = resolve_compile(config, device.type == "cuda", deepspeed, quantized)
    if compiled:
        step_model, step_loss = compiled_step(task, model, config, world)
        if main:
            log.info("compiling the training step (torch.compile, backend %s)", config.compile_backend)

    batches_per_epoch = len(loader)  # per rank
    steps_per_epoch = math.ceil(batches_per_epoch / config.grad_accum)
    total_steps = config.max_steps if config.max_steps is not None else steps_per_epoch * config.epochs

    state = TrainerState(total_steps=total_steps, world_size=world)
    resumed_from = None
    latest = latest_checkpoint(root)
    if latest is not None:
        if zero3:
            refuse_zero3_resharding(latest, world)
        accelerator.load_state(str(latest))
        state = read_state(latest)
        resumed_from = state.step
        if state.world_size != world:
            log.warning("resuming a %d-process run with %d processes: the data order changes", state.world_size, world)
        if state.total_steps != total_steps:
            log.warning("planned steps changed from %d to %d on resume", state.total_steps, total_steps)
            state.total_steps, state.finished = total_steps, state.finished and state.step >= total_steps
        if main:
            log.info("resumed from %s (step %d)", latest, state.step)

    def emit(metrics: dict[str, float], step: int) -> None:
        if tracker is not None:
            tracker.log_metrics(metrics, step=step)
        if callback is not None and main:
            callback(step, metrics)

    def checkpoint() -> None:
        save_checkpoint(accelerator, model, root, state, deepspeed=deepspeed, zero3=zero3)
        if main:
            prune_checkpoints(root, config.keep_checkpoints, protect=state.best_step if config.restore_best else None)

    if tracker is not None:
        state.mlflow_run_id = tracker.run_id  # what a later resume continues
    watch = _Stopwatch(device)
    tokens_session = 0

    def zero(dtype=torch.float32) -> torch.Tensor:  # () on the device: window sums stay on the GPU
        return torch.zeros((), dtype=dtype, device=device)

    window_loss, window_micro, window_tokens, window_start_time = zero(), 0, zero(torch.float64), 0.0
    bar = None
    if progress and main:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, initial=state.step, desc=f"train {out.name}", unit="step", dynamic_ncols=True)

    model.train()
    set_seed(step_seed(config.seed, state.step, rank))
    watch.start()
    while not state.finished:
        if state.batches_in_epoch >= batches_per_epoch:
            state.epoch, state.batches_in_epoch = state.epoch + 1, 0
        if state.step >= total_steps or (config.max_steps is None and state.epoch >= config.epochs):
            state.finished = True
            break
        epoch_loader = loader
        if state.batches_in_epoch:  # resumed mid-epoch: skip what this rank already consumed
            epoch_loader = accelerator.skip_first_batches(loader, state.batches_in_epoch)
        epoch_loader.set_epoch(state.epoch)  # accelerate applies its own epoch counter at iter(): set that one
        for batch in epoch_loader:
            set_lr(optimizer, config.lr * lr_multiplier(state.step, config.warmup_steps, total_steps, config.schedule))
            with accelerator.accumulate(model):
                loss, tokens = step_loss(step_model, batch)  # (), target tokens in this micro-batch
                accelerator.backward(loss)
                grad_norm = None
                if accelerator.sync_gradients and config.max_grad_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            state.batches_in_epoch += 1
            window_loss += loss.detach().float()
            window_micro += 1
            window_tokens += tokens
            if not accelerator.sync_gradients:
                continue
            # ---- one optimizer step done ----
            state.step += 1
            if bar is not None:
                bar.update(1)
            last = state.step >= total_steps
            if state.step % config.log_every == 0 or last:
                elapsed = watch.pause() - window_start_time
                totals = accelerator.reduce(torch.stack([window_loss.double(), zero(torch.float64) + window_micro,
                                                         window_tokens]), reduction="sum")
                step_tokens = int(totals[2])
                tokens_session += step_tokens
                state.tokens_seen += step_tokens
                train_loss = float(totals[0] / totals[1])
                state.train_losses.append([state.step, train_loss])
                metrics = {"train/loss": train_loss, "train/lr": optimizer.param_groups[0]["lr"],
                           "train/tokens_per_s": step_tokens / elapsed if elapsed > 0 else 0.0,
                           "train/peak_memory_bytes": float(peak_memory_bytes(device)),
                           "train/epoch": state.epoch + state.batches_in_epoch / batches_per_epoch}
                if grad_norm is not None:
                    metrics["train/grad_norm"] = float(grad_norm)
                emit(metrics, state.step)
                if bar is not None:
                    bar.set_postfix(loss=f"{train_loss:.4f}")
                window_loss, window_micro, window_tokens = zero(), 0, zero(torch.float64)
                window_start_time = watch.total
                watch.start()
            improved = False
            if has_valid and (state.step % config.eval_every == 0 or last):
                watch.pause()
                valid_loss = evaluate(model, valid_ds, task.collate, task.compute_loss,
                                      batch_size=config.batch_size, accelerator=accelerator)
                if valid_loss is not None:  # None: the validation set has no target token
                    state.valid_losses.append([state.step, valid_loss])
                    if state.best_valid_loss is None or valid_loss < state.best_valid_loss - config.min_delta:
                        state.best_valid_loss, state.best_step, state.bad_evals, improved = (valid_loss, state.step,
                                                                                             0, True)
                    else:
                        state.bad_evals += 1
                    emit({"valid/loss": valid_loss, "valid/best_loss": state.best_valid_loss}, state.step)
                if config.early_stopping_patience is not None and state.bad_evals >= config.early_stopping_patience:
                    state.stopped_early = True
                    log.info("early stopping at step %d: no improvement in %d validation passes", state.step,
                             state.bad_evals)
                watch.start()
            state.finished = last or state.stopped_early
            if state.step % config.save_every == 0 or state.finished or (improved and config.restore_best):
                watch.pause()
                checkpoint()
                watch.start()
            if state.finished:
                break
            set_seed(step_seed(config.seed, state.step, rank))  # the RNG of the next step
    train_seconds = watch.pause()
    if bar is not None:
        bar.close()
    if not (root / f"step-{state.step}").exists():
        checkpoint()  # the loop ended without saving its last step (e.g. nothing was left to run)

    # ---- the final model: best validation weights (when asked), written atomically ----
    restore = config.restore_best and state.best_step is not None and state.best_step != state.step
    if restore:
        accelerator.load_state(str(root / f"step-{state.best_step}"))
    final_dir, tmp_dir = out / "final", out / ".final.tmp"
    shards = root / f"step-{state.best_step if restore else state.step}" if zero3 else None  # the final weights
    full = _unwrapped_for_saving(accelerator, model, task, shards)
    summary = TrainSummary(
        final_step=state.step, epochs_done=state.epoch + state.batches_in_epoch / batches_per_epoch,
        train_losses=[(int(s), float(v)) for s, v in state.train_losses],
        valid_losses=[(int(s), float(v)) for s, v in state.valid_losses],
        best_valid_loss=state.best_valid_loss, stopped_early=state.stopped_early,
        tokens_per_s=tokens_session / train_seconds if train_seconds > 0 else 0.0,
        peak_memory_bytes=peak_memory_bytes(device), resumed_from_step=resumed_from, best_step=state.best_step,
        total_steps=total_steps, final_dir=str(final_dir), num_processes=world, train_seconds=train_seconds)
    if main:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir(parents=True)
        task.save_final(full, tmp_dir)
        name = config.model_name or out.name
        backend = (f"DeepSpeed ZeRO-{accelerator.state.deepspeed_plugin.zero_stage}" if deepspeed
                   else f"{accelerator.distributed_type.value} ({accelerator.mixed_precision})")
        backend += ", torch.compile" if compiled else ""
        card = render_model_card(name=name, paper=task.paper, model=full, config=config, summary=summary,
                                 backend=backend)
        (tmp_dir / "MODEL_CARD.md").write_text(card)
        (tmp_dir / "train_config.json").write_text(json.dumps(config.to_dict(), indent=1))
        shutil.rmtree(final_dir, ignore_errors=True)
        os.replace(tmp_dir, final_dir)
        if tracker is not None:
            tracker.log_model_card(card)
            summary.registered_version = tracker.register_model(final_dir, name)
    accelerator.wait_for_everyone()
    return summary
