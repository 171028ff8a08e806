"""The declared keys of the resolved configuration, and the check of a whole config before a run.

Every key a stage reads is declared once, in the registry, by the package whose stages read it
(pipelines.registry.config_section; this module imports nothing of the methods):
- a section the code builds into a config dataclass has that dataclass's fields as its keys, typed by their
  annotations: ``synthetic`` -> SyntheticConfig, ``mdr`` -> MDRConfig, ``mdr.teacher`` -> TrainConfig,
  ``emma.dialogue`` -> EMMADialogueConfig, ``glong.extractor`` -> ExtractorTrainConfig, ``llm.reader`` and
  ``llm.judge`` -> LLMConfig (``llm.judge`` may be null: the reader's model judges), ...;
- a section keyed by the names of a registry accepts those names only: ``sources.<loader>``
  (pipelines.data.loaders.LOADERS) and ``benchmark.strategy_settings.<strategy>`` (pipelines.memory.STRATEGIES,
  whose keys are the fields of that strategy's config class);
- the few keys a stage reads without a dataclass of its own (``mdr.tokenizer``, ``emma.eval_examples``,
  ``ingest.max_dropped_turn_share``, ...) are declared by small settings dataclasses beside their readers
  (``IngestSettings`` in pipelines/data/ingest.py, ``MDRStageSettings`` in pipelines/mdr/config.py, ...), a comment
  on every field.

:func:`check_keys` refuses an unknown key of one layer (params.yaml, ``--set``, the Dagster run config) with a
:class:`ConfigError` naming the full dotted key, where it came from and the closest known key;
:func:`check_values` checks every value of the resolved config against its field's type, then builds every
config dataclass from its section as the stage will (so its own range and cross-field checks run).
``pipelines.config.resolve`` runs both (check_keys on each layer), so every view of a stage (CLI, Dagster
asset, dvc repro, a launched training process) refuses a bad config before any output is removed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipelines.errors import ConfigError
from pipelines.registry import Section, config_sections


def positive_int(key: str, value: Any, nullable: bool = False) -> None:
    """A ConfigError unless ``value`` is a positive integer, or None when ``nullable`` (a cap that may be unset;
    ``key`` names it)."""
    if nullable and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a positive integer{' or null' if nullable else ''}, got {value!r}.")


def dataset_names(key: str, value: Any) -> None:
    """As pipelines.data.stage.training_sources reads ``<method>.sources`` (empty or null: synthetic)."""
    names = [value] if isinstance(value, str) else value
    if value and not all(isinstance(s, str) and s.strip() for s in names):
        raise ConfigError(f"{key} must be a list of dataset names (synthetic or a configured source), got {value!r}.")


# --- the top-level keys ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Globals:
    """Top-level keys: what every stage's MLflow run logs beside its sections (pipelines.config.stage_config)."""

    profile: str = "tiny"    # the defaults of pipelines/config.py PROFILES: tiny (CPU, minutes) or paper
    seed: int = 2022         # seed of every stage (data, initialisation, data order)
    device: str = "cpu"      # torch device of the profile: "cpu", or "auto" (CUDA when there is one)


# --- the declaration: sections of typed keys ---------------------------------------------------------------------

def seed_base(config: dict, root: Path) -> dict:
    """The base of a section whose dataclass takes the top-level ``seed`` (e.g. ``synthetic``)."""
    return {"seed": config.get("seed", 2022)}


_ROOT: Section | None = None


def declared() -> Section:
    """The declaration of the whole resolved config: :class:`Globals` at the top, every section declared in the
    registry by the stage packages (pipelines.registry.config_section) under it."""
    global _ROOT
    if _ROOT is None:
        _ROOT = Section((Globals,), sections=config_sections())
    return _ROOT


def build_config(cls, section: dict | None):
    """The config dataclass ``cls`` built from a params section; a key it does not have is a ConfigError naming it
    (resolve has refused undeclared keys already; this guards a section read outside a resolved config)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(section or {}) - names)
    if unknown:
        raise ConfigError(f"{cls.__name__} has no setting {unknown}; known: {sorted(names)}")
    return cls(**(section or {}))


# --- unknown keys ------------------------------------------------------------------------------------------------

UNKNOWN = object()  # the declaration of a key that is not declared


def _walk(values: dict, section: Section, prefix: str = ""):
    """(dotted key, value, declaration) of every key of ``values``, nested sections included; the declaration is
    a type hint (a typed key), a Section (a nested mapping) or UNKNOWN."""
    hints = section.hints()
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if key in section.sections:
            yield dotted, value, section.sections[key]
            if isinstance(value, dict):
                yield from _walk(value, section.sections[key], dotted + ".")
        else:
            yield dotted, value, hints.get(key, UNKNOWN)


def _all_keys(section: Section, prefix: str = "") -> list[str]:
    out = [f"{prefix}{k}" for k in section.hints()]
    for key, sub in section.sections.items():
        out.append(f"{prefix}{key}")
        out.extend(_all_keys(sub, f"{prefix}{key}."))
    return out


def _suggest(dotted: str, section: Section) -> str:
    """The closest known key of the same level, else known keys elsewhere ending in a close name."""
    parent, _, name = dotted.rpartition(".")
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(str(name), section.known(), n=1)
    if close:
        return f"did you mean {prefix}{close[0]}?"
    elsewhere = [k for k in _all_keys(declared()) if difflib.get_close_matches(str(name), [k.rpartition(".")[2]],
                                                                               cutoff=0.8)]
    if elsewhere:
        return f"did you mean {' or '.join(elsewhere[:3])}?"
    return f"known keys {'of ' + parent if parent else 'at the top level'}: {', '.join(section.known())}."


def _parent(dotted: str) -> Section:
    """The declaration of the mapping that holds ``dotted`` (its parents are known)."""
    section = declared()
    for part in dotted.split(".")[:-1]:
        section = section.sections[part]
    return section


def check_keys(values: dict | None, origin: str) -> None:
    """ConfigError listing every key of ``values`` (one layer: params.yaml, --set, ...) that is not declared.

    Each line names the full dotted key, ``origin`` and the closest known key; a declared section given
    something other than a mapping is refused too.
    """
    problems = []
    for dotted, value, declaration in _walk(values or {}, declared()):
        if declaration is UNKNOWN:
            problems.append(dotted)
        elif isinstance(declaration, Section) and not isinstance(value, dict):
            if value is None and declaration.nullable:
                continue
            raise ConfigError(f"{origin}: {dotted} is a section, a mapping of keys (write {{}} for none"
                              + (", or null" if declaration.nullable else "") + f"), got {value!r}.")
    if problems:
        lines = [f"{origin}: unknown key {d}; {_suggest(d, _parent(d))}" for d in problems]
        raise ConfigError("\n".join(lines))


# --- values ------------------------------------------------------------------------------------------------------

def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` (as YAML gives it) fits type ``hint``; a list stands for a tuple, an int for a float."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (tuple, list) or hint in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis or origin is list:
            return all(_matches(v, args[0]) for v in value) if args else True
        return not args or (len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args)))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # a type this check does not know: the dataclass checks it


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in (tuple, list):
        if len(args) == 2 and args[1] is Ellipsis or origin is list:
            return f"a list of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a list"
        return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null",
             dict: "a mapping"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _type_error(dotted: str, value: Any, hint: Any, origin: str) -> ConfigError:
    hint_text = ""
    if isinstance(value, str) and _matches(1.0, hint):
        try:
            float(value)
            hint_text = (f" (YAML reads a number like {value} as a string: write it with a dot and a signed "
                         "exponent, e.g. 1.0e-4)")
        except ValueError:
            pass
    return ConfigError(f"{origin}: {dotted} must be {_describe(hint)}, got {value!r}{hint_text}.")


def _sets(layer: dict, dotted: str) -> bool:
    """Whether ``layer`` holds the (possibly nested) key ``dotted``."""
    node: Any = layer
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def origin_of(dotted: str, layers: list[tuple[str, dict]], default: str = "config") -> str:
    """The label of the highest-priority layer that sets ``dotted`` (``default`` when none does)."""
    return next((label for label, layer in layers if _sets(layer, dotted)), default)


def _build(section: Section, values: dict, config: dict, root: Path, dotted: str,
           layers: list[tuple[str, dict]]) -> None:
    """Build every dataclass of ``section`` from ``values`` over its base, as the stage will; a refusal names
    the section and the layers that set something in it."""
    if not section.configs:
        return
    try:
        base = section.base(config, root) if section.base else {}
        for cls in section.configs:
            names = {f.name for f in dataclasses.fields(cls)}
            cls(**{k: v for k, v in {**base, **values}.items() if k in names})
    except (ConfigError, TypeError, ValueError, AttributeError) as exc:  # the last three: a check not phrased
        named = [k for k in values if re.search(rf"\.{re.escape(str(k))}\b", str(exc))]  # keys the message names
        where = dict.fromkeys(origin_of(f"{dotted}.{k}", layers) for k in named) if dotted else {}
        origin = f" (set in {', '.join(where)})" if where else ""
        raise ConfigError(f"{dotted or 'config'}{origin}: {exc}") from exc


def check_values(config: dict, root: Path, layers: list[tuple[str, dict]] | None = None) -> None:
    """Check every value of the resolved ``config``: its type first, then the dataclasses built from it.

    ``layers`` (label, values), highest priority first, name where a badly typed value came from.
    """
    layers = layers or []
    for dotted, value, declaration in _walk(config, declared()):
        if declaration is UNKNOWN or isinstance(declaration, Section):
            continue
        if not _matches(value, declaration):
            raise _type_error(dotted, value, declaration, origin_of(dotted, layers))
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{origin_of(dotted, layers)}: {dotted} must be a finite number, got {value!r}.")

    def build(section: Section, values: dict, dotted: str) -> None:
        _build(section, values, config, root, dotted, layers)
        for key, sub in section.sections.items():
            if isinstance(values.get(key), dict):  # check_keys refused any other value of a section
                build(sub, values[key], f"{dotted}.{key}" if dotted else key)

    build(declared(), config, "")
