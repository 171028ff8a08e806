"""Which process of a launched run this is.

A training stage may run in several processes (``accelerate launch``, ``torchrun``, ``deepspeed``: each sets
``RANK``); only rank 0 writes a stage's outputs, dvc.lock and the MLflow run. A plain process is rank 0.
"""

from __future__ import annotations

import os


def is_rank_zero() -> bool:
    """Whether this process is the launched run's first (``RANK`` unset or 0)."""
    return int(os.environ.get("RANK", "0")) == 0
