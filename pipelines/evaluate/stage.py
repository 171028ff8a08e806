"""The benchmark stage: every configured memory strategy under the temporal protocol."""

from __future__ import annotations

from pipelines.config import load_params
from pipelines.data.schema import iter_episodes
from pipelines.data.stage import canonical_dir
from pipelines.registry import StageResult, stage

REPORT = "reports/benchmark.md"
METRICS = "reports/metrics.json"
QUERIES = "reports/queries.jsonl"
PLOTS = "reports/plots"
RECALL_CSV = f"{PLOTS}/recall_at_k.csv"


def _recall_plot() -> dict:
    """DVC plot of turn-level recall@k, one line per configured strategy (from params.yaml)."""
    strategies = load_params().get("benchmark", {}).get("strategies", [])
    return {RECALL_CSV: {"x": "k", "y": [f"turn/{s}" for s in strategies], "template": "linear",
                         "title": "Recall@k per strategy (turn level)", "y_label": "recall@k"}}


@stage(name="benchmark", group="evaluate", params=("benchmark",),
       inputs=(canonical_dir("synthetic"),), outputs=(REPORT, METRICS, QUERIES, PLOTS),
       metrics=(METRICS,),
       plots=(_recall_plot(), f"{PLOTS}/recall_at_k.png", f"{PLOTS}/tokens_vs_recall.png"),
       code=("pipelines/evaluate", "pipelines/memory"))
def benchmark(ctx) -> StageResult:
    """Benchmark of the memory strategies on the synthetic test split (temporal protocol).

    Memory holds only sessions earlier than the one a query is asked in. Recall@k, recall_all@k,
    ndcg_any@k, MRR and context tokens at turn and session level; reports/benchmark.md,
    reports/metrics.json and PNG plots.
    """
    from pipelines.evaluate.report import run_benchmark

    cfg = ctx.config["benchmark"]
    split = cfg.get("split", "test")
    episodes = list(iter_episodes(ctx.path(f"{canonical_dir('synthetic')}/{split}.jsonl")))
    out = run_benchmark(episodes, cfg["strategies"], ks=cfg["ks"], out_dir=ctx.path("reports"),
                        profile=ctx.profile, budget_tokens=cfg["budget_tokens"], suite="synthetic",
                        strategy_settings=_settings(ctx, cfg))
    if ctx.tracker is not None:
        for path in out["plots"]:
            ctx.tracker.log_artifact(path, artifact_path="plots")
    metrics = {f"{strategy}/{name}": value
               for strategy, values in out["metrics"]["synthetic"].items() for name, value in values.items()}
    meta = {"episodes": len(episodes), "strategies": list(cfg["strategies"]),
            "benchmark_md": "\n\n".join(out["markdown"].values()) if isinstance(out["markdown"], dict) else out["markdown"],
            "report": str(ctx.path(REPORT))}
    return StageResult(metadata=meta, metrics=metrics)


def _settings(ctx, cfg: dict) -> dict:
    """Per-strategy settings: params.yaml ``benchmark.strategy_settings`` over project defaults."""
    settings = {name: dict(values) for name, values in (cfg.get("strategy_settings") or {}).items()}
    if "dense" in cfg["strategies"]:
        dense = settings.setdefault("dense", {})
        dense.setdefault("cache_dir", str(ctx.root / ".cache" / "embeddings"))
        dense.setdefault("batch_size", cfg.get("embedding_batch_size", 64))
    return settings
