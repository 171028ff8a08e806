"""A child process's stage registry holding the given stages instead of the project's (subprocess tests)."""

from __future__ import annotations

import importlib
import sys
import types

from pipelines.registry import Stage, mark_complete


def install(stages: dict) -> None:
    """Put a ``pipelines.stages`` of ``stages`` alone in ``sys.modules``, before ``pipelines.runner`` is imported:
    the runner looks its stage up there (``stage_for_run``) and checks its inputs (``check_inputs``)."""
    # The config sections stay the project's: the stage packages declare them (and their stages, which this registry
    # leaves out), as the real pipelines.stages has them do before it marks the declarations complete.
    for package in ("data", "mdr", "emma", "glong", "rerank", "evaluate"):
        importlib.import_module(f"pipelines.{package}.stage")
    mark_complete()
    registry = types.ModuleType("pipelines.stages")
    registry.STAGES = dict(stages)
    registry.stage_for_run = lambda name, config: registry.STAGES[name]
    registry.check_inputs = lambda stage, root: None
    sys.modules["pipelines.stages"] = registry


def demo_stage(fn, output: str, **kw) -> Stage:
    """A stage named ``demo`` running ``fn``, writing ``output``, reading the ``benchmark`` section."""
    base = dict(name="demo", group="data", description="demo stage", fn=fn, inputs=(), outputs=(output,),
                params=("benchmark",))
    base.update(kw)
    return Stage(**base)
