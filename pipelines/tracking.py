"""Experiment tracking: with pipelines/evaluate/answers/traces.py (the answers as traces), the only module that imports
mlflow.

One MLflow run per stage execution, in one experiment per method (``mnemos-data``,
``mnemos-mdr``, ``mnemos-emma``, ``mnemos-glong``, ``mnemos-evaluate``), named
``<stage>-<profile>``. Each run carries the full resolved config of the stage as params,
the git commit and the content hash of every input as tags, and the stage's metrics
and artifacts. A training session resumed from a checkpoint continues the run of the session
it resumes (:meth:`Tracker.continue_run`); a run left RUNNING by a killed process is marked
KILLED by the next execution of its stage (the stage lock proves the process dead).

Store: ``MLFLOW_TRACKING_URI`` when set (e.g. a remote ``http://mlflow.example:5000``);
otherwise a SQLite file ``mlflow/mlflow.db`` with artifacts under ``mlflow/artifacts/``
in the project. ``python -m pipelines.tracking serve`` starts the UI over that store.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from pipelines.config import ROOT, flatten

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
logging.getLogger("alembic").setLevel(logging.WARNING)

STORE_DIR = ROOT / "mlflow"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{STORE_DIR / 'mlflow.db'}"


def artifact_root() -> str:
    return os.environ.get("MNEMOS_ARTIFACT_ROOT") or (STORE_DIR / "artifacts").as_uri()


def _is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def git_commit(root: Path = ROOT) -> str:
    """The commit of the working tree, with ``-dirty`` when it has uncommitted changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def content_hash(path: Path) -> str:
    """sha256 of a file, or of a folder's files (relative names and contents, sorted)."""
    path = Path(path)
    h = hashlib.sha256()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    else:
        return "missing"
    for file in files:
        if path.is_dir():
            h.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


class Tracker:
    """What a stage uses to log: a thin, duck-typed handle over one MLflow run.

    The run opens on first use, or at once unless :func:`stage_run` was asked to defer it. A training
    engine resuming a killed session calls :meth:`continue_run` before anything is logged: the handle then
    logs into that session's run (status back to RUNNING, tag ``mnemos.resumed_at_step``) instead of a new
    one, and drops every point of a metric at a step the run already holds, so that each metric's history
    keeps one value per step. When the handle holds a stage lock (``lock``), opening it marks the runs of
    the same stage left RUNNING under that lock as KILLED: holding the lock proves their process is dead.
    """

    def __init__(self, mlflow_module, experiment_id: str, run_name: str, stage: str, tags: dict[str, str],
                 params: dict[str, Any], lock: str | None = None):
        self._mlflow = mlflow_module
        self.experiment_id = experiment_id
        self._run_name, self._stage, self._tags, self._params, self._lock = run_name, stage, tags, params, lock
        self.run = None
        self._held: dict[str, int] = {}  # metric -> last step the continued run already holds
        self._deferred: list[tuple[str, str]] | None = None  # (name, description) awaiting the registry

    @property
    def run_id(self) -> str:
        return self.open().info.run_id

    def open(self):
        """The run, opened now when it is not yet: a new run with the stage's tags and params."""
        if self.run is None:
            self.run = self._mlflow.start_run(experiment_id=self.experiment_id, run_name=self._run_name)
            self.set_tags(self._tags)
            self.log_params(self._params)
            self._mark_dead_runs_killed()
        return self.run

    def continue_run(self, run_id: str, at_step: int) -> bool:
        """Log into the existing run ``run_id`` (a resumed training) instead of a new one.

        Returns False, and logs into a new run tagged ``mnemos.resumed_from_run``, when that run is not in
        this store's experiment (another store, deleted) or when this handle has already opened its own run.
        """
        from mlflow.exceptions import MlflowException

        client = self._mlflow.MlflowClient()
        if self.run is not None:
            if self.run.info.run_id == run_id:
                return True
            self.set_tags({"mnemos.resumed_from_run": run_id, "mnemos.resumed_at_step": str(at_step)})
            return False
        try:
            old = client.get_run(run_id)
        except MlflowException:
            old = None
        if old is None or old.info.lifecycle_stage == "deleted" or old.info.experiment_id != self.experiment_id:
            logging.getLogger("mnemos").warning("MLflow run %s of the resumed checkpoint is not in experiment %s "
                                                "of %s: logging into a new run", run_id, self.experiment_id,
                                                tracking_uri())
            self._tags = {**self._tags, "mnemos.resumed_from_run": run_id, "mnemos.resumed_at_step": str(at_step)}
            self.open()
            return False
        self.run = self._mlflow.start_run(run_id=run_id)  # sets the status back to RUNNING
        self._held = {key: max(m.step for m in client.get_metric_history(run_id, key))
                      for key in old.data.metrics}
        earlier = old.data.tags.get("mnemos.resumed_at_step")
        # Same config (the checkpoint folder is keyed by it), so the params stand; tags say who continued it.
        self.set_tags({**self._tags, "mnemos.resumed_at_step": f"{earlier},{at_step}" if earlier else str(at_step)})
        self._mark_dead_runs_killed()
        return True

    def _mark_dead_runs_killed(self) -> None:
        if self._lock is None:
            return
        client = self._mlflow.MlflowClient()
        found = client.search_runs([self.experiment_id], max_results=1000,
                                   filter_string=f"tags.`mnemos.stage` = '{self._stage}' "
                                                 "and attributes.status = 'RUNNING'")
        for run in found:
            if run.info.run_id != self.run.info.run_id and run.data.tags.get("mnemos.lock") == self._lock:
                client.set_tag(run.info.run_id, "mnemos.killed_reason",
                               f"left RUNNING by a process that died; found by run {self.run.info.run_id}, "
                               "which holds the stage lock")
                client.set_terminated(run.info.run_id, status="KILLED")

    def end(self, status: str = "FINISHED") -> None:
        """End the run (opening it first if nothing was logged, so every execution is recorded)."""
        self.open()
        self._mlflow.end_run(status)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        clean = {_metric_name(k): float(v) for k, v in metrics.items() if _is_number(v)}
        if self._held:  # a continued run: the steps it holds were logged by the killed session
            at = 0 if step is None else step  # MLflow's default step
            clean = {k: v for k, v in clean.items() if at > self._held.get(k, -1)}
        if clean:
            self.open()
            self._mlflow.log_metrics(clean, step=step)

    def log_params(self, params: dict[str, Any]) -> None:
        self.open()
        flat = flatten(params)
        for start in range(0, len(flat), 100):  # MLflow accepts 100 params a batch
            self._mlflow.log_params(dict(list(flat.items())[start:start + 100]))

    def set_tags(self, tags: dict[str, str]) -> None:
        self.open()
        self._mlflow.set_tags(tags)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        path = Path(path)
        self.open()
        if path.is_dir():
            self._mlflow.log_artifacts(str(path), artifact_path=artifact_path or path.name)
        elif path.exists():
            self._mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def log_text(self, text: str, name: str) -> None:
        self.open()
        self._mlflow.log_text(text, name)

    def log_model_card(self, text: str, artifact_path: str = "model") -> None:
        self.open()
        self._mlflow.log_text(text, f"{artifact_path}/MODEL_CARD.md")

    def register_model(self, path: str | Path, name: str, description: str = "") -> str | None:
        """Log the model folder as artifacts and register it as a new version of ``name``; after
        :meth:`defer_registrations` the artifacts are logged now, the version waits (returns None)."""
        self.log_artifact(path, artifact_path="model")
        if self._deferred is not None:
            self._deferred.append((name, description))
            return None
        return self._create_version(name, description)

    def defer_registrations(self) -> None:
        """Hold back the registry's new versions until :meth:`register_deferred`: the runner registers a
        stage's models only once its outputs are swapped in (pipelines/runner.py); a run that fails, or is
        killed, leaves the registry as it was."""
        if self._deferred is None:
            self._deferred = []

    def register_deferred(self) -> dict[str, str]:
        """Create the versions :meth:`register_model` held back (the run may have ended): {name: version}."""
        pending, self._deferred = self._deferred or [], None
        return {name: self._create_version(name, description) for name, description in pending}

    def _create_version(self, name: str, description: str) -> str:
        client = self._mlflow.MlflowClient()
        try:
            client.get_registered_model(name)
        except self._mlflow.exceptions.MlflowException:
            client.create_registered_model(name, description=description)
        source = f"{self.run.info.artifact_uri}/model"
        version = client.create_model_version(name, source=source, run_id=self.run_id,
                                              description=description)
        return str(version.version)

    @property
    def url(self) -> str:
        base = os.environ.get("MNEMOS_MLFLOW_UI", "http://127.0.0.1:5000")
        return f"{base}/#/experiments/{self.experiment_id}/runs/{self.run_id}"


def _is_number(value: Any) -> bool:
    """Scalars MLflow can chart: ints and floats (numpy ones too), not bools or strings."""
    if isinstance(value, (bool, str, bytes)):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _metric_name(name: str) -> str:
    # MLflow allows alphanumerics, _ - . space / : only.
    return "".join(c if c.isalnum() or c in "_-. /:" else "_" for c in name)


def _experiment(mlflow, name: str) -> str:
    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    kwargs = {"artifact_location": f"{artifact_root()}/{name}"} if _is_local_store(tracking_uri()) else {}
    return mlflow.create_experiment(name, **kwargs)


@contextlib.contextmanager
def stage_run(stage: str, experiment: str, config: dict, inputs: dict[str, Path] | None = None,
              tags: dict[str, str] | None = None, *, lock: str | None = None,
              deferred: bool = False) -> Iterator[Tracker]:
    """One MLflow run for one execution of ``stage``: FINISHED, FAILED on an exception, KILLED on Ctrl-C.

    ``lock``: the identity of the stage lock the execution holds (pipelines.locks); runs of the stage
    left RUNNING under it are marked KILLED. ``deferred``: open the run on first use, so that a training
    engine can continue the run of the session it resumes (:meth:`Tracker.continue_run`).
    """
    import mlflow

    STORE_DIR.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(tracking_uri())
    experiment_id = _experiment(mlflow, experiment)
    profile = config.get("profile", "tiny")
    all_tags = {"mnemos.stage": stage, "mnemos.profile": profile, "mlflow.source.git.commit": git_commit()}
    if lock is not None:
        all_tags["mnemos.lock"] = lock
    for name, path in (inputs or {}).items():
        all_tags[f"input_hash.{name}"] = content_hash(path)
    all_tags.update(tags or {})
    tracker = Tracker(mlflow, experiment_id, f"{stage}-{profile}", stage, all_tags, config, lock=lock)
    if not deferred:
        tracker.open()
    status = "FINISHED"
    try:
        yield tracker
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        tracker.end(status)


def serve(host: str = "127.0.0.1", port: int = 5000) -> int:
    """Start the MLflow UI over the project's store (blocks)."""
    STORE_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri(),
           "--default-artifact-root", artifact_root(), "--host", host, "--port", str(port)]
    # MLflow 3's server starts a job runner (four huey worker processes, ~240 MB each) for the GenAI evaluation and
    # trace-rollup jobs it can be sent; the project sends none, and on a small machine the four idle workers cost
    # cores and memory. A user who wants them sets MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true.
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    return subprocess.call(cmd, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.tracking")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="start the MLflow UI over the project's store")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    return serve(args.host, args.port)


if __name__ == "__main__":
    raise SystemExit(main())
