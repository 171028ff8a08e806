"""Score calibration: one ranker's scores over the candidates of one query, put on a common scale.

Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval" (ACM TOIS 2023): min-max
(s - min) / (max - min), or the z-score (s - mean) / std, before a convex combination of rankers (:mod:`pipelines.memory.fusion`,
:mod:`pipelines.threads`, :mod:`pipelines.memory.rerank`).
"""

from __future__ import annotations

import numpy as np

from pipelines.errors import ConfigError

CALIBRATIONS = ("zscore", "minmax")


def calibrate(scores: np.ndarray, method: str) -> np.ndarray:
    """Scores of one ranker over the candidates of one query (N,), normalised (N,); constant scores -> zeros."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return scores
    if method == "zscore":
        std = scores.std()
        return (scores - scores.mean()) / std if std > 0 else np.zeros_like(scores)
    if method == "minmax":
        span = scores.max() - scores.min()
        return (scores - scores.min()) / span if span > 0 else np.zeros_like(scores)
    raise ConfigError(f"calibration must be one of {list(CALIBRATIONS)}, got {method!r}.")
