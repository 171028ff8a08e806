"""``fusion``: calibrated score fusion of BM25 and dense turn scores, with session scoring and time awareness.

Score fusion (Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023):
a convex combination of each ranker's scores, each first normalised over the candidates of the query, beats
Reciprocal Rank Fusion, which throws the score gaps away (:mod:`.hybrid` fuses ranks). For a query q and the
held turns d (BM25's unbounded scores s_b, dense cosines s_d):

    z_r(d) = (s_r(d) - min_d' s_r(d')) / (max_d' s_r(d') - min_d' s_r(d'))   ("minmax", the default)
    z_r(d) = (s_r(d) - mean_d' s_r(d')) / std_d' s_r(d')                  ("zscore")
    f(d)   = w_b * z_b(d) + w_d * z_d(d)                                 (turn score; weights >= 0)

so each ranker counts by how far a turn stands out of its own distribution for this query, not by its scale.

Session scoring (``session_pool``; Dai & Callan, "Deeper Text Understanding for IR with Contextual Neural
Language Modeling", SIGIR 2019: a document scored from its passages, MaxP and SumP): a session s with turns
d_1..d_n scores

    "max":      S(s) = max_i f(d_i)                                    (the protocol's default: best item)
    "sum_top":  S(s) = sum_{j<=m} f_(j) / j                            (its m best turns, f_(1) >= f_(2) ...)

plus, with ``session_key_weight`` w_k > 0, a session-level key: BM25 over the session's whole text (user and
partner turns joined), the key LongMemEval (Wu et al., ICLR 2025, section 5) indexes sessions by:

    S(s) += w_k * z(BM25(q, session text))

Key expansion (``key_expansion: llm``; LongMemEval section 5.3, fact-augmented keys: key = value + what a model
read in it): a language model of the LLM layer (``expansion_llm``, through the response cache) writes each
session's facts, events and preferences (:class:`~pipelines.memory.writers.LLMSummariser`); the summary joins the
session's BM25 key and is embedded, its cosine with the question added to S with the key's weight w_k:

    S(s) += w_k * (z(BM25(q, session text + summary)) + z(cos(E(q), E(summary))))

A turn inherits its session's evidence with ``session_prior`` w_p (a turn of a relevant session is likelier
evidence): f'(d) = f(d) + w_p * z(S)(session(d)). The turn ranking sorts f' (ties to the newer turn); the session
ranking (:meth:`session_ranking`) sorts S (ties to the newer session).

Time awareness (``time``: ``rules`` or ``llm``; :mod:`.temporal`): when the question names a time ("last week",
"in May") resolved against its date into a range of days, sessions dated in that range get ``time_boost`` added to
z(S) and to their turns' f' (``time_mode: boost``), or every other dated session is dropped (``filter``): the
time-aware query expansion of LongMemEval (section 5.4) with a range from rules or from a model.

A large store (issue #18, point 4: the first stage under 2 ms p50 at 100k turns): from ``ann_min_items`` held
turns with ``index: hnsw`` (the default here), a query for k turns fuses only the candidates U, the union of BM25's
top L turns sharing a term with the query and the HNSW graph's top L (L = max(``candidate_depth``, k)), as a hybrid
search engine does; z_r is then taken over U (Bruch et al. normalise over the retrieved lists too), the turns outside
U are not scored, and in a session's score they count as the floor min_U f = sum_r w_r min_U z_r (so "max" is
max(max_{d in U} f(d), floor) and "sum_top" fills its ranks past the session's candidates with the floor: every
session still scores, and a session key or a date can still lift one without a candidate). Below ``ann_min_items``,
or for a ranking deeper than the graph serves, every held turn is scored as above.

The strategy holds one :class:`~.bm25.BM25` and one :class:`~.dense.Dense` (the shipped MiniLM, or a trained
encoder through ``model_path``), built from its settings as :mod:`.hybrid` builds them, and sends observe /
forget / reset / prepare / enter to both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pipelines.data.schema import Episode, Query, Session
from pipelines.errors import ConfigError
from pipelines.memory.base import Retrieved, Selector, check_k, check_weights, register_strategy
from pipelines.lexical import bm25_tokens
from pipelines.models.embeddings import Embedder
from pipelines.memory.hybrid import RankerPair, RankersConfig
from pipelines.calibration import CALIBRATIONS, calibrate
from pipelines.memory.index import BM25Index, top_k
from pipelines.memory.turn_store import retrieved_turns

SESSION_POOLS = ("max", "sum_top")
TIME_SOURCES = ("none", "rules", "llm")
TIME_MODES = ("boost", "filter")


def pool_sessions(turn_scores: np.ndarray, session_of: np.ndarray, n_sessions: int, pool: str, m: int,
                  sizes: np.ndarray | None = None, floor: float = 0.0) -> np.ndarray:
    """Session scores (S,) from turn scores (N,) and each turn's session position (N,) in [0, S).

    With ``sizes`` (S,), the turns each session holds, of which ``turn_scores`` gives only some (the candidates of
    a large store, :meth:`Fusion._candidates`), every turn not given scores ``floor`` (no lower than the given
    ones' lowest possible score): a session with no given turn still scores from its ``floor`` turns, so that a
    session key or a date can bring it in. Without, a session with no turn scores -inf.
    """
    given = np.bincount(session_of, minlength=n_sessions)                         # (S,) turns given per session
    held = given if sizes is None else np.asarray(sizes)                         # (S,) turns held per session
    if pool not in SESSION_POOLS:
        raise ConfigError(f"session_pool must be one of {list(SESSION_POOLS)}, got {pool!r}.")
    order = np.lexsort((-turn_scores, session_of))         # (N,) by session, best turn first within it
    grouped = session_of[order]
    starts = np.r_[True, grouped[1:] != grouped[:-1]] if len(order) else np.zeros(0, dtype=bool)  # group firsts
    if pool == "max":                                       # a session's best turn: the first of its group
        out = np.full(n_sessions, -np.inf)
        out[grouped[starts]] = turn_scores[order][starts]
        if sizes is not None:
            out = np.where(held > given, np.maximum(out, floor), out)
        return out
    position = np.arange(len(order))
    rank = position - np.maximum.accumulate(np.where(starts, position, 0))   # (N,) 0 for a session's best turn
    keep = rank < m
    out = np.bincount(grouped[keep], weights=turn_scores[order][keep] / (rank[keep] + 1),
                      minlength=n_sessions).astype(np.float64)               # (S,) sum_j f_(j) / j
    if sizes is not None:   # the floor turns fill ranks given+1 .. min(held, m): floor * sum 1/j over them
        harmonic = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, m + 1))])   # (m+1,) H_j
        out += floor * (harmonic[np.minimum(held, m)] - harmonic[np.minimum(given, m)])
    out[held == 0] = -np.inf
    return out


def rank_sessions(sessions: Sequence[str], scores: np.ndarray) -> list[str]:
    """Session ids (S,) by score (S,), best first, equal scores to the newer (later) session; -inf left out."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.lexsort((-np.arange(len(scores)), -scores))
    return [sessions[p] for p in order[np.isfinite(scores[order])].tolist()]


@dataclass(frozen=True)
class FusionConfig(RankersConfig):
    """Calibrated fusion settings, plus the rankers' (:class:`~.hybrid.RankersConfig`)."""

    calibration: str = "minmax"        # minmax | zscore: each ranker's scores normalised per query
    bm25_weight: float = 1.0           # w_b
    dense_weight: float = 1.0          # w_d
    session_pool: str = "max"          # max | sum_top: a session's score from its turns' scores
    session_top: int = 3               # m of sum_top
    session_key_weight: float = 0.0    # w_k: BM25 over the session's whole text added to its score (0: none)
    session_prior: float = 0.0         # w_p: a turn's score gains its session's calibrated score (0: none)
    key_expansion: str = "none"        # none | llm: a model's summary of each session joins its key (w_k > 0)
    expansion_llm: dict[str, Any] | None = None  # key_expansion: llm only: the model that writes it (as llm.reader)
    expansion_llm_instructed: bool = True  # false: the small profile's G-Long summariser prompt (its adapter)
    time: str = "none"                 # none | rules | llm: time-aware retrieval (pipelines.memory.temporal)
    time_mode: str = "boost"           # boost | filter: sessions dated in the question's time range
    time_boost: float = 1.0            # added inside the range, decaying outside (boost; a ranker's min-max span is 1)
    time_llm: dict[str, Any] | None = None  # time: llm only: the model that reads the range (as llm.reader)
    llm_cache_dir: str | None = None   # the LLM layer's response cache of time_llm
    index: str = "hnsw"                # the dense ranker's: an HNSW graph once ann_min_items turns are held
    candidate_depth: int = 100         # graph in use: each ranker's top turns (at least k) are the ones fused
    context_weight: float = 0.0        # w_c: the conversation so far (Query.preceding) as a second query (0: none)
    context_turns: int = 4             # its last turns read (the nearest the question)
    thread_weight: float = 0.0         # w_t: sessions expanded along content links, by thread (0: none; .threads)
    thread_recency: float = 0.8        # gamma: a thread's session gains gamma^r, r its thread's newer sessions
    thread_opening: int = 4            # m: a session's first m turns say which earlier session it continues
    thread_lexical: float = 1.0        # w_l: BM25 of the opening against an earlier session's text, in the link
    link_min_cos: float = 0.4          # tau: a link needs cos(opening, earlier session's centroid) >= tau
    link_min_margin: float = 0.1       # delta: and that cosine >= delta + the mean over the earlier sessions
    query_link_weight: float = 0.0     # w_q: the thread the query's own session continues lifted (needs w_t > 0)
    query_link_min_cos: float = 0.2    # tau_q: that session's link needs cos(opening, centroid) >= tau_q

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calibration not in CALIBRATIONS:
            raise ConfigError(f"fusion.calibration must be one of {list(CALIBRATIONS)}, got {self.calibration!r}.")
        if self.session_pool not in SESSION_POOLS:
            raise ConfigError(f"fusion.session_pool must be one of {list(SESSION_POOLS)}, got {self.session_pool!r}.")
        for name in ("session_top", "candidate_depth", "context_turns", "thread_opening"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"fusion.{name} must be a positive integer, got {value!r}.")
        check_weights(self, "fusion", ("bm25_weight", "dense_weight", "session_key_weight", "session_prior",
                                       "time_boost", "context_weight", "thread_weight", "thread_lexical",
                                       "query_link_weight"))
        if not 0.0 <= self.thread_recency <= 1.0:
            raise ConfigError(f"fusion.thread_recency must be in [0, 1] (a discount per newer session of a "
                              f"thread), got {self.thread_recency!r}.")
        for name in ("link_min_cos", "query_link_min_cos"):
            if not -1.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"fusion.{name} must be a cosine in [-1, 1], got {getattr(self, name)!r}.")
        if self.query_link_weight and not self.thread_weight:
            raise ConfigError("fusion.query_link_weight lifts a thread of sessions, and threads are made only with "
                              "thread_weight > 0: set thread_weight, or query_link_weight: 0.")
        if self.bm25_weight == 0 and self.dense_weight == 0:
            raise ConfigError("fusion.bm25_weight and fusion.dense_weight are both 0; at least one ranker must count.")
        if self.key_expansion not in ("none", "llm"):
            raise ConfigError(f"fusion.key_expansion must be 'none' or 'llm', got {self.key_expansion!r}.")
        if self.key_expansion == "llm" and not self.session_key_weight:
            raise ConfigError("fusion.key_expansion is 'llm' but session_key_weight is 0: the expansion joins the "
                              "session key, which counts only with a weight > 0.")
        from pipelines.memory.writers import check_writer_llm

        check_writer_llm("summariser", self.expansion_llm, "fusion.expansion_llm", self.key_expansion == "llm",
                         why_wanted="fusion.key_expansion is 'llm'",
                         why_unused="fusion.key_expansion is 'none': a model writes key expansions only with "
                                    "key_expansion: llm",
                         example="{backend: local, model: smollm2-135m-instruct}")
        if self.time not in TIME_SOURCES:
            raise ConfigError(f"fusion.time must be one of {list(TIME_SOURCES)}, got {self.time!r}.")
        if self.time_mode not in TIME_MODES:
            raise ConfigError(f"fusion.time_mode must be one of {list(TIME_MODES)}, got {self.time_mode!r}.")
        if self.time == "llm" and not self.time_llm:
            raise ConfigError("fusion.time is 'llm': set time_llm (the model that reads a question's time range, "
                              "as llm.reader: {backend, model, ...}).")
        if self.time != "llm" and self.time_llm:
            raise ConfigError(f"fusion.time_llm is set but time is {self.time!r}: set time: llm or remove time_llm.")


@register_strategy("fusion")
class Fusion(RankerPair):
    """Calibrated fusion of BM25 and dense turn scores; sessions scored from their turns (and a session key);
    questions that name a time favour the sessions of that time."""

    config_class = FusionConfig
    ingredient = "BM25 + dense, calibrated score fusion (min-max normalised, summed)"

    def __init__(self, config=None, counter=None, embedder: Embedder | None = None, time_reader=None,
                 expander=None):
        super().__init__(config, counter, embedder)
        self._time_reader = time_reader if time_reader is not None else self._build_time_reader()
        c = self.config
        if expander is None and c.key_expansion == "llm":
            from pipelines.memory.writers import shared_writer

            expander = shared_writer("summariser", c.expansion_llm, c.llm_cache_dir, role="fusion.expansion_llm",
                                     instructed=c.expansion_llm_instructed)
        self.expander = expander   # sessions -> one summary each (pipelines.memory.writers.LLMSummariser), or None
        self._last: tuple | None = None  # (what was asked, of which memory; session ids (S,), their scores (S,))
        self.reset()

    def _build_time_reader(self):
        """query -> TimeRange | None (None for ``time: none``)."""
        c = self.config
        if c.time == "none":
            return None
        from pipelines.memory import temporal

        if c.time == "rules":
            return lambda query: temporal.extract_time_range(query.question, query.timestamp)
        reader = temporal.LLMTimeRangeExtractor.from_config(c.time_llm, cache_dir=c.llm_cache_dir)
        return lambda query: reader.extract(query.question, query.timestamp)

    def _empty_scope(self) -> dict:
        return {"_session_docs": {},   # session id -> BM25 tokens of its whole text (the session key)
                "_session_time": {},   # session id -> its timestamp
                "_expansions": {},     # session id -> (the model's summary, its request, its vector (D,) or None)
                "_changes": 0,         # observes and forgets so far (a cached session ranking is of one state)
                "_links": {},          # session id -> the earlier session id it continues, or None
                "_layout_cache": None}  # the held memory's _Layout, made at the first query of a state

    def index_bytes(self) -> int:
        """BM25's weights and the dense vectors of the turns, and what session scoring holds beside them: the
        session keys' tokens (8 bytes a token: a pointer to an interned string), their BM25 weights and the key
        expansions' vectors (the layout, made once per memory state)."""
        held = super().index_bytes()
        if not self.config.session_key_weight or not len(self):
            return held
        layout = self._layout()
        tokens = 8 * sum(len(tokens) for tokens in self._session_docs.values())
        return held + tokens + layout.keys.nbytes + layout.expansions.nbytes

    def prepare(self, episodes: Sequence[Episode]) -> None:
        """The rankers' batched embeddings; with ``key_expansion: llm``, every session's expansion written in one
        batched call (the writer memoises them for ``observe``) and embedded. Nothing enters memory."""
        super().prepare(episodes)
        if self.expander is None:
            return
        summaries = self.expander([s for e in episodes for s in e.sessions if s.turns])
        self.dense.embedder.embed([t for t in dict.fromkeys(summaries) if t.strip()])
        if hasattr(self.expander, "log_report"):
            self.expander.log_report()

    def observe(self, episode: Episode, session: Session) -> None:
        super().observe(episode, session)
        if session.turns:
            if self.expander is not None:
                summary = self.expander([session])[0]
                request = self.expander.request(session) if hasattr(self.expander, "request") else None
                vector = self.dense.embedder.embed([summary])[0] if summary.strip() else None   # (D,)
                self._expansions[session.id] = (summary, request, vector)
            held = self.bm25._items[-len(session.turns):]    # the session's turns, just appended by the store
            self._session_docs[session.id] = self._key(session.id, [i.indexed_text(self.config.include_speaker)
                                                                    for i in held])
            self._session_time[session.id] = session.timestamp
        self._changes += 1

    def _key(self, session_id: str, texts: list[str]) -> list[str]:
        """The session key's tokens: its held turns' texts (``speaker: text``) and its expansion, if it has one."""
        expansion = self._expansions.get(session_id)
        return self._key_tokens(texts + [expansion[0]] if expansion else texts)

    def forget(self, selector: Selector) -> int:
        """The turns go from both rankers; a session that lost a turn loses its key expansion too (the model wrote
        it from every turn), as does one whose expansion is about a selected speaker, and the writer forgets their
        requests (memo and response cache); the session keys are made again of what is held."""
        before = {i.turn_id: i.session_id for i in self.bm25.items}
        removed = super().forget(selector)
        self._changes += 1
        self._layout_cache = None      # its session keys' index holds the forgotten words
        self._links = {}               # links made again of what is held
        held = {i.turn_id for i in self.bm25.items}
        touched = {sid for tid, sid in before.items() if tid not in held}
        stale = {sid for sid, (summary, _, _) in self._expansions.items()
                 if sid in touched or sid in selector.session_ids or selector.about(text=summary)}
        if stale:
            requests = sorted({self._expansions[sid][1] for sid in stale if self._expansions[sid][1] is not None})
            if requests and hasattr(self.expander, "forget"):
                self.expander.forget(requests)
            if self.dense.config.forget_cached:
                kept = {summary for sid, (summary, _, _) in self._expansions.items() if sid not in stale}
                self.dense.embedder.forget({self._expansions[sid][0] for sid in stale} - kept)
            self._expansions = {sid: e for sid, e in self._expansions.items() if sid not in stale}
        if removed or stale:  # session keys made again of what is still held
            texts: dict[str, list[str]] = {}
            for item in self.bm25.items:
                texts.setdefault(item.session_id, []).append(item.indexed_text(self.config.include_speaker))
            self._session_docs = {sid: self._key(sid, t) for sid, t in texts.items()}
            self._session_time = {sid: t for sid, t in self._session_time.items() if sid in texts}
        return removed

    def reset(self) -> None:
        super().reset()
        self._last = None

    def _key_tokens(self, texts: list[str]) -> list[str]:
        return bm25_tokens(" ".join(texts), self.config.remove_stopwords)

    # --- scoring ----------------------------------------------------------------------------------
    def _layout(self) -> "_Layout":
        """The held memory as the scoring reads it, made once per state (observe and forget change it)."""
        layout = self._layout_cache
        if layout is None or layout.changes != self._changes:
            layout = self._layout_cache = _Layout.of(self)
        return layout

    def _candidates(self, k: int | None, lexical: np.ndarray | None, q: np.ndarray | None) -> np.ndarray | None:
        """The rows (U,) scored for a query for ``k`` turns, ascending, from its BM25 scores (N,) and its vector
        (D,) (None for a ranker of weight 0); None: every held turn.

        Below ``ann_min_items`` held turns (or with ``index: exact``, or a ranking deeper than the graph serves)
        every turn is scored. Above, the first stage reads a large store as a search engine does: the union of
        BM25's top L turns sharing a term with the query and the HNSW graph's top L (L = max(candidate_depth, k)),
        each ranker's scores calibrated over that union (the min-max of Bruch et al. over the retrieved lists);
        the other turns are not scored (-inf) and count, in their sessions' scores, as the union's lowest.
        """
        depth = max(self.config.candidate_depth, k or 0)
        if k is None or not self.dense._index.uses_ann(depth):
            return None
        parts = []
        if q is not None:
            rows = self.dense._index.search(q, depth)                                # (L,)
            if rows is None:
                return None
            parts.append(rows)
        if lexical is not None:
            rows = top_k(lexical, depth, background=0.0)                             # (L,)
            parts.append(rows[lexical[rows] > 0])
        return np.unique(np.concatenate(parts))

    def _scores(self, query: Query, k: int | None = None) -> tuple[np.ndarray, list[str], np.ndarray]:
        """(turn scores f' (N,) in store order, -inf for the turns not scored; session ids (S,); session scores
        S (S,)), for a query for ``k`` turns (None: every held turn scored). The store-wide view of :meth:`_fuse`,
        for inspection (the strategy itself ranks :meth:`_fuse`'s candidates and never builds it)."""
        rows, fused, sessions, pooled = self._fuse(query, k)
        if rows is not None:
            scored, fused = fused, np.full(len(self), -np.inf)                        # (N,)
            fused[rows] = scored
        return fused, sessions, pooled

    def _fuse(self, query: Query, k: int | None = None
              ) -> tuple[np.ndarray | None, np.ndarray, list[str], np.ndarray]:
        """(the rows scored (U,) ascending, or None for every held turn; their scores f' (U,) or (N,); session
        ids (S,); session scores S (S,)). A large store's query touches U turns and S sessions, never all N."""
        c = self.config
        layout = self._layout()
        self._linked = -1             # the held session the query's own session continues (set by the thread step)
        lexical = self.bm25._scores(query) if c.bm25_weight else None                # (N,)
        linking = bool(c.query_link_weight and query.turn_id is not None and layout.sessions)   # w_q needs w_t
        q = (self.dense.embedder.embed([query.question])[0]                        # (D,)
             if c.dense_weight or layout.expanded.any() or linking else None)
        rows = self._candidates(k, lexical, q if c.dense_weight else None)           # (U,) or None: all N
        fused, floor = self._turn_scores(lexical, q, rows)                           # (U,), the floor
        context = self._context(query)                # the conversation so far: its texts, or None
        if context is not None:
            tokens = bm25_tokens(" ".join(context), c.remove_stopwords)
            vectors = self.dense.embedder.embed(context)                              # (C, D)
            mean = vectors.mean(axis=0)
            scored, low = self._turn_scores(self.bm25._index.scores(tokens) if c.bm25_weight else None,
                                            mean / max(float(np.linalg.norm(mean)), 1e-12), rows)
            fused, floor = fused + c.context_weight * scored, floor + c.context_weight * low
        session_of = layout.session_of if rows is None else layout.session_of[rows]  # (U,)
        pooled = pool_sessions(fused, session_of, len(layout.sessions), c.session_pool, c.session_top,
                               None if rows is None else layout.sizes, floor)         # (S,)
        if c.session_key_weight:
            key = layout.keys.scores(bm25_tokens(query.question, c.remove_stopwords))  # (S,)
            pooled = pooled + c.session_key_weight * calibrate(key, c.calibration)
            if context is not None:
                key = layout.keys.scores(tokens)                                       # (S,)
                pooled = pooled + c.context_weight * c.session_key_weight * calibrate(key, c.calibration)
            if layout.expanded.any():   # the expansions' cosines (a session without one: the lowest)
                cos = np.where(layout.expanded, layout.expansions @ q, -1.0)   # (S,)
                pooled = pooled + c.session_key_weight * calibrate(cos, c.calibration)
        adjust = None
        if self._time_reader is not None:
            from pipelines.memory.temporal import day_weights

            adjust = day_weights(layout.days, self._time_reader(query), c.time_mode, boost=c.time_boost)  # (S,)
            pooled = pooled + adjust                                                 # -inf: filtered out
        if c.thread_weight and layout.threads is not None:
            from pipelines.threads import expand

            pooled = expand(pooled, layout.threads, c.thread_weight, c.thread_recency)  # (S,)
            if linking:                       # asked inside a session: the thread that session continues
                from pipelines.threads import lift

                self._linked = self._query_link(query, q, layout)
                pooled = lift(pooled, layout.threads, self._linked, c.query_link_weight)
        if c.session_prior:
            fused = fused + c.session_prior * _calibrate_finite(pooled, c.calibration)[session_of]
        if adjust is not None:
            fused = fused + adjust[session_of]
        return rows, fused, layout.sessions, pooled

    def _query_link(self, query: Query, q: np.ndarray, layout: "_Layout") -> int:
        """The held session (position) that the session ``query`` is asked in continues, or -1 (:mod:`pipelines.threads`:
        its opening is its first turns before the question and the question, q its vector (D,))."""
        from pipelines.threads import link

        c = self.config
        texts = [t.text for t in query.preceding if t.text.strip()][:c.thread_opening - 1]
        vectors = np.vstack([self.dense.embedder.embed(texts), q[None]]) if texts else q[None]   # (m, D)
        opening = vectors.astype(np.float64).mean(axis=0)
        opening /= max(float(np.linalg.norm(opening)), 1e-12)                                    # (D,)
        lexical = None
        if c.thread_lexical:
            lexical = layout.texts.scores(bm25_tokens(" ".join(texts + [query.question]), c.remove_stopwords))  # (S,)
        return link(opening, layout.centroids, lexical, c.thread_lexical, c.query_link_min_cos)[0]

    def _turn_scores(self, lexical: np.ndarray | None, q: np.ndarray | None, rows: np.ndarray | None
                     ) -> tuple[np.ndarray, float]:
        """f (U,) of one query: its BM25 scores (N,) and vector (D,) calibrated over the rows scored (U,; None:
        all N) and weighted; and the floor, what a turn outside the rows counts in its session's score."""
        c = self.config
        fused = np.zeros(len(self) if rows is None else len(rows))                   # (U,)
        floor = 0.0
        if c.bm25_weight:
            z = calibrate(lexical if rows is None else lexical[rows], c.calibration)
            fused += c.bm25_weight * z
            floor += c.bm25_weight * (z.min() if z.size else 0.0)
        if c.dense_weight:
            vectors = self.dense._index.vectors                                      # (N, D)
            z = calibrate(vectors @ q if rows is None else vectors[rows] @ q, c.calibration)
            fused += c.dense_weight * z
            floor += c.dense_weight * (z.min() if z.size else 0.0)
        return fused, floor

    def _context(self, query: Query) -> list[str] | None:
        """The texts of the last ``context_turns`` turns of the conversation so far (``Query.preceding``), as the
        rankers index turns; None without (or with ``context_weight`` 0)."""
        c = self.config
        if not c.context_weight or not query.preceding:
            return None
        turns = [t for t in query.preceding if t.text.strip()][-c.context_turns:]
        return [f"{t.speaker}: {t.text}" if c.include_speaker else t.text for t in turns] or None

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        if not len(self):
            self._last = (self._asked(query), [], np.zeros(0))
            return []
        rows, scores, sessions, pooled = self._fuse(query, k)
        self._last = (self._asked(query), sessions, pooled)
        return self._retrieved(rows, scores, k)

    def _retrieved(self, rows: np.ndarray | None, scores: np.ndarray, k: int) -> list[Retrieved]:
        """The ``k`` best of the scored turns (rows (U,) ascending and their scores (U,); None: every row, (N,)):
        score desc, then newer first (rows ascend in observation order), without those a filter dropped (-inf)."""
        best = top_k(scores, k, background=-np.inf)                                   # positions in scores
        best = best[np.isfinite(scores[best])]
        ranking = best if rows is None else rows[best]
        return retrieved_turns(self.bm25._items, ranking, scores[best])

    def session_ranking(self, query: Query) -> list[str] | None:
        """The sessions by S; None when S is the best of a session's turns (``max``, no session key): the ranking
        is then the one the protocol reads off the turn ranking (a session-wide constant added to every turn of
        a session, the time adjustment or the prior, moves the best turn as it moves S)."""
        c = self.config
        if c.session_pool == "max" and not c.session_key_weight:
            return None
        if self._last is None or self._last[0] != self._asked(query):
            self.retrieve(query, max(len(self), 1))
        return rank_sessions(self._last[1], self._last[2])

    def _asked(self, query: Query) -> tuple:
        """What a session ranking answers: the query, in this episode's memory as it is now (items held)."""
        return (self.episode_id, query.id, query.question, query.timestamp, query.turn_id,
                tuple(t.id for t in query.preceding), len(self), self._changes)


@dataclass(frozen=True)
class _Layout:
    """The held memory of a :class:`Fusion` as its scoring reads it (one state: ``changes`` observes / forgets)."""

    changes: int
    n: int                        # N held turns
    sessions: list[str]           # (S,) session ids in observation order
    session_of: np.ndarray        # (N,) int: each turn's session position
    sizes: np.ndarray             # (S,) int: turns held per session
    days: np.ndarray              # (S,) float: each session's day (proleptic ordinal), NaN undated
    keys: BM25Index | None        # BM25 over the S session keys (session_key_weight > 0)
    expansions: np.ndarray        # (S, D) float32: the key expansions' vectors (zeros without)
    expanded: np.ndarray          # (S,) bool: the session has an embedded expansion
    threads: Any = None           # the sessions' thread forest (thread_weight > 0; pipelines.threads.Threads)
    centroids: Any = None         # (S, D) float64: each session's normalised mean vector (thread_weight > 0)
    texts: BM25Index | None = None  # BM25 over the S sessions' texts (thread_lexical > 0)

    @classmethod
    def of(cls, fusion: "Fusion") -> "_Layout":
        c = fusion.config
        items = fusion.bm25._items
        sessions = list(dict.fromkeys(i.session_id for i in items))
        position = {sid: p for p, sid in enumerate(sessions)}
        session_of = np.fromiter((position[i.session_id] for i in items), dtype=np.int64, count=len(items))
        times = [fusion._session_time.get(sid) for sid in sessions]
        days = np.array([np.nan if t is None else t.toordinal() for t in times], dtype=np.float64)
        keys = None
        if c.session_key_weight:
            keys = BM25Index(c.k1, c.b, c.epsilon)
            keys.add([fusion._session_docs.get(sid, []) for sid in sessions])
        vectors = [fusion._expansions.get(sid, (None, None, None))[2] for sid in sessions]
        expanded = np.array([v is not None for v in vectors], dtype=bool)
        dim = next((len(v) for v in vectors if v is not None), 0)
        expansions = np.zeros((len(sessions), dim), dtype=np.float32)
        for p in np.flatnonzero(expanded):
            expansions[p] = vectors[p]
        threads = centroids = texts = None
        if c.thread_weight and sessions:
            from pipelines.threads import session_vectors

            texts = keys
            if c.thread_lexical and texts is None:          # BM25 over the sessions' whole texts
                texts = BM25Index(c.k1, c.b, c.epsilon)
                texts.add([fusion._session_docs.get(sid, []) for sid in sessions])
            openings, centroids = session_vectors(np.asarray(fusion.dense._index.vectors, dtype=np.float64),
                                                  session_of, len(sessions), c.thread_opening)   # (S, D) each
            threads = _threads(fusion, sessions, session_of, openings, centroids, texts)
        return cls(fusion._changes, len(items), sessions, session_of,
                   np.bincount(session_of, minlength=len(sessions)), days, keys, expansions, expanded, threads,
                   centroids, texts)


def _threads(fusion: "Fusion", sessions: list[str], session_of: np.ndarray, openings: np.ndarray,
             centroids: np.ndarray, texts: BM25Index | None):
    """The held sessions' thread forest (:mod:`pipelines.threads`) from their openings and centroids (S, D) and BM25
    over their texts. A session's link is made once, against the sessions held before it, and kept (``_links``:
    session id -> its parent's id, or None) until a forget."""
    from pipelines.threads import forest, link

    c = fusion.config
    links = fusion._links
    position = {sid: p for p, sid in enumerate(sessions)}
    new = [p for p, sid in enumerate(sessions) if sid not in links]
    if new:
        opening_texts: dict[int, list[str]] = {p: [] for p in new}
        for item, p in zip(fusion.bm25._items, session_of.tolist()):
            if p in opening_texts and len(opening_texts[p]) < c.thread_opening:
                opening_texts[p].append(item.indexed_text(c.include_speaker))
        for p in new:
            lexical = None
            if c.thread_lexical:
                lexical = texts.scores(bm25_tokens(" ".join(opening_texts[p]), c.remove_stopwords))[:p]   # (p,)
            parent, _ = link(openings[p], centroids[:p], lexical, c.thread_lexical, c.link_min_cos,
                             c.link_min_margin)
            links[sessions[p]] = sessions[parent] if parent >= 0 else None
    return forest(np.array([position[links[sid]] if links[sid] is not None else -1 for sid in sessions]))


def _calibrate_finite(scores: np.ndarray, method: str) -> np.ndarray:
    """:func:`calibrate` over the finite entries; the others stay -inf."""
    out = np.full_like(scores, -np.inf, dtype=np.float64)
    finite = np.isfinite(scores)
    out[finite] = calibrate(scores[finite], method)
    return out


# --- the named steps of the ablation: each adds one ingredient to the previous -------------------------------
# Defaults chosen on LoCoMo conversations 0-4 (calibration, m, w_k, w_p, time_boost); docs/explanation/retrieval.md
# gives the sweep and the held-out figures (conversations 5-9, the LongMemEval S sample).

@dataclass(frozen=True)
class FusionSessionsConfig(FusionConfig):
    session_pool: str = "sum_top"
    session_key_weight: float = 1.0
    session_prior: float = 1.0


@register_strategy("fusion_sessions")
class FusionSessions(Fusion):
    """fusion + session scoring: a session's 3 best turns (SumP), its whole-text BM25 key, a turn's session prior."""

    config_class = FusionSessionsConfig
    ingredient = "+ session scoring: 3 best turns (SumP), session BM25 key, session prior"


@dataclass(frozen=True)
class FusionTimeConfig(FusionSessionsConfig):
    time: str = "rules"


@register_strategy("fusion_time")
class FusionTime(Fusion):
    """fusion_sessions + time awareness: sessions dated in the time range a question names are boosted."""

    config_class = FusionTimeConfig
    ingredient = "+ time-aware: sessions in the question's time range boosted"


@dataclass(frozen=True)
class FusionContextConfig(FusionTimeConfig):
    context_weight: float = 0.5


@register_strategy("fusion_context")
class FusionContext(Fusion):
    """fusion_time + the conversation so far: the turns of the query's session before it, a second query at half
    the question's weight."""

    config_class = FusionContextConfig
    ingredient = "+ conversation so far: the session's turns before the question, at half its weight"


@dataclass(frozen=True)
class FusionThreadsConfig(FusionContextConfig):
    thread_weight: float = 1.0
    query_link_weight: float = 0.3


@register_strategy("fusion_threads")
class FusionThreads(Fusion):
    """fusion_context + threads: sessions linked by content to the earlier sessions they continue, the latest
    sessions of the threads the question matches lifted with them, and, for a question asked inside a session, the
    thread that session continues lifted whole (:mod:`pipelines.threads`)."""

    config_class = FusionThreadsConfig
    ingredient = "+ threads: sessions linked by content; the matched threads and the asking session's thread lifted"


@dataclass(frozen=True)
class FusionKeysConfig(FusionTimeConfig):
    key_expansion: str = "llm"


@register_strategy("fusion_keys")
class FusionKeys(Fusion):
    """fusion_time + key expansion: a language model's summary of each session joins its key (expansion_llm)."""

    config_class = FusionKeysConfig
    ingredient = "+ key expansion: a model's summary of each session joins its key"
