"""Resources: the run-time settings a user can change in the launchpad or run config."""

from __future__ import annotations

from pathlib import Path

import dagster as dg


class MnemosResource(dg.ConfigurableResource):
    """How stages run: which profile, which params overrides, and how training is launched.

    Set in the launchpad, e.g. ``resources: {mnemos: {config: {profile: paper,
    overrides: ["synthetic.episodes=48"]}}}``.
    """

    profile: str | None = None        # tiny | small | paper; None: params.yaml's profile
    overrides: list[str] = []         # "section.key=value" (YAML values), applied over params.yaml
    track: bool = True                # log each stage execution to MLflow
    launcher: str = "accelerate"      # how training stages start: accelerate | torchrun | deepspeed | python
    launcher_config: str | None = None  # e.g. deploy/accelerate/gpu_multi.yaml; None: one local process
    num_processes: int = 1            # processes per node for the launcher
    root: str | None = None           # project folder (params.yaml, data/, models/, reports/); None: the checkout

    def resolved_overrides(self) -> dict:
        """The overrides as one dict, with the whole config they resolve to checked.

        Every asset calls this first, so a bad config (an unknown key, named with the closest known one; a value
        its config class refuses) fails the asset with a ConfigError before any output is touched, and before a
        training stage's subprocess is launched.
        """
        from pipelines.config import ROOT, parse_overrides, resolve

        merged = parse_overrides(self.overrides, "Dagster run config (resources.mnemos.config.overrides)")
        if self.profile:
            merged["profile"] = self.profile
        resolve(merged, params_file=Path(self.root or ROOT) / "params.yaml")
        return merged
