"""A DeepSpeed op build that was killed half-way: its lock file named, instead of every later run waiting forever.

DeepSpeed compiles its C++ ops the first time a run needs them (on a CPU, ``deepspeed_shm_comm`` when a process
group starts; ``cpu_adam`` with optimizer offload) through torch's JIT extension builder. The builder holds the file
``<torch extensions root>/<op>/lock`` while it compiles (opened with O_CREAT | O_EXCL, kept open, removed when
done), and a process that finds the file there waits, without a message and without end, for it to go
(torch.utils.file_baton.FileBaton.wait). A build killed while it held the lock (Ctrl-C, SIGKILL, out of memory
during the first DeepSpeed run) leaves the file behind: from then on every DeepSpeed run of that user hangs at
start-up.

:func:`refuse_stale_build_locks` looks before a DeepSpeed run starts. A lock file that a live process on this
machine holds open (its ``/proc/<pid>/fd``) is a build in progress: waiting for it is right. An unheld one older
than ``stale_after_s`` (no build takes that long; a build on another machine sharing the home folder holds its lock
open there, where /proc cannot see it) is a ConfigError naming the file; a younger unheld one is a warning naming
it, in case its build died a moment ago.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from pipelines.errors import ConfigError

log = logging.getLogger("mnemos")

STALE_AFTER_S = 600.0   # a CPU build of deepspeed_shm_comm takes under a minute on 2 cores; cpu_adam about two


def extensions_root() -> Path:
    """torch's JIT extension root, as ``torch.utils.cpp_extension._get_build_directory`` names it:
    ``$TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions/py<ver>_<cpu|cu<ver>|rocm<ver>>``."""
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    if torch.version.hip is not None:
        accelerator = "rocm" + torch.version.hip.replace(".", "")
    elif torch.version.cuda is not None:
        accelerator = "cu" + torch.version.cuda.replace(".", "")
    else:
        accelerator = "cpu"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return Path(get_default_build_root()) / f"{python}_{accelerator}"


def deepspeed_ops() -> set[str]:
    """The build folders of DeepSpeed's ops for this machine's accelerator (their builders' ``NAME``)."""
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    return {builder.NAME for builder in ALL_OPS.values()}


def held_open(path: Path) -> bool:
    """Whether a process of this machine (one /proc can show us) has ``path`` open."""
    target = os.path.realpath(path)
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                if os.readlink(fd) == target:
                    return True
        except OSError:              # a process that ended, or another user's
            continue
    return False


def refuse_stale_build_locks(ops: set[str] | None = None, root: Path | None = None,
                             stale_after_s: float = STALE_AFTER_S, now: float | None = None) -> None:
    """Raise ConfigError naming the lock file of a killed DeepSpeed op build (module docstring); warn about an
    unheld one too young to call stale. ``ops`` defaults to DeepSpeed's, ``root`` to torch's extension root."""
    root = extensions_root() if root is None else root
    ops = deepspeed_ops() if ops is None else ops
    now = time.time() if now is None else now
    for op in sorted(ops):
        lock = root / op / "lock"
        try:
            age = now - lock.stat().st_mtime
        except FileNotFoundError:
            continue
        if held_open(lock):
            log.info("DeepSpeed's op %s is being built by another process (%s): this run waits for it", op, lock)
        elif age > stale_after_s:
            err = ConfigError(f"DeepSpeed's build of its op '{op}' was killed half-way {age / 60:.0f} minutes ago "
                              f"and left its lock file {lock}: torch waits for that file to go before it builds or "
                              f"loads the op, so this run would wait forever.")
            err.hint = (f"remove it (rm {lock}) if no process on any machine sharing this folder builds '{op}', "
                        "then run again.")
            raise err
        else:
            log.warning("%s (DeepSpeed's op %s) exists and no process here holds it: if its build was killed, "
                        "this run waits forever; remove the file if no other machine builds the op", lock, op)
