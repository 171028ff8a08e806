"""The temporal evaluation protocol (RealMem, seed 002; METHODS.md section 5).

RealMem's loop, for one episode and a fresh memory::

    for session in sessions (time order):
        for each query asked in this session:       # Query.session_id == session.id
            retrieve from memory of the sessions before this one, never this one or a later one
            score the ranking, measure the context a generator would read
        memory.observe(session)                      # only now does the session enter memory
    queries with session_id None are asked after the last session

Rules:
- Sessions are taken in ``Session.index`` order (the canonical time order).
- A query whose evidence is not strictly earlier than its session (evidence in the current or a
  later session, or flagged ``evidence_not_earlier`` by its loader: RealMem's quirk) is counted
  and excluded, never scored: scoring it would reward a leak or punish the impossible.
- Abstention queries (no answer in the history) are left out of the retrieval metrics, counted.
- A retrieved item from a session the memory has not observed is a leak and raises RuntimeError.
- Granularities: ``turn`` (evidence_turns), ``session`` (evidence_sessions; when a source gives
  only turn evidence, the sessions of those turns) and ``memory`` (evidence_memories), each scored
  when the strategy declares it and the query has evidence at it. Turn rankings are the turn ids
  of the retrieved items; session and memory rankings deduplicate the items' session / memory ids
  in rank order (a session ranks at the position of its best item).
- Every query gets one ranking of depth ``depth`` (default: every item the memory holds), from
  which recall/NDCG at each k and MRR are taken, and one ``context(query, budget_tokens)`` whose
  tokens are counted with the strategy's token counter. Its wall time (``latency_ms``: the retrieval
  at full depth, a session ranking included; not the context) is recorded per query.
- A strategy that scores sessions itself (:meth:`~pipelines.memory.base.MemoryStrategy.session_ranking`
  returns a ranking: e.g. a session's top turns combined, a session-level key) is scored at session
  granularity on that ranking, as LongMemEval's official code scores a session-key retriever
  (``evaluate_retrieval`` over session documents) — also under ``session_scoring: longmemeval``, whose
  turn2session rule is for rankings of turns.
- Before the loop, one strategy instance gets ``prepare(episodes)`` so that pure, text-only work
  (embedding every turn) is batched; it adds nothing to memory, so it cannot leak.

Answer-level evaluation (``ProtocolConfig.answers``, an :class:`AnswerRequest`; None: nothing is recorded and
the loop is what it was): for each query the request names, the loop also keeps what a reader model will be
given, at the query's time: the text of ``context(query, budget_tokens)`` (setting ``context``) and, for each k
of the request, the strategy's top k retrieved items rendered as the context renders them (setting ``top<k>``:
G-Long's Accuracy@k). Abstention queries are answered too (a reader should refuse): they are retrieved for
although they are never scored. A query whose evidence is not earlier than its session is never answered
(:func:`answerable`: the memory cannot hold the answer). The request's ``probes`` are extra queries asked in a
session only for their context, never scored nor counted (the response task: the partner's utterance before
each response of a dialogue). The retrieval scores and exclusions do not change.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from statistics import fmean, median
from typing import Any, Callable, Iterable, Mapping, Sequence

from tqdm.auto import tqdm

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import ConfigError, DataError
from pipelines.evaluate.metrics import longmemeval_turn2session, retrieval_metrics
from pipelines.memory import MemoryStrategy, Retrieved, TokenCounter, build_strategy, pack_context

EXCLUSION_REASONS = ("abstention", "evidence_not_earlier", "no_evidence", "no_scored_granularity")
_ID_FIELD = {"turn": "turn_id", "session": "session_id", "memory": "memory_id"}
MAX_SESSION_GROUPS = 10  # per-session tables and plots: one column per session up to this many, else ranges


@dataclass(frozen=True)
class AnswerRequest:
    """What the protocol records for answer-level evaluation (see the module docstring)."""

    queries: frozenset[tuple[str, str]] = frozenset()  # (episode id, query id) whose contexts are recorded
    ks: tuple[int, ...] = ()             # top<k> settings: the top k retrieved items, rendered (Accuracy@k)
    probes: Mapping[str, tuple[Query, ...]] = field(default_factory=dict)  # episode id -> context-only queries

    def __post_init__(self) -> None:
        ks = tuple(self.ks)
        if any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in ks):
            raise ConfigError(f"answer ks must be positive integers, got {list(ks)}.")
        object.__setattr__(self, "ks", tuple(sorted(set(ks))))
        object.__setattr__(self, "queries", frozenset(self.queries))

    def wants(self, episode_id: str, query_id: str) -> bool:
        return (episode_id, query_id) in self.queries


@dataclass(frozen=True)
class AnswerContext:
    """What one reader setting of one strategy is given for one query (recorded under an AnswerRequest)."""

    episode_id: str
    query_id: str
    setting: str                 # "context" (context(query, budget_tokens)) or "top<k>"
    text: str
    tokens: int                  # tokens of ``text`` (the strategy's token counter)


@dataclass(frozen=True)
class ProtocolConfig:
    """Settings of the temporal protocol."""

    ks: tuple[int, ...] = (1, 3, 5, 10)  # cut-offs of recall@k, recall_any/all@k, ndcg_any@k
    budget_tokens: int = 1024            # token budget of context(query, budget_tokens)
    depth: int | None = None             # items ranked per query (MRR, session rankings); None: all held
    show_progress: bool = True           # tqdm bar over episodes
    session_scoring: str = "dedup"       # "dedup", or "longmemeval": official turn2session metrics
    answers: AnswerRequest | None = None  # record the readers' contexts of these queries (None: record nothing)

    def __post_init__(self) -> None:
        ks = tuple(self.ks)
        if not ks or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in ks):
            raise ConfigError(f"ks must be a non-empty list of positive integers, got {list(ks)}.")
        if len(set(ks)) != len(ks):
            raise ConfigError(f"ks must not repeat a cut-off, got {list(ks)}.")
        object.__setattr__(self, "ks", tuple(sorted(ks)))
        if not isinstance(self.budget_tokens, int) or self.budget_tokens < 0:
            raise ConfigError(f"budget_tokens must be an integer >= 0, got {self.budget_tokens!r}.")
        if self.session_scoring not in ("dedup", "longmemeval"):
            raise ConfigError(f"session_scoring must be 'dedup' or 'longmemeval', got {self.session_scoring!r}.")
        if self.session_scoring == "longmemeval" and self.depth is not None:
            raise ConfigError("session_scoring 'longmemeval' needs the full turn ranking: leave depth null.")
        if self.depth is not None and self.depth < max(ks):
            raise ConfigError(f"depth ({self.depth}) must be at least the largest k ({max(ks)}), "
                              f"or null to rank every held item.")


@dataclass
class QueryScore:
    """The metrics of one query for one strategy at one granularity."""

    strategy: str
    episode_id: str
    query_id: str
    granularity: str             # "turn" | "session" | "memory"
    category: str                # the query's category ("uncategorised" when the source has none)
    session_index: int           # Session.index of the session it was asked in (last + 1: after the last)
    context_tokens: int          # tokens of context(query, budget_tokens)
    n_evidence: int              # |R| at this granularity
    retrieved: int               # items retrieve(query, depth) returned (0: the memory had nothing to give)
    metrics: dict[str, float] = field(default_factory=dict)  # "recall@5", "ndcg_any@10", "mrr", ...
    # wall time of retrieve(query, depth) and the session ranking, ms: a measurement, not a figure (not compared)
    latency_ms: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class Exclusion:
    """A query left out of the metrics, and why (one of EXCLUSION_REASONS)."""

    strategy: str
    episode_id: str
    query_id: str
    reason: str


@dataclass
class ProtocolResult:
    """All per-query scores and exclusions of one strategy over a set of episodes."""

    strategy: str
    episodes: int
    scores: list[QueryScore]
    excluded: list[Exclusion]
    contexts: list[AnswerContext] = field(default_factory=list)  # recorded under ProtocolConfig.answers
    # per episode: (episode id, sessions observed, items the memory held after its last session): what a
    # strategy wrote (a graph's triplets, EMMA's memories, a store's turns)
    memory: list[tuple[str, int, int]] = field(default_factory=list)
    index_bytes: list[int] = field(default_factory=list)  # per episode whose strategy measures it: its index's bytes
    # the language-model writers this run called (pipelines.memory.writers): role, model, and what THIS run cost
    # and wrote (requests, cache hits, tokens, seconds; the extractor's utterances, triplets and parse counts)
    writers: list[dict[str, Any]] = field(default_factory=list)
    _aggregate: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def exclusion_counts(self) -> dict[str, int]:
        counts = Counter(e.reason for e in self.excluded)
        return {reason: counts.get(reason, 0) for reason in EXCLUSION_REASONS}

    def aggregate(self) -> dict[str, Any]:
        """:func:`aggregate` of the scores (computed once; the scores are not meant to change)."""
        if self._aggregate is None:
            self._aggregate = aggregate(self.scores)
        return self._aggregate

    def memory_written(self) -> dict[str, float]:
        """Items held after the last session, summed over the episodes, the sessions observed, and their ratio."""
        items, sessions = sum(m[2] for m in self.memory), sum(m[1] for m in self.memory)
        return {"items": float(items), "sessions": float(sessions),
                "items_per_session": items / sessions if sessions else 0.0}

    def retrieved_nothing(self) -> bool:
        """True when queries were scored and not one retrieval returned an item: the memory stayed empty
        (or unusable) on this data, so the zeros measure no retrieval."""
        return bool(self.scores) and not any(s.retrieved for s in self.scores)


def ranking(items: Sequence[Retrieved], granularity: str) -> list[str]:
    """The ids of ``items`` at ``granularity``, in rank order, first occurrence kept."""
    attr = _ID_FIELD[granularity]
    ids = (getattr(item, attr) for item in items)
    return list(dict.fromkeys(i for i in ids if i is not None))


def _turn2session(items: Sequence[Retrieved], evidence_turns: set[str], ks: Sequence[int],
                  turn_session: dict[str, str]) -> dict[str, float]:
    """LongMemEval's session metrics from the turn ranking (metrics.longmemeval_turn2session)."""
    ranked = list(dict.fromkeys(i.turn_id for i in items if i.turn_id is not None))
    out: dict[str, float] = {}
    for k in ks:
        for name, value in longmemeval_turn2session(ranked, turn_session, evidence_turns, k).items():
            out[f"{name}@{k}"] = value
    return out


def _evidence(episode: Episode, query: Query, turn_session: dict[str, str], memory_session: dict[str, str],
              sessions: set[str]) -> dict[str, set[str]]:
    """Evidence ids per granularity, every id resolved (DataError naming the query and field)."""
    record = f"episode {episode.id}, query {query.id}"
    for fname, known in (("evidence_turns", turn_session), ("evidence_sessions", sessions),
                         ("evidence_memories", memory_session)):
        missing = [i for i in getattr(query, fname) if i not in known]
        if missing:
            raise DataError(f"evidence id(s) {missing} do not exist in the episode", record=record,
                            field=fname, rule="evidence_resolves")
    session_ev = set(query.evidence_sessions) or {turn_session[t] for t in query.evidence_turns}
    return {"turn": set(query.evidence_turns), "session": session_ev, "memory": set(query.evidence_memories)}


def _layout(episode: Episode) -> tuple[list, dict[str, int], dict[str, str], dict[str, str], dict]:
    """(sessions in time order, session id -> position, turn id -> session id, memory id -> session id,
    session id (None: after the last) -> the queries asked in it); DataError for a query asked in a session
    the episode does not have."""
    sessions = sorted(episode.sessions, key=lambda s: s.index)
    position = {s.id: p for p, s in enumerate(sessions)}
    turn_session = {t.id: s.id for s in sessions for t in s.turns}
    memory_session = {m.id: m.session_id for s in sessions for m in s.memories}
    asked_in: dict[str | None, list[Query]] = defaultdict(list)
    for query in episode.queries:
        if query.session_id is not None and query.session_id not in position:
            raise DataError(f"query is asked in session {query.session_id!r}, which the episode does not have",
                            record=f"episode {episode.id}, query {query.id}", field="session_id",
                            rule="query_session_resolves")
        asked_in[query.session_id].append(query)
    return sessions, position, turn_session, memory_session, asked_in


def _evidence_sessions(evidence: dict[str, set[str]], turn_session: dict[str, str],
                       memory_session: dict[str, str]) -> set[str]:
    """Every session the evidence lies in (its sessions, and the sessions of its turns and memories)."""
    return (evidence["session"] | {turn_session[t] for t in evidence["turn"]}
            | {memory_session[m] for m in evidence["memory"]})


def _not_earlier(query: Query, ev_sessions: set[str], pos: int, position: dict[str, int]) -> bool:
    """The rule of exclusion ``evidence_not_earlier``: flagged by the loader, or evidence in the session the
    query is asked in (position ``pos``) or a later one."""
    return "evidence_not_earlier" in query.flags or any(position.get(s, pos) >= pos for s in ev_sessions)


def answerable(episode: Episode) -> list[tuple[Query, str | None]]:
    """Every query of ``episode`` (in its order) with None when a reader can answer it from the memory, else
    the reason it cannot (``evidence_not_earlier``: the answer lies in the session the query is asked in or
    a later one). Abstention queries and queries without evidence are answerable (their answer, or the
    refusal, is known); the rule is the protocol's own, so it is the same for every strategy."""
    sessions, position, turn_session, memory_session, asked_in = _layout(episode)
    out = []
    for query in episode.queries:
        pos = position[query.session_id] if query.session_id is not None else len(sessions)
        evidence = _evidence(episode, query, turn_session, memory_session, set(position))
        late = _not_earlier(query, _evidence_sessions(evidence, turn_session, memory_session), pos, position)
        out.append((query, "evidence_not_earlier" if late else None))
    return out


def in_conversation(query: Query, session: Session | None) -> Query:
    """``query`` as it is asked in ``session``: with the turns of that session before its own turn
    (``Query.preceding``: the conversation so far, which the assistant has read; never in memory yet). A query
    that is no turn of the session (LoCoMo's and LongMemEval's questions, asked after the last session) has none."""
    if session is None or query.turn_id is None:
        return query
    ids = [t.id for t in session.turns]
    if query.turn_id not in ids:
        return query
    return query.model_copy(update={"preceding": session.turns[:ids.index(query.turn_id)]})


def evaluate_episode(episode: Episode, strategy: MemoryStrategy, config: ProtocolConfig,
                     name: str | None = None, contexts: list[AnswerContext] | None = None
                     ) -> tuple[list[QueryScore], list[Exclusion]]:
    """Run RealMem's temporal loop over one episode with ``strategy`` (reset first). Under
    ``config.answers`` the readers' contexts of the requested queries and probes are appended to
    ``contexts``."""
    name = name or strategy.name
    strategy.reset()
    sessions, position, turn_session, memory_session, asked_in = _layout(episode)
    request = config.answers
    if request is not None and contexts is None:
        raise ValueError("evaluate_episode: config.answers is set, so pass a list to receive the contexts.")

    scores: list[QueryScore] = []
    excluded: list[Exclusion] = []
    observed: set[str] = set()

    def retrieve(query: Query, k: int) -> list[Retrieved]:
        items = strategy.retrieve(query, k)
        leaked = sorted({i.session_id for i in items if i.session_id is not None} - observed)
        if leaked:
            raise RuntimeError(f"strategy {name!r} returned items of session(s) {leaked} for query {query.id} "
                               f"of episode {episode.id}, which it has not observed: a temporal leak.")
        return items

    def record(query: Query, text: str | None = None, tokens: int | None = None,
               items: list[Retrieved] | None = None, depth: int = 0) -> None:
        """The reader's contexts of ``query`` (what was already computed for scoring is reused)."""
        if text is None:
            text = strategy.context(query, config.budget_tokens)
            tokens = strategy.counter.count(text)
        contexts.append(AnswerContext(episode.id, query.id, "context", text, tokens))
        if not request.ks:
            return
        if items is None or depth < max(request.ks):
            items = retrieve(query, max(request.ks))
        dates = getattr(strategy.config, "include_dates", True)
        for k in request.ks:  # the top k items, unbudgeted, rendered as the context renders its items
            top = pack_context(items[:k], sys.maxsize, strategy.counter, dates)
            contexts.append(AnswerContext(episode.id, query.id, f"top{k}", top, strategy.counter.count(top)))

    def ask(query: Query, pos: int, session_index: int) -> None:
        def skip(reason: str) -> None:
            excluded.append(Exclusion(name, episode.id, query.id, reason))

        query = in_conversation(query, sessions[pos] if pos < len(sessions) else None)

        wanted = request is not None and request.wants(episode.id, query.id)
        if query.abstention and not wanted:
            return skip("abstention")
        evidence = _evidence(episode, query, turn_session, memory_session, set(position))
        if _not_earlier(query, _evidence_sessions(evidence, turn_session, memory_session), pos, position):
            return skip("abstention" if query.abstention else "evidence_not_earlier")
        if query.abstention or not any(evidence.values()):
            skip("abstention" if query.abstention else "no_evidence")
            return record(query) if wanted else None
        depth = config.depth or max(len(strategy), max(config.ks))
        start = time.perf_counter()
        items = retrieve(query, depth)
        sessions_ranked = strategy.session_ranking(query)
        latency_ms = (time.perf_counter() - start) * 1000.0
        if sessions_ranked is not None:
            leaked = sorted(set(sessions_ranked) - observed)
            if leaked:
                raise RuntimeError(f"strategy {name!r} ranked session(s) {leaked} for query {query.id} of episode "
                                   f"{episode.id}, which it has not observed: a temporal leak.")
        text = strategy.context(query, config.budget_tokens)
        tokens = strategy.counter.count(text)
        scored = False
        for granularity in strategy.granularities:
            relevant = evidence.get(granularity)
            if not relevant:
                continue
            if granularity == "session" and sessions_ranked is not None:
                metrics = retrieval_metrics(sessions_ranked, relevant, config.ks)
            else:
                metrics = retrieval_metrics(ranking(items, granularity), relevant, config.ks)
            if (granularity == "session" and config.session_scoring == "longmemeval" and evidence["turn"]
                    and "turn" in strategy.granularities and sessions_ranked is None):
                metrics = {**metrics, **_turn2session(items, evidence["turn"], config.ks, turn_session)}
            scores.append(QueryScore(name, episode.id, query.id, granularity, query.category or "uncategorised",
                                     session_index, tokens, len(relevant), len(items), metrics, latency_ms))
            scored = True
        if not scored:
            skip("no_scored_granularity")
        if wanted:
            record(query, text, tokens, items, depth)

    probes: dict[str | None, list[Query]] = defaultdict(list)
    for probe in (request.probes.get(episode.id, ()) if request is not None else ()):
        probes[probe.session_id].append(probe)
    for pos, session in enumerate(sessions):
        for query in asked_in.get(session.id, []):
            ask(query, pos, session.index)
        for probe in probes.get(session.id, []):
            record(probe)
        strategy.observe(episode, session)
        observed.add(session.id)
    after_last = (sessions[-1].index + 1) if sessions else 0
    for query in asked_in.get(None, []):
        ask(query, len(sessions), after_last)
    for probe in probes.get(None, []):
        record(probe)
    return scores, excluded


def run_protocol(episodes: Iterable[Episode], strategy: str | Callable[[], MemoryStrategy],
                 config: ProtocolConfig | None = None, settings: dict[str, Any] | None = None,
                 counter: TokenCounter | None = None, name: str | None = None) -> ProtocolResult:
    """Evaluate one strategy over ``episodes``, a fresh memory per episode.

    ``strategy`` is a registered name (built with ``settings`` and ``counter``) or a factory
    returning a fresh strategy.
    """
    config = config or ProtocolConfig()
    if isinstance(strategy, str):
        label = name or strategy
        settings = dict(settings or {})
        build = lambda: build_strategy(strategy, counter=counter, **settings)  # noqa: E731
    else:
        build = strategy
        label = name or getattr(strategy, "name", None) or "strategy"
    episodes = list(episodes)
    writers_before = _writer_counts(start=True)
    if episodes:
        build().prepare(episodes)  # batched pure precomputation (embeddings); memory stays empty
    scores: list[QueryScore] = []
    excluded: list[Exclusion] = []
    contexts: list[AnswerContext] = []
    memory: list[tuple[str, int, int]] = []
    index_bytes: list[int] = []
    for episode in tqdm(episodes, desc=f"benchmark {label}", unit="episode", disable=not config.show_progress):
        memory_of_episode = build()
        s, e = evaluate_episode(episode, memory_of_episode, config, name=label, contexts=contexts)
        scores.extend(s)
        excluded.extend(e)
        memory.append((episode.id, len(episode.sessions), len(memory_of_episode)))
        size = memory_of_episode.index_bytes()
        if size is not None:
            index_bytes.append(size)
    return ProtocolResult(label, len(episodes), scores, excluded, contexts, memory, index_bytes,
                          writers=_writer_delta(writers_before, _writer_counts()))


def _writer_counts(start: bool = False) -> dict[tuple[str, str], dict[str, Any]]:
    """(role, model) -> the report of each language-model writer of the process (cumulative counts); ``start``: the
    writers' peaks (``longest_prompt``) start afresh first, so that the next :func:`_writer_delta` reports the peaks
    of what ran in between."""
    from pipelines.memory.writers import reset_peaks, writer_reports

    if start:
        reset_peaks()
    return {(r["role"], r["model"]): r for r in writer_reports()}


def _writer_delta(before: dict, after: dict) -> list[dict[str, Any]]:
    """What each writer did between two :func:`_writer_counts` (numbers subtracted, nested counts too); the writers
    that did nothing are left out (a product's writer whose every prompt was refused, or whose product failed, did
    something: it is kept, to say why its memory is empty)."""
    from pipelines.memory.writers import PEAKS

    def minus(new: Any, old: Any) -> Any:
        if isinstance(new, dict):
            return {k: new[k] if k in PEAKS else minus(v, (old or {}).get(k) if isinstance(old, dict) else None)
                    for k, v in new.items()}
        if isinstance(new, (int, float)) and not isinstance(new, bool):
            return new - (old if isinstance(old, (int, float)) and not isinstance(old, bool) else 0)
        return new

    out = []
    for key, report in after.items():
        delta = minus(report, before.get(key))
        if any(delta.get(k, 0) for k in ("calls", "utterances", "refused_too_long", "product_errors")):
            out.append(delta)
    return out


def _group(scores: Sequence[QueryScore]) -> dict[str, Any]:
    """{"queries": n, "context_tokens": mean, "latency_ms_p50": median, <granularity>: {"queries": n,
    <metric>: mean}}."""
    tokens = {(s.episode_id, s.query_id): s.context_tokens for s in scores}  # one value per query
    latency = {(s.episode_id, s.query_id): s.latency_ms for s in scores}
    out: dict[str, Any] = {"queries": len(tokens),
                           "context_tokens": fmean(tokens.values()) if tokens else 0.0,
                           "latency_ms_p50": median(latency.values()) if latency else 0.0}
    by_gran: dict[str, list[QueryScore]] = defaultdict(list)
    for s in scores:
        by_gran[s.granularity].append(s)
    for granularity, rows in by_gran.items():
        names = list(rows[0].metrics)
        out[granularity] = {"queries": len(rows), **{m: fmean(r.metrics[m] for r in rows) for m in names}}
    return out


def aggregate(scores: Sequence[QueryScore]) -> dict[str, Any]:
    """Means over queries: overall, per category, per session index (each a :func:`_group`)."""
    per_category: dict[str, list[QueryScore]] = defaultdict(list)
    per_session: dict[int, list[QueryScore]] = defaultdict(list)
    for s in scores:
        per_category[s.category].append(s)
        per_session[s.session_index].append(s)
    return {"overall": _group(scores),
            "per_category": {c: _group(v) for c, v in sorted(per_category.items())},
            "per_session": {i: _group(v) for i, v in sorted(per_session.items())}}


def session_ranges(indices: Iterable[int], max_groups: int = MAX_SESSION_GROUPS) -> list[tuple[int, int]]:
    """Contiguous, inclusive ranges of session indices covering ``indices``, for per-session breakdowns.

    At most ``max_groups`` distinct indices: one range per index. More (RealMem: about 270 sessions per
    persona): the span from the lowest to the highest index cut into ``max_groups`` ranges of equal width
    (the last may be shorter), ranges holding none of ``indices`` left out.
    """
    if max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}.")
    present = sorted(set(indices))
    if len(present) <= max_groups:
        return [(i, i) for i in present]
    low, high = present[0], present[-1]
    width = -(-(high - low + 1) // max_groups)  # ceil: at most max_groups ranges
    ranges = [(start, min(start + width - 1, high)) for start in range(low, high + 1, width)]
    return [(a, b) for a, b in ranges if any(a <= i <= b for i in present)]


def aggregate_sessions(scores: Sequence[QueryScore], ranges: Sequence[tuple[int, int]]
                       ) -> dict[tuple[int, int], dict[str, Any]]:
    """:func:`_group` of the scores asked in each range of session indices: means over the queries of the
    range (never means of per-session means). Ranges without a score are left out."""
    out = {}
    for low, high in ranges:
        rows = [s for s in scores if low <= s.session_index <= high]
        if rows:
            out[(low, high)] = _group(rows)
    return out


def flat_metrics(group: dict[str, Any]) -> dict[str, float]:
    """``{"turn/recall@5": .., "session/mrr": .., "context_tokens": .., "queries": ..}`` of a group."""
    out: dict[str, float] = {}
    for key, value in group.items():
        if isinstance(value, dict):
            out.update({f"{key}/{m}": float(v) for m, v in value.items() if m != "queries"})
        else:
            out[key] = float(value)
    return out
