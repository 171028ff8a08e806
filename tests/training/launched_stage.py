"""A training stage of the tiny task, run by ``pipelines.runner.run_stage`` on every rank of a launch.

    <launcher> tests/training/launched_stage.py PROJECT_ROOT

does what ``<launcher> -m pipelines run STAGE`` does for a real training stage (lock on rank 0, outputs,
the engine, MLflow on rank 0), with this one stage as the registry, so that a test can launch it fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipelines.registry import Stage, StageResult  # noqa: E402
from tests.training.tiny_task import TinyLMTask  # noqa: E402

OUTPUT = "models/tiny"


def tiny_train(ctx) -> StageResult:
    from pipelines.training.stage import train_stage

    knobs = {"lr": 3e-3, "warmup_steps": 2, "max_steps": 6, "batch_size": 4, "save_every": 3, "eval_every": 3,
             "early_stopping_patience": None}
    return train_stage(ctx, TinyLMTask(), knobs, OUTPUT)


STAGE = Stage(name="tiny_train", group="mdr", description="the engine tests' tiny task as a stage", fn=tiny_train,
              inputs=(), outputs=(OUTPUT,), params=(), launcher="accelerate")

if __name__ == "__main__":
    from tests._one_registry import install

    install({STAGE.name: STAGE})  # this one stage instead of the project's
    from pipelines.runner import run_stage

    run_stage(STAGE.name, root=Path(sys.argv[1]))
