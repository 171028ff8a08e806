"""Resources: the run-time settings a user can change in the launchpad or run config."""

from __future__ import annotations

import dagster as dg


class MnemosResource(dg.ConfigurableResource):
    """How stages run: which profile, which params overrides, and how training is launched.

    Set in the launchpad, e.g. ``resources: {mnemos: {config: {profile: paper,
    overrides: ["synthetic.episodes=48"]}}}``.
    """

    profile: str | None = None        # tiny | paper; None: params.yaml's profile
    overrides: list[str] = []         # "section.key=value" (YAML values), applied over params.yaml
    track: bool = True                # log each stage execution to MLflow
    launcher: str = "accelerate"      # how training stages start: accelerate | torchrun | deepspeed | python
    launcher_config: str | None = None  # e.g. deploy/accelerate/gpu_multi.yaml; None: one local process
    num_processes: int = 1            # processes per node for the launcher
    root: str | None = None           # project folder (params.yaml, data/, models/, reports/); None: the checkout

    def resolved_overrides(self) -> dict:
        from pipelines.config import deep_merge, parse_override

        merged: dict = {}
        for text in self.overrides:
            merged = deep_merge(merged, parse_override(text))
        if self.profile:
            merged["profile"] = self.profile
        return merged
