"""The stage registry: one record per stage, read by Dagster, dvc.yaml and the CLI.

A stage is a pure function over files: it reads its declared ``inputs`` (paths
relative to the project root), writes its declared ``outputs`` (through ``ctx.path``, which puts them in
a staging folder the runner swaps in on success: pipelines/staging.py), takes its settings
from ``ctx.config`` (the resolved section(s) of params.yaml named in ``params``) and
returns a :class:`StageResult`. Upstream stages are derived from paths: a stage
depends on whichever stage declares one of its inputs as an output.

Stages register themselves with the :func:`stage` decorator in their own package, and so do the config
sections they read (:func:`config_section`: a params.yaml section, the config dataclasses built from it and its
nested sections); ``pipelines.stages`` imports those packages, marks the registry complete and exposes it. The
config resolver (``pipelines.config``, ``pipelines.config_schema``) checks every key and value against the sections
declared here, so it imports nothing of the methods.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

Group = Literal["data", "mdr", "emma", "glong", "evaluate"]


@dataclass
class CheckOutcome:
    """Result of one validation rule, surfaced as a Dagster asset check."""

    name: str                      # rule name, e.g. "evidence_turns_resolve"
    passed: bool
    description: str = ""
    blocking: bool = True          # a failed blocking check stops everything downstream
    count: int = 0                 # number of failing records
    examples: list[str] = field(default_factory=list)  # a few failing records, "file:line: message"
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class StageResult:
    """What a stage returns: metadata for Dagster, metrics for MLflow, check outcomes."""

    metadata: dict[str, Any] = field(default_factory=dict)   # row counts, paths, markdown tables
    metrics: dict[str, float] = field(default_factory=dict)  # scalar results (also logged to MLflow)
    checks: list[CheckOutcome] = field(default_factory=list)


@dataclass(frozen=True)
class CheckSpec:
    name: str
    description: str
    blocking: bool = True


@dataclass(frozen=True)
class Stage:
    name: str
    group: Group
    description: str
    fn: Callable[..., StageResult]
    inputs: tuple[str, ...]       # files or folders read (root-relative; an output_of(stage) until mark_complete)
    outputs: tuple[str, ...]      # files or folders written (root-relative); built in staging, swapped in on success
    params: tuple[str, ...]       # top-level params.yaml sections the stage reads
    checks: tuple[CheckSpec, ...] = ()
    metrics: tuple[str, ...] = ()  # outputs that are DVC metrics files
    plots: tuple = ()               # outputs that are DVC plots: a path, or {path: {x, y, template}}
    launcher: Literal["inprocess", "accelerate"] = "inprocess"  # training stages run in a launched subprocess
    experiment: str = ""          # MLflow experiment (defaults to the group)
    code: tuple[str, ...] = ()    # source folders whose change re-runs the stage under DVC
    # A partitioned stage (the benchmark's shards): one run per key, each writing its own outputs, where
    # ``{partition}`` in an output path stands for the key. Dagster partitions the asset by these keys (static
    # partitions), dvc.yaml runs them as a ``foreach`` stage (``<name>@<key>``), the CLI takes ``--partition``.
    partitions: tuple[str, ...] = ()
    partition: str | None = None  # the key of a stage made by :meth:`for_partition` (None: the declared stage)

    @property
    def mlflow_experiment(self) -> str:
        return self.experiment or f"mnemos-{self.group}"

    @property
    def run_name(self) -> str:
        """The stage's name in dvc.yaml / dvc.lock and its lock file: ``<name>@<key>`` for one partition."""
        return self.name if self.partition is None else f"{self.name}@{self.partition}"

    def for_partition(self, key: str | None) -> "Stage":
        """The stage as one partition runs it: its outputs those of ``key``. A stage without partitions takes
        ``None`` only; a partitioned one a key of its own (ValueError naming the keys otherwise)."""
        if not self.partitions:
            if key is not None:
                raise ValueError(f"stage {self.name!r} has no partitions; run it without --partition")
            return self
        if key is None and len(self.partitions) == 1:
            key = self.partitions[0]
        if key not in self.partitions:
            raise ValueError(f"stage {self.name!r} runs one partition at a time: give --partition with one of "
                             f"{', '.join(self.partitions)}" + ("" if key is None else f" (not {key!r})"))
        return dataclasses.replace(self, partition=key,
                                   outputs=tuple(o.replace("{partition}", key) for o in self.outputs))

    @property
    def all_outputs(self) -> tuple[str, ...]:
        """Every path the stage writes, over all its partitions."""
        if not self.partitions:
            return self.outputs
        return tuple(dict.fromkeys(o.replace("{partition}", k) for k in self.partitions for o in self.outputs))


_REGISTRY: dict[str, Stage] = {}


@dataclass(frozen=True)
class OutputOf:
    """An input declared as another stage's output, by that stage's name (``output_of("mdr_decoder")``): a stage of a
    higher layer (the benchmark) reads the methods' models without knowing where their stages put them. Resolved to
    the path when the registry is complete (:func:`mark_complete`)."""

    stage: str
    index: int = 0    # which of the stage's declared outputs

    def resolve(self, reader: str) -> str:
        if self.stage not in _REGISTRY:
            raise ValueError(f"stage {reader!r} reads an output of stage {self.stage!r}, which is not registered")
        outputs = _REGISTRY[self.stage].outputs
        if not 0 <= self.index < len(outputs):
            raise ValueError(f"stage {reader!r} reads output {self.index} of stage {self.stage!r}, which declares "
                             f"{len(outputs)}")
        return outputs[self.index]


def output_of(stage: str, index: int = 0) -> OutputOf:
    """Declare, among a stage's inputs, output ``index`` of ``stage``."""
    return OutputOf(stage, index)


def output(stage: str, index: int = 0) -> str:
    """The path (root-relative) of output ``index`` of the registered ``stage`` (at run time)."""
    return OutputOf(stage, index).resolve("a run")


def stage(*, name: str, group: Group, inputs=(), outputs=(), params=(), checks=(), metrics=(),
          plots=(), launcher="inprocess", experiment="", code=(), partitions=()):
    """Register ``fn(ctx) -> StageResult`` as a stage. The docstring is its description."""

    def wrap(fn):
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"stage {name!r} registered twice")
        _REGISTRY[name] = make_stage(fn, name=name, group=group, inputs=inputs, outputs=outputs, params=params,
                                     checks=checks, metrics=metrics, plots=plots, launcher=launcher,
                                     experiment=experiment, code=code, partitions=partitions)
        return fn

    return wrap


def make_stage(fn, *, name: str, group: Group, inputs=(), outputs=(), params=(), checks=(), metrics=(),
               plots=(), launcher="inprocess", experiment="", code=(), partitions=()) -> Stage:
    """The :class:`Stage` record of ``fn`` (what :func:`stage` registers), without registering it."""
    return Stage(
        name=name, group=group, description=(fn.__doc__ or "").strip(), fn=fn, inputs=tuple(inputs),
        outputs=tuple(outputs), params=tuple(params),
        checks=tuple(c if isinstance(c, CheckSpec) else CheckSpec(*c) for c in checks),
        metrics=tuple(metrics), plots=tuple(plots), launcher=launcher, experiment=experiment,
        code=tuple(code) or (str(Path(fn.__code__.co_filename).parent.relative_to(_ROOT)),),
        partitions=tuple(str(k) for k in partitions),
    )


_ROOT = Path(__file__).resolve().parent.parent  # the code's checkout (for DVC code deps)


def registered() -> dict[str, Stage]:
    return dict(_REGISTRY)


# --- config sections ---------------------------------------------------------------------------------------------

Base = Callable[[dict, Path], dict]  # (resolved config, project root) -> values the stage puts under a section's own


@dataclass(frozen=True)
class Section:
    """The declared keys of one mapping of the config.

    ``configs`` are the dataclasses built from it (their fields, less ``internal``, are its typed keys), ``leaves``
    further typed keys, ``sections`` the keys holding a nested mapping; ``base`` gives the values a stage adds
    under the section's own before it builds the dataclasses (e.g. the top-level seed). A ``nullable`` section
    may also be null (e.g. ``llm.judge: null``: the reader's model judges).
    """

    configs: tuple[type, ...] = ()
    leaves: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, "Section"] = field(default_factory=dict)
    internal: tuple[str, ...] = ()
    base: Base | None = None
    nullable: bool = False
    _hints: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def hints(self) -> dict[str, Any]:
        """Typed keys -> their type hints."""
        if not self._hints:
            for cls in self.configs:
                try:
                    hints = typing.get_type_hints(cls)
                except NameError:  # an annotation naming a type-checking-only import: the key is known, untyped
                    hints = {}
                self._hints.update({f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)
                                    if f.name not in self.internal})
            self._hints.update(self.leaves)
        return self._hints

    def known(self) -> list[str]:
        return sorted({*self.hints(), *self.sections})


_SECTIONS: dict[str, Section] = {}
_COMPLETE = False


def config_section(name: str, section: Section) -> Section:
    """Declare the top-level params.yaml section ``name`` (the package whose stages read it declares it once)."""
    if name in _SECTIONS and _SECTIONS[name].configs != section.configs:
        raise ValueError(f"config section {name!r} declared twice")
    _SECTIONS[name] = section
    return section


def mark_complete() -> None:
    """Called by ``pipelines.stages`` once every stage package is imported: the declarations are whole, and the
    inputs declared as another stage's output (:func:`output_of`) become its path."""
    global _COMPLETE
    for name, stage_ in list(_REGISTRY.items()):
        if any(isinstance(i, OutputOf) for i in stage_.inputs):
            _REGISTRY[name] = dataclasses.replace(stage_, inputs=tuple(
                i.resolve(name) if isinstance(i, OutputOf) else i for i in stage_.inputs))
    _COMPLETE = True


def config_sections() -> dict[str, Section]:
    """The declared top-level sections; a RuntimeError before ``pipelines.stages`` has filled the registry (a
    resolver checking against half the declarations would call the other half's keys unknown)."""
    if not _COMPLETE:
        raise RuntimeError("the config sections are declared by the stage packages: import pipelines.stages (the "
                           "CLI, the runner and the Dagster definitions do) before resolving a config")
    return dict(_SECTIONS)
