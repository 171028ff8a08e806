"""Write a synthetic file with the shape of LongMemEval's S file, then time its ingestion.

The real ``longmemeval_s`` file (about 260 MB) has 500 questions, each with about 48
haystack sessions of about 10 turns, drawn from about 19k unique sessions. This script
writes a file of that shape (random words, deterministic seed) with the published file's
quirks (FORMATS.md): ``--blank-turns`` turns with an empty ``content`` (12 in S) and
``--unordered-questions`` questions whose haystack is listed out of date order (210 of
499 in S); ``0`` for either writes a file without that quirk. With ``--measure`` it
ingests the file in a fresh process as ``python -m pipelines ingest`` does (load,
normalise, validate: ``pipelines.data.ingest.load_and_validate``) and reports the wall
time, the validation time and the peak resident memory (``resource.getrusage``).

    python benchmarks/make_longmemeval_like.py --out /tmp/lme_like.json --measure

Target (issue 3): under 60 s and 6 GB on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

WORDS = ("the a memory session user assistant travel recipe budget plan garden music movie "
         "book doctor weekend project deadline friend family city hotel flight price list "
         "dinner coffee morning evening yesterday tomorrow because really maybe great idea").split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def write(out: Path, questions: int = 500, per_question: int = 48, unique: int = 19000,
          turns: int = 10, words_per_turn: int = 155, seed: int = 0, user_words: int | None = None,
          blank_turns: int = 12, unordered_questions: int = 210) -> dict:
    """Write the file; return its shape (questions, slots, unique sessions, bytes, quirks).

    ``user_words`` (default: ``words_per_turn``) sets the user turns' length apart, with the
    assistant turns at ``2 * words_per_turn - user_words`` so the file keeps its size: in the real
    data user messages are much shorter than the assistant's answers. ``blank_turns`` unique
    turns (never a session's first, which may carry ``has_answer``) get an empty content, in
    every question holding their session; ``unordered_questions`` questions, spread over the
    file, list their haystack in a shuffled order (dates move with their sessions).
    """
    user_words = words_per_turn if user_words is None else user_words
    assistant_words = max(1, 2 * words_per_turn - user_words)
    rng = random.Random(seed)
    quirks = random.Random(seed + 1)  # its own stream: the clean file's words do not change with the quirks
    blank_at = set(quirks.sample(range(min(unique, questions * per_question)), min(blank_turns, unique)))
    n_unordered = min(unordered_questions, questions)
    unordered = {q * questions // n_unordered for q in range(n_unordered)} if n_unordered else set()
    pool_ids = [f"sess_{k:05d}" for k in range(unique)]
    pool: dict[str, list[dict]] = {}
    # Dates: one per pool session, in id order, so any ordered draw is chronological.
    start = datetime(2023, 1, 1)
    dates = {sid: (start + timedelta(minutes=25 * k)).strftime("%Y/%m/%d (%a) %H:%M")
             for k, sid in enumerate(pool_ids)}
    used: set[str] = set()
    blanks = shuffled = 0
    # Most pool sessions appear once; the 24k slots repeat the rest (as in S: 24k slots, 19k unique).
    order = list(pool_ids)
    rng.shuffle(order)
    cursor = 0
    with open(out, "w", encoding="utf-8") as f:
        f.write("[")
        for q in range(questions):
            take = []
            while len(take) < per_question:
                if cursor < len(order):
                    sid = order[cursor]
                    cursor += 1
                else:
                    sid = rng.choice(pool_ids)
                if sid not in take:
                    take.append(sid)
            take.sort()
            haystack = []
            for sid in take:
                if sid not in pool:
                    pool[sid] = [{"role": "user" if j % 2 == 0 else "assistant",
                                  "content": _text(rng, user_words if j % 2 == 0 else assistant_words)}
                                 for j in range(turns)]
                    if len(pool) - 1 in blank_at and turns > 1:  # the n-th session built gets a blank turn
                        pool[sid][quirks.randrange(1, turns)]["content"] = ""
                        blanks += 1
                haystack.append(pool[sid])
                used.add(sid)
            answer_sid = take[rng.randrange(len(take))]
            sessions = [[dict(t) for t in s] for s in haystack]
            k = take.index(answer_sid)
            sessions[k][0]["has_answer"] = True
            qid = f"q{q:04d}" + ("_abs" if q % 30 == 0 else "")
            listed = list(range(len(take)))
            if q in unordered:  # out of date order, as 210 of S's 499 questions
                while listed == sorted(listed) and len(listed) > 1:
                    quirks.shuffle(listed)
                shuffled += 1
            record = {"question_id": qid, "question_type": "multi-session",
                      "question": _text(rng, 12) + "?", "answer": rng.choice([_text(rng, 4), 3]),
                      "question_date": "2024/01/01 (Mon) 10:00",
                      "haystack_session_ids": [take[i] for i in listed],
                      "haystack_dates": [dates[take[i]] for i in listed],
                      "haystack_sessions": [sessions[i] for i in listed], "answer_session_ids": [answer_sid]}
            f.write(("," if q else "") + json.dumps(record))
        f.write("]")
    return {"questions": questions, "slots": questions * per_question, "unique_sessions": len(used),
            "bytes": out.stat().st_size, "blank_turns": blanks, "unordered_questions": shuffled}


_MEASURE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from pipelines.data.ingest import load_and_validate
checked = load_and_validate("longmemeval", sys.argv[1])
dt = time.perf_counter() - t0
r = checked.loaded
unique = len({id(s.turns[0]) for e in r.episodes for s in e.sessions if s.turns})
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
counts = {k: v for k, v in r.counts().items() if k != "examples"}
blocking = [o.name for o in checked.report.blocking_failures()]
print(json.dumps({"ingest_s": round(dt, 1), "validate_s": round(checked.report.duration_s, 1),
                  "blocking_failures": blocking, "peak_rss_mib": round(rss), "unique_turn_lists": unique, **counts}))
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the synthetic JSON file")
    ap.add_argument("--questions", type=int, default=500)
    ap.add_argument("--sessions-per-question", type=int, default=48)
    ap.add_argument("--unique-sessions", type=int, default=19000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--words-per-turn", type=int, default=155, help="about 260 MB at the defaults")
    ap.add_argument("--blank-turns", type=int, default=12, help="turns with an empty content (S: 12; 0: none)")
    ap.add_argument("--unordered-questions", type=int, default=210,
                    help="questions whose haystack is out of date order (S: 210 of 499; 0: none)")
    ap.add_argument("--measure", action="store_true", help="then ingest it and report time and peak RSS")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    shape = write(args.out, args.questions, args.sessions_per_question, args.unique_sessions,
                  args.turns, args.words_per_turn, blank_turns=args.blank_turns,
                  unordered_questions=args.unordered_questions)
    print(json.dumps({"written": str(args.out), "write_s": round(time.perf_counter() - t0, 1), **shape}))
    if args.measure:
        root = Path(__file__).resolve().parents[1]
        out = subprocess.run([sys.executable, "-c", _MEASURE, str(args.out)], cwd=root,
                             capture_output=True, text=True, check=True)
        print(out.stdout.strip())


if __name__ == "__main__":
    main()
