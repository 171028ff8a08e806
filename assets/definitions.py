"""The Dagster code location: ``dagster dev -m assets.definitions`` / ``dagster asset materialize``."""

from __future__ import annotations

import dagster as dg

from assets.factory import build_assets
from assets.resources import MnemosResource

defs = dg.Definitions(
    assets=build_assets(),
    resources={"mnemos": MnemosResource(), "pipes_subprocess_client": dg.PipesSubprocessClient()},
    # Stages share one machine's cores and one MLflow SQLite file: run them one at a time.
    # A multi-process executor is a deployment choice (deploy/dagster.yaml).
    executor=dg.in_process_executor,
)
