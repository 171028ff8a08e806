"""Time a benchmark suite run as one process against N shards run side by side, then merged (issue #29 point 4).

    python benchmarks/shard_speedup.py --suite longmemeval_s --path /tmp/lme_s.json --max-episodes 100 \
        --strategies bm25,dense,hybrid,fusion_time --work /tmp/shards

Runs, each a fresh ``python -m pipelines`` process on the same data and embedding cache:

1. ``warm``: one unsharded run that fills the embedding cache (not timed against the others unless ``--cold``);
2. ``1 shard``: ``benchmark`` with every core (``OMP_NUM_THREADS`` = cores);
3. ``N shards``: N ``benchmark --shards N --shard i`` processes at once, each with cores / N threads, then
   ``merge``; the speed-up is (2)'s wall time over (3)'s (the merge included).

With ``--cold`` each timed run starts from an empty embedding cache of its own (the encoder's time is then
part of the figure). The merged report must equal the unsharded one (metrics.json without wall times): the
script stops otherwise. Prints one JSON line per run and a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _figures(metrics: dict) -> dict:
    return {suite: {name: {k: v for k, v in values.items() if not (k.startswith("latency_ms") or k.endswith("_ms"))}
                    for name, values in per.items()} for suite, per in metrics.items()}


def _cmd(args, out: Path, cache: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "pipelines", "benchmark", "--suite", args.suite, "--out", str(out),
           "--cache-dir", str(cache), "--no-answers", "-q", "--strategies", args.strategies, *extra]
    if args.path:
        cmd += ["--path", args.path]
    if args.max_episodes:
        cmd += ["--max-episodes", str(args.max_episodes)]
    for item in args.set or []:
        cmd += ["--set", item]
    return cmd


def _env(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")


def _run(cmds: list[list[str]], threads: int) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=ROOT, env=_env(threads), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for c in cmds]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"{' '.join(p.args)} failed ({p.returncode}):\n{err[-3000:]}")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="longmemeval_s")
    ap.add_argument("--path", help="the suite's data (default: the suite's own, or the generator)")
    ap.add_argument("--strategies", default="bm25,dense,hybrid,fusion_time")
    ap.add_argument("--max-episodes", type=int)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cold", action="store_true", help="each timed run with an empty embedding cache")
    ap.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE")
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.shards < 2:
        raise SystemExit(f"--shards must be at least 2 (the run is compared with one shard), got {args.shards}")
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    shared = args.work / "cache"
    if not args.cold:
        wall = _run([_cmd(args, args.work / "warm", shared)], args.cores)
        print(json.dumps({"run": "warm-up (fills the embedding cache)", "wall_s": round(wall, 1)}), flush=True)
    cache = (lambda name: args.work / f"cache_{name}") if args.cold else (lambda name: shared)
    one = _run([_cmd(args, args.work / "one", cache("one"))], args.cores)
    print(json.dumps({"run": "1 shard", "threads": args.cores, "wall_s": round(one, 1)}), flush=True)
    threads = max(1, args.cores // args.shards)
    out = args.work / "sharded"
    t0 = time.perf_counter()
    _run([_cmd(args, out, cache("sharded"), "--shards", str(args.shards), "--shard", str(i))
          for i in range(args.shards)], threads)
    shards_wall = time.perf_counter() - t0
    merge = [sys.executable, "-m", "pipelines", "merge", *_cmd(args, out, cache("sharded"), "--shards",
                                                                str(args.shards))[4:]]
    _run([merge], args.cores)
    many = time.perf_counter() - t0
    print(json.dumps({"run": f"{args.shards} shards", "threads_each": threads, "wall_s": round(many, 1),
                      "shards_s": round(shards_wall, 1), "merge_s": round(many - shards_wall, 1)}), flush=True)
    a = _figures(json.loads((args.work / "one" / "metrics.json").read_text()))
    b = _figures(json.loads((out / "metrics.json").read_text()))
    if a != b:
        raise SystemExit("the merged report differs from the unsharded one")
    print(json.dumps({"speedup": round(one / many, 2), "shards": args.shards, "cores": args.cores,
                      "cold": args.cold, "merged_equals_unsharded": True}))


if __name__ == "__main__":
    main()
