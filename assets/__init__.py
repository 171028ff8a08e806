"""Dagster code location of mnemos: a thin view over the stage registry in pipelines/."""
