"""The loss policy: what the loader left out, weighed against what it kept (rule ``load_loss_within_limit``).

A loader drops the bad parts of a record and counts them by reason
(``pipelines.data.loaders.base``; ``DROP_KINDS`` says which kind of record each reason leaves
out). A few dropped parts are the normal cost of reading published files; a load that kept no
episode, or no turn, or no query from a source that publishes questions
(``rules.QUESTION_SOURCES``: a renamed ``qa`` key drops nothing, it only leaves the questions
out), or lost every record of a kind it read (every turn renamed away, every query malformed),
or dropped more than ``max_dropped_turn_share`` of the turns it read, is broken input that would
otherwise pass validation (an empty dataset breaks no per-record rule) and benchmark nothing.
Each such finding is one failure of the blocking rule, naming the drop reasons with their counts
and the first example.

Turns are counted as the loaders count them: LongMemEval's sessions shared between questions
count once per question, both in what was kept and in what was dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from pipelines.validate.rules import QUESTION_SOURCES, Failure, Tables

if TYPE_CHECKING:
    from pipelines.data.loaders.base import LoadResult

WHERE = "whole file"  # the locator of a loss: it is a property of the load, not of one record
WEIGHED = ("sessions", "turns", "queries", "memories", "triplets")  # kinds (and tables) whose total loss fails

LoadCheck = Callable[["LoadResult", Tables, float], list[Failure]]
LOAD_CHECKS: dict[str, LoadCheck] = {}  # rule name -> check over the load and the tables


def _reasons(load: "LoadResult", kind: str) -> str:
    """``"bad_turn: 5882 (first: <example>)"`` for every reason that dropped records of ``kind``."""
    from pipelines.data.loaders.base import DROP_KINDS

    parts = []
    for reason, n in sorted(load.dropped.items(), key=lambda item: -item[1]):
        if DROP_KINDS[reason] == kind:
            first = (load.examples.get(reason) or ["no example recorded"])[0]
            parts.append(f"{reason}: {n} (first: {first})")
    return "; ".join(parts)


def load_loss_within_limit(load: "LoadResult", t: Tables, max_dropped_turn_share: float) -> list[Failure]:
    return loss_failures(load, {kind: len(t[kind]) for kind in ("episodes", *WEIGHED)}, set(t["episodes"]["source"]),
                         max_dropped_turn_share)


def loss_failures(load: "LoadResult", kept: Mapping[str, int], sources: Iterable[str],
                  max_dropped_turn_share: float) -> list[Failure]:
    """The loss policy over what was kept (``kept``: rows of the episodes table and of every
    :data:`WEIGHED` table) from ``sources`` (the episodes' sources): what the streaming validator
    (``pipelines.validate.stream``), which never holds the whole tables, calls with its totals."""
    lost = load.lost()
    out = []
    if kept["episodes"] == 0:
        why = f"; left out: {_reasons(load, 'episodes')}" if lost.get("episodes") else ""
        out.append(Failure(WHERE, f"no episode was loaded{why}"))
    elif kept["turns"] == 0 and not lost.get("turns"):
        out.append(Failure(WHERE, f"no turn was loaded ({kept['episodes']} episode(s) without a turn)"))
    asking = sorted(set(sources) & set(QUESTION_SOURCES))
    if kept["episodes"] and asking and kept["queries"] == 0 and not lost.get("queries"):
        out.append(Failure(WHERE, f"no query was loaded, but {', '.join(asking)} publishes questions"))
    for kind in WEIGHED:
        if kept[kind] == 0 and lost.get(kind):
            out.append(Failure(WHERE, f"every one of the {lost[kind]} {kind} read was left out: "
                                      f"{_reasons(load, kind)}"))
    dropped = lost.get("turns", 0)
    read = dropped + kept["turns"]
    if kept["turns"] and read and dropped / read > max_dropped_turn_share:
        out.append(Failure(WHERE, f"{dropped} of the {read} turns read ({dropped / read:.1%}) were left out, more "
                                  f"than ingest.max_dropped_turn_share = {max_dropped_turn_share:g}: "
                                  f"{_reasons(load, 'turns')}"))
    return out


LOAD_CHECKS["load_loss_within_limit"] = load_loss_within_limit
