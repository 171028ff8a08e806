"""Run one registered stage: resolve its config, open its MLflow run, call it, enforce its checks.

The same function serves every view of a stage: ``python -m pipelines run STAGE`` (and so
``dvc repro``), the Dagster asset, and a launched training subprocess. Guarantees:
- a failed run never loses the last good outputs: the stage builds its declared outputs in a staging
  folder (:mod:`pipelines.staging`: ``ctx.path`` resolves them there), and they replace the previous
  ones only when the stage returned and its blocking checks passed. A stage that raises (Ctrl-C
  included), fails a blocking check or is refused (config, missing input, busy lock) leaves the previous
  outputs, dvc.lock and the MLflow model registry as they were, and its staging folder is deleted; a
  SIGKILL leaves it to the next run of the stage, which deletes it, or completes the swap when the kill
  came while swapping. Training checkpoints live outside the outputs (``models/.runs``): a killed
  training resumes;
- a failed blocking check raises :class:`ValidationFailed` naming the file, record and rule,
  unless the caller (Dagster) reports checks itself; the outputs stay the previous ones either way;
- one execution at a time: the stage's file lock (:mod:`pipelines.locks`, also taking the locks of
  stages whose outputs overlap) is held from repairing the staging folder to the swap and the records
  after it; a second run waits (or refuses: ``lock_timeout``), and every output file is written whole
  (:mod:`pipelines.atomic`);
- only rank 0 of a distributed launch talks to MLflow, locks the stage and swaps its outputs;
- only after the swap: a stage that succeeds outside ``dvc repro`` is recorded in dvc.lock
  (:mod:`pipelines.dvc_lock`), so DVC sees what Dagster or the CLI produced as up to date, and the
  models it trained are registered in the MLflow model registry (their files are logged to the run as
  the stage goes; the registry's new versions wait for the swap: :meth:`pipelines.tracking.Tracker.defer_registrations`).

Under ``dvc repro`` the same holds: dvc.yaml declares every output ``persist: true``
(:func:`pipelines.stages.dvc_yaml`), so DVC leaves the outputs in place for the runner instead of deleting them
before the command, and writes the stage's dvc.lock entry only when the command succeeded. A run under ``dvc repro``
that did not make every declared output fails before the swap (DVC would refuse to record it): the previous outputs
stay, matching dvc.lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipelines import config as cfg
from pipelines.errors import ValidationFailed
from pipelines.locks import StageLocks, stage_lock, timeout_from_env
from pipelines.ranks import is_rank_zero
from pipelines.registry import Stage, StageResult
from pipelines.staging import Staging

log = logging.getLogger("mnemos")


@dataclass
class StageContext:
    """What a stage function receives."""

    stage: Stage
    config: dict[str, Any]            # the resolved sections the stage reads (+ profile, seed, device)
    root: Path                        # project root; all declared paths are relative to it
    tracker: Any = None               # pipelines.tracking.Tracker on rank 0, else None
    extra: dict[str, Any] = field(default_factory=dict)
    staging: Staging | None = None    # where the declared outputs are built (the runner's); None: in place

    def path(self, relative: str) -> Path:
        """The file or folder ``relative`` (root-relative) as this run reads or writes it: in the staging
        folder when it is, is inside, or holds a declared output of the stage (:meth:`Staging.path`), else
        ``root / relative``. Stages reach their outputs through this alone, never ``root`` directly."""
        staged = self.staging.path(relative) if self.staging is not None else None
        return staged if staged is not None else self.root / relative

    @property
    def profile(self) -> str:
        return self.config.get("profile", "tiny")

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if self.tracker is not None:
            self.tracker.log_metrics(metrics, step=step)


def failed_blocking(result: StageResult):
    return [c for c in result.checks if c.blocking and not c.passed]


def blocking_message(stage: Stage, result: StageResult) -> str:
    failed = failed_blocking(result)
    first = failed[0]
    example = first.examples[0] if first.examples else "no example recorded"
    others = "; ".join(f"{c.name} ({c.count})" for c in failed[1:])
    report = result.metadata.get("validation_report", "")
    return (f"stage {stage.name}: blocking rule '{first.name}' failed for {first.count} record(s), "
            f"first: {example}" + (f"; also failed: {others}" if others else "")
            + (f"; report: {report}" if report else "") + ". Nothing downstream runs on this data.")


def run_stage(name: str, overrides: dict | None = None, *, track: bool = True, enforce_checks: bool = True,
              root: Path | None = None, params_file: Path | None = None,
              lock_timeout: float | None | Literal["env"] = "env", partition: str | None = None) -> StageResult:
    """Run stage ``name`` once and return its result (see module docstring).

    ``lock_timeout``: how long to wait while another process runs the stage (or one sharing its outputs):
    None as long as it takes, 0 not at all, else seconds; then :class:`~pipelines.locks.StageBusy`.
    "env": ``MNEMOS_LOCK_TIMEOUT`` (unset: wait as long as it takes).
    ``partition``: the key of a partitioned stage (``Stage.partitions``: the benchmark's shards) this run makes.
    """
    from pipelines.stages import STAGES, check_inputs, stage_for_run  # the registry, complete

    root = Path(root or cfg.ROOT)
    # The whole config is checked here (every key declared, every value accepted), before any output is touched.
    resolved = cfg.resolve(overrides, params_file=params_file or root / "params.yaml")
    # UnknownName (close matches; ingest_<source> for a source set in params.yaml or by this run's overrides)
    stage = stage_for_run(name, resolved)
    try:
        stage = stage.for_partition(partition)
    except ValueError as exc:
        from pipelines.errors import ConfigError

        error = ConfigError(str(exc))
        error.hint = ("its partitions are params.yaml benchmark.shards' shard indices" if stage.partitions else
                      "only a partitioned stage takes --partition")
        raise error from None
    stage_cfg = cfg.stage_config(resolved, stage.params)
    check_inputs(stage, root)  # MissingInput naming the stage that writes it

    # Rank 0 alone locks, stages and swaps outputs: the other ranks of a launch write nothing before the training
    # engine's first collective, which they pass once their rank 0 holds the lock (within torch's process-group
    # timeout), and no rank waits on a lock its own launch holds. The Dagster asset of a launched stage does
    # not lock: its Pipes subprocess does.
    if lock_timeout == "env":
        lock_timeout = timeout_from_env()
    guard = stage_lock(root, stage, STAGES.values(), lock_timeout) if is_rank_zero() else contextlib.nullcontext()
    with guard as held:
        return _execute(stage, stage_cfg, root, track=track, enforce_checks=enforce_checks, held=held)


def _execute(stage: Stage, stage_cfg: dict, root: Path, *, track: bool, enforce_checks: bool,
             held: StageLocks | None) -> StageResult:
    """Run ``stage`` under its locks (``held``; None on ranks other than 0) against its staging folder; swap
    the outputs in, record dvc.lock and register models only once it succeeded (see the module docstring)."""
    writer = is_rank_zero()
    staging = Staging(root, stage)
    if writer:
        staging.begin()  # a killed earlier run: its swap completed, or its staging folder deleted
    started = time.time()
    tracker_cm, tracker = None, None
    if track and writer:
        from pipelines import tracking

        # A training stage's run opens when its engine knows whether it resumes an earlier, killed run:
        # then it continues that MLflow run (pipelines/training/engine.py).
        tracker_cm = tracking.stage_run(stage.run_name, stage.mlflow_experiment, stage_cfg,
                                        inputs={rel: root / rel for rel in stage.inputs},
                                        lock=held.identity if held is not None else None,
                                        deferred=stage.launcher == "accelerate")
    try:
        if tracker_cm is not None:
            with tracker_cm as tracker:
                tracker.defer_registrations()  # the registry gets the models once they are in place
                result = _call(stage, stage_cfg, root, tracker, staging)
        else:
            result = _call(stage, stage_cfg, root, None, staging)
    except BaseException:
        if writer:
            staging.discard()
        raise
    result.metadata.setdefault("seconds", round(time.time() - started, 2))
    if failed_blocking(result):
        if writer:
            staging.discard()
        if enforce_checks:
            raise ValidationFailed(blocking_message(stage, result), rule=failed_blocking(result)[0].name)
        return result
    if writer:
        unmade = staging.unmade() if os.environ.get("DVC_STAGE") else []
        if unmade:  # DVC would fail the stage after the swap, leaving outputs that dvc.lock does not describe
            staging.discard()
            raise RuntimeError(f"stage {stage.run_name} did not write its declared output(s) {', '.join(unmade)}; "
                               "dvc repro records every declared output, so the previous outputs are kept")
        staging.commit()
        result.metadata = staging.published(result.metadata)
    # complete outputs, in place: recorded in dvc.lock as `dvc repro` would (pipelines/dvc_lock.py says when not)
    from pipelines.dvc_lock import record_stage

    record_stage(stage, root, stage_cfg)
    if tracker is not None:
        registered = tracker.register_deferred()
        if registered:
            result.metadata.setdefault("registered_models", registered)
    return result


def _call(stage: Stage, stage_cfg: dict, root: Path, tracker, staging: Staging | None = None) -> StageResult:
    ctx = StageContext(stage=stage, config=stage_cfg, root=root, tracker=tracker, staging=staging)
    log.info("stage %s: starting (profile %s)", stage.run_name, ctx.profile)
    result = stage.fn(ctx)
    if not isinstance(result, StageResult):
        raise TypeError(f"stage {stage.name} returned {type(result).__name__}, expected StageResult")
    if tracker is not None:
        tracker.log_metrics(result.metrics)
        failed = [c.name for c in result.checks if not c.passed]
        tracker.set_tags({"mnemos.checks": "failed: " + ", ".join(failed) if failed else "passed"})
        for rel in stage.outputs:
            path = ctx.path(rel)  # staged: the swap comes after the checks
            if rel.startswith("reports/") and path.exists():
                tracker.log_artifact(path, artifact_path="reports")
        result.metadata.setdefault("mlflow_run_id", tracker.run_id)
        result.metadata.setdefault("mlflow_run_url", tracker.url)
    log.info("stage %s: done", stage.run_name)
    return result
