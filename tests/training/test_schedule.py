"""The warm-up schedule: exact multipliers, agreement with transformers, and what the engine applies."""

from __future__ import annotations

import pytest
import torch

from pipelines.training.schedule import lr_multiplier, set_lr


@pytest.mark.parametrize("schedule, warmup, total, expected", [
    ("linear", 4, 10, [0.0, 0.25, 0.5, 0.75, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0]),
    ("constant", 4, 10, [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ("linear", 0, 4, [1.0, 0.75, 0.5, 0.25, 0.0]),
    ("constant", 0, 3, [1.0, 1.0, 1.0, 1.0]),
    ("linear", 2, 2, [0.0, 0.5, 0.0]),
])
def test_multiplier_values(schedule, warmup, total, expected):
    got = [lr_multiplier(s, warmup, total, schedule) for s in range(total + 1)]
    assert got == pytest.approx(expected, abs=1e-12)


def test_linear_never_negative_past_the_end():
    assert lr_multiplier(12, 2, 10) == 0.0


def test_unknown_schedule():
    with pytest.raises(ValueError, match="unknown schedule 'cosine'"):
        lr_multiplier(5, 1, 10, "cosine")


@pytest.mark.parametrize("schedule", ["linear", "constant"])
def test_matches_transformers_schedulers(schedule):
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    if schedule == "linear":
        sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=3, num_training_steps=9)
    else:
        sched = get_constant_schedule_with_warmup(opt, num_warmup_steps=3)
    for step in range(9):
        assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * lr_multiplier(step, 3, 9, schedule), abs=1e-15)
        opt.step()
        sched.step()


def test_set_lr_writes_every_group():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.AdamW([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=1.0)
    set_lr(opt, 0.125)
    assert [g["lr"] for g in opt.param_groups] == [0.125, 0.125]
