"""A child process's stage registry holding the given stages instead of the project's (subprocess tests)."""

from __future__ import annotations

import sys
import types

from pipelines.registry import Stage


def install(stages: dict) -> None:
    """Put a ``pipelines.stages`` of ``stages`` alone in ``sys.modules``, before ``pipelines.runner`` is imported:
    the runner looks its stage up there (``stage_for_run``) and checks its inputs (``check_inputs``)."""
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
