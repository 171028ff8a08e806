"""``graph``: G-Long's graph memory (seed 003) behind the project's memory interface.

- ``observe(episode, session)``: the session's triplets (``extraction``: the ground-truth ``Turn.triplets``, the
  trained extractor's output, or a language model's through pipelines/llm with the same prompt,
  :class:`~pipelines.memory.writers.LLMExtractor`, batched over every turn in ``prepare``) are scored once
  per session (``importance``: uniform 1.0, or the T5 cross-attention scores of Eqs. 1-3, normalised by the
  session maximum)
  and stored as edges of the graph memory bank with their source turn, session, speaker and the
  session's time.
- ``retrieve(query, k)``: section 3.4 (anchors, 1-hop candidates, coarse top-N, Eq. 4) at the
  query's time, as a ranking of depth k (deeper than N: tiers of N, see pipelines/glong/retrieve);
  only the first ``context_k`` items (the paper's kept top-k) count as accessed. Each item carries
  the source turn and session of its triplet, and ``memory_id = "triplet:<tid>"``.
- ``context(query, budget)``: the kept triplets as one "MEMORY:" block of "subject relation
  object" lines (section 3.5), cut to the token budget.
- ``forget(selector)``: turns, sessions, ``"triplet:<tid>"`` memory ids, and every triplet about
  a selected speaker by the shared rule (:meth:`~pipelines.memory.base.Selector.about`): said by
  them, said in a session they took part in (to them), or naming them (their entity, as subject,
  object or within either); :meth:`GraphMemory.forget_entities` removes entities. Every deletion
  cascades through the graph, the entity index, the column store and the embedding cache (a text
  another held triplet or entity still has, in any episode's bank, keeps its cached vector); with
  ``extraction: llm`` the extractor's answers for the forgotten turns leave its memo and the response cache.

One bank per episode (:mod:`pipelines.memory.base` scopes): the entity "user" of one LongMemEval
episode is not the "user" of another, so banks never share nodes; they share the embedder.

Times are POSIX seconds of the session timestamps (naive datetimes read as UTC); a session without
a timestamp is placed at ``index * missing_time_hours``. A query is asked at its own timestamp,
or else at the time of the latest observed session.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from pipelines.data.schema import Episode, Query, Session, Triplet
from pipelines.errors import ConfigError, DataError
from pipelines.glong.graph import GraphMemoryBank, NewFact
from pipelines.glong.retrieve import memory_block, retrieve
from pipelines.memory.base import (MemoryStrategy, Retrieved, Selector, check_k, register_strategy,
                                   session_participants)
from pipelines.memory.graph.config import GraphConfig
from pipelines.memory.writers import shared_writer

if TYPE_CHECKING:  # the summariser's module imports torch: loaded when a strategy is built, not by the registry
    from pipelines.glong.importance import ImportanceScorer

# A triplet extractor maps (speaker, utterance) pairs to one list of triplets per pair.
Extractor = Callable[[Sequence[tuple[str, str]]], list[list[Triplet]]]
TRIPLET_PREFIX = "triplet:"


def to_seconds(when: datetime) -> float:
    """POSIX seconds of ``when`` (a naive datetime is read as UTC)."""
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def _from_seconds(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(tzinfo=None)


class SharedEmbedder:
    """The one embedder of every episode's bank. ``forget(texts)`` keeps the cached vectors of the
    texts that ``held()`` (the triplet texts and entity names of every bank) still has; anything
    else (``embed``, ``cache``, ``model_name``) is the wrapped embedder's."""

    def __init__(self, inner, held: Callable[[], set[str]]):
        self.inner, self._held = inner, held

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def embed(self, texts: list[str]):
        return self.inner.embed(texts)

    def forget(self, texts: Iterable[str]) -> int:
        held = self._held()
        return self.inner.forget([t for t in dict.fromkeys(texts) if t not in held])


@lru_cache(maxsize=2)
def _load_extractor(path: str) -> Extractor:
    """The trained extractor, loaded once per process (a fresh strategy is built per episode)."""
    from pipelines.glong.tasks import load_extractor

    return load_extractor(path)


@lru_cache(maxsize=2)
def _load_scorer(path: str, device: str) -> ImportanceScorer:
    """The trained summariser's importance scorer, loaded once per process."""
    from pipelines.glong.importance import load_importance_scorer

    return load_importance_scorer(path, device=device)


@register_strategy("graph")
class GraphMemory(MemoryStrategy):
    """G-Long: triplets in a graph memory bank, associative retrieval with hybrid re-ranking."""

    config_class = GraphConfig
    model_settings = {"importance_model": "glong_importance", "extractor_model": "glong_extractor"}
    granularities = ("turn", "session")

    @classmethod
    def required_models(cls, settings: dict) -> dict[str, str]:
        """The extractor only with ``extraction: model`` (``llm`` calls a configured language model), the summariser
        only with ``importance: model``."""
        need = {}
        if settings.get("extraction", GraphConfig.extraction) == "model":
            need["extractor_model"] = cls.model_settings["extractor_model"]
        if settings.get("importance", GraphConfig.importance) == "model":
            need["importance_model"] = cls.model_settings["importance_model"]
        return need

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        """With ``extraction: ground_truth`` the data must give triplets (``Turn.triplets``): without any,
        the graph stays empty. An extractor (``extraction: model`` or ``llm``) needs nothing from the data."""
        if settings.get("extraction", GraphConfig.extraction) != "ground_truth":
            return None
        if any(turn.triplets for e in episodes for _, turn in e.turns()):
            return None
        turns = sum(len(s.turns) for e in episodes for s in e.sessions)
        return (f"the data has no triplets (none of the {turns} turns of the {len(episodes)} episodes has one), "
                f"and extraction 'ground_truth' reads them; set extraction: model to use the trained extractor, "
                f"or extraction: llm with extractor_llm")

    def __init__(self, config: GraphConfig | None = None, counter=None, *, embedder=None,
                 extractor: Extractor | None = None, scorer: ImportanceScorer | None = None):
        super().__init__(config, counter)
        c: GraphConfig = self.config
        if c.extraction == "model" and extractor is None and c.extractor_model:
            extractor = _load_extractor(c.extractor_model)
        if c.extraction == "model" and extractor is None:
            raise ConfigError("graph.extraction is 'model' but no triplet extractor was given; pass "
                              "extractor=... or graph.extractor_model, or use extraction 'ground_truth'.")
        if c.extraction == "llm" and extractor is None:
            extractor = shared_writer("extractor", c.extractor_llm, c.llm_cache_dir, role="graph.extractor_llm")
        self.extractor = extractor
        if c.importance == "uniform":
            from pipelines.glong.importance import uniform_importance

            self.scorer: ImportanceScorer = uniform_importance
        elif scorer is not None:
            self.scorer = scorer
        elif c.importance_model:
            self.scorer = _load_scorer(c.importance_model, c.device)
        else:
            raise ConfigError("graph.importance is 'model' but neither a scorer nor "
                              "graph.importance_model (the trained summariser folder) was given.")
        self.embedder = SharedEmbedder(embedder if embedder is not None else self._embedder(), self._held_texts)
        self.reset()

    def _empty_scope(self) -> dict:
        c: GraphConfig = self.config
        return {"bank": GraphMemoryBank(self.embedder, c.entity_index, c.exact_up_to),
                "_sessions": {},   # observed session id -> its participants
                "_asked": {},      # extraction llm: turn id -> (session id, speaker, text) the extractor was asked
                "_clock": 0.0}     # time of the latest observed session, POSIX seconds

    def _held_texts(self) -> set[str]:
        """The triplet texts and entity names of every episode's bank."""
        banks = [state["bank"] for state in self.held_scopes() if "bank" in state]
        return {text for bank in banks for text in [f.text for f in bank.facts()] + bank.entity_names()}

    def _embedder(self):
        c: GraphConfig = self.config
        if c.embedder == "hashing":
            from pipelines.glong.embedding import HashingEmbedder

            return HashingEmbedder(c.hashing_dim)
        from pipelines.glong.embedding import minilm_embedder

        return minilm_embedder(c.model_path, c.cache_dir, c.device)

    # --- time --------------------------------------------------------------------------------
    def session_time(self, session: Session) -> float:
        if session.timestamp is not None:
            return to_seconds(session.timestamp)
        return session.index * self.config.missing_time_hours * 3600.0

    def query_time(self, query: Query) -> float:
        return to_seconds(query.timestamp) if query.timestamp is not None else self._clock

    # --- the interface -----------------------------------------------------------------------
    def _session_triplets(self, session: Session) -> list[list[Triplet]]:
        if self.config.extraction == "ground_truth":
            return [list(turn.triplets) for turn in session.turns]
        pairs = [(turn.speaker, turn.text) for turn in session.turns]
        out = self.extractor(pairs)
        if len(out) != len(pairs):
            raise DataError(f"the extractor returned {len(out)} triplet lists for {len(pairs)} "
                            "turns", record=f"session {session.id}", rule="one_list_per_turn")
        return [list(t) for t in out]

    def prepare(self, episodes: Sequence[Episode]) -> None:
        """With ``extraction: llm``, extract the triplets of every turn of ``episodes`` in one batched call (the
        extractor memoises them for ``observe``) and log what its calls cost; then warm the embedding cache with
        every entity, triplet and question, in one batch.

        Pure work on text: nothing enters memory. The trained extractor's output is not known before ``observe``
        (no warming then); without an embedding cache the warming does nothing.
        """
        if self.config.extraction == "llm":
            pairs = [(turn.speaker, turn.text) for e in episodes for _, turn in e.turns()]
            per_turn = self.extractor(pairs)
            if hasattr(self.extractor, "log_report"):
                self.extractor.log_report()
        elif self.config.extraction == "ground_truth":
            per_turn = [turn.triplets for e in episodes for _, turn in e.turns()]
        else:
            return
        if getattr(self.embedder, "cache", None) is None:
            return
        texts = [x for triplets in per_turn for t in triplets
                 for x in (" ".join(t.subject.split()), " ".join(t.object.split()), t.serialise())]
        texts += [q.question for e in episodes for q in e.queries]
        self.embedder.embed(list(dict.fromkeys(texts)))

    def observe(self, episode: Episode, session: Session) -> None:
        self.enter(episode)
        if session.id in self._sessions:
            raise DataError("session observed twice; each finished session enters memory once",
                            record=f"episode {episode.id}, session {session.id}",
                            rule="observe_once")
        self._sessions[session.id] = session_participants(episode, session)
        when = self.session_time(session)
        per_turn = self._session_triplets(session)
        if self.config.extraction == "llm":
            self._asked.update((t.id, (session.id, t.speaker, t.text)) for t in session.turns)
        flat = [(turn, t) for turn, triplets in zip(session.turns, per_turn) for t in triplets]
        scores = self.scorer([t for _, t in flat]) if flat else []
        if len(scores) != len(flat):
            raise DataError(f"the importance scorer returned {len(scores)} scores for "
                            f"{len(flat)} triplets", record=f"session {session.id}",
                            rule="one_score_per_triplet")
        self.bank.add([NewFact(triplet=t, importance=float(s), time=when, turn_id=turn.id,
                               session_id=session.id, speaker=turn.speaker, episode_id=episode.id)
                       for (turn, t), s in zip(flat, scores)])
        self._clock = max(self._clock, when)

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        kept = retrieve(self.bank, query.question, self.query_time(query), self.config.retrieval,
                        depth=k)
        return [Retrieved(score=s.score, text=s.fact.text, session_id=s.fact.session_id,
                          turn_id=s.fact.turn_id, memory_id=f"{TRIPLET_PREFIX}{s.fact.tid}",
                          speaker=s.fact.speaker, timestamp=_from_seconds(s.fact.created),
                          order=s.fact.tid)
                for s in kept]

    def context(self, query: Query, budget_tokens: int) -> str:
        """One MEMORY block of the top ``context_k`` triplets, as many as fit ``budget_tokens``."""
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}.")
        lines: list[str] = []
        for item in self.retrieve(query, self.config.context_k) if len(self) else []:
            block = memory_block(lines + [item.text], self.config.context_header)
            if self.counter.count(block) > budget_tokens:
                break
            lines.append(item.text)
        return memory_block(lines, self.config.context_header)

    def forget(self, selector: Selector) -> int:
        """Remove the triplets ``selector`` names (module docstring) in one cascade; returns how many."""
        def named(f) -> bool:
            return selector.matches(turn_id=f.turn_id, session_id=f.session_id,
                                    memory_id=f"{TRIPLET_PREFIX}{f.tid}", speakers=(f.speaker, f.subject, f.object),
                                    participants=self._sessions.get(f.session_id, ()), text=f.text)

        removed = self.bank.remove_where(named)
        self._forget_asked(selector)
        for sid in selector.session_ids:
            self._sessions.pop(sid, None)
        if selector.speakers:  # their names leave the record of who took part, as everything said to them did
            self._sessions = {sid: selector.scrub(names) for sid, names in self._sessions.items()}
        return len(removed)

    def _forget_asked(self, selector: Selector) -> None:
        """extraction llm: the turns ``selector`` names (by id, session, or about a selected speaker) leave the
        extractor's memo and the response cache."""
        gone = [tid for tid, (sid, speaker, text) in self._asked.items()
                if selector.matches(turn_id=tid, session_id=sid, speakers=(speaker,),
                                    participants=self._sessions.get(sid, ()), text=text)]
        pairs = [self._asked.pop(tid)[1:] for tid in gone]
        if pairs and hasattr(self.extractor, "forget"):
            self.extractor.forget(pairs)

    def forget_entities(self, names: Iterable[str]) -> int:
        """Remove entities and every triplet that names them; returns the triplets removed."""
        return sum(len(self.bank.remove_entity(n)) for n in names)

    def reset(self) -> None:
        """Empty every episode's bank, and purge the cached vectors of all they held."""
        texts = self._held_texts()
        super().reset()
        if texts:
            self.embedder.inner.forget(sorted(texts))

    def __len__(self) -> int:
        return len(self.bank)

    # --- persistence -------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        return self.bank.save(folder)

    def load(self, folder: str | Path) -> None:
        """Replace the memory with a bank saved by :meth:`save` (same embedder)."""
        self.bank = GraphMemoryBank.load(folder, self.embedder)
        said: dict[str, set[str]] = {}  # participants as far as the saved facts tell: their speakers
        for f in self.bank.facts():
            if f.session_id:
                said.setdefault(f.session_id, set()).update([f.speaker] if f.speaker else [])
        self._sessions = {sid: frozenset(names) for sid, names in said.items()}
        self._clock = max((f.created for f in self.bank.facts()), default=0.0)
