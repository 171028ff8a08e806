"""Record a stage that finished outside ``dvc repro`` in dvc.lock, as ``dvc repro`` would have.

Dagster (``make run``) and ``python -m pipelines run STAGE`` run the very stages dvc.yaml declares,
over the same files. Without a record of what they produced, dvc.lock would not know those outputs:
``dvc status`` would list every stage as changed and ``dvc repro`` would rerun the whole chain. After
a stage succeeds in one of those views, :func:`record_stage` does what ``dvc commit --force STAGE``
does (the dvc Python API): it hashes the stage's deps, params and outs, writes its entry in dvc.lock,
and stores its cached outs in ``.dvc/cache`` (so ``dvc checkout`` can restore them, as after a repro).

Skipped, quietly or with a log line saying why:
- under ``dvc repro`` itself (DVC sets ``DVC_STAGE`` for a stage's command): DVC writes the lock
  and holds the repository lock while the command runs, so committing from inside would deadlock;
- when the project root is no DVC repository (no ``.dvc/`` or no ``dvc.yaml``: a temp project);
- on ranks other than 0 of a distributed launch;
- when the run's config is not the one params.yaml gives (run-time overrides, ``MNEMOS_PROFILE``):
  dvc.lock would claim params.yaml's values produced outputs they did not.

A failure to record never fails the stage (its outputs are complete); it is logged as a warning
naming dvc.lock, the stage and the cause, and DVC then simply sees the stage as changed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from pipelines import config as cfg
from pipelines.registry import Stage
from pipelines.ranks import is_rank_zero

log = logging.getLogger("mnemos")
OVERRIDDEN = "this run's config differs from params.yaml (run-time overrides or MNEMOS_PROFILE)"


def params_config(stage: Stage, params_file: Path) -> dict:
    """The config DVC's view of ``stage`` stands for: params.yaml alone (its own profile, no overrides)."""
    profile = cfg.load_params(params_file).get("profile", "tiny")
    return cfg.stage_config(cfg.resolve({"profile": profile}, params_file=params_file), stage.params)


def skip_reason(stage: Stage, root: Path, stage_cfg: dict, params_file: Path) -> str | None:
    """Why ``stage`` finished in ``root`` with ``stage_cfg`` must not be recorded in dvc.lock (None: record it)."""
    if os.environ.get("DVC_STAGE"):
        return "running under dvc repro, which writes dvc.lock itself"
    if not (root / ".dvc").is_dir() or not (root / "dvc.yaml").is_file():
        return f"{root} is not a DVC project"
    if not is_rank_zero():
        return "not rank 0"
    if stage_cfg != params_config(stage, params_file):
        return OVERRIDDEN
    return None


def record_stage(stage: Stage, root: Path, stage_cfg: dict, params_file: Path | None = None) -> bool:
    """Write ``stage``'s entry in ``root``/dvc.lock after a successful run; True when written."""
    root = Path(root)
    params_file = Path(params_file or root / "params.yaml")
    why = skip_reason(stage, root, stage_cfg, params_file)
    if why is not None:  # said when it is the user's choice (overrides); quiet when it is how things run
        log.log(logging.INFO if why == OVERRIDDEN else logging.DEBUG,
                "stage %s: not recorded in %s: %s", stage.run_name, root / "dvc.lock", why)
        return False
    started = time.time()
    try:
        from dvc.repo import Repo

        # DVC resolves dvc.yaml's paths from the working directory (its CLI chdirs for `--cd` too).
        with contextlib.chdir(root), Repo(str(root)) as repo:
            # relink=False: the outputs stay the files the stage wrote (no re-checkout from the cache).
            repo.commit(target=stage.run_name, force=True, relink=False)
    except Exception as exc:  # noqa: BLE001 - the stage succeeded; only DVC's record of it is missing
        log.warning("stage %s: not recorded in %s (%s: %s); `dvc status` lists it as changed until "
                    "`dvc commit --force %s` or `dvc repro`", stage.run_name, root / "dvc.lock",
                    type(exc).__name__, exc, stage.run_name)
        return False
    log.info("stage %s: recorded in %s (%.1f s)", stage.run_name, root / "dvc.lock", time.time() - started)
    return True
