"""Learning-rate schedule: linear warm-up to the peak rate, then linear decay or constant.

MDR (seed 001, "Implementation Details"): "maximum learning rate of 1e-4 with linear
warmup". The multiplier is the one of ``transformers.get_linear_schedule_with_warmup`` /
``get_constant_schedule_with_warmup`` (tests check they agree step by step):

    m(s) = s / max(1, W)                         for s < W          (warm-up)
    m(s) = max(0, (T - s) / max(1, T - W))       for s >= W         ("linear")
    m(s) = 1                                     for s >= W         ("constant")

with s the number of optimizer updates already done, W the warm-up steps, T the planned
total. The engine sets ``lr = peak * m(s)`` on every parameter group right before update
s + 1, so the rate is a pure function of the step: nothing to checkpoint, identical
under DDP, DeepSpeed and CPU offload (whose optimizer DeepSpeed swaps in).
"""

from __future__ import annotations


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, schedule: str = "linear") -> float:
    """m(step) of the module docstring, for ``schedule`` in {"linear", "constant"}."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    raise ValueError(f"unknown schedule {schedule!r}: use 'linear' or 'constant'")


def set_lr(optimizer, lr: float) -> None:
    """Write ``lr`` into every parameter group of ``optimizer`` (torch, accelerate or DeepSpeed wrapper)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
