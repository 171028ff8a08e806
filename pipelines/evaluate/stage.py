"""The benchmark stage: every configured memory strategy under the temporal protocol."""

from __future__ import annotations

from pipelines.config import load_params
from pipelines.data.schema import iter_episodes
from pipelines.data.stage import canonical_dir
from pipelines.mdr.stage import DECODER as MDR_DECODER
from pipelines.mdr.stage import EXAMPLES as MDR_EXAMPLES
from pipelines.mdr.stage import STUDENT as MDR_STUDENT
from pipelines.emma.stage import DIALOGUE as EMMA_DIALOGUE
from pipelines.emma.stage import EXAMPLES as EMMA_EXAMPLES
from pipelines.emma.stage import RETRIEVER as EMMA_RETRIEVER
from pipelines.emma.stage import RETRIEVER_EVAL as EMMA_RETRIEVER_EVAL
from pipelines.glong.stage import EVAL_FILE as GLONG_EVAL
from pipelines.glong.stage import EXTRACTOR as GLONG_EXTRACTOR
from pipelines.glong.stage import IMPORTANCE as GLONG_IMPORTANCE
from pipelines.registry import StageResult, stage

REPORT = "reports/benchmark.md"
METRICS = "reports/metrics.json"
QUERIES = "reports/queries.jsonl"
PLOTS = "reports/plots"
RECALL_CSV = f"{PLOTS}/recall_at_k.csv"


def _recall_plot() -> dict:
    """DVC plot of turn-level recall@k, one line per configured strategy scored at turn level."""
    from pipelines.memory import STRATEGIES

    strategies = load_params().get("benchmark", {}).get("strategies", [])
    turn_level = [s for s in strategies if s in STRATEGIES and "turn" in STRATEGIES[s].granularities]
    return {RECALL_CSV: {"x": "k", "y": [f"turn/{s}" for s in turn_level], "template": "linear",
                         "title": "Recall@k per strategy (turn level)", "y_label": "recall@k"}}


@stage(name="benchmark", group="evaluate", params=("benchmark", "mdr", "glong", "emma"),
       inputs=(canonical_dir("synthetic"), MDR_EXAMPLES, MDR_STUDENT, MDR_DECODER, GLONG_EXTRACTOR, GLONG_IMPORTANCE,
               EMMA_EXAMPLES, EMMA_DIALOGUE, EMMA_RETRIEVER),
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
    # The trained methods' sections: (markdown, metrics of one "strategy" key) each, written once below.
    generation = _mdr_generation(ctx, episodes, split)
    sections = {"mdr": (generation["markdown"], _generation_metrics(generation)),
                "glong_extractor": _extraction_section(ctx),
                "emma": _emma_section(ctx, episodes, split)}
    _write_sections(ctx, out, sections)
    metrics = {f"{strategy}/{name}": value
               for strategy, values in out["metrics"]["synthetic"].items() for name, value in values.items()}
    meta = {"episodes": len(episodes), "strategies": list(cfg["strategies"]),
            "benchmark_md": "\n\n".join(out["markdown"].values()) if isinstance(out["markdown"], dict) else out["markdown"],
            "report": str(ctx.path(REPORT)), "generation_md": sections["mdr"][0],
            "extraction_md": sections["glong_extractor"][0], "emma_md": sections["emma"][0]}
    return StageResult(metadata=meta, metrics=metrics)


def _settings(ctx, cfg: dict) -> dict:
    """Per-strategy settings: params.yaml ``benchmark.strategy_settings`` over project defaults."""
    settings = {name: dict(values) for name, values in (cfg.get("strategy_settings") or {}).items()}
    if "dense" in cfg["strategies"]:
        dense = settings.setdefault("dense", {})
        dense.setdefault("cache_dir", str(ctx.root / ".cache" / "embeddings"))
        dense.setdefault("batch_size", cfg.get("embedding_batch_size", 64))
    if "egocentric" in cfg["strategies"]:
        ego = settings.setdefault("egocentric", {})
        ego.setdefault("retriever", str(ctx.path(EMMA_RETRIEVER)))  # the trained dual encoder
    if "graph" in cfg["strategies"]:
        graph = settings.setdefault("graph", {})
        graph.setdefault("importance", "model")  # Eqs. (1)-(3) from the trained summariser
        graph.setdefault("importance_model", str(ctx.path(GLONG_IMPORTANCE)))
        graph.setdefault("cache_dir", str(ctx.root / ".cache" / "embeddings"))
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


def _generation_metrics(generation: dict) -> dict[str, float]:
    mdr = {f"generation/{k}": v for k, v in generation["overall"].items()}
    for num, m in generation["by_session"].items():
        mdr.update({f"generation/session_{num}/{k}": v for k, v in m.items() if k in ("bleu-1", "rouge-l")})
    return mdr


def _write_sections(ctx, out: dict, sections: dict[str, tuple[str, dict]]) -> None:
    """Append the sections to benchmark.md and their metrics to metrics.json (suite -> key -> metric)."""
    import json

    report = ctx.path(REPORT)
    report.write_text(report.read_text(encoding="utf-8") + "".join("\n" + md for md, _ in sections.values()),
                      encoding="utf-8")
    for key, (_, metrics) in sections.items():
        out["metrics"]["synthetic"][key] = metrics
    path = ctx.path(METRICS)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out["metrics"], indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def _extraction_section(ctx) -> tuple[str, dict]:
    """G-Long's extractor: triplet precision / recall / F1 on the test split."""
    import json

    scores = json.loads((ctx.path(GLONG_EXTRACTOR) / GLONG_EVAL).read_text())
    keys = list(scores)  # triplet_precision/recall/f1/predicted/gold, parse_valid/repaired/dropped
    md = "\n".join([
        "## Triplet extraction (G-Long extractor)", "",
        f"Greedy JSON output of the QLoRA-tuned extractor (profile `{ctx.profile}`) on test utterances, "
        "parsed strictly; exact match of normalised (subject, relation, object). The graph strategy above "
        "stores the ground-truth triplets of the synthetic data, so its retrieval figures do not depend on "
        "this extractor.", "",
        "| " + " | ".join(keys) + " |", "|" + " ---: |" * len(keys),
        "| " + " | ".join(f"{scores[k]:.3f}" if isinstance(scores[k], float) else str(scores[k]) for k in keys) + " |", ""])
    return md, {f"extraction/{k}": float(v) for k, v in scores.items()}


def _emma_section(ctx, episodes, split: str) -> tuple[str, dict]:
    """EMMA: the retriever's Recall@1 / MRR untrained vs trained, and the dialogue module's
    responses (generation task) scored with BLEU, ROUGE-L and Distinct per session index."""
    import json
    from collections import defaultdict

    from pipelines.emma.dialogue import EMMADialogue
    from pipelines.emma.formats import iter_examples
    from pipelines.evaluate.generation import generation_metrics

    scores = json.loads((ctx.path(EMMA_RETRIEVER) / EMMA_RETRIEVER_EVAL).read_text())
    examples = [e for e in iter_examples(ctx.path(f"{EMMA_EXAMPLES}/{split}.jsonl")) if e.task == "generation"]
    limit = int(ctx.config["emma"].get("eval_examples", 64))
    examples = examples[:limit]
    model = EMMADialogue.load(ctx.path(EMMA_DIALOGUE))
    hyps = model.generate_text([e.source for e in examples], max_new_tokens=32)
    refs = [e.target for e in examples]
    overall = generation_metrics(hyps, refs)
    index = {s.id: s.index + 1 for e in episodes for s in e.sessions}
    groups = defaultdict(list)
    for i, e in enumerate(examples):
        groups[index.get(e.session_id)].append(i)
    per = ["| session | responses | bleu-1 | bleu-2 | rouge-l | dist-1 | dist-2 |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    by = {}
    for num in sorted(k for k in groups if k is not None):
        idx = groups[num]
        m = generation_metrics([hyps[i] for i in idx], [refs[i] for i in idx])
        by[num] = m
        per.append(f"| {num} | {len(idx)} | {m['bleu-1']:.2f} | {m['bleu-2']:.2f} | {m['rouge-l']:.2f} | "
                   f"{m['dist-1']:.3f} | {m['dist-2']:.3f} |")
    u, t = scores["untrained"], scores["trained"]
    md = "\n".join([
        "## EMMA", "",
        "### Retriever (dual encoder, triplet loss on cosine distance, margin 0.2)", "",
        f"Tagged main-speaker turns of the synthetic {split} split; candidates are the memories written in "
        "earlier sessions of the episode.", "",
        "| encoder | recall@1 | mrr | queries |", "| --- | ---: | ---: | ---: |",
        f"| untrained (all-MiniLM-L6-v2) | {u['recall@1']:.3f} | {u['mrr']:.3f} | {int(u['queries'])} |",
        f"| trained (profile `{ctx.profile}`) | {t['recall@1']:.3f} | {t['mrr']:.3f} | {int(t['queries'])} |", "",
        "### Dialogue module (QLoRA T5, generation task)", "",
        f"{len(examples)} generation inputs of the {split} split (memories, links, [NOW], history), greedy. "
        "EMMA's published evaluation is human judgement on MiSC: not comparable with these figures.", "",
        "| bleu-1 | bleu-2 | rouge-l | dist-1 | dist-2 | c_dist-1 | c_dist-2 |", "|" + " ---: |" * 7,
        "| " + " | ".join(f"{overall[k]:.3f}" for k in ("bleu-1", "bleu-2", "rouge-l", "dist-1", "dist-2",
                                                         "c_dist-1", "c_dist-2")) + " |", "",
        "By session:", "", "\n".join(per), ""])
    emma = {}
    emma.update({f"retriever/{w}/{k}": float(v) for w, vals in scores.items() for k, v in vals.items()})
    emma.update({f"generation/{k}": float(v) for k, v in overall.items()})
    for num, m in by.items():
        emma.update({f"generation/session_{num}/{k}": float(m[k]) for k in ("bleu-1", "rouge-l")})
    return md, emma
