"""The benchmark stage: every configured memory strategy under the temporal protocol."""

from __future__ import annotations

from pipelines.data.schema import iter_episodes
from pipelines.data.stage import canonical_dir
from pipelines.registry import StageResult, stage

REPORT = "reports/benchmark.md"
METRICS = "reports/metrics.json"
QUERIES = "reports/queries.jsonl"
PLOTS = "reports/plots"
RECALL_CSV = f"{PLOTS}/recall_at_k.csv"


@stage(name="benchmark", group="evaluate", params=("benchmark",),
       inputs=(canonical_dir("synthetic"),), outputs=(REPORT, METRICS, QUERIES, PLOTS),
       metrics=(METRICS,),
       plots=({RECALL_CSV: {"x": "k", "template": "linear", "title": "Recall@k per strategy (turn level)"}},
              f"{PLOTS}/recall_at_k.png", f"{PLOTS}/tokens_vs_recall.png"),
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
                        strategy_settings=cfg.get("strategy_settings"))
    if ctx.tracker is not None:
        for path in out["plots"]:
            ctx.tracker.log_artifact(path, artifact_path="plots")
    metrics = {f"{strategy}/{name}": value
               for strategy, values in out["metrics"]["synthetic"].items() for name, value in values.items()}
    meta = {"episodes": len(episodes), "strategies": list(cfg["strategies"]),
            "benchmark_md": "\n\n".join(out["markdown"].values()) if isinstance(out["markdown"], dict) else out["markdown"],
            "report": str(ctx.path(REPORT))}
    return StageResult(metadata=meta, metrics=metrics)
