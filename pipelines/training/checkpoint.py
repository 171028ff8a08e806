"""Checkpoints that survive a SIGKILL: atomic ``step-<n>/`` folders and the newest-complete lookup.

Layout of ``<output_dir>/checkpoints/``::

    step-40/                  a complete checkpoint (the only kind ever named step-<n>)
        model.safetensors     weights (accelerate.save_state, safe_serialization=True); not under ZeRO-3
        optimizer.bin         AdamW moments; random_states_<rank>.pkl: RNG of every rank
        pytorch_model/        DeepSpeed only: its own model + optimizer state (``latest`` names it); under
                              ZeRO-3 the shards alone, zero_pp_rank_<r>_mp_rank_00_{model,optim}_states.pt
                              per rank r (its partition of the fp32 weights and AdamW moments)
        trainer_state.json    step, epoch, batches consumed, loss history, early-stopping state,
                              the MLflow run id of the session (a resumed session continues that run)
    .tmp-step-50/             a save in progress: never picked up, removed at the next start

A checkpoint is written into ``.tmp-step-<n>`` by every rank (accelerate needs all ranks
for DeepSpeed and per-rank RNG files), then rank 0 writes ``trainer_state.json`` last,
flushes it to disk and renames the folder: the rename is atomic, so a process killed at
any moment leaves either the complete ``step-<n>`` or an ignored temporary folder. The
output folder must be on a file system all ranks share (see deploy/README.md).

Under DeepSpeed ZeRO-3 (Rajbhandari et al. 2020) each rank writes and reads back only its own
partition: no checkpoint gathers the whole model. The weights are consolidated once, when the
final model is written (:func:`load_zero3_checkpoint`, deepspeed's zero_to_fp32 on the CPU).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

STATE_FILE = "trainer_state.json"


class _TiedWeightsNotice(logging.Filter):
    """Hide accelerate's "Removed shared tensor" warning: tied weights (GPT-2's lm_head = wte) are
    stored once by safetensors and re-tied by the model on load, which the resume test checks."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Removed shared tensor" not in record.getMessage()


logging.getLogger("accelerate.utils.other").addFilter(_TiedWeightsNotice())
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass
class TrainerState:
    """The part of a run's state accelerate does not save: where the loop is and what it saw."""

    step: int = 0                          # optimizer steps completed
    epoch: int = 0                         # current epoch (0-based)
    batches_in_epoch: int = 0              # micro-batches this rank consumed in the current epoch
    total_steps: int = 0                   # planned optimizer steps when the run started
    world_size: int = 1                    # processes; the data order depends on it
    tokens_seen: int = 0                   # target tokens over all ranks, all sessions
    train_losses: list[list[float]] = field(default_factory=list)   # [step, loss]
    valid_losses: list[list[float]] = field(default_factory=list)   # [step, loss]
    best_valid_loss: float | None = None
    best_step: int | None = None
    bad_evals: int = 0                     # validation passes since the last improvement
    stopped_early: bool = False
    finished: bool = False                 # the loop ended (max steps, epochs or early stopping)
    mlflow_run_id: str | None = None       # the MLflow run of the session: a resumed session continues it

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "TrainerState":
        return cls(**json.loads(text))


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def step_of(path: Path) -> int | None:
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else None


def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first (a folder without its state file is not one)."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and step_of(p) is not None and (p / STATE_FILE).is_file()]
    return sorted(found, key=step_of)


def latest_checkpoint(root: Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def read_state(path: Path) -> TrainerState:
    return TrainerState.from_json((path / STATE_FILE).read_text())


def remove_partial(root: Path) -> None:
    """Delete leftovers of saves that were interrupted (rank 0, before training starts)."""
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(".tmp-"):
                shutil.rmtree(p, ignore_errors=True)


def _fsync_write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(accelerator, model, root: Path, state: TrainerState, *, deepspeed: bool,
                    zero3: bool = False) -> Path:
    """Save the full training state as ``root/step-<state.step>`` atomically; every rank must call it.
    Under ZeRO-3 (``zero3``) it holds each rank's shards only (see the module docstring)."""
    final = root / f"step-{state.step}"
    tmp = root / f".tmp-step-{state.step}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp), safe_serialization=True)
    if deepspeed and not zero3:  # DeepSpeed's own files are pickles; keep a plain safetensors copy of the weights too
        accelerator.save_model(model, str(tmp), safe_serialization=True)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _fsync_write(tmp / STATE_FILE, state.to_json())
        if final.exists():  # re-saving the same step (e.g. the end of a resumed, finished run)
            shutil.rmtree(final)
        os.replace(tmp, final)
        dir_fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    accelerator.wait_for_everyone()
    return final


def load_zero3_checkpoint(model: torch.nn.Module, checkpoint: Path) -> None:
    """Fill ``model``, whole (not partitioned), with the weights of the ZeRO-3 ``checkpoint`` (a ``step-<n>``).

    deepspeed's zero_to_fp32 (``get_fp32_state_dict_from_zero_checkpoint``) rebuilds each parameter from the
    fp32 partitions every rank saved, on the CPU, with no process group; in lazy mode one tensor is read at a
    time, so the process needs the model's memory plus one tensor. Names must match both ways.
    """
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    lazy = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint), lazy_mode=True)  # ``latest`` names the tag
    target = model.state_dict(keep_vars=True)  # the model's own tensors (tied weights under each name)
    missing, unexpected = sorted(set(target) - set(lazy)), sorted(set(lazy) - set(target))
    if missing or unexpected:
        raise RuntimeError(f"the ZeRO-3 checkpoint {checkpoint} does not fit {type(model).__name__}: missing "
                           f"{missing or 'none'}, unexpected {unexpected or 'none'}.")
    with torch.no_grad():
        for name, tensor in lazy.items():
            target[name].copy_(tensor.contiguous())


def prune_checkpoints(root: Path, keep: int, protect: int | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints, never the one of step ``protect``."""
    found = complete_checkpoints(root)
    doomed = [p for p in found[:-keep] if step_of(p) != protect] if keep > 0 else []
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def adapter_only_checkpoints(model: torch.nn.Module) -> torch.nn.Module:
    """Make ``model.state_dict()`` hold the trainable (LoRA) weights only, and loading tolerate the rest.

    The training engine checkpoints ``model.state_dict()`` through accelerate and loads it back strictly.
    A 4-bit base does not survive that round trip (bitsandbytes stores each weight's quantisation state as
    extra keys a plain load reports as unexpected), and it need not: it is frozen and rebuilt identically
    from ``base_ref``. With these two hooks a checkpoint holds the adapters alone (megabytes instead of the
    whole model), under DDP too (the hooks act on the module wherever it sits in the wrapped tree).
    The engine applies it to every model with 4-bit weights (EMMA's dialogue module, G-Long's
    extractor); a second call changes nothing.
    """
    if getattr(model, "_adapter_only_checkpoints", False):
        return model
    model._adapter_only_checkpoints = True
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}

    def keep_trainable(module, state_dict, prefix, local_metadata):
        for key in [k for k in state_dict if k.startswith(prefix) and k[len(prefix):] not in trainable]:
            del state_dict[key]

    def ignore_frozen(module, incompatible):   # keys arrive with the module's outer prefix (e.g. "module.")
        frozen = [k for k in incompatible.missing_keys if not any(k.endswith(name) for name in trainable)]
        for key in frozen:
            incompatible.missing_keys.remove(key)

    model.register_state_dict_post_hook(keep_trainable)
    model.register_load_state_dict_post_hook(ignore_frozen)
    return model
