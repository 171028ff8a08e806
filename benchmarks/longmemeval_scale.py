"""Time the LongMemEval S suite with the untrained retrieval strategies, cold and warm cache.

Issue 7's target: LongMemEval S (500 questions, about 19k unique sessions) through
``python -m pipelines benchmark --suite longmemeval_s`` with the untrained retrieval strategies
on 2 CPU cores within 20 minutes, each unique turn embedded once and cached on disk (keyed by
model and text hash), so that a second run is fast.

    python benchmarks/longmemeval_scale.py --data /tmp/lme_s.json --work /tmp/lme_scale

``--data``: the real ``longmemeval_s.json`` if you have it; when the file does not exist a file
of S's shape is written first (benchmarks/make_longmemeval_like.py: random words; user turns of
``--user-words`` words, assistant turns longer, ``--words-per-turn`` on average, as S's ~260 MB). The suite indexes user turns only (as the official
retrieval code), so the dense encoder sees about half the turns. Prints one JSON line per run:
wall seconds, peak RSS of the benchmark process, encoded texts, and the turn recall@5 figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(data: Path, out: Path, cache: Path, strategies: str, max_episodes: int | None) -> dict:
    cmd = [sys.executable, "-m", "pipelines", "benchmark", "--suite", "longmemeval_s", "--path", str(data),
           "--strategies", strategies, "--out", str(out), "--cache-dir", str(cache), "-q"]
    if max_episodes:
        cmd += ["--max-episodes", str(max_episodes)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"benchmark failed with exit code {proc.returncode}")
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])["longmemeval_s"]
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"wall_s": round(wall, 1), "peak_rss_mib": round(rss),
            "turn_recall@5": {s: round(m.get("turn/recall@5", 0.0), 4) for s, m in metrics.items()},
            "session_recall_any@5": {s: round(m.get("session/recall_any@5", 0.0), 4) for s, m in metrics.items()},
            "queries": {s: int(m.get("queries", 0)) for s, m in metrics.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="longmemeval_s.json (written if absent)")
    ap.add_argument("--work", type=Path, required=True, help="folder for reports and the embedding cache")
    ap.add_argument("--strategies", default="no_history,long_context,bm25,dense,hybrid")
    ap.add_argument("--max-episodes", type=int, help="first N questions only (a quick check)")
    ap.add_argument("--words-per-turn", type=int, default=155, help="mean words of a turn (file of S's size)")
    ap.add_argument("--user-words", type=int, default=60,
                    help="words of a user turn (assistant turns take the rest of the mean)")
    args = ap.parse_args(argv)
    if not args.data.exists():
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from make_longmemeval_like import write

        print(json.dumps({"written": str(args.data), **write(args.data, words_per_turn=args.words_per_turn,
                                                         user_words=args.user_words)}))
    cache = args.work / "cache"
    for label in ("cold cache", "warm cache"):
        figures = run(args.data, args.work / label.replace(" ", "_"), cache, args.strategies, args.max_episodes)
        print(json.dumps({"run": label, **figures}), flush=True)


if __name__ == "__main__":
    main()
