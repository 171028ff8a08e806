"""The one memory interface every strategy implements, and the registry of strategies.

ARCHITECTURE.md "Memory strategies": the temporal evaluator (RealMem, seed 002) drives any
strategy with the same five calls:

- ``observe(episode, session)``: add a finished session to memory;
- ``retrieve(query, k)``: at most ``k`` items, best first, each carrying its score, its text and
  its source ids (turn, session, memory) so that it can be scored at every granularity;
- ``context(query, budget_tokens)``: the text a generator reads, at most ``budget_tokens`` tokens
  as counted by the strategy's :class:`~pipelines.memory.tokens.TokenCounter`;
- ``forget(selector)``: remove everything a :class:`Selector` names (turn, session, memory,
  speaker ids) from every index the strategy keeps; returns how many items went;
- ``reset()``: forget everything;
- ``prepare(episodes)`` (optional): batch pure precomputation (embeddings) before a run; it
  never adds anything to memory.

Strategies register by name with ``@register_strategy("bm25")`` and are built with
``build_strategy("bm25", **settings)``; ``STRATEGIES`` maps names to classes.

Context packing (:func:`pack_context`), shared by all strategies: items are taken in priority
order (rank for retrievers, recency for the long context) while their rendered lines fit in the
budget; the first item that does not fit ends the packing (the context is a prefix of the
priority order, never a patchwork), and the kept items are written in chronological order, one
line each: ``[YYYY-MM-DD] speaker: text`` (date and speaker only when known).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Sequence

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import ConfigError, ModelNotTrained
from pipelines.memory.tokens import DEFAULT_COUNTER, TokenCounter

GRANULARITIES = ("turn", "session", "memory")


@dataclass(frozen=True)
class Retrieved:
    """One retrieved item with the ids it came from (None where the item has no such source)."""

    score: float                     # the strategy's score; higher is better
    text: str                        # the item's text (a turn, a summary, a memory)
    session_id: str | None = None    # session the item came from
    turn_id: str | None = None       # turn the item is (turn-granularity strategies)
    memory_id: str | None = None     # memory the item is (memory-granularity strategies)
    speaker: str | None = None       # who said / wrote it
    timestamp: datetime | None = None  # the session's time, when known
    order: int = 0                   # position in the observed history (chronological order)


@dataclass(frozen=True)
class Selector:
    """What :meth:`MemoryStrategy.forget` removes: any item matching any of the ids."""

    turn_ids: frozenset[str] = frozenset()     # turns to forget
    session_ids: frozenset[str] = frozenset()  # whole sessions to forget
    memory_ids: frozenset[str] = frozenset()   # memories to forget
    speakers: frozenset[str] = frozenset()     # everything said by (or about) these speakers

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, frozenset(getattr(self, f.name)))
        if not (self.turn_ids or self.session_ids or self.memory_ids or self.speakers):
            raise ValueError("A Selector must name at least one turn, session, memory or speaker id; "
                             "an empty selector would forget nothing.")

    @classmethod
    def of(cls, turns: Iterable[str] = (), sessions: Iterable[str] = (), memories: Iterable[str] = (),
           speakers: Iterable[str] = ()) -> "Selector":
        return cls(frozenset(turns), frozenset(sessions), frozenset(memories), frozenset(speakers))

    def matches(self, *, turn_id: str | None = None, session_id: str | None = None,
                memory_id: str | None = None, speakers: Iterable[str | None] = ()) -> bool:
        return ((turn_id is not None and turn_id in self.turn_ids)
                or (session_id is not None and session_id in self.session_ids)
                or (memory_id is not None and memory_id in self.memory_ids)
                or any(s is not None and s in self.speakers for s in speakers))


@dataclass(frozen=True)
class StrategyConfig:
    """Settings every strategy shares."""

    context_k: int = 5          # at most this many retrieved items enter the context (retrievers)
    include_dates: bool = True  # prefix context lines with the session date (YYYY-MM-DD) when known

    def __post_init__(self) -> None:
        if not isinstance(self.context_k, int) or isinstance(self.context_k, bool) or self.context_k < 1:
            raise ConfigError(f"context_k must be a positive integer (items in the context), got {self.context_k!r}.")


def render_line(item: Retrieved, include_dates: bool = True) -> str:
    """``[2022-03-03] Wren: I collect old maps.`` (date and speaker only when known)."""
    head = f"[{item.timestamp.date().isoformat()}] " if include_dates and item.timestamp is not None else ""
    who = f"{item.speaker}: " if item.speaker else ""
    return f"{head}{who}{item.text}"


def pack_context(items: Sequence[Retrieved], budget_tokens: int, counter: TokenCounter,
                 include_dates: bool = True) -> str:
    """Lines of ``items`` (given in priority order) that fit in ``budget_tokens``, chronologically.

    Packing stops at the first item whose line does not fit. The joined text is counted again
    and the lowest-priority kept item is dropped while it is over budget (a subword tokenizer
    may count a joined text differently from the sum of its lines; regex tokens never do).
    """
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}.")
    kept: list[Retrieved] = []
    used = 0
    for item in items:
        cost = counter.count(render_line(item, include_dates))
        if used + cost > budget_tokens:
            break
        kept.append(item)
        used += cost

    def join(chosen: list[Retrieved]) -> str:
        return "\n".join(render_line(i, include_dates) for i in sorted(chosen, key=lambda i: i.order))

    text = join(kept)
    while kept and counter.count(text) > budget_tokens:
        kept.pop()
        text = join(kept)
    return text


class MemoryStrategy(ABC):
    """A long-term memory: observes finished sessions, answers queries from what it holds."""

    name: ClassVar[str] = ""
    config_class: ClassVar[type[StrategyConfig]] = StrategyConfig
    # Granularities at which the strategy's rankings can be scored (ids its items carry).
    granularities: ClassVar[tuple[str, ...]] = ("turn", "session")
    # Settings that name a trained model's directory -> the stage that trains it. A benchmark
    # lists the strategy as missing (never drops it) while such a directory does not exist.
    model_settings: ClassVar[dict[str, str]] = {}
    # Setting values that mean "no trained model needed" (e.g. egocentric retriever "minilm").
    untrained_values: ClassVar[frozenset[str]] = frozenset()
    # An oracle reads what a real system would have to produce (e.g. the dataset's own memories): the
    # report labels it, says why, and never ranks it among the strategies (None: not an oracle).
    oracle: ClassVar[str | None] = None

    @classmethod
    def required_models(cls, settings: dict) -> dict[str, str]:
        """The ``model_settings`` (setting -> training stage) that ``settings`` actually use."""
        return dict(cls.model_settings)

    def __init__(self, config: StrategyConfig | None = None, counter: TokenCounter | None = None):
        self.config = config if config is not None else self.config_class()
        if not isinstance(self.config, self.config_class):
            raise ConfigError(f"strategy {self.name!r} takes a {self.config_class.__name__}, "
                              f"got {type(self.config).__name__}.")
        self.counter = counter or DEFAULT_COUNTER

    @abstractmethod
    def observe(self, episode: Episode, session: Session) -> None:
        """Add the finished ``session`` of ``episode`` to memory."""

    @abstractmethod
    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        """At most ``k`` items for ``query``, best first."""

    @abstractmethod
    def forget(self, selector: Selector) -> int:
        """Remove every item ``selector`` names from every index; return how many were removed."""

    @abstractmethod
    def reset(self) -> None:
        """Forget everything (a fresh memory)."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of items held (the depth of a full ranking)."""

    def prepare(self, episodes: Sequence[Episode]) -> None:
        """Precompute pure functions of text for ``episodes`` (e.g. warm an embedding cache).

        Called once before an evaluation loop, so that work can be batched. It must not change
        what the memory holds: only ``observe`` adds to memory. Default: nothing to do.
        """
        return None

    def context(self, query: Query, budget_tokens: int) -> str:
        """The generator's context: the top ``context_k`` items packed into ``budget_tokens``."""
        items = self.retrieve(query, self.config.context_k) if len(self) else []
        return pack_context(items, budget_tokens, self.counter, self.config.include_dates)


def missing_models(name: str, settings: dict | None = None) -> list[ModelNotTrained]:
    """The trained models strategy ``name`` needs under ``settings`` whose directories do not exist.

    Only the settings the strategy class declares in ``model_settings`` are checked; a value in
    ``untrained_values`` or an unset (None / missing) setting needs no model.
    """
    if name not in STRATEGIES:
        raise ConfigError(f"memory strategy {name!r} is unknown; registered: {sorted(STRATEGIES)}.")
    cls = STRATEGIES[name]
    settings = settings or {}
    missing = []
    for key, stage in cls.required_models(settings).items():
        value = settings.get(key)
        if value is None or str(value) in cls.untrained_values:
            continue
        if not Path(str(value)).is_dir():
            missing.append(ModelNotTrained(f"strategy {name!r}: {key} = {str(value)!r} does not exist",
                                           path=str(value), stage=stage))
    return missing


def check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer (items to retrieve), got {k!r}.")


# --- registry -----------------------------------------------------------------

STRATEGIES: dict[str, type[MemoryStrategy]] = {}


def register_strategy(name: str) -> Callable[[type[MemoryStrategy]], type[MemoryStrategy]]:
    """Class decorator: make the strategy buildable by ``name``."""

    def wrap(cls: type[MemoryStrategy]) -> type[MemoryStrategy]:
        if name in STRATEGIES and STRATEGIES[name] is not cls:
            raise ValueError(f"memory strategy {name!r} registered twice")
        cls.name = name
        STRATEGIES[name] = cls
        return cls

    return wrap


def build_strategy(name: str, counter: TokenCounter | None = None, **settings) -> MemoryStrategy:
    """A fresh strategy ``name`` whose config is ``config_class(**settings)``."""
    if name not in STRATEGIES:
        raise ConfigError(f"memory strategy {name!r} is unknown; registered: {sorted(STRATEGIES)}.")
    cls = STRATEGIES[name]
    known = {f.name for f in fields(cls.config_class)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"memory strategy {name!r} has no setting(s) {unknown}; "
                          f"its settings are {sorted(known)}.")
    return cls(cls.config_class(**settings), counter=counter)
