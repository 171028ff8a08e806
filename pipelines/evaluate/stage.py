"""The benchmark stage: every configured memory strategy under the temporal protocol."""

from __future__ import annotations

from pipelines.config import load_params
from pipelines.data.schema import iter_episodes
from pipelines.data.stage import canonical_dir
from pipelines.mdr.stage import DECODER as MDR_DECODER
from pipelines.mdr.stage import EXAMPLES as MDR_EXAMPLES
from pipelines.mdr.stage import STUDENT as MDR_STUDENT
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


@stage(name="benchmark", group="evaluate", params=("benchmark", "mdr"),
       inputs=(canonical_dir("synthetic"), MDR_EXAMPLES, MDR_STUDENT, MDR_DECODER),
       outputs=(REPORT, METRICS, QUERIES, PLOTS),
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
    generation = _mdr_generation(ctx, episodes, split)
    _append_generation(ctx, out, generation)
    metrics = {f"{strategy}/{name}": value
               for strategy, values in out["metrics"]["synthetic"].items() for name, value in values.items()}
    meta = {"episodes": len(episodes), "strategies": list(cfg["strategies"]),
            "benchmark_md": "\n\n".join(out["markdown"].values()) if isinstance(out["markdown"], dict) else out["markdown"],
            "report": str(ctx.path(REPORT)), "generation_md": generation["markdown"]}
    return StageResult(metadata=meta, metrics=metrics)


def _settings(ctx, cfg: dict) -> dict:
    """Per-strategy settings: params.yaml ``benchmark.strategy_settings`` over project defaults."""
    settings = {name: dict(values) for name, values in (cfg.get("strategy_settings") or {}).items()}
    if "dense" in cfg["strategies"]:
        dense = settings.setdefault("dense", {})
        dense.setdefault("cache_dir", str(ctx.root / ".cache" / "embeddings"))
        dense.setdefault("batch_size", cfg.get("embedding_batch_size", 64))
    return settings


def _mdr_generation(ctx, episodes, split: str) -> dict:
    """MDR responses on the split's examples: BLEU-1..4, ROUGE-L, Distinct-1/2, per session."""
    from pipelines.data.tasks import read_mdr_examples
    from pipelines.mdr.evaluate import PAPER_CONVAI2, evaluate_mdr

    examples = read_mdr_examples(ctx.path(f"{MDR_EXAMPLES}/{split}.jsonl"))
    index = {s.id: s.index for e in episodes for s in e.sessions}
    gen = ctx.config["mdr"].get("generation", {})
    result = evaluate_mdr(ctx.path(MDR_DECODER), ctx.path(MDR_STUDENT), examples, session_index=index,
                          max_new_tokens=gen.get("max_new_tokens", 32), seed=ctx.config.get("seed", 2022))
    cols = ["bleu-1", "bleu-2", "rouge-l", "dist-1", "dist-2", "c_dist-1", "c_dist-2", "s_dist-1", "s_dist-2"]
    rows = [f"| mdr (this run, profile `{ctx.profile}`, synthetic {split}) | "
            + " | ".join(f"{result['overall'][c]:.2f}" if c.startswith(("bleu", "rouge")) else f"{result['overall'][c]:.3f}"
                         for c in cols) + " |",
            "| MDR as published (GPT-2 124M, ConvAI2) | " + " | ".join(
                f"{PAPER_CONVAI2[c]:.2f}" if c in PAPER_CONVAI2 else "–" for c in cols) + " |"]
    table = "\n".join(["| system | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols), *rows])
    per = ["| session | responses | bleu-1 | bleu-2 | rouge-l | dist-1 | dist-2 |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for num, m in result["by_session"].items():
        per.append(f"| {num} | {int(m['responses'])} | {m['bleu-1']:.2f} | {m['bleu-2']:.2f} | {m['rouge-l']:.2f} | "
                   f"{m['dist-1']:.3f} | {m['dist-2']:.3f} |")
    samples = ["| query | reference | mdr response |", "| --- | --- | --- |"] + [
        f"| {x['query']} | {x['reference']} | {x['response']} |".replace("\n", " ") for x in result["examples"]]
    md = "\n".join([
        "## Response generation (MDR)", "",
        f"Greedy responses of the MDR decoder from the cached R^(K) and the query, on {len(examples)} "
        f"(Q, R) rounds of the synthetic {split} split. BLEU (sacrebleu, corpus) and ROUGE-L (rouge-score) "
        "on 0-100; Distinct-n: corpus (dist), per response (c_dist), over 5 samples per context (s_dist). "
        f"The published row is MDR on ConvAI2 with GPT-2 124M: **not comparable** with profile `{ctx.profile}` "
        "(tiny random-initialised models on synthetic data).", "", table, "", "### By session", "", "\n".join(per),
        "", "### Samples", "", "\n".join(samples), ""])
    return {"overall": result["overall"], "by_session": result["by_session"], "markdown": md}


def _append_generation(ctx, out: dict, generation: dict) -> None:
    """Add the generation results to benchmark.md and metrics.json (suite -> strategy -> metric)."""
    import json

    report = ctx.path(REPORT)
    report.write_text(report.read_text(encoding="utf-8") + "\n" + generation["markdown"], encoding="utf-8")
    mdr = {f"generation/{k}": v for k, v in generation["overall"].items()}
    for num, m in generation["by_session"].items():
        mdr.update({f"generation/session_{num}/{k}": v for k, v in m.items() if k in ("bleu-1", "rouge-l")})
    out["metrics"]["synthetic"]["mdr"] = mdr
    path = ctx.path(METRICS)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out["metrics"], indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
