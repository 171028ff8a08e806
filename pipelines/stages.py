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
from pipelines.registry import Stage, mark_complete, registered

mark_complete()  # every stage package has declared its stages and config sections
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


def _out(path: str, **flags) -> dict:
    """One entry of a dvc.yaml ``outs`` or ``metrics`` list, always ``persist: true`` (see :func:`dvc_yaml`);
    ``{partition}`` in the path of a partitioned stage's output becomes the ``foreach`` item."""
    return {path.replace("{partition}", "${item}"): {**flags, "persist": True}}


def dvc_yaml() -> str:
    """dvc.yaml generated from the registry: each stage runs ``bin/python -m pipelines run NAME``.

    Every output is ``persist: true``: DVC leaves it in place when it runs the stage's command (by default it
    deletes a stage's outputs first), so the runner's staging (:mod:`pipelines.staging`) keeps the last good
    outputs under ``dvc repro`` too: they are replaced whole when the stage succeeds, and stay as they were when
    it fails, is refused or is killed (DVC then leaves dvc.lock as it was). Persistent outputs are cached,
    checked out and compared as any others; DVC only skips its run cache for such a stage.

    Metrics files go under ``metrics`` and plots (PNG or CSV) stay in git-ignored, uncached
    outs and are listed in the top-level ``plots`` section (a CSV plot may carry x/y/template).
    """
    stages, plots = {}, []
    for stage in STAGES.values():
        plot_paths = {_plot_path(p) for p in stage.plots}
        outs = [_out(o, cache=False) if o in plot_paths else _out(o)
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
            entry["metrics"] = [_out(m, cache=False) for m in stage.metrics]
        if stage.partitions:  # one DVC stage per key: <name>@<key>
            entry["cmd"] += " --partition ${item}"
            entry = {"foreach": list(stage.partitions), "do": entry}
        stages[stage.name] = entry
        plots.extend(stage.plots)
    doc = {"stages": stages}
    if plots:
        doc["plots"] = plots
    header = "# GENERATED from pipelines/stages.py by `make dvc-yaml`: do not edit by hand.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=120)


def stage_for_run(name: str, config: dict) -> Stage:
    """Stage ``name`` as a run whose resolved config is ``config`` sees it (the CLI looks a stage up with this).

    ``ingest_<source>`` exists for each source that params.yaml ``sources`` sets; a source set only for this run
    (``--set sources.<source>=PATH``), or set to another path, gets its stage here, put in :data:`STAGES` for the
    rest of this process (the runner looks stages up there). An unknown name is an :class:`UnknownName` listing the
    close matches and saying where stages come from.
    """
    from pipelines.data.loaders import LOADERS
    from pipelines.data.stage import source_stage
    from pipelines.errors import UnknownName, close_matches

    if name.startswith("ingest_") and name[len("ingest_"):] in LOADERS:
        source = name[len("ingest_"):]
        path = (config.get("sources") or {}).get(source)
        if path:
            if name not in STAGES or STAGES[name].inputs != (str(path),):
                STAGES[name] = source_stage(source, path)
            return STAGES[name]
        raise UnknownName(f"stage {name!r} does not exist: source {source!r} is not configured "
                          f"(params.yaml sources.{source} is empty).",
                          hint=f"set sources.{source} in params.yaml to its published files, or give them for "
                               f"this run: --set sources.{source}=PATH.")
    if name in STAGES:
        return STAGES[name]
    ingest = [f"ingest_{s}" for s in LOADERS]
    raise UnknownName(f"unknown stage {name!r}{close_matches(name, [*STAGES, *ingest])}",
                      hint="`python -m pipelines list` lists the stages (pipelines/stages.py registers them); "
                           "ingest_<source> exists once params.yaml sources.<source> (or --set sources.<source>=PATH) "
                           "names the source's files.")


def check_inputs(stage: Stage, root) -> None:
    """A :class:`~pipelines.errors.MissingInput` for the first declared input of ``stage`` missing under ``root``,
    naming the stage that writes it."""
    from pathlib import Path

    from pipelines.errors import MissingInput

    for rel in stage.inputs:
        if not (Path(root) / rel).exists():
            producers = [s.name for s in STAGES.values() if rel in s.all_outputs]
            how = f"; run stage {producers[0]} first" if producers else ""
            error = MissingInput(f"input {rel} of stage {stage.name} does not exist{how}.")
            error.file = rel
            source = stage.name[len("ingest_"):] if stage.params == ("sources", "ingest") else None
            if producers:
                error.hint = f"python -m pipelines run {producers[0]}, then run {stage.name} again."
            elif source:
                error.hint = (f"point sources.{source} at the published files (params.yaml, or --set "
                              f"sources.{source}=PATH for one run).")
            raise error
