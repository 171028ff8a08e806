"""The one memory interface every strategy implements, and the registry of strategies.

ARCHITECTURE.md "Memory strategies": the temporal evaluator (RealMem, seed 002) drives any
strategy with the same five calls:

- ``observe(episode, session)``: add a finished session to memory;
- ``retrieve(query, k)``: at most ``k`` items, best first, each carrying its score, its text and
  its source ids (turn, session, memory) so that it can be scored at every granularity;
- ``context(query, budget_tokens)``: the text a generator reads, at most ``budget_tokens`` tokens
  as counted by the strategy's :class:`~pipelines.memory.tokens.TokenCounter`;
- ``forget(selector)``: remove everything a :class:`Selector` names (turn, session, memory,
  speaker ids) from every index and cache the strategy keeps; returns how many items went;
- ``reset()``: forget everything;
- ``prepare(episodes)`` (optional): batch pure precomputation (embeddings) before a run; it
  never adds anything to memory;
- ``enter(episode)``: make ``episode`` the memory's scope (``observe`` enters its episode itself).

Scopes: a strategy keeps one memory per episode (the episode's user and its agents), never one per
speaker name: every LongMemEval and RealMem episode has a speaker called "user", and one instance
fed two of them must not answer the second's questions with the first's items. What a strategy
holds of one episode lives in the attributes its ``_empty_scope()`` names; the base keeps one such
set per episode and swaps it in on ``enter``. ``retrieve``, ``context``, ``forget`` and ``len``
see the current episode only (ids are unique within an episode only); ``reset`` empties them all.

"About" (:meth:`Selector.about`, the one rule every strategy's ``forget`` applies): an item is
about speaker X when X said it or it names X as its owner, subject or entity; when it was said in,
or made from, a session X took part in (the main speaker, the session's partner and every speaker
of its turns): what is said to X ("Since you play the violin...") is about X; or when its text
names X as a word, case-insensitively ("Wren's violin", not "Wrench"). An item made from turns
(a summary, a memory, a triplet) goes with them: ``turn_ids`` reach it too.

Strategies register by name with ``@register_strategy("bm25")`` and are built with
``build_strategy("bm25", **settings)``; ``STRATEGIES`` maps names to classes.

Context packing (:func:`pack_context`), shared by all strategies: items are taken in priority
order (rank for retrievers, recency for the long context) while their rendered lines fit in the
budget; the first item that does not fit ends the packing (the context is a prefix of the
priority order, never a patchwork), and the kept items are written in chronological order, one
line each: ``[YYYY-MM-DD] speaker: text`` (date and speaker only when known).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
import inspect
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Sequence

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import ConfigError, ModelNotTrained
from pipelines.memory.tokens import DEFAULT_COUNTER, TokenCounter
from pipelines.plugins import load as load_plugins
from pipelines.plugins import refuse_broken

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

    @classmethod
    def built(cls, score: float, text: str, session_id: str | None = None, turn_id: str | None = None,
              memory_id: str | None = None, speaker: str | None = None, timestamp: datetime | None = None,
              order: int = 0) -> Retrieved:
        """The same frozen item as ``Retrieved(...)``, made without the dataclass's ``__init__``, which sets
        each field through ``object.__setattr__`` (about 2 us an item: a tenth of a first stage over 100k
        turns that returns 100). For the turn stores, which make k of them per query."""
        item = object.__new__(cls)
        item.__dict__.update(score=score, text=text, session_id=session_id, turn_id=turn_id, memory_id=memory_id,
                             speaker=speaker, timestamp=timestamp, order=order)
        return item


def name_key(name: str) -> str:
    """How speaker names compare: whitespace collapsed, case-folded ("wren " == "Wren")."""
    return " ".join(name.split()).casefold()


@lru_cache(maxsize=1024)
def _name_pattern(name: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(w) for w in name.split())
    return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)


def names(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` as a word, case-insensitively: "Since Wren's violin..." names
    Wren, "a wrench" does not (a blank name names nothing)."""
    return bool(name.split()) and _name_pattern(name).search(text) is not None


def session_participants(episode: Episode, session: Session) -> frozenset[str]:
    """Who took part in ``session``: the episode's main speaker, the session's partner and every speaker
    of its turns. Everything said in the session was said by or to each of them."""
    return frozenset({episode.main_speaker, *((session.partner,) if session.partner else ()),
                      *(t.speaker for t in session.turns)})


@dataclass(frozen=True)
class Selector:
    """What :meth:`MemoryStrategy.forget` removes: any item matching any of the ids, any item made
    from a selected turn, and any item about a selected speaker (:meth:`about`)."""

    turn_ids: frozenset[str] = frozenset()     # turns to forget (and what was made from them)
    session_ids: frozenset[str] = frozenset()  # whole sessions to forget
    memory_ids: frozenset[str] = frozenset()   # memories to forget
    speakers: frozenset[str] = frozenset()     # everything said by, to or about these speakers

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

    @cached_property
    def _speaker_keys(self) -> frozenset[str]:
        return frozenset(name_key(s) for s in self.speakers)

    def matches(self, *, turn_id: str | None = None, session_id: str | None = None,
                memory_id: str | None = None, turns: Iterable[str] = (), speakers: Iterable[str | None] = (),
                participants: Iterable[str] = (), text: str | None = None) -> bool:
        """Whether the selector names an item: by its turn, session or memory id, by one of the turns it
        was made from (``turns``: a summary's or a memory's session, a triplet's turn), or as an item
        about a selected speaker (:meth:`about`)."""
        return ((turn_id is not None and turn_id in self.turn_ids)
                or (session_id is not None and session_id in self.session_ids)
                or (memory_id is not None and memory_id in self.memory_ids)
                or not self.turn_ids.isdisjoint(turns)
                or self.about(speakers=speakers, participants=participants, text=text))

    def about(self, *, speakers: Iterable[str | None] = (), participants: Iterable[str] = (),
              text: str | None = None) -> bool:
        """Whether an item is about one of :attr:`speakers` (the module's rule, the same for every strategy):

        - ``speakers``: the names the item carries (who said it, its owner, whom it is about);
        - ``participants``: who took part in the session it was said in or made from
          (:func:`session_participants`): what was said to X is about X;
        - ``text``: the item's text, about X when it names X as a word (:func:`names`).
        """
        if not self.speakers:
            return False
        if any(n is not None and name_key(n) in self._speaker_keys for n in (*speakers, *participants)):
            return True
        return text is not None and any(names(text, s) for s in self.speakers)

    def scrub(self, names_: Iterable[str]) -> frozenset[str]:
        """``names_`` without the selected speakers (what a record of participants keeps after a forget)."""
        return frozenset(n for n in names_ if name_key(n) not in self._speaker_keys)


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
    # What the strategy is, in a few words, for the ablation table (empty: the first line of its docstring).
    ingredient: ClassVar[str] = ""

    @classmethod
    def required_models(cls, settings: dict) -> dict[str, str]:
        """The ``model_settings`` (setting -> training stage) that ``settings`` actually use."""
        return dict(cls.model_settings)

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        """Why the strategy cannot run on ``episodes`` under ``settings`` (e.g. it retrieves over session
        summaries and the data has none), or None when it can. A benchmark lists such a strategy as
        missing with this reason instead of scoring a memory that could only stay empty. Default: None."""
        return None

    def __init__(self, config: StrategyConfig | None = None, counter: TokenCounter | None = None):
        self.config = config if config is not None else self.config_class()
        if not isinstance(self.config, self.config_class):
            raise ConfigError(f"strategy {self.name!r} takes a {self.config_class.__name__}, "
                              f"got {type(self.config).__name__}.")
        self.counter = counter or DEFAULT_COUNTER
        self.episode_id: str | None = None              # the current scope (None before any episode)
        self._scopes: dict[str, dict[str, Any]] = {}    # episode id -> its state while another is current
        self._scope_names: tuple[str, ...] = ()          # the attributes of the current scope's state

    @abstractmethod
    def observe(self, episode: Episode, session: Session) -> None:
        """Add the finished ``session`` of ``episode`` to memory (in the scope of ``episode``: call
        :meth:`enter` first)."""

    @abstractmethod
    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        """At most ``k`` items for ``query``, best first."""

    @abstractmethod
    def forget(self, selector: Selector) -> int:
        """Remove every item ``selector`` names (its ids, and what is about its speakers:
        :meth:`Selector.about`) from the current episode's memory, every index and every cache;
        return how many were removed."""

    def reset(self) -> None:
        """Forget everything, the memory of every episode (a fresh memory)."""
        self._scopes = {}
        self.episode_id = None
        self._swap_in(self._empty_scope())

    # --- scopes: one memory per episode -----------------------------------------------------------
    def _empty_scope(self) -> dict[str, Any]:
        """What the strategy holds of one episode, empty: attribute name -> fresh value (e.g.
        ``{"_items": [], "_sessions": set()}``). Default: nothing (a strategy that keeps nothing). A
        strategy that keeps something calls ``self.reset()`` at the end of its ``__init__``, which
        sets these attributes."""
        return {}

    def _swap_in(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self._scope_names = tuple(state)

    def _current_scope(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._scope_names}

    def enter(self, episode: Episode) -> None:
        """Make ``episode`` the scope of the memory: from now on ``retrieve``, ``context``, ``forget`` and
        ``len`` see what was observed of ``episode`` and nothing of any other episode (whose memories are
        kept for when it is entered again). ``observe`` enters its episode; call this before asking the
        first queries of an episode not observed yet when one instance serves several episodes. Before the
        first episode, what is held (a memory loaded from disk) becomes the memory of the episode entered."""
        if episode.id == self.episode_id:
            return
        if self.episode_id is not None:
            self._scopes[self.episode_id] = self._current_scope()
            self._swap_in(self._scopes.pop(episode.id, None) or self._empty_scope())
        self.episode_id = episode.id

    def held_scopes(self) -> list[dict[str, Any]]:
        """The state of every episode held, the current one last (e.g. to tell whether another item
        still holds a text whose cached vector a forget would delete)."""
        return [*self._scopes.values(), self._current_scope()]

    @abstractmethod
    def __len__(self) -> int:
        """Number of items held (the depth of a full ranking)."""

    def prepare(self, episodes: Sequence[Episode]) -> None:
        """Precompute pure functions of text for ``episodes`` (e.g. warm an embedding cache).

        Called once before an evaluation loop, so that work can be batched. It must not change
        what the memory holds: only ``observe`` adds to memory. Default: nothing to do.
        """
        return None

    def index_bytes(self) -> int | None:
        """Bytes the current episode's index holds (vectors, postings), for the cost column of the ablation
        table; None (the default): not measured."""
        return None

    def session_ranking(self, query: Query) -> list[str] | None:
        """The session ids ranked for ``query`` when the strategy scores sessions itself (a session's top turns
        combined, a session-level key), best first; None (the default): a session ranks at the position of its
        best item in :meth:`retrieve`'s ranking. Called right after ``retrieve(query, ...)``; only observed
        sessions of the current episode may appear."""
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
    known_strategy(name)
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


def check_weights(config, section: str, names: Sequence[str]) -> None:
    """ConfigError unless each of ``config``'s ``names`` is a finite number >= 0 (a score weight)."""
    for name in names:
        w = getattr(config, name)
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0.0 <= w < float("inf"):
            raise ConfigError(f"{section}.{name} must be a finite number >= 0, got {w!r}.")


# --- registry -----------------------------------------------------------------

STRATEGIES: dict[str, type[MemoryStrategy]] = {}
PLUGIN_GROUP = "mnemos.strategies"   # installed packages' strategies (pipelines.plugins)


def known_strategy(name: str) -> None:
    """A ConfigError unless ``name`` is a registered strategy: a broken plugin's names its package and why
    (:class:`pipelines.plugins.PluginError`), an unknown name lists the registered ones."""
    if name not in STRATEGIES:
        refuse_broken(PLUGIN_GROUP, name, "memory strategy")
        raise ConfigError(f"memory strategy {name!r} is unknown; registered: {sorted(STRATEGIES)}.")


def check_plugin_strategy(name: str, obj: Any) -> str | None:
    """Why the object an entry point of ``mnemos.strategies`` names cannot be a strategy (None when it can): a
    concrete :class:`MemoryStrategy` subclass whose ``config_class`` is a :class:`StrategyConfig` dataclass and
    whose granularities are known."""
    if not (isinstance(obj, type) and issubclass(obj, MemoryStrategy)):
        return f"{obj!r} is not a MemoryStrategy subclass (pipelines.memory.base)"
    if inspect.isabstract(obj):
        return f"{obj.__name__} does not implement {', '.join(sorted(obj.__abstractmethods__))}"
    config = obj.config_class
    if not (isinstance(config, type) and issubclass(config, StrategyConfig) and is_dataclass(config)):
        return f"{obj.__name__}.config_class must be a StrategyConfig dataclass, got {config!r}"
    unknown = sorted(set(obj.granularities) - set(GRANULARITIES))
    if unknown or not obj.granularities:
        return f"{obj.__name__}.granularities must be some of {GRANULARITIES}, got {obj.granularities!r}"
    return None


def load_strategy_plugins() -> None:
    """Register the strategies of installed packages (entry points ``mnemos.strategies``), after the built-ins."""
    load_plugins(PLUGIN_GROUP, STRATEGIES, check_plugin_strategy,
                 register=lambda name, cls: register_strategy(name)(cls))


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
    known_strategy(name)
    cls = STRATEGIES[name]
    known = {f.name for f in fields(cls.config_class)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"memory strategy {name!r} has no setting(s) {unknown}; "
                          f"its settings are {sorted(known)}.")
    return cls(cls.config_class(**settings), counter=counter)
