"""A stage's outputs built in a staging folder and swapped in whole: a failed run never loses the last good ones.

Each run of a stage (its rank 0 when launched) builds its declared outputs under
``.mnemos/staging/<run_name>/new/<output>`` (git- and dvc-ignored, under the project root so that the swap
is a rename on one file system). The stage does not know: :meth:`pipelines.runner.StageContext.path`
resolves ``rel`` there (:meth:`Staging.path`) when ``rel`` is a declared output, lies inside one, or is a
folder holding one (the benchmark writes its report files into ``ctx.path("reports")``); every other path
(inputs, caches, training checkpoints under ``models/.runs``) resolves to the project root as before.

- Start (:meth:`Staging.begin`, under the stage's lock): what an earlier run left is repaired first
  (:meth:`Staging.recover`), then an empty staging folder is laid out.
- Success, blocking checks passed (:meth:`Staging.commit`): ``SWAP`` is written (the outputs the run made),
  then each output in turn: the previous one is renamed to ``old/<output>``, the staged one renamed into
  place; a declared output the run did not make is moved aside too (the outputs are those of the run that
  succeeded last; under ``dvc repro``, which records every declared output, such a run fails before the swap
  instead: :mod:`pipelines.runner`); then the staging folder, ``old/`` included, is deleted.
- Failure, a failed blocking check, Ctrl-C (:meth:`Staging.discard`): the staging folder is deleted; the
  previous outputs were never touched.
- SIGKILL: the staging folder stays until the next run of the same stage, whose :meth:`Staging.recover`
  completes the swap when ``SWAP`` is there (killed while swapping: the run had succeeded) and otherwise
  deletes it (killed while the stage ran). A killed training stage resumes from the checkpoints of its run
  folder (``models/.runs/<stage>-<hash>``, :mod:`pipelines.training.stage`), which is not an output: the
  staging folder holds only the copy of the finished model.

Under ``dvc repro`` as under the CLI and Dagster: dvc.yaml declares every output ``persist: true``
(:func:`pipelines.stages.dvc_yaml`), so DVC does not delete the outputs before the stage's command and the
swap is what replaces them; DVC writes the stage's dvc.lock entry only when the command succeeded.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from pipelines.atomic import write_text

log = logging.getLogger("mnemos")

STAGING_DIR = ".mnemos/staging"   # <run_name>/{new,old,SWAP} under the project root
SWAP_FILE = "SWAP"                # written once a run succeeded: the swap it starts is completed by the next run


def _norm(relative: str | os.PathLike) -> str | None:
    """``relative`` as a plain root-relative POSIX path ("" for the root), None when it leaves the root."""
    path = PurePosixPath(os.fspath(relative))
    if path.is_absolute():
        return None
    parts = [p for p in path.parts if p not in ("", ".")]
    return None if ".." in parts else "/".join(parts)


def published_path(path: str | os.PathLike) -> Path:
    """``path`` where a stage's swap puts it: a path inside a run's staging folder
    (``<root>/.mnemos/staging/<run_name>/new/<rel>``) as ``<root>/<rel>``, any other path as it is. It names a
    model folder alike in the run that trains it (which reads its staged copy) and the later runs that read it
    (e.g. the owner of an encoder export: :func:`pipelines.models.embeddings.prune_superseded`)."""
    parts, marker = Path(path).parts, PurePosixPath(STAGING_DIR).parts
    for i in range(len(parts) - len(marker) - 1):
        if parts[i:i + len(marker)] == marker and parts[i + len(marker) + 1] == "new":
            return Path(*parts[:i], *parts[i + len(marker) + 2:])
    return Path(path)


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def remove(path: Path) -> None:
    """Delete a file, link or folder (nothing when absent)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif _exists(path):
        path.unlink(missing_ok=True)


def _move(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` (which must not exist); a copy where they lie on different file systems."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(str(src), str(dst))  # not atomic: a kill midway is repaired by the next run's recover()


class Staging:
    """The staging folder of one run of ``stage`` in ``root`` (see the module docstring)."""

    def __init__(self, root: Path, stage) -> None:
        self.root = Path(root)
        self.outputs = tuple(dict.fromkeys(o for o in (_norm(out) for out in stage.outputs) if o))
        self.folder = self.root / STAGING_DIR / stage.run_name
        self.new, self.old = self.folder / "new", self.folder / "old"

    def path(self, relative: str | os.PathLike) -> Path | None:
        """Where the stage writes ``relative``: its staged place when it is, is inside, or holds a declared
        output; None when it is none of these (the caller uses ``root / relative``)."""
        rel = _norm(relative)
        if not rel:
            return None
        for out in self.outputs:
            if rel == out or rel.startswith(out + "/") or out.startswith(rel + "/"):
                return self.new / rel
        return None

    def begin(self) -> None:
        """Repair what an earlier run left (:meth:`recover`), then lay out an empty staging folder whose
        folders above each output exist, as they do in the project."""
        self.recover()
        for out in self.outputs:
            (self.new / out).parent.mkdir(parents=True, exist_ok=True)

    def discard(self) -> None:
        """Delete the staging folder: the run failed, the previous outputs stand as they were."""
        remove(self.folder)

    def unmade(self) -> list[str]:
        """The declared outputs this run did not make (the swap moves their previous versions aside)."""
        return [out for out in self.outputs if not _exists(self.new / out)]

    def commit(self) -> None:
        """Put the staged outputs in place of the previous ones (module docstring); a kill midway leaves
        ``SWAP``, and the next run of the stage completes the swap."""
        made = [out for out in self.outputs if _exists(self.new / out)]
        write_text(self.folder / SWAP_FILE, json.dumps({"outputs": list(self.outputs), "made": made}) + "\n")
        self._swap(self.outputs, made)

    def recover(self) -> str | None:
        """Repair what a killed run of the stage left: "completed" (it was swapping: the swap is finished),
        "discarded" (it was running: its staging folder is deleted) or None (nothing was left)."""
        swap = self.folder / SWAP_FILE
        if swap.is_file():
            record = json.loads(swap.read_text(encoding="utf-8"))
            log.warning("%s: completing the swap of outputs a killed run of this stage had begun", self.folder)
            self._swap(tuple(record["outputs"]), list(record["made"]))
            return "completed"
        if _exists(self.folder):
            log.info("%s: deleting the staging folder of an unfinished run", self.folder)
            remove(self.folder)
            return "discarded"
        return None

    def _swap(self, outputs, made) -> None:
        """Idempotent: each step checks what is already done, so a rerun after a kill finishes the job."""
        for out in outputs:
            target, staged = self.root / out, self.new / out
            if out in made and not _exists(staged):
                continue  # swapped in already (the rename of a staged output is the last step for it)
            if _exists(target):
                remove(self.old / out)
                _move(target, self.old / out)
            if out in made:
                _move(staged, target)
        remove(self.folder)  # old versions, SWAP, whatever else the stage wrote there

    def published(self, value: Any) -> Any:
        """``value`` (a result's metadata) with paths into the staging folder changed to their place in the
        project, where :meth:`commit` put them."""
        staged, final = str(self.new), str(self.root)
        if isinstance(value, str):
            return final + value[len(staged):] if value == staged or value.startswith(staged + os.sep) else value
        if isinstance(value, Path):
            return Path(self.published(str(value)))
        if isinstance(value, dict):
            return {k: self.published(v) for k, v in value.items()}
        if type(value) in (list, tuple):
            return type(value)(self.published(v) for v in value)
        return value
