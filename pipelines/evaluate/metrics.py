"""Retrieval metrics of the memory benchmark (METHODS.md sections 5-6), small pure functions.

Notation: ``ranked`` = the retrieved ids, best first, no repeats; R = the set of relevant
(evidence) ids, |R| >= 1; top_k = the first k ids of ``ranked``; rank(r) is 1-based.

- recall@k      = |R ∩ top_k| / |R|                          (fraction of evidence found)
- recall_any@k  = 1 if R ∩ top_k ≠ ∅ else 0                  (LongMemEval)
- recall_all@k  = 1 if R ⊆ top_k else 0                      (LongMemEval)
- ndcg_any@k    = DCG@k / IDCG@k with binary relevance        (LongMemEval)
      DCG@k  = rel_1 + sum_{i=2..k} rel_i / log2(i)           rel_i = 1 if ranked[i] in R
      IDCG@k = the DCG@k of the ideal ranking (all |R| relevant ids first)
- MRR           = 1 / rank of the first relevant id in ``ranked`` (0 if none is retrieved)
- context tokens = the token count of the text a generator reads

The three LongMemEval metrics follow the official code (xiaowu0162/LongMemEval,
``src/retrieval/eval_utils.py``: ``evaluate_retrieval`` and ``ndcg``) exactly: note its DCG
discounts rank 1 and rank 2 both by 1 (``rel[0] + sum(rel[1:] / log2(arange(2, n + 1)))``),
and its ideal DCG counts the relevant ids present in the corpus. Our corpus is the whole
earlier history, which holds every evidence item under the temporal protocol, so the ideal
ranking holds all |R| relevant ids. One deliberate difference: an empty R raises ValueError (the official code returns recall_all = 1
and ndcg = 0, and averages such questions in; abstention questions and questions whose evidence is
not in the indexed corpus, e.g. assistant-only evidence under LongMemEval's user-turn index, are
left out before scoring and counted as exclusions). Session rankings are, with ``session_scoring:
dedup``, the deduplicated turn ranking (sessions in order of their best turn,
:func:`pipelines.evaluate.protocol.ranking`) scored like any ranking; with ``session_scoring:
longmemeval`` they are scored by :func:`longmemeval_turn2session`, exactly as the official
``evaluate_retrieval_turn2session`` (duplicate turns kept, k widened to k distinct documents, an
evidence session's non-evidence turns a separate "noans" document), which differs from the
deduplicated ranking in NDCG and, through the noans rule, in recall_any / recall_all too.
"""

from __future__ import annotations

import math
from typing import Collection, Sequence

from pipelines.memory.tokens import DEFAULT_COUNTER, TokenCounter

METRICS = ("recall", "recall_any", "recall_all", "ndcg_any")  # the metrics taken at each cut-off k


def _check(ranked: Sequence[str], relevant: Collection[str], k: int | None = None) -> set[str]:
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    rel = set(relevant)
    if not rel:
        raise ValueError("the relevant set is empty: the metric is undefined (leave such queries out).")
    if len(set(ranked)) != len(ranked):
        raise ValueError("ranked ids repeat; deduplicate the ranking before scoring it.")
    return rel


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """|R ∩ top_k| / |R|."""
    rel = _check(ranked, relevant, k)
    return len(rel.intersection(ranked[:k])) / len(rel)


def recall_any_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 if any relevant id is in the top k, else 0.0."""
    rel = _check(ranked, relevant, k)
    return float(any(r in rel for r in ranked[:k]))


def recall_all_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 if every relevant id is in the top k, else 0.0."""
    rel = _check(ranked, relevant, k)
    return float(rel.issubset(ranked[:k]))


def dcg(relevances: Sequence[float], k: int) -> float:
    """LongMemEval's DCG@k: rel_1 + sum_{i=2..k} rel_i / log2(i)."""
    rels = list(relevances)[:k]
    if not rels:
        return 0.0
    return float(rels[0] + sum(r / math.log2(i) for i, r in enumerate(rels[1:], start=2)))


def ndcg_any_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """DCG@k of the ranking / DCG@k of the ideal ranking, binary relevance (LongMemEval)."""
    rel = _check(ranked, relevant, k)
    actual = dcg([1.0 if r in rel else 0.0 for r in ranked[:k]], k)
    ideal = dcg([1.0] * min(len(rel), k), k)
    return actual / ideal


def mrr(ranked: Sequence[str], relevant: Collection[str]) -> float:
    """Reciprocal rank of the first relevant id (1-based); 0.0 if none was retrieved."""
    rel = _check(ranked, relevant)
    for rank, item in enumerate(ranked, start=1):
        if item in rel:
            return 1.0 / rank
    return 0.0


def context_tokens(text: str, counter: TokenCounter = DEFAULT_COUNTER) -> int:
    """Tokens of the context a generator reads (regex tokens unless a tokenizer is given)."""
    return counter.count(text)


def retrieval_metrics(ranked: Sequence[str], relevant: Collection[str], ks: Sequence[int]) -> dict[str, float]:
    """Every metric at every k, flat: ``{"recall@1": ..., "ndcg_any@10": ..., "mrr": ...}``."""
    out: dict[str, float] = {}
    for name, fn in (("recall", recall_at_k), ("recall_any", recall_any_at_k),
                     ("recall_all", recall_all_at_k), ("ndcg_any", ndcg_any_at_k)):
        for k in ks:
            out[f"{name}@{k}"] = fn(ranked, relevant, k)
    out["mrr"] = mrr(ranked, relevant)
    return out


def longmemeval_turn2session(turn_ranking: Sequence[str], turn_session: dict[str, str],
                             evidence_turns: Collection[str], k: int) -> dict[str, float]:
    """Session metrics from a full turn ranking, exactly as LongMemEval's
    ``evaluate_retrieval_turn2session`` (``src/retrieval/eval_utils.py``).

    The official corpus ids are ``<session>_<turn>`` for evidence turns and ``noans`` ids for the
    other turns of an evidence session, so after stripping the turn number an evidence session's
    non-evidence turns belong to a *different* document than its evidence turns. We reproduce
    that: a turn's document is its session, or ``<session>#noans`` when it is a non-evidence turn
    of an evidence session. Then, with R = the documents of the evidence turns:

    - effective_k = the smallest k' >= k whose first k' turns hold k distinct documents (or all);
    - recall_any / recall_all = whether any / every d in R is among the documents of the first
      effective_k turns; recall = the share of R among them;
    - ndcg_any = DCG@effective_k / IDCG@effective_k over the turn list, a turn relevant when its
      document is in R (so every evidence turn counts), IDCG from all corpus turns sorted.

    ``turn_ranking`` must rank every turn of the corpus (the protocol's default depth).
    """
    if k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    evidence = set(evidence_turns)
    if not evidence:
        raise ValueError("the relevant set is empty: the metric is undefined (leave such queries out).")
    ev_sessions = {turn_session[t] for t in evidence}

    def doc(turn: str) -> str:
        session = turn_session[turn]
        return f"{session}#noans" if session in ev_sessions and turn not in evidence else session

    docs = [doc(t) for t in turn_ranking]
    relevant = {turn_session[t] for t in evidence}
    effective_k, seen = 0, set()
    for d in docs:  # widen k until the prefix holds k distinct documents
        if len(seen) >= k:
            break
        seen.add(d)
        effective_k += 1
    effective_k = max(effective_k, min(k, len(docs)))
    top = set(docs[:effective_k])
    rels = [1.0 if d in relevant else 0.0 for d in docs]
    ideal = dcg(sorted(rels, reverse=True), effective_k)
    return {"recall": len(relevant & top) / len(relevant),
            "recall_any": float(bool(relevant & top)),
            "recall_all": float(relevant <= top),
            "ndcg_any": dcg(rels[:effective_k], effective_k) / ideal if ideal else 0.0}
