"""The model card written next to every final model and logged to MLflow with it.

It names the paper the stage implements (``TrainTask.paper``), the architecture and its
size, the training settings and the outcome, so a registered model version says what it
is without opening the run.
"""

from __future__ import annotations

import json

import torch

from pipelines.training.config import TrainConfig, TrainSummary


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(all parameters, trainable parameters); tied weights are counted once."""
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return total, trainable


def render_model_card(*, name: str, paper: str, model: torch.nn.Module, config: TrainConfig,
                      summary: TrainSummary, backend: str) -> str:
    total, trainable = count_parameters(model)
    arch = type(model).__name__
    hf_config = getattr(model, "config", None)
    arch_line = f"{arch}"
    if hf_config is not None and hasattr(hf_config, "to_dict"):
        keys = ("model_type", "n_layer", "n_head", "n_embd", "num_layers", "num_heads", "d_model", "vocab_size")
        cfg = hf_config.to_dict()
        arch_line += " (" + ", ".join(f"{k}={cfg[k]}" for k in keys if k in cfg) + ")"
    valid = "n/a"
    if summary.best_valid_loss is not None:
        valid = f"{summary.best_valid_loss:.4f} at step {summary.best_step}"
    final_train = f"{summary.train_losses[-1][1]:.4f}" if summary.train_losses else "n/a"
    settings = {k: v for k, v in config.to_dict().items() if k not in ("output_dir", "model_name")}
    return "\n".join([
        f"# {name}",
        "",
        f"Implements: **{paper}**.",
        "Trained by mnemos' training engine (pipelines/training/engine.py).",
        "",
        "## Model",
        f"- architecture: {arch_line}",
        f"- parameters: {total:,} ({trainable:,} trainable)",
        "",
        "## Training",
        f"- backend: {backend}, processes: {summary.num_processes}",
        f"- steps: {summary.final_step} of {summary.total_steps} planned, epochs: {summary.epochs_done:.2f}, "
        f"stopped early: {summary.stopped_early}",
        f"- final train loss: {final_train}; best validation loss: {valid}",
        f"- throughput: {summary.tokens_per_s:,.0f} target tokens/s; peak memory: {summary.peak_memory_bytes:,} bytes",
        "",
        "Settings:",
        "```json",
        json.dumps(settings, indent=1, sort_keys=True),
        "```",
        "",
    ])
