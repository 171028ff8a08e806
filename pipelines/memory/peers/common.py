"""What every memory product's adapter shares: the protocol's five calls over a product's own add / search / delete,
provenance of what it wrote, forgetting by every route, and its language model and embedder through this project's
layers.

An adapter (:class:`PeerStrategy`) feeds each finished session to the product in chunks of turns (``turns_per_add``;
the whole session by default) the way the product's own documentation ingests a conversation, asks each query through
the product's own search, and deletes through the product's own delete. What the product wrote is tracked on this side
(:class:`PeerItem`: the product's id, its text, the session and turns of the chunk it came from), which is what makes
the protocol's ids possible: an item made from one turn carries that turn's id, one made from several carries the
session only.

- Language model: the product's calls go through :class:`~pipelines.memory.writers.LLMChat` (the LLM layer: a local
  model, or any OpenAI-compatible server by ``base_url``; the response cache, so a rerun asks nothing; token counts and
  seconds in the report's "Language-model writers" table). A prompt longer than the model's window is refused and
  counted, never cut (a cut prompt is another product). A failure of the product itself (an answer it cannot parse, an
  exception it raises) is counted per ingestion call; the run goes on. A server that cannot be reached stops the run,
  as it does for the reader.
- Embedder: the dense strategy's encoder (the shipped all-MiniLM-L6-v2, on the backend this machine runs fastest) and
  its embedding cache: the same vectors as ``dense``.
- Forgetting (:meth:`PeerStrategy.forget`, the module rule of :class:`~pipelines.memory.base.Selector`): the turns the
  selector names (by id, session, speaker, or about a speaker) and every item the selector names or that was made from
  such a turn are deleted from the product (its delete), from the product's own logs that keep the raw text (the
  adapter's :meth:`~PeerStrategy._purge`, where the product's delete keeps a copy), from the response cache (every
  request asked while a forgotten turn was in the product's memory) and from the embedding cache (every text embedded
  while it was). ``held_texts()`` lists the strings the product's stores still hold (the conformance kit's
  ``extra_leaks``).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Iterable, Sequence

from pipelines.data.schema import Episode, Query, Session, Turn
from pipelines.errors import ConfigError
from pipelines.memory.base import MemoryStrategy, Retrieved, Selector, StrategyConfig, check_k, session_participants
from pipelines.memory.dense import DenseConfig
from pipelines.models.embeddings import DEFAULT_CACHE_DIR

log = logging.getLogger("mnemos")

DEFAULT_LLM = {"backend": "local", "model": "smollm2-135m-instruct"}   # the shipped model; a served one: base_url


@dataclass(frozen=True)
class PeerConfig(StrategyConfig):
    """Settings every product adapter shares: its language model, its embedder, how it is fed."""

    # the product's language model: the LLM layer's settings (as llm.reader in params.yaml: backend local | openai,
    # model, base_url, ...); the default is the shipped SmolLM2-135M-Instruct in-process
    llm: dict = field(default_factory=lambda: dict(DEFAULT_LLM))
    llm_cache_dir: str | None = ".cache/llm"   # the response cache (a rerun asks nothing again)
    turns_per_add: int | None = None           # turns fed per ingestion call; None: a whole session at once
    # the product's embedder: the dense strategy's encoder settings (DenseConfig), the shipped MiniLM by default
    model_path: str | None = None
    model_name: str | None = None
    cache_dir: str | None = DEFAULT_CACHE_DIR
    batch_size: int | None = None
    device: str = "auto"
    backend: str = "auto"
    quantization: str = "auto"
    export_dir: str | None = None
    precision: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        _ = self.dense_config   # the encoder settings' own checks
        if self.turns_per_add is not None and (not isinstance(self.turns_per_add, int)
                                               or isinstance(self.turns_per_add, bool) or self.turns_per_add < 1):
            raise ConfigError(f"turns_per_add must be a positive integer or null (a whole session), "
                              f"got {self.turns_per_add!r}.")
        if not isinstance(self.llm, dict):
            raise ConfigError(f"llm must be a mapping of language-model settings (backend, model, base_url, ...; "
                              f"see llm.reader in params.yaml), got {self.llm!r}.")

    @property
    def dense_config(self) -> DenseConfig:
        return DenseConfig(model_path=self.model_path, model_name=self.model_name, cache_dir=self.cache_dir,
                           batch_size=self.batch_size, device=self.device, backend=self.backend,
                           quantization=self.quantization, export_dir=self.export_dir, precision=self.precision)


@dataclass
class PeerItem:
    """What the product wrote, as this side knows it."""

    id: str                          # the product's id of it
    key: str                         # this side's id of it (the items' memory_id): "<session id>/m<n>", the n-th
                                     # item written from the session, the same in every run (the product's are not)
    text: str
    session_id: str
    turn_ids: frozenset[str]         # the turns of the ingestion call it came from
    speakers: frozenset[str]         # who said those turns
    participants: frozenset[str]     # who took part in its session
    timestamp: datetime | None
    order: int                       # position in the observed history


@dataclass
class _Observed:
    """A turn fed to the product (kept to know what a forget selects; its text goes with it)."""

    session_id: str
    speaker: str
    text: str
    content: str                     # the text as sent to the product
    participants: frozenset[str]


class PeerStrategy(MemoryStrategy):
    """A memory product behind the protocol (see the module docstring). Subclasses give the product's calls:
    :meth:`_build`, :meth:`_ingest`, :meth:`_search`, :meth:`_delete`, and :meth:`_purge` / :meth:`held_texts` where
    the product keeps raw text of its own."""

    config_class: ClassVar[type[PeerConfig]] = PeerConfig
    granularities = ("turn", "session", "memory")
    package: ClassVar[str] = ""      # the import name of the product's package
    extra: ClassVar[str] = ""        # the pyproject extra that installs it
    scope_refuses: ClassVar[str | None] = None   # a regex of the characters the product refuses in a scope id
    _runner: asyncio.Runner | None = None        # the event loop of an async product (:meth:`run`)

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        if importlib.util.find_spec(cls.package) is None:
            return (f"the {cls.package} package is not installed (pip install -e '.[{cls.extra}]' installs the "
                    f"product as tested here)")
        return None

    def __init__(self, config=None, counter=None):
        super().__init__(config, counter)
        self._embedder = None
        self._chat = None
        self._product = None
        self._seen_now: frozenset[str] = frozenset()   # turns in the product's memory during an ingestion call
        self._layer_error: BaseException | None = None  # what the LLM layer raised inside the product's call
        self.reset()

    # --- the project's layers, as the product sees them --------------------------------------------------------
    @property
    def embedder(self):
        if self._embedder is None:
            from pipelines.memory.dense import build_embedder

            self._embedder = build_embedder(self.config.dense_config)
        return self._embedder

    @property
    def chat(self):
        """The product's language model (:class:`~pipelines.memory.writers.LLMChat`, shared by the process)."""
        if self._chat is None:
            from pipelines.memory.writers import shared_writer

            self._chat = shared_writer("chat", self.config.llm, self.config.llm_cache_dir, role=f"{self.name}.llm")
        return self._chat

    def ask(self, messages: list[dict[str, str]]) -> str:
        """One conversation the product asks, through the layer; recorded with the turns it may hold."""
        from pipelines.llm.base import LLMError
        from pipelines.memory.writers import PromptTooLong

        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        self._asked.append((self._seen_now, messages))
        try:
            return self.chat(messages)
        except (PromptTooLong, LLMError) as e:
            self._layer_error = e
            raise

    def embed(self, texts: list[str]):
        """Vectors (N, D) of ``texts``; those embedded while ingesting are recorded with the turns they may hold."""
        if self._seen_now:
            self._embedded.extend((self._seen_now, t) for t in texts)
        return self.embedder.embed(list(texts))

    # --- scopes ------------------------------------------------------------------------------------------------
    def _empty_scope(self) -> dict:
        return {"_items": {},        # product id -> PeerItem
                "_turns": {},        # turn id -> _Observed
                "_asked": [],        # (turns held then, conversation) of every request asked while ingesting
                "_embedded": [],     # (turns held then, text) of every text embedded while ingesting
                "_order": 0}

    def reset(self) -> None:
        super().reset()
        try:
            if getattr(self, "_product", None) is not None:
                self._close()
        finally:
            self._product = None
            runner, self._runner = self._runner, None   # the event loop of :meth:`run`, after the product's close
            if runner is not None:
                runner.close()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def product(self):
        if self._product is None:
            self._product = self._build()
        return self._product

    def scope_id(self) -> str:
        """The product's id of the current episode's memory (its user): ``episode-<id>``, the characters the product
        refuses (``scope_refuses``) replaced by ``_`` and then a hash of the id added, so that two ids never meet."""
        raw = f"episode-{self.episode_id}"
        safe = raw if self.scope_refuses is None else re.sub(self.scope_refuses, "_", raw)
        return safe if safe == raw else f"{safe}-{hashlib.sha1(raw.encode()).hexdigest()[:10]}"

    def run(self, coroutine):
        """Run one of an async product's coroutines to its end on the strategy's own event loop (in this thread)."""
        self._runner = self._runner or asyncio.Runner()   # closed by reset (a later call opens another)
        return self._runner.run(coroutine)

    # --- the five calls ----------------------------------------------------------------------------------------
    def prepare(self, episodes: Sequence[Episode]) -> None:
        """Embed, in one batched pass into the embedding cache, the texts the product will embed one call at a time
        (:meth:`prepared_texts`); nothing is added to memory."""
        texts = list(dict.fromkeys(t for t in self.prepared_texts(episodes) if t.strip()))
        if texts and self.config.cache_dir:
            self.embedder.embed(texts)

    def prepared_texts(self, episodes: Sequence[Episode]) -> list[str]:
        """The texts :meth:`prepare` embeds (default: the questions, which the product's search embeds)."""
        return [q.question for e in episodes for q in e.queries]

    def observe(self, episode: Episode, session: Session) -> None:
        self.enter(episode)
        participants = session_participants(episode, session)
        turns = [t for t in session.turns if t.text.strip()]
        step = self.config.turns_per_add or max(len(turns), 1)
        written_here = 0   # items written from this session so far (a session is observed once)
        for start in range(0, len(turns), step):
            chunk = turns[start:start + step]
            for t in chunk:
                self._turns[t.id] = _Observed(session.id, t.speaker, t.text, self.content(t), participants)
            self._seen_now = frozenset(self._turns)
            self._layer_error = None
            try:
                written = self._call_ingest(episode, session, chunk)
            finally:
                self._seen_now = frozenset()
            for product_id, text, turn_ids in written:
                turn_ids = frozenset(turn_ids)
                self._items[product_id] = PeerItem(
                    product_id, f"{session.id}/m{written_here}", text, session.id, turn_ids,
                    frozenset(self._turns[t].speaker for t in turn_ids if t in self._turns), participants,
                    session.timestamp, self._order)
                self._order += 1
                written_here += 1

    def _call_ingest(self, episode: Episode, session: Session,
                     chunk: list[Turn]) -> list[tuple[str, str, Iterable[str]]]:
        """:meth:`_ingest`, its failures counted: the layer's refusal of a prompt too long for the window (counted by
        the layer), the product's own exceptions (``product_errors``); an unreachable server stops the run."""
        from pipelines.llm.base import LLMError
        from pipelines.memory.writers import PromptTooLong

        try:
            written = self._ingest(episode, session, chunk)
        except Exception as e:
            cause = self._layer_error
            if isinstance(cause, LLMError):
                raise cause from e
            if not isinstance(cause, PromptTooLong):
                self.chat.outcome("product_errors")
                log.warning("%s: the product failed on session %s of episode %s: %s: %s", self.name, session.id,
                            episode.id, type(e).__name__, str(e)[:300])
            return []
        if written and self.uses_llm:
            self.chat.outcome("memories_written", len(written))
        return written

    @property
    def uses_llm(self) -> bool:
        """Whether the product calls its language model when it ingests (an adapter's no-inference mode: False)."""
        return True

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        if not self._items:
            return []
        found = [(self._items[pid], score) for pid, score in self._search(query, k) if pid in self._items]
        found.sort(key=lambda x: -x[1])   # stable: the product's order among ties
        out = []
        for item, score in found[:k]:
            single = next(iter(item.turn_ids)) if len(item.turn_ids) == 1 else None
            out.append(Retrieved.built(float(score), item.text, session_id=item.session_id, turn_id=single,
                                       memory_id=item.key,
                                       speaker=next(iter(item.speakers)) if single and item.speakers else None,
                                       timestamp=item.timestamp, order=item.order))
        return out

    def selected_turns(self, selector: Selector) -> set[str]:
        """The ids of the observed turns of the current episode that ``selector`` names."""
        return {tid for tid, t in self._turns.items()
                if selector.matches(turn_id=tid, session_id=t.session_id, speakers=[t.speaker],
                                    participants=t.participants, text=t.text)}

    def forget(self, selector: Selector) -> int:
        turns = self.selected_turns(selector)
        gone = [i for i in self._items.values()
                if not turns.isdisjoint(i.turn_ids)
                or selector.matches(memory_id=i.key, session_id=i.session_id, turns=i.turn_ids, speakers=i.speakers,
                                    participants=i.participants, text=i.text)
                or i.id in selector.memory_ids]   # the product's own id of it
        if not gone and not turns:
            return 0
        tainted = set(turns).union(*(i.turn_ids for i in gone))
        if gone:
            self._delete([i.id for i in gone])
        self._purge([self._turns[t].content for t in turns], [i.id for i in gone])
        for item in gone:
            del self._items[item.id]
        kept_texts = {i.text for i in self._items.values()}
        # the caches: every request asked and every text embedded while a forgotten turn was held
        asked = [m for seen, m in self._asked if not seen.isdisjoint(tainted)]
        self._asked = [(seen, m) for seen, m in self._asked if seen.isdisjoint(tainted)]
        if asked:
            self.chat.forget(asked)
        texts = {t for seen, t in self._embedded if not seen.isdisjoint(tainted)}
        texts |= {i.text for i in gone}
        texts |= {self._turns[t].content for t in turns} | {self._turns[t].text for t in turns}
        self._embedded = [(seen, t) for seen, t in self._embedded if seen.isdisjoint(tainted)]
        if self._embedder is not None:
            self.embedder.forget(texts - kept_texts)
        for t in turns:
            del self._turns[t]
        return len(gone)

    # --- what an adapter gives ---------------------------------------------------------------------------------
    def content(self, turn: Turn) -> str:
        """A turn as the product is given it (default: ``speaker: text``, as the products' LoCoMo evaluations)."""
        return f"{turn.speaker}: {turn.text}"

    def _build(self) -> Any:
        """The product's memory, empty (called on first use, again after reset)."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release the product's memory (default: nothing; reset then drops the product and closes the event loop
        of :meth:`run`)."""

    def _ingest(self, episode: Episode, session: Session, chunk: list[Turn]) -> list[tuple[str, str, Iterable[str]]]:
        """Feed ``chunk`` (turns of ``session``) to the product in the current scope; (product id, text, turn ids it
        came from) of each item it wrote."""
        raise NotImplementedError

    def _search(self, query: Query, k: int) -> list[tuple[str, float]]:
        """The product's own search in the current scope: (product id, score), best first."""
        raise NotImplementedError

    def _delete(self, ids: list[str]) -> None:
        """The product's own delete of ``ids``."""
        raise NotImplementedError

    def _purge(self, contents: list[str], ids: list[str]) -> None:
        """Remove what the product's delete leaves behind: the raw ``contents`` of forgotten turns in its own logs, the
        history of deleted ``ids`` (default: nothing)."""

    def held_texts(self) -> list[str]:
        """Every string the product's own stores still hold (for the conformance kit's ``extra_leaks``)."""
        return []
