"""The registry of loaders by source name: ``@register("locomo")`` on a loader function, ``@register_stream`` on its
streaming reader (see the package docstring); :func:`get_loader` / :func:`get_streamer` look them up."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from pipelines.data.loaders.base import LoadResult
from pipelines.data.schema import Episode
from pipelines.errors import UnknownName, close_matches
from pipelines.plugins import load as load_plugins
from pipelines.plugins import refuse_broken

PLUGIN_GROUP = "mnemos.loaders"   # installed packages' loaders (pipelines.plugins): name -> path -> LoadResult

Loader = Callable[[str | Path], LoadResult]
Streamer = Callable[[str | Path, LoadResult], Iterator[tuple[str, Episode]]]
LOADERS: dict[str, Loader] = {}
STREAMERS: dict[str, Streamer] = {}


def register(name: str) -> Callable[[Loader], Loader]:
    """Decorator: ``@register("locomo")`` makes ``get_loader("locomo")`` return the function."""
    def deco(fn: Loader) -> Loader:
        if name in LOADERS:
            raise ValueError(f"loader '{name}' is registered twice")
        LOADERS[name] = fn
        return fn
    return deco


def register_stream(name: str) -> Callable[[Streamer], Streamer]:
    """Decorator: ``@register_stream("longmemeval")`` makes ``get_streamer("longmemeval")`` return the function."""
    def deco(fn: Streamer) -> Streamer:
        if name in STREAMERS:
            raise ValueError(f"streaming loader '{name}' is registered twice")
        STREAMERS[name] = fn
        return fn
    return deco


def get_streamer(name: str) -> Streamer | None:
    """The streaming reader of source ``name``, None when it has none (ConfigError for an unknown source)."""
    get_loader(name)
    return STREAMERS.get(name)


def get_loader(name: str) -> Loader:
    """The loader registered under ``name``; ConfigError listing the known names otherwise."""
    if name not in LOADERS:
        refuse_broken(PLUGIN_GROUP, name, "source")
        raise UnknownName(f"unknown source '{name}'{close_matches(name, LOADERS)}; known sources: "
                          f"{', '.join(sorted(LOADERS))}")
    return LOADERS[name]


def load_loader_plugins() -> None:
    """Register the loaders of installed packages (entry points ``mnemos.loaders``: a function path -> LoadResult
    whose episodes carry the entry point's name as ``source``), after the built-ins."""
    load_plugins(PLUGIN_GROUP, LOADERS, lambda name, obj: None if callable(obj) else f"{obj!r} is not callable")
