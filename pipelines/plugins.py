"""Plugins: memory strategies, dataset loaders and benchmark suites from installed packages (issue #32).

A package adds to the project through Python entry points (the packaging standard's plugin mechanism, read with
:func:`importlib.metadata.entry_points`), one group per kind; in its ``pyproject.toml``::

    [project.entry-points."mnemos.strategies"]
    my_memory = "my_package.memory:MyMemory"        # a MemoryStrategy subclass (pipelines.memory.base)
    [project.entry-points."mnemos.loaders"]
    my_dataset = "my_package.loader:load"           # a function: path -> LoadResult (pipelines.data.loaders)
    [project.entry-points."mnemos.suites"]
    my_suite = "my_package:SUITE_FILE"              # a path (str or Path) to a suite YAML file

The entry point's name is the name the thing is used by, exactly like a built-in one: ``--strategies my_memory``,
``strategies: [my_memory]`` in a suite file, ``benchmark.strategy_settings.my_memory`` in params.yaml or the Dagster
launchpad, ``sources.my_dataset`` / ``ingest --source my_dataset``, ``--suite my_suite``. Each registry loads its
group once, after its built-ins (``pipelines.memory``, ``pipelines.data.loaders``, ``pipelines.evaluate.suite``).

A plugin that cannot be used (its module fails to import, its name is a built-in's, what it names does not implement
the interface) is left out and recorded with the reason (:func:`broken`): the built-ins and the other plugins stay
usable, a warning names the package once, ``python -m pipelines strategies`` / ``suites`` / ``sources`` list it as
broken, and asking for it by name is one :class:`PluginError` naming the package, the entry point and the reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, MutableMapping

from pipelines.errors import ConfigError

log = logging.getLogger("mnemos")

GROUPS = {"strategies": "mnemos.strategies", "loaders": "mnemos.loaders", "suites": "mnemos.suites"}
BUILT_IN = "built-in"


class PluginError(ConfigError):
    """An installed plugin that cannot be used: names the package, the entry point and why."""

    hint = ("fix the package named above (or uninstall it: `pip uninstall PACKAGE`); the built-in names and the "
            "other plugins keep working.")


@dataclass(frozen=True)
class Plugin:
    """One entry point of a plugin group: what it names, the package that declares it, why it is broken (or None)."""

    group: str             # e.g. "mnemos.strategies"
    name: str              # the name it is used by
    value: str             # "module:attr"
    package: str           # "name version" of the distribution that declares it
    error: str | None = None

    def describe(self) -> str:
        return f"package {self.package} (entry point {self.group}: {self.name} = {self.value})"


_ORIGINS: dict[str, dict[str, Plugin]] = {}   # group -> name -> loaded plugin
_BROKEN: dict[str, dict[str, Plugin]] = {}    # group -> name -> broken plugin
_LOADED: dict[str, list[Plugin]] = {}         # group -> its plugins, loaded and broken (each group loads once)
_LOADING: list[str] = []                       # the group being loaded (loads do not nest)
_DEFERRED: list[tuple] = []                     # loads asked for meanwhile


def _package(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.metadata['Name']} {dist.version}" if dist is not None else "an unknown package"


def load(group: str, registry: MutableMapping[str, Any], check: Callable[[str, Any], str | None],
         register: Callable[[str, Any], None] | None = None) -> list[Plugin]:
    """Load every entry point of ``group`` into ``registry`` (name -> object), after its built-ins.

    ``check(name, obj)`` says why ``obj`` cannot be used (None when it can); ``register(name, obj)`` adds it
    (default: ``registry[name] = obj``). A name already in ``registry`` is a built-in's (or an earlier
    plugin's): the plugin is refused, the registry keeps what it had. Returns the plugins of the group, loaded
    and broken. A group is loaded once a process (its entry points read once); later calls return that result.
    """
    if group in _LOADED:
        return _LOADED[group]
    if _LOADING:   # a plugin's module, imported by another group's load, imports a registry that loads its group:
        if all(deferred[0] != group for deferred in _DEFERRED):   # done once the module is whole (no half import)
            _DEFERRED.append((group, registry, check, register))
        return []
    _LOADING.append(group)
    try:
        _LOADED[group] = _load(group, registry, check, register)
    finally:
        _LOADING.pop()
    while _DEFERRED and not _LOADING:
        load(*_DEFERRED.pop(0))
    return _LOADED[group]


def _load(group, registry, check, register) -> list[Plugin]:
    origins, broken = _ORIGINS.setdefault(group, {}), _BROKEN.setdefault(group, {})
    taken = set(registry)   # the built-ins
    found = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        plugin = Plugin(group, ep.name, ep.value, _package(ep))
        error = None
        if ep.name in taken or ep.name in origins:
            owner = origins.get(ep.name)
            error = (f"the name {ep.name!r} is already taken by "
                     f"{owner.describe() if owner else 'a built-in'}; rename the entry point")
        else:
            before = set(registry)
            try:
                obj = ep.load()   # its module may register names itself (a decorator): those must be its own
            except Exception as exc:  # noqa: BLE001 - any failure of a third party's import is that package's
                error = f"it failed to load: {type(exc).__name__}: {exc}"
                for key in set(registry) - before:   # whatever the failed import registered goes with it
                    del registry[key]
            else:
                error = check(ep.name, obj)
                if error is None and registry.get(ep.name, obj) is not obj:
                    error = f"its module registered another object as {ep.name!r}"
                if error is None:
                    (register or registry.__setitem__)(ep.name, obj)
                    origins[ep.name] = plugin
                elif registry.get(ep.name) is obj:
                    del registry[ep.name]
        if error is not None:
            plugin = Plugin(group, ep.name, ep.value, plugin.package, error)
            broken[ep.name] = plugin
            log.warning("mnemos: %s is left out: %s", plugin.describe(), error)
        found.append(plugin)
    return found


def origin(group: str, name: str) -> str:
    """Where ``name`` of ``group`` comes from: ``built-in``, or the plugin's ``package version``."""
    plugin = _ORIGINS.get(group, {}).get(name)
    return plugin.package if plugin else BUILT_IN


def broken(group: str) -> dict[str, Plugin]:
    """The plugins of ``group`` left out, by name."""
    return dict(_BROKEN.get(group, {}))


def refuse_broken(group: str, name: str, kind: str) -> None:
    """A :class:`PluginError` when ``name`` is a broken plugin of ``group`` (``kind``: "memory strategy", ...)."""
    plugin = _BROKEN.get(group, {}).get(name)
    if plugin is not None:
        raise PluginError(f"{kind} {name!r} comes from {plugin.describe()}, which cannot be used: {plugin.error}.")
