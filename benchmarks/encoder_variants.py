"""Cold benchmark runs of a suite, one per encoder variant: wall time, peak memory and the recall figures side by side.

Issue #29 asks, per encoder backend, for the cold LongMemEval S time with every strategy's session recall_all@5 and
ndcg_any@10 beside it, within 0.005 of the fp32 figures on the LongMemEval sample and on LoCoMo. This runs
``python -m pipelines benchmark`` once per variant, each in its own process with an empty embedding cache, the
variant set on every strategy that embeds (``dense``, ``hybrid``, ``fusion*``, ``rerank``: backend, quantization,
precision) and on rerank's cross-encoder (``rerank_backend`` = the variant's backend, fp32 weights), then prints
one JSON line per variant and a table of the largest move of each variant's figures from ``--reference``'s:

    python benchmarks/encoder_variants.py --suite longmemeval_s --path longmemeval_s_sample.json --work /tmp/ev \\
        --variants openvino:none:fp32,openvino:none:bf16,torch:none:bf16,onnx:int8:fp32

A variant is ``backend:quantization:precision`` with the dense settings' values (``auto`` allowed, e.g.
``auto:auto:auto`` = the machine's default). Exports are made once, in ``WORK/exports``: the first run of a
variant also pays its export (tens of seconds), so run the list twice, or accept that, when timing. Run it alone on
the machine: the variants' times are only comparable when nothing else runs beside them.
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
STRATEGIES = "bm25,dense,hybrid,fusion,fusion_sessions,fusion_time,rerank"
EMBEDDING = ("dense", "hybrid", "fusion", "fusion_sessions", "fusion_time", "rerank")   # strategies that embed
FIGURES = ("session/recall_all@5", "session/ndcg_any@10")
CROSS_ENCODER_BACKENDS = ("torch", "onnx", "openvino")


def parse_variant(text: str) -> tuple[str, str, str]:
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise SystemExit(f"variant {text!r}: write backend:quantization:precision, e.g. openvino:none:bf16")
    return parts[0], parts[1], parts[2]


def settings(variant: str, strategies: list[str], export_dir: Path) -> dict[str, dict]:
    """benchmark.strategy_settings of ``variant`` for the strategies that embed."""
    backend, quantization, precision = parse_variant(variant)
    out = {}
    for name in strategies:
        if name not in EMBEDDING:
            continue
        out[name] = {"backend": backend, "quantization": quantization, "precision": precision,
                     "export_dir": str(export_dir)}
        if name == "rerank" and backend in CROSS_ENCODER_BACKENDS:
            out[name].update(rerank_backend=backend, rerank_quantization="none")
    return out


def run(suite: str, path: str, variant: str, strategies: list[str], work: Path, max_episodes: int | None) -> dict:
    """One cold run of ``variant``: its own empty embedding cache and report folder; wall, peak RSS, metrics."""
    slug = variant.replace(":", "-")
    cache, report = work / f"cache-{slug}", work / f"report-{slug}"
    for folder in (cache, report):
        shutil.rmtree(folder, ignore_errors=True)
    chosen = json.dumps(settings(variant, strategies, work / "exports"))
    cmd = [sys.executable, "-m", "pipelines", "benchmark", "--suite", suite, "--path", path, "--no-answers",
           "--strategies", ",".join(strategies), "--out", str(report), "--cache-dir", str(cache),
           "--validated-cache", "none", "-q", "--set", f"benchmark.strategy_settings={chosen}"]
    if max_episodes:
        cmd += ["--max-episodes", str(max_episodes)]
    log = work / f"log-{slug}.txt"
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)             # this child's own peak RSS, not the largest so far
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode:
        return {"variant": variant, "failed": log.read_text().strip().splitlines()[-2:], "log": str(log)}
    metrics = json.loads((report / "metrics.json").read_text())
    metrics = metrics.get(suite, next(iter(metrics.values())))
    row = {"variant": variant, "wall_s": round(wall, 1), "peak_rss_gb": round(usage.ru_maxrss * 1024 / 1e9, 2)}
    for name in strategies:
        m = metrics.get(name, {})
        row[name] = {k: round(float(m[k]), 4) for k in (*FIGURES, "latency_ms_p50") if k in m}
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", required=True, help="a shipped suite (longmemeval_s, locomo, ...) or a suite .yaml")
    ap.add_argument("--path", required=True, help="the suite's data file")
    ap.add_argument("--work", type=Path, required=True, help="folder for the reports, caches and exports")
    ap.add_argument("--variants", default="openvino:none:fp32,openvino:none:bf16,torch:none:bf16,torch:none:fp32",
                    help="comma-separated backend:quantization:precision")
    ap.add_argument("--reference", default=None, help="the variant the others are compared with (default: first)")
    ap.add_argument("--strategies", default=STRATEGIES)
    ap.add_argument("--max-episodes", type=int, help="first N episodes only (a quick check)")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        parse_variant(v)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    args.work.mkdir(parents=True, exist_ok=True)
    rows = {}
    for variant in variants:
        rows[variant] = run(args.suite, args.path, variant, strategies, args.work, args.max_episodes)
        print(json.dumps(rows[variant]), flush=True)
    (args.work / "variants.json").write_text(json.dumps(rows, indent=1) + "\n")
    reference = rows.get(args.reference or variants[0], {})
    print(f"\n{'variant':24s} {'wall s':>8s} {'peak GB':>8s}  rerank p50 ms  max |move| of {' / '.join(FIGURES)} "
          f"from {args.reference or variants[0]} (strategy)")
    for variant, row in rows.items():
        if "failed" in row:
            print(f"{variant:24s} failed: {row['failed']}")
            continue
        moves = [(abs(row[s][k] - reference[s][k]), s) for s in strategies for k in FIGURES
                 if k in row.get(s, {}) and k in reference.get(s, {})]
        worst, where = max(moves) if moves else (float("nan"), "-")
        p50 = row.get("rerank", {}).get("latency_ms_p50", float("nan"))
        print(f"{variant:24s} {row['wall_s']:8.1f} {row['peak_rss_gb']:8.2f}  {p50:13.1f}  {worst:.4f} ({where})")
    if any("failed" in row for row in rows.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
