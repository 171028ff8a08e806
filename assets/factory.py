"""The asset factory: one Dagster asset per registered stage, never a hand-written copy.

In-process stages call ``pipelines.runner.run_stage``; training stages (``launcher ==
"accelerate"``) run as a subprocess started through Dagster Pipes with the configured
launcher (accelerate / torchrun / deepspeed), so one process or N GPUs is a setting.
Each validation rule of a stage is an asset check; blocking ones stop everything downstream.
An error a user can cause (:class:`pipelines.errors.MnemosError`) fails the asset with a ``dg.Failure`` whose
description is the CLI's ``error:`` / ``hint:`` lines, its traceback kept in the failure's metadata.
"""


import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import dagster as dg

from assets.resources import MnemosResource
from pipelines.errors import MnemosError, describe, exit_code
from pipelines.registry import CheckOutcome, Stage, StageResult
from pipelines.stages import STAGES, upstream


def to_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """Plain values -> Dagster metadata values (markdown tables, links, paths, JSON)."""
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if key.endswith("_md") and isinstance(value, str):
            out[key[:-3]] = dg.MetadataValue.md(value)
        elif key.endswith("_url") and isinstance(value, str):
            out[key] = dg.MetadataValue.url(value)
        elif isinstance(value, (dict, list)):
            out[key] = dg.MetadataValue.json(value)
        elif isinstance(value, bool) or value is None:
            out[key] = dg.MetadataValue.text(str(value))
        elif isinstance(value, (int, float, str)):
            out[key] = value
        else:
            out[key] = dg.MetadataValue.text(str(value))
    return out


def check_result(stage: Stage, outcome: CheckOutcome, report_url: str | None = None) -> dg.AssetCheckResult:
    meta = {"failing_records": outcome.count, "examples": dg.MetadataValue.md(
        "\n".join(f"- `{e}`" for e in outcome.examples) or "none")}
    if report_url:
        meta["validation_report_url"] = dg.MetadataValue.url(report_url)
    meta.update(to_metadata(outcome.metadata))
    return dg.AssetCheckResult(
        asset_key=dg.AssetKey(stage.name), check_name=outcome.name, passed=outcome.passed,
        severity=dg.AssetCheckSeverity.ERROR if outcome.blocking else dg.AssetCheckSeverity.WARN,
        description=outcome.description or None, metadata=meta)


def materialize_result(stage: Stage, result: StageResult) -> dg.MaterializeResult:
    meta = dict(result.metadata)
    meta.update({f"metric.{k}": v for k, v in result.metrics.items() if f"metric.{k}" not in meta})
    return dg.MaterializeResult(metadata=to_metadata(meta),
                                check_results=[check_result(stage, c, result.metadata.get("validation_report_url"))
                                               for c in result.checks])


@contextlib.contextmanager
def user_error_as_failure():
    """A user error raised inside becomes a ``dg.Failure``: the run's failure message is the CLI's one or two lines
    (``error: ...`` / ``hint: ...``), the error's class, exit code and traceback are its metadata."""
    try:
        yield
    except MnemosError as exc:
        raise dg.Failure(description=describe(exc), metadata={
            "error": type(exc).__name__, "exit_code": exit_code(exc),
            "traceback": dg.MetadataValue.text("".join(traceback.format_exception(exc)))}) from None


def pipes_command(stage: Stage, mnemos: MnemosResource) -> list[str]:
    """The launcher command that runs ``assets.pipes_entry STAGE`` on every rank.

    One local process needs no launcher; anything else goes through
    ``pipelines.training.launch.launch_command`` (accelerate / torchrun / deepspeed).
    """
    entry = ["-m", "assets.pipes_entry", stage.name]
    if mnemos.launcher == "python" or (mnemos.launcher == "accelerate" and mnemos.num_processes == 1
                                        and not mnemos.launcher_config):
        return [sys.executable, *entry]
    from pipelines.training.launch import launch_command

    if mnemos.launcher == "deepspeed":
        entry = ["--module", "assets.pipes_entry", stage.name]
    return launch_command(stage.name, launcher=mnemos.launcher, accelerate_config=mnemos.launcher_config,
                          num_processes=mnemos.num_processes, entry=entry)


def build_asset(stage: Stage) -> dg.AssetsDefinition:
    check_specs = [dg.AssetCheckSpec(c.name, asset=stage.name, description=c.description, blocking=c.blocking)
                   for c in stage.checks]
    kinds = {"pytorch"} if stage.launcher == "accelerate" else {"python"}
    static_meta = {"inputs": dg.MetadataValue.json(list(stage.inputs)),
                   "outputs": dg.MetadataValue.json(list(stage.outputs)),
                   "params": dg.MetadataValue.json(list(stage.params)),
                   "mlflow_experiment": stage.mlflow_experiment}

    if stage.launcher == "accelerate":
        @dg.asset(name=stage.name, group_name=stage.group, description=stage.description,
                  deps=upstream(stage), check_specs=check_specs, kinds=kinds, metadata=static_meta)
        def _launched(context: dg.AssetExecutionContext, mnemos: MnemosResource,
                      pipes_subprocess_client: dg.PipesSubprocessClient):
            with user_error_as_failure():
                overrides = mnemos.resolved_overrides()
            env = {"MNEMOS_ROOT": mnemos.root or os.environ.get("MNEMOS_ROOT", ""), "MNEMOS_OVERRIDES": json.dumps(overrides),
                   "MNEMOS_TRACK": "1" if mnemos.track else "0"}
            return pipes_subprocess_client.run(
                command=pipes_command(stage, mnemos), context=context, env=env,
            ).get_materialize_result()

        return _launched

    # A partitioned stage (the benchmark's shards) is a partitioned asset when it has several keys: a backfill
    # runs them as separate runs, side by side under the run launcher / executor of the deployment. One key is
    # no partition at all (so `dagster asset materialize --select '*'` runs it with the rest).
    partitions = dg.StaticPartitionsDefinition(list(stage.partitions)) if len(stage.partitions) > 1 else None

    @dg.asset(name=stage.name, group_name=stage.group, description=stage.description,
              deps=upstream(stage), check_specs=check_specs, kinds=kinds, metadata=static_meta,
              partitions_def=partitions)
    def _inprocess(context: dg.AssetExecutionContext, mnemos: MnemosResource):
        from pipelines.runner import run_stage

        key = context.partition_key if partitions is not None else None
        with user_error_as_failure():
            result = run_stage(stage.name, mnemos.resolved_overrides(), track=mnemos.track, enforce_checks=False,
                               root=Path(mnemos.root) if mnemos.root else None, partition=key)
        return materialize_result(stage, result)

    return _inprocess


def build_assets() -> list[dg.AssetsDefinition]:
    return [build_asset(stage) for stage in STAGES.values()]
