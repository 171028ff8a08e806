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
TRAINED = {"mdr_teacher": "models/mdr_teacher", "emma_retriever": EMMA_RETRIEVER,
           "glong_importance": GLONG_IMPORTANCE, "glong_extractor": GLONG_EXTRACTOR}


def _suites() -> list[str]:
    """The suites params.yaml ``benchmark.suites`` names (default: the synthetic suite)."""
    return list(load_params().get("benchmark", {}).get("suites") or ["synthetic"])


def _suite_inputs() -> tuple[str, ...]:
    """The canonical data of every configured suite (a real-data suite reads its ingest stage's output)."""
    from pipelines.evaluate.suite import load_suite

    sources = []
    for name in _suites():
        source = load_suite(name).source
        sources.append("synthetic" if source in ("synthetic", "canonical") else source)
    return tuple(canonical_dir(s) for s in dict.fromkeys(sources))


def _recall_plot() -> dict:
    """DVC plot of the first suite's turn-level recall@k, one line per strategy scored at turn level."""
    from pipelines.evaluate.suite import load_suite
    from pipelines.memory import STRATEGIES

    suite = load_suite(_suites()[0])
    turn_level = [s for s in suite.strategies if "turn" in STRATEGIES[s].granularities]
    return {f"{PLOTS}/{suite.name}/recall_at_k.csv": {
        "x": "k", "y": [f"turn/{s}" for s in turn_level], "template": "linear",
        "title": f"Recall@k per strategy ({suite.name}, turn level)", "y_label": "recall@k"}}


def _first_suite() -> str:
    return _suites()[0]


@stage(name="benchmark", group="evaluate", params=("benchmark", "synthetic", "mdr", "glong", "emma"),
       inputs=(*_suite_inputs(), MDR_EXAMPLES, MDR_STUDENT, MDR_DECODER, GLONG_EXTRACTOR, GLONG_IMPORTANCE,
               EMMA_EXAMPLES, EMMA_DIALOGUE, EMMA_RETRIEVER),
       outputs=(REPORT, METRICS, QUERIES, PLOTS),
       metrics=(METRICS,),
       plots=(_recall_plot(), f"{PLOTS}/{_first_suite()}/recall_at_k.png",
              f"{PLOTS}/{_first_suite()}/recall_by_session.png", f"{PLOTS}/{_first_suite()}/tokens_vs_recall.png"),
       code=("pipelines/evaluate", "pipelines/memory"))
def benchmark(ctx) -> StageResult:
    """Every memory strategy of every configured benchmark suite under the temporal protocol.

    The suites are named in params.yaml ``benchmark.suites`` (default: the synthetic suite); the
    trained methods' own sections (MDR and EMMA generation, G-Long extraction) follow.

    Memory holds only sessions earlier than the one a query is asked in. Recall@k, recall_any/all@k,
    ndcg_any@k, MRR and context tokens at turn, session and memory level, per category and per
    session; reports/benchmark.md, reports/metrics.json and PNG plots. A strategy whose model is
    not trained is listed as missing.
    """
    from pipelines.evaluate.report import evaluate_suite, write_report
    from pipelines.evaluate.suite import load_suite, strategy_defaults

    cfg = ctx.config["benchmark"]
    runs, synthetic_episodes, split = [], None, "test"
    for name in _suites():
        suite = load_suite(name)
        source = "synthetic" if suite.source in ("synthetic", "canonical") else suite.source
        data = ctx.path(canonical_dir(source))
        episodes = list(_episodes(suite, data))
        settings = strategy_defaults(suite.strategies, ctx.root, embedding_batch_size=cfg.get("embedding_batch_size", 64))
        for strategy, values in (cfg.get("strategy_settings") or {}).items():
            if strategy in suite.strategies:
                settings.setdefault(strategy, {}).update(values)
        runs.append(evaluate_suite(suite, episodes, settings))
        if source == "synthetic" and synthetic_episodes is None:
            synthetic_episodes, split = episodes, suite.split
    out = write_report(runs, ctx.path("reports"), profile=ctx.profile, models=_model_sizes(ctx))
    if ctx.tracker is not None:
        for path in out["plots"]:
            ctx.tracker.log_artifact(path, artifact_path=f"plots/{path.parent.name}")
    sections = {}
    if synthetic_episodes is not None:  # the trained methods' own sections (written once below)
        generation = _mdr_generation(ctx, synthetic_episodes, split)
        sections = {"mdr_generation": (generation["markdown"], _generation_metrics(generation)),
                    "glong_extractor": _extraction_section(ctx),
                    "emma": _emma_section(ctx, synthetic_episodes, split)}
    _write_sections(ctx, out, sections)
    if ctx.tracker is not None:  # the finished report beside its plots in the MLflow run
        for rel in (REPORT, METRICS):
            ctx.tracker.log_artifact(ctx.path(rel), artifact_path="report")
    metrics = {f"{suite}/{strategy}/{name}": value for suite, per in out["metrics"].items()
               for strategy, values in per.items() for name, value in values.items()}
    meta = {"suites": [r.suite.name for r in runs], "episodes": {r.suite.name: r.episodes for r in runs},
            "strategies": {r.suite.name: list(r.suite.strategies) for r in runs},
            "missing": out["missing"],
            "benchmark_md": "\n\n".join(f"## {name}\n\n{t}" for name, t in out["markdown"].items()),
            "report": str(ctx.path(REPORT)),
            **{f"{key}_md": md for key, (md, _) in sections.items()}}
    return StageResult(metadata=meta, metrics=metrics)


def _episodes(suite, data):
    """A suite's episodes from the canonical data its ingest stage wrote."""
    from pipelines.evaluate.suite import main_speaker_corpus

    split = suite.split if suite.split != "all" else None
    files = [data / f"{split}.jsonl"] if split else sorted(data.glob("*.jsonl"))
    episodes = [e for f in files for e in iter_episodes(f)]
    if suite.max_episodes:
        episodes = episodes[: suite.max_episodes]
    return [main_speaker_corpus(e) for e in episodes] if suite.corpus == "main_speaker" else episodes


def _model_sizes(ctx) -> dict[str, str]:
    """Architecture and size of each trained model, read from its saved config.json."""
    import json

    out = {}
    for stage_name, rel in TRAINED.items():
        configs = sorted(ctx.path(rel).rglob("config.json")) if ctx.path(rel).is_dir() else []
        if not configs:
            out[stage_name] = "not trained"
            continue
        c = json.loads(configs[0].read_text())
        layers = c.get("n_layer") or c.get("num_layers") or c.get("num_hidden_layers")
        width = c.get("n_embd") or c.get("d_model") or c.get("hidden_size")
        out[stage_name] = f"{c.get('model_type', '?')} {layers}x{width}"
    return out


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
        out["metrics"].setdefault("synthetic", {})[key] = metrics
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
