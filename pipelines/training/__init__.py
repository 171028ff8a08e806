"""The project's one training engine (Accelerate + DeepSpeed plugin), checkpoint/resume and launch helpers.

    from pipelines.training import TrainConfig, train, launch_command
    summary = train(task, TrainConfig(output_dir="models/mdr_teacher", lr=1e-4, warmup_steps=100), tracker)

``engine.train`` runs the loop; ``checkpoint`` makes checkpoints atomic and resumable;
``schedule`` is the warm-up schedule; ``data`` the deterministic order and sharded
validation; ``launch`` builds the ``accelerate launch`` / ``torchrun`` / ``deepspeed``
command of a stage. Importing this package does not import accelerate or deepspeed.
"""

from pipelines.training.config import TrainConfig, TrainSummary, TrainTask
from pipelines.training.launch import launch_command


def train(*args, **kwargs):
    """See :func:`pipelines.training.engine.train` (imported lazily: it pulls in accelerate)."""
    from pipelines.training.engine import train as _train

    return _train(*args, **kwargs)


__all__ = ["TrainConfig", "TrainSummary", "TrainTask", "launch_command", "train"]
