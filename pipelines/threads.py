"""Thread links between sessions, inferred from their content, and retrieval expanded along them.

EMMA (seed 000, section 3.3, "Memory Linker") links each new memory to the earlier memories it continues and, at
retrieval time, returns the top memory together with the memories linked to it; G-Long (seed 003) retrieves
associatively over its graph of memories. A user who comes back to an assistant ("I'm back. About that
checklist...") continues a thread of sessions, and what they ask about is most often in the latest sessions of
that thread (RealMem, seed 002: about half of the queries are the first turn of a session). Neither the thread nor
the session's title is given to a memory: both are inferred here from the sessions' text alone.

Links (made over the held sessions in observation order, each session only to earlier ones). A session s has an
opening o_s, the normalised mean of the vectors of its first m turns (what a returning user says first), and a
centroid c_t, the normalised mean of all its turns' vectors. Its link score to an earlier session t < s is

    a(s, t) = z_t(cos(o_s, c_t)) + w_l * z_t(BM25(opening tokens of s, whole text of t))       (z: min-max over t < s)

s is linked to its best earlier session t* = argmax_t a(s, t) when cos(o_s, c_t*) >= tau (``link_min_cos``) and
cos(o_s, c_t*) >= delta + mean_t cos(o_s, c_t) (``link_min_margin``: it stands out of the earlier sessions; a file
whose sessions all look alike, LoCoMo's chats of two friends, links nothing): a session that continues nothing (a
one-off question) stays unlinked. The links form a forest; its trees are the
threads (each session in one thread, a new thread when unlinked).

Expansion at query time, from the session scores S (S,) of the first stage (any finite scores, -inf for a session
filtered out), with z(S) their min-max over the finite ones:

    theta(T)   = max_{t in T} z(S)(t)                      (a thread is as relevant as its best session)
    r(s)       = #{t in T(s): t newer than s}              (0 for the thread's latest session)
    S'(s)      = S(s) + w_t * theta(T(s)) * gamma^r(s)     (``thread_weight`` w_t, ``thread_recency`` gamma)

so the latest sessions of the threads the query matches rise with their thread, the latest most; a session alone
in its thread gains w_t * z(S)(s), its own score again, which keeps the order of unlinked sessions as it was.

The session the query is asked in. A question asked by a turn of a session (a RealMem user coming back: "I'm back.
About that checklist...") opens a session not held yet, and that session is linked as any session is (EMMA's linker
links the new memory to the memories it continues). Its opening o_q is the normalised mean of the vectors of the
session's turns before the question (its first m - 1 at most) and of the question; its link t_q is the best earlier
session by a(q, t), kept when cos(o_q, c_t_q) >= tau_q (``query_link_min_cos``, no margin: a returning user's
session nearly always continues one). Every session of t_q's thread is then lifted by w_q (``query_link_weight``)
times the span of the scores:

    S''(s) = S'(s) + w_q * (max S' - min S') * [T(s) = T(t_q)]          (max, min over the finite S')

so the sessions of the thread the conversation continues rise together, in the order the steps above gave them. A
question asked after the last session (LoCoMo's, LongMemEval's) is asked in no session: nothing is lifted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.calibration import calibrate


@dataclass(frozen=True)
class Threads:
    """The held sessions' thread forest (observation order, S sessions)."""

    parent: np.ndarray    # (S,) int: the earlier session each session continues, -1 for none
    thread: np.ndarray    # (S,) int: each session's thread, numbered 0.. by its first (oldest) session
    newer: np.ndarray     # (S,) int: sessions of the same thread observed after it (0: the thread's latest)

    @property
    def links(self) -> int:
        return int((self.parent >= 0).sum())


def session_vectors(vectors: np.ndarray, session_of: np.ndarray, n_sessions: int, opening: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(openings (S, D), centroids (S, D)), each normalised, from the held turns' unit vectors (N, D) in
    observation order and each turn's session position (N,): a session's first ``opening`` turns' mean, and all
    of its turns' mean. A session with no vector (no turn held) gets zeros."""
    dim = vectors.shape[1] if vectors.ndim == 2 else 0
    starts = np.r_[True, session_of[1:] != session_of[:-1]] if len(session_of) else np.zeros(0, dtype=bool)
    position = np.arange(len(session_of))
    rank = position - np.maximum.accumulate(np.where(starts, position, 0))  # (N,) a turn's place in its session
    openings = np.zeros((n_sessions, dim), dtype=np.float64)
    centroids = np.zeros((n_sessions, dim), dtype=np.float64)
    np.add.at(centroids, session_of, vectors)
    first = rank < opening
    np.add.at(openings, session_of[first], vectors[first])
    return _unit(openings), _unit(centroids)


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def link(opening: np.ndarray, centroids: np.ndarray, lexical: np.ndarray | None, lexical_weight: float,
         min_cos: float, min_margin: float = 0.0) -> tuple[int, float]:
    """(the earlier session a session continues, or -1; the link's cosine, nan for none), from the session's
    opening (D,), the earlier sessions' centroids (s, D) and the BM25 scores (s,) of its opening against their
    whole texts (None: none)."""
    if not len(centroids):
        return -1, float("nan")
    cosines = centroids @ opening                                          # (s,) cos(o_s, c_t)
    score = calibrate(cosines, "minmax")                                   # (s,) over the earlier sessions
    if lexical is not None and lexical_weight:
        score = score + lexical_weight * calibrate(lexical, "minmax")
    best = int(np.argmax(score))
    margin = cosines[best] - cosines.mean()                                # how far it stands out of the others
    if cosines[best] >= min_cos and (len(cosines) < 2 or margin >= min_margin):
        return best, float(cosines[best])
    return -1, float("nan")


def forest(parent: np.ndarray) -> Threads:
    """The threads of S sessions in observation order from each one's parent (S,) (an earlier position, or -1)."""
    parent = np.asarray(parent, dtype=np.int64)
    n = len(parent)
    thread = np.arange(n)
    for s in range(n):                                                     # a parent is older: already resolved
        if parent[s] >= 0:
            thread[s] = thread[parent[s]]
    _, thread = np.unique(thread, return_inverse=True)
    newer = np.zeros(n, dtype=np.int64)
    seen = np.zeros(thread.max() + 1 if n else 0, dtype=np.int64)
    for s in range(n - 1, -1, -1):                                         # latest first
        newer[s] = seen[thread[s]]
        seen[thread[s]] += 1
    return Threads(parent, thread.astype(np.int64), newer)


def expand(scores: np.ndarray, threads: Threads, weight: float, recency: float) -> np.ndarray:
    """S' (S,) from the session scores S (S,) (module docstring): each session gains its thread's best calibrated
    score, discounted by ``recency`` per newer session of its thread; -inf stays -inf."""
    scores = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(scores)
    if not finite.any() or not weight:
        return scores
    z = np.full_like(scores, -np.inf)
    z[finite] = calibrate(scores[finite], "minmax")                         # (S,) in [0, 1]
    best = np.full(threads.thread.max() + 1, -np.inf)
    np.maximum.at(best, threads.thread, z)                                 # (T,) theta per thread
    theta = np.maximum(best[threads.thread], 0.0)                          # (S,) a filtered thread gains 0
    return np.where(finite, scores + weight * theta * recency ** threads.newer, scores)


def lift(scores: np.ndarray, threads: Threads, link: int, weight: float) -> np.ndarray:
    """S'' (S,) from S' (S,): the sessions of ``link``'s thread (the earlier session the query's own session
    continues; -1: none) lifted by ``weight`` times the span of the finite scores (module docstring); -inf stays."""
    scores = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(scores)
    if link < 0 or not weight or not finite.any():
        return scores
    span = float(scores[finite].max() - scores[finite].min()) or 1.0      # one session, or all alike: 1
    members = threads.thread == threads.thread[link]                       # (S,) T(s) = T(t_q)
    return np.where(finite & members, scores + weight * span, scores)
