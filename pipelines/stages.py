"""The registry of stages, complete: every stage module registers itself on import.

Three views are derived from ``STAGES`` and nothing else:
- the Dagster assets (``assets/factory.py``),
- ``dvc.yaml`` (:func:`dvc_yaml`, committed; ``tests/test_stages.py`` fails when it drifts),
- the CLI ``python -m pipelines run STAGE``.

A stage that succeeds under Dagster or the CLI is recorded in dvc.lock (:mod:`pipelines.dvc_lock`),
so the three views agree on what is up to date.
"""

from __future__ import annotations

import yaml

# Stage modules, in pipeline order. Importing them fills the registry.
from pipelines.data import stage as _data_stages  # noqa: F401
from pipelines.mdr import stage as _mdr_stages  # noqa: F401
from pipelines.emma import stage as _emma_stages  # noqa: F401
from pipelines.glong import stage as _glong_stages  # noqa: F401
from pipelines.rerank import stage as _rerank_stages  # noqa: F401
from pipelines.evaluate import stage as _evaluate_stages  # noqa: F401
from pipelines.registry import Stage, registered

STAGES: dict[str, Stage] = registered()


def upstream(stage: Stage) -> list[str]:
    """Stages that produce one of ``stage``'s inputs (a path equal to or containing it)."""
    names = []
    for other in STAGES.values():
        if other.name == stage.name:
            continue
        for rel in stage.inputs:
            if any(rel == out or rel.startswith(out.rstrip("/") + "/") for out in other.all_outputs):
                names.append(other.name)
                break
    return names


def _param_keys(stage: Stage) -> list[str]:
    return ["profile", "seed", *stage.params]


# DVC runs a stage's cmd through a shell with the caller's PATH: a bare `python` would be whatever comes
# first there. bin/python is the project's interpreter (.venv's, else a python with mnemos installed).
PYTHON = "bin/python"


def _plot_path(plot) -> str:
    return plot if isinstance(plot, str) else next(iter(plot))


def dvc_yaml() -> str:
    """dvc.yaml generated from the registry: each stage runs ``bin/python -m pipelines run NAME``.

    Metrics files go under ``metrics`` and plots (PNG or CSV) stay in git-ignored, uncached
    outs and are listed in the top-level ``plots`` section (a CSV plot may carry x/y/template).
    """
    stages, plots = {}, []
    for stage in STAGES.values():
        plot_paths = {_plot_path(p) for p in stage.plots}
        outs = [{o: {"cache": False}} if o in plot_paths else o
                for o in stage.outputs if o not in stage.metrics]
        entry = {
            "desc": stage.description.splitlines()[0] if stage.description else stage.name,
            "cmd": f"{PYTHON} -m pipelines run {stage.name}",
            # The profiles' defaults live in pipelines/config.py: every stage depends on it.
            "deps": list(dict.fromkeys([*stage.inputs, *stage.code, "pipelines/config.py"])),
            "params": _param_keys(stage),
            "outs": outs,
        }
        if stage.metrics:
            entry["metrics"] = [{m: {"cache": False}} for m in stage.metrics]
        if stage.partitions:  # one DVC stage per key: <name>@<key>
            entry["cmd"] += " --partition ${item}"
            entry["outs"] = [o.replace("{partition}", "${item}") if isinstance(o, str) else o for o in outs]
            entry = {"foreach": list(stage.partitions), "do": entry}
        stages[stage.name] = entry
        plots.extend(stage.plots)
    doc = {"stages": stages}
    if plots:
        doc["plots"] = plots
    header = "# GENERATED from pipelines/stages.py by `make dvc-yaml`: do not edit by hand.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=120)
