"""Write a synthetic file with the shape of LongMemEval's S or M file, then time its ingestion.

Shapes (``--shape``; every number below can be overridden by its flag):

* ``s`` (default): the real ``longmemeval_s`` file (about 260 MB) has 500 questions, each with
  about 48 haystack sessions of about 10 turns, drawn from about 19k unique sessions (24k slots).
* ``m``: the real ``longmemeval_m`` file (about 2.7 GB) has 500 questions, each with about 500
  haystack sessions (about 1.5M tokens a question). Assumptions, since the M file was never run
  here: its sessions are as long as S's (2.7 GB / 250k slots = 10.8 kB a slot, S's 260 MB / 24k
  slots), so 500 x 500 slots at S's 10 turns of 155 words give about 2.7 GB; and they are mostly
  distinct between questions, with the share of unique sessions of S (19k of 24k slots, 80%): a
  pool of ``0.8 x questions x 500`` sessions (200k at 500 questions, 20k at ``--questions 50``),
  the file walking the pool once before repeating sessions. Its quirks keep S's rates: blank
  turns at S's 12 per 19k unique sessions (126 at 500 questions) and 42% of the questions out of
  date order (210 of 500).

Both shapes carry the published file's quirks (FORMATS.md): ``--blank-turns`` turns with an
empty ``content`` and ``--unordered-questions`` questions whose haystack is listed out of date
order; ``0`` for either writes a file without that quirk.

The file is written one question at a time and never held in memory. The S shape keeps the
sessions it built in memory (about 200 MB; the S file of this script is unchanged since its first
version); the M shape keeps none: a session's words are drawn from its own seeded generator
(seed and session id), so a session repeated in a later question is rebuilt identical, and
writing 500 M questions takes about 60 MB whatever the file's size.

With ``--measure`` it then runs ``python -m pipelines ingest --source longmemeval`` on the file
in a fresh process (load, normalise, validate, write the canonical ``test.jsonl`` to a
temporary folder, deleted afterwards) and reports its wall time and peak resident memory
(``resource.getrusage`` of the child).

    python benchmarks/make_longmemeval_like.py --out /tmp/lme_s.json --measure
    python benchmarks/make_longmemeval_like.py --shape m --questions 50 --user-words 44 --out /tmp/lme_m50.json --measure

Targets: S under 60 s and 6 GB (issue 3); M (500 questions) under 3 GB (issue 29) on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

WORDS = ("the a memory session user assistant travel recipe budget plan garden music movie "
         "book doctor weekend project deadline friend family city hotel flight price list "
         "dinner coffee morning evening yesterday tomorrow because really maybe great idea").split()


@dataclass(frozen=True)
class Shape:
    """A published file's shape: sessions per question, the unique pool and its quirks.

    ``unique``/``blank_turns``/``unordered_questions`` None: derived from the number of questions
    (``unique_share`` of the slots, S's blank-turn rate per unique session, ``unordered_share``
    of the questions). ``seeded``: each session's words come from its own generator (nothing kept).
    """

    per_question: int
    unique: int | None = None
    blank_turns: int | None = None
    unordered_questions: int | None = None
    unique_share: float = 0.8        # unique sessions / haystack slots (S: 19k / 24k)
    blank_rate: float = 12 / 19000   # blank turns per unique session (S: 12 in 19k)
    unordered_share: float = 0.42    # questions out of date order (S: 210 of 499)
    seeded: bool = False

    def resolve(self, questions: int, per_question: int | None = None, unique: int | None = None,
                blank_turns: int | None = None, unordered_questions: int | None = None) -> dict:
        """The write() arguments of this shape for ``questions``, with the explicit overrides."""
        per_question = self.per_question if per_question is None else per_question
        if unique is None:
            unique = self.unique if self.unique is not None else round(self.unique_share * questions * per_question)
            unique = max(1, unique)
        if blank_turns is None:
            blank_turns = self.blank_turns if self.blank_turns is not None else round(self.blank_rate * unique)
        if unordered_questions is None:
            unordered_questions = (self.unordered_questions if self.unordered_questions is not None
                                   else round(self.unordered_share * questions))
        return {"per_question": per_question, "unique": unique, "blank_turns": blank_turns,
                "unordered_questions": unordered_questions, "seeded": self.seeded}


SHAPES = {
    "s": Shape(per_question=48, unique=19000, blank_turns=12, unordered_questions=210),
    "m": Shape(per_question=500, seeded=True),
}


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def write(out: Path, questions: int = 500, per_question: int = 48, unique: int = 19000,
          turns: int = 10, words_per_turn: int = 155, seed: int = 0, user_words: int | None = None,
          blank_turns: int = 12, unordered_questions: int = 210, seeded: bool = False) -> dict:
    """Write the file; return its shape (questions, slots, unique sessions, bytes, quirks).

    ``user_words`` (default: ``words_per_turn``) sets the user turns' length apart, with the
    assistant turns at ``2 * words_per_turn - user_words`` so the file keeps its size: in the real
    data user messages are much shorter than the assistant's answers. ``blank_turns`` unique
    turns (never a session's first, which may carry ``has_answer``) get an empty content, in
    every question holding their session; ``unordered_questions`` questions, spread over the
    file, list their haystack in a shuffled order (dates move with their sessions).
    ``seeded=False`` (the S shape) keeps every session built in memory, drawn from the file's one
    generator; ``seeded=True`` (the M shape) keeps none: each session is drawn, identically each
    time it is listed, from a generator seeded with ``seed`` and its id.
    """
    user_words = words_per_turn if user_words is None else user_words
    assistant_words = max(1, 2 * words_per_turn - user_words)
    rng = random.Random(seed)
    quirks = random.Random(seed + 1)  # its own stream: the clean file's words do not change with the quirks
    n_blank = min(blank_turns, unique) if turns > 1 else 0
    blank_at = set(quirks.sample(range(min(unique, questions * per_question)), n_blank))
    n_unordered = min(unordered_questions, questions)
    unordered = {q * questions // n_unordered for q in range(n_unordered)} if n_unordered else set()
    pool_ids = [f"sess_{k:06d}" if seeded else f"sess_{k:05d}" for k in range(unique)]
    pool: dict[str, list[dict]] = {}  # the S shape's sessions, built once (seeded: empty)
    # Dates: one per pool session, in id order, so any ordered draw is chronological.
    start = datetime(2023, 1, 1)
    dates = {sid: (start + timedelta(minutes=25 * k)).strftime("%Y/%m/%d (%a) %H:%M")
             for k, sid in enumerate(pool_ids)}
    used: set[str] = set()
    blanks = shuffled = 0
    # Most pool sessions appear once; the slots after the pool's first pass repeat sessions drawn at random.
    order = list(pool_ids)
    rng.shuffle(order)
    # seeded: the sessions with a blank turn are named by id (the n-th session of the pool's first pass)
    blank_sids = {order[n] for n in blank_at} if seeded else set()
    cursor = 0

    def seeded_session(sid: str) -> list[dict]:
        own = random.Random(f"{seed}:{sid}")
        session = [{"role": "user" if j % 2 == 0 else "assistant",
                    "content": " ".join(own.choices(WORDS, k=user_words if j % 2 == 0 else assistant_words))}
                   for j in range(turns)]
        if sid in blank_sids:
            session[own.randrange(1, turns)]["content"] = ""
        return session

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
            if seeded:
                sessions = [seeded_session(sid) for sid in take]
                blanks += sum(sid in blank_sids and sid not in used for sid in take)
                used.update(take)
            else:
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
                sessions = [[dict(t) for t in s] for s in haystack]
            answer_sid = take[rng.randrange(len(take))]
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
            del record, sessions
        f.write("]")
    return {"questions": questions, "slots": questions * per_question, "unique_sessions": len(used),
            "bytes": out.stat().st_size, "blank_turns": blanks, "unordered_questions": shuffled}


def measure(path: Path, root: Path | None = None) -> dict:
    """``python -m pipelines ingest --source longmemeval`` on ``path`` in a fresh process: wall time,
    peak RSS of that process, and the counts it prints (written to a temporary folder, then deleted)."""
    root = root or Path(__file__).resolve().parents[1]
    work = Path(tempfile.mkdtemp(prefix="lme_ingest."))
    cmd = [sys.executable, "-m", "pipelines", "ingest", "--source", "longmemeval", "--path", str(path),
           "--out", str(work / "out")]
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"ingest failed with exit code {proc.returncode}")
        counts = json.loads(proc.stdout.strip().splitlines()[-1])
        written = sum(p.stat().st_size for p in (work / "out").iterdir())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB -> MiB on Linux
    keep = ("episodes", "sessions", "turns", "queries", "dropped", "flagged", "warnings")
    return {"ingest_s": round(wall, 1), "peak_rss_mib": round(rss), "canonical_bytes": written,
            **{k: counts[k] for k in keep if k in counts}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the synthetic JSON file")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="s",
                    help="s: 48 sessions a question, 19k unique (260 MB); m: 500 a question, 80%% unique (2.7 GB)")
    ap.add_argument("--questions", type=int, default=500)
    ap.add_argument("--sessions-per-question", type=int, help="default: the shape's (s 48, m 500)")
    ap.add_argument("--unique-sessions", type=int, help="default: the shape's (s 19000, m 80%% of the slots)")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--words-per-turn", type=int, default=155, help="about 260 MB (s) or 2.7 GB (m) at the defaults")
    ap.add_argument("--user-words", type=int,
                    help="words of a user turn (default: --words-per-turn), the assistant's at 2 x words-per-turn "
                         "minus these so the file keeps its size; 44 is the shared LongMemEval S sample's mean (its "
                         "assistant turns 275), which the dense strategy's embedding time follows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blank-turns", type=int,
                    help="turns with an empty content (s: 12; m: S's rate, 126 at 500 questions; 0: none)")
    ap.add_argument("--unordered-questions", type=int,
                    help="questions whose haystack is out of date order (s: 210; m: 42%%; 0: none)")
    ap.add_argument("--measure", action="store_true",
                    help="then run `python -m pipelines ingest` on it and report wall time and peak RSS")
    args = ap.parse_args(argv)
    shape = SHAPES[args.shape].resolve(args.questions, args.sessions_per_question, args.unique_sessions,
                                       args.blank_turns, args.unordered_questions)
    t0 = time.perf_counter()
    written = write(args.out, args.questions, turns=args.turns, words_per_turn=args.words_per_turn,
                    user_words=args.user_words, seed=args.seed, **shape)
    print(json.dumps({"written": str(args.out), "shape": args.shape, "write_s": round(time.perf_counter() - t0, 1),
                      **written}), flush=True)
    if args.measure:
        print(json.dumps(measure(args.out)))


if __name__ == "__main__":
    main()
