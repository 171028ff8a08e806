"""Running a TrainTask as a registered stage: resumable run folder, final model in place.

Checkpoints live in ``models/.runs/<stage>-<hash>`` where the hash covers the stage's resolved
config and the content of its inputs: a killed run started again with the same config resumes
there; a changed config starts afresh. The run folder is no declared output: the runner's staging
(pipelines/staging.py) never touches it. The finished model is copied to the stage's declared output
(``ctx.path``: its staging place, swapped in by the runner once the stage succeeded) and the run folder
removed. Only rank 0 writes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from pipelines.registry import StageResult


def run_dir(ctx) -> Path:
    """Checkpoint folder keyed by the resolved config and the content of the inputs."""
    from pipelines.tracking import content_hash

    h = hashlib.sha256(json.dumps(ctx.config, sort_keys=True, default=str).encode())
    for rel in ctx.stage.inputs:
        h.update(content_hash(ctx.path(rel)).encode())
    return ctx.path(f"models/.runs/{ctx.stage.name}-{h.hexdigest()[:12]}")


def train_stage(ctx, task, knobs: dict, out_rel: str, folder: Path | None = None) -> StageResult:
    """Train ``task`` with TrainConfig ``knobs`` and put the final model at ``out_rel``."""
    from pipelines.ranks import is_rank_zero
    from pipelines.training.config import TrainConfig
    from pipelines.training.engine import train

    folder = folder or run_dir(ctx)
    values = {"seed": ctx.config.get("seed", 2022), "model_name": f"mnemos-{ctx.stage.name}"}
    values.update({k: v for k, v in knobs.items() if v is not None or k not in values})
    values["output_dir"] = str(folder)
    config = TrainConfig(**values)
    summary = train(task, config, tracker=ctx.tracker)
    if not is_rank_zero():  # rank 0 alone wrote the final model; the others are done
        return StageResult(metadata={"final_step": summary.final_step})
    out = ctx.path(out_rel)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(Path(summary.final_dir), out)
    shutil.rmtree(folder, ignore_errors=True)  # finished: nothing left to resume
    metrics = summary.to_metrics()
    meta = dict(metrics)
    meta["model_dir"] = str(out)
    if summary.resumed_from_step is not None:  # this session resumed a killed one from its checkpoint
        meta["resumed_from_step"] = summary.resumed_from_step
    if summary.train_losses:
        meta["first_train_loss"], meta["last_train_loss"] = summary.train_losses[0][1], summary.train_losses[-1][1]
    return StageResult(metadata=meta, metrics=metrics)
