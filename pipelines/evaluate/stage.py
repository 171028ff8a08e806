"""The benchmark stage: every configured memory strategy under the temporal protocol, and the answers a
language model gives from each memory (pipelines/evaluate/answers)."""

from __future__ import annotations

import shutil

from pipelines.config import load_params
from pipelines.data.schema import iter_episodes
from pipelines.data.stage import canonical_dir
from pipelines.emma.retriever_config import EVAL_FILE as EMMA_RETRIEVER_EVAL
from pipelines.evaluate.settings import BenchmarkSettings
from pipelines.evaluate.suite import strategy_defaults
from pipelines.glong.extractor import EVAL_FILE as GLONG_EVAL
from pipelines.llm.config import LLMConfig, LLMSettings
from pipelines.memory import STRATEGIES
from pipelines.registry import Section, StageResult, config_section, output, output_of, stage

REPORT = "reports/benchmark.md"
METRICS = "reports/metrics.json"
HEADLINE = "reports/headline"  # <suite>/<strategy>.json: the DVC metrics (report.write_headline)
QUERIES = "reports/queries.jsonl"
PLOTS = "reports/plots"
SHARDS = "reports/shards"  # <key>/<suite>: benchmark_shard's complete shards, merged by the benchmark stage
SHARD_PROGRESS = ".cache/benchmark"  # the shards' finished episodes as they end (undeclared: a killed shard resumes)
LLM_CACHE = ".cache/llm"  # the reader's and judge's response cache (and the converted local model), undeclared


def _strategy_base(name: str):
    """A strategy's settings go over the project's defaults for it (pipelines.evaluate.suite.strategy_defaults)."""
    def base(config: dict, root) -> dict:
        batch = config.get("benchmark", {}).get("embedding_batch_size", 64)
        return strategy_defaults([name], root, embedding_batch_size=batch).get(name, {})
    return base


config_section("benchmark", Section((BenchmarkSettings,), sections={"strategy_settings": Section(sections={
    name: Section((cls.config_class,), base=_strategy_base(name)) for name, cls in STRATEGIES.items()})}))
config_section("llm", Section((LLMSettings,), sections={
    "reader": Section((LLMConfig,)), "judge": Section((LLMConfig,), nullable=True)}))
# The trained models the report names (their outputs asked of the registry, pipelines.registry.output).
TRAINED = ("mdr_teacher", "emma_retriever", "emma_dialogue", "glong_importance", "glong_extractor", "reranker")


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

    suite = load_suite(_suites()[0])
    turn_level = [s for s in suite.strategies if "turn" in STRATEGIES[s].granularities]
    return {f"{PLOTS}/{suite.name}/recall_at_k.csv": {
        "x": "k", "y": [f"turn/{s}" for s in turn_level], "template": "linear",
        "title": f"Recall@k per strategy ({suite.name}, turn level)", "y_label": "recall@k"}}


def _first_suite() -> str:
    return _suites()[0]


def _shard_keys() -> tuple[str, ...]:
    """The benchmark's shards, params.yaml ``benchmark.shards`` (default 1): keys "0" .. "N-1"."""
    count = (load_params().get("benchmark") or {}).get("shards", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return ("0",)  # the resolver says what is wrong with the value when a stage runs
    return tuple(str(i) for i in range(count))


PARAMS = ("benchmark", "synthetic", "mdr", "glong", "emma", "llm", "rerank")
# The methods' outputs the benchmark reads, declared by their stages' names: the registry resolves the paths.
INPUTS = (*_suite_inputs(), *(output_of(name) for name in (
    "mdr_examples", "mdr_student", "mdr_decoder", "glong_extractor", "glong_importance", "emma_examples",
    "emma_dialogue", "emma_retriever", "reranker")))
CODE = ("pipelines/evaluate", "pipelines/memory", "pipelines/llm")


def _suite_data(ctx, suite):
    """A suite's canonical data folder (its ingest stage's output) and its episodes."""
    source = "synthetic" if suite.source in ("synthetic", "canonical") else suite.source
    data = ctx.path(canonical_dir(source))
    return source, data, list(_episodes(suite, data))


def _strategy_settings(ctx, suite) -> dict:

    cfg = ctx.config["benchmark"]
    settings = strategy_defaults(suite.strategies, ctx.root, embedding_batch_size=cfg.get("embedding_batch_size"))
    for strategy, values in (cfg.get("strategy_settings") or {}).items():
        if strategy in suite.strategies:
            settings.setdefault(strategy, {}).update(values)
    return settings


def _shard_count(ctx) -> int:
    """The number of shards: the registry's (params.yaml), which this run's config must not contradict."""
    count = len(ctx.stage.partitions) if ctx.stage.partitions else len(_shard_keys())
    asked = int((ctx.config.get("benchmark") or {}).get("shards", 1))
    if asked != count:
        from pipelines.errors import ConfigError

        raise ConfigError(f"benchmark.shards is {asked} in this run but the stages were declared with {count} from "
                          f"params.yaml: set benchmark.shards in params.yaml (then `make dvc-yaml`), not at run time.")
    return count


@stage(name="benchmark_shard", group="evaluate", params=PARAMS, inputs=INPUTS, outputs=(f"{SHARDS}/{{partition}}",),
       partitions=_shard_keys(), code=CODE)
def benchmark_shard(ctx) -> StageResult:
    """One shard of every configured benchmark suite through the temporal protocol (the benchmark stage merges them).

    A shard holds a suite's episodes at positions p with p mod N equal to its key (N = params.yaml
    ``benchmark.shards``); every strategy runs over them episode by episode.

    Each finished episode is kept under ``.cache/benchmark`` as it ends (a killed run resumes after the episodes it
    finished); the complete shard is then copied to ``reports/shards/<key>/<suite>``. The readers' contexts of the
    questions the benchmark stage will answer are recorded with the retrieval.
    """
    from pipelines.evaluate.answers.run import AnswerSettings, evaluate_shard
    from pipelines.evaluate.shards import ShardSpec, data_digest
    from pipelines.evaluate.suite import load_suite

    count = _shard_count(ctx)
    shard = ShardSpec(int(ctx.stage.partition or 0), count)
    answer_settings = AnswerSettings.from_config(ctx.config.get("llm") or {}, ctx.config.get("seed", 2022))
    episodes, missing = {}, {}
    for name in _suites():
        suite = load_suite(name)
        _, data, published = _suite_data(ctx, suite)
        store = evaluate_shard(suite, published, _strategy_settings(ctx, suite), suite.answers is not None,
                               answer_settings, shard, ctx.path(SHARD_PROGRESS), data_id=data_digest([data]))
        target = ctx.path(f"{SHARDS}/{shard.index}/{suite.name}")
        shutil.copytree(store.folder, target)
        episodes[suite.name], missing[suite.name] = len(store.done), dict(store.missing)
    return StageResult(metadata={"shard": shard.label, "episodes": episodes, "missing": missing},
                       metrics={f"{suite}/episodes": float(n) for suite, n in episodes.items()})


@stage(name="benchmark", group="evaluate", params=PARAMS,
       inputs=(*INPUTS, *(f"{SHARDS}/{key}" for key in _shard_keys())),
       outputs=(REPORT, METRICS, HEADLINE, QUERIES, PLOTS),
       metrics=(HEADLINE,),
       plots=(_recall_plot(), f"{PLOTS}/{_first_suite()}/recall_at_k.png",
              f"{PLOTS}/{_first_suite()}/recall_by_session.png", f"{PLOTS}/{_first_suite()}/tokens_vs_recall.png"),
       code=CODE)
def benchmark(ctx) -> StageResult:
    """Every memory strategy of every configured benchmark suite under the temporal protocol.

    The suites are named in params.yaml ``benchmark.suites`` (default: the synthetic suite); their retrieval is
    the benchmark_shard stage's (its shards, merged here); the trained methods' own sections (MDR and EMMA
    generation, G-Long extraction) follow.

    Memory holds only sessions earlier than the one a query is asked in. Recall@k, recall_any/all@k,
    ndcg_any@k, MRR and context tokens at turn, session and memory level, per category and per
    session; reports/benchmark.md, reports/metrics.json (every figure), reports/headline (the DVC
    metrics: a few figures per suite and strategy) and PNG plots. A strategy whose model is not
    trained is listed as missing.

    A suite with ``answers`` is also answered: params.yaml ``llm.reader`` answers its questions from each
    strategy's context and from the reference readers', ``llm.judge`` (the reader when null) judges them
    (pipelines/evaluate/answers/run.py); responses are cached under ``.cache/llm`` (a rerun asks nothing
    again), the answers join the report and every sampled one is an MLflow trace (``llm.trace_sample``).
    """
    from pipelines.evaluate.answers.run import AnswerLLMs, AnswerSettings, evaluate_and_answer
    from pipelines.evaluate.report import write_headline, write_report
    from pipelines.evaluate.suite import corpus_episodes, load_suite, strategy_defaults

    from pipelines.evaluate.shards import data_digest

    cfg = ctx.config["benchmark"]
    llm_cfg = ctx.config.get("llm") or {}
    answer_settings = AnswerSettings.from_config(llm_cfg, ctx.config.get("seed", 2022))
    llms = AnswerLLMs(llm_cfg, ctx.path(LLM_CACHE))  # built at the first suite that answers
    runs, answer_runs, synthetic_episodes, split = [], [], None, "test"
    count = _shard_count(ctx)
    try:
        for name in _suites():
            suite = load_suite(name)
            source, data, published = _suite_data(ctx, suite)
            folders = [ctx.path(f"{SHARDS}/{key}/{suite.name}") for key in _shard_keys()]
            run, answered = evaluate_and_answer(suite, published, _strategy_settings(ctx, suite), llms,
                                                answer_settings, data_id=data_digest([data]), shards=count,
                                                shard_folders=folders)
            runs.append(run)
            answer_runs += [answered] if answered is not None else []
            if source == "synthetic" and synthetic_episodes is None:
                synthetic_episodes, split = corpus_episodes(suite, published), suite.split
    finally:
        llms.close()
    sections = {}
    egocentric = {**strategy_defaults(["egocentric"], ctx.root)["egocentric"],
                  **((cfg.get("strategy_settings") or {}).get("egocentric") or {})}
    if synthetic_episodes is not None:  # the trained methods' own sections, at the end of the report
        generation = _mdr_generation(ctx, synthetic_episodes, split)
        sections = {"mdr_generation": (generation["markdown"], _generation_metrics(generation)),
                    "glong_extractor": _extraction_section(ctx),
                    "emma": _emma_section(ctx, split, egocentric)}
    # The whole report at once, each file written whole (the sections' metrics under the synthetic suite)
    section_metrics = {"synthetic": {key: m for key, (_, m) in sections.items()}} if sections else None
    out = write_report(runs, ctx.path("reports"), profile=ctx.profile, models=_model_sizes(ctx),
                       sections=[md for md, _ in sections.values()], section_metrics=section_metrics,
                       answers=answer_runs)
    write_headline(runs, ctx.path(HEADLINE), answers=answer_runs)
    if ctx.tracker is not None:  # the finished report beside its plots in the MLflow run; the answers as traces
        from pipelines.evaluate.answers.traces import log_answer_traces

        for path in out["plots"]:
            ctx.tracker.log_artifact(path, artifact_path=f"plots/{path.parent.name}")
        for rel in (REPORT, METRICS):
            ctx.tracker.log_artifact(ctx.path(rel), artifact_path="report")
        for answer_run in answer_runs:
            log_answer_traces(ctx.tracker, answer_run, sample=float(llm_cfg.get("trace_sample", 1.0)),
                              seed=ctx.config.get("seed", 2022))
    metrics = {f"{suite}/{strategy}/{name}": value for suite, per in out["metrics"].items()
               for strategy, values in per.items() for name, value in values.items()}
    meta = {"suites": [r.suite.name for r in runs], "episodes": {r.suite.name: r.episodes for r in runs},
            **({"answers": {a.suite: {"reader": a.reader, "judge": a.judge, "questions": a.questions,
                                      "answers": len(a.records)} for a in answer_runs}} if answer_runs else {}),
            "strategies": {r.suite.name: list(r.suite.strategies) for r in runs},
            "missing": out["missing"],
            "benchmark_md": "\n\n".join(f"## {name}\n\n{t}" for name, t in out["markdown"].items()),
            "report": str(ctx.path(REPORT)),
            **{f"{key}_md": md for key, (md, _) in sections.items()}}
    return StageResult(metadata=meta, metrics=metrics)


def _episodes(suite, data):
    """A suite's episodes from the canonical data its ingest stage wrote, every turn kept (the suite's corpus
    is applied by the caller: the reference readers read the dialogue as published)."""
    split = suite.split if suite.split != "all" else None
    files = [data / f"{split}.jsonl"] if split else sorted(data.glob("*.jsonl"))
    episodes = [e for f in files for e in iter_episodes(f)]
    if suite.max_episodes:
        episodes = episodes[: suite.max_episodes]
    return episodes


def _model_sizes(ctx) -> dict[str, str]:
    """Architecture and size of each trained model, read from its saved config.json; a LoRA adapter over a
    pretrained base (the small profile's) from the base's config.json, which adapter_config.json names."""
    import json
    from pathlib import Path

    def size(config: Path) -> str:
        c = json.loads(config.read_text())
        layers = c.get("n_layer") or c.get("num_layers") or c.get("num_hidden_layers")
        width = c.get("n_embd") or c.get("d_model") or c.get("hidden_size")
        return f"{c.get('model_type', '?')} {layers}x{width}"

    out = {}
    for stage_name in TRAINED:
        folder = ctx.path(output(stage_name))
        configs = sorted(folder.rglob("config.json")) if folder.is_dir() else []
        adapters = sorted(folder.rglob("adapter_config.json")) if folder.is_dir() else []
        if configs:
            out[stage_name] = size(configs[0])
        elif adapters:
            lora = json.loads(adapters[0].read_text())
            base = Path(lora.get("base_model_name_or_path") or "") / "config.json"
            name = Path(lora.get("base_model_name_or_path") or "?").name
            out[stage_name] = (f"{name} ({size(base)}) + LoRA r{lora.get('r')}" if base.is_file()
                               else f"{name} + LoRA r{lora.get('r')}")
        else:
            out[stage_name] = "not trained"
    return out


def _mdr_generation(ctx, episodes, split: str) -> dict:
    """MDR responses on the split's examples: BLEU-1..4, ROUGE-L, Distinct-1/2, per session."""
    from pipelines.data.tasks import read_mdr_examples
    from pipelines.mdr.evaluate import PAPER_CONVAI2, evaluate_mdr

    examples = read_mdr_examples(ctx.path(f"{output('mdr_examples')}/{split}.jsonl"))
    index = {s.id: s.index for e in episodes for s in e.sessions}
    gen = ctx.config["mdr"].get("generation", {})
    result = evaluate_mdr(ctx.path(output("mdr_decoder")), ctx.path(output("mdr_student")), examples,
                          session_index=index, max_new_tokens=gen.get("max_new_tokens", 32), seed=ctx.config.get("seed", 2022))
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
        f"({_profile_note(ctx)}).", "", table, "", "### By session", "", "\n".join(per),
        "", "### Samples", "", "\n".join(samples), ""])
    return {"overall": result["overall"], "by_session": result["by_session"], "markdown": md}


def _generation_metrics(generation: dict) -> dict[str, float]:
    mdr = {f"generation/{k}": v for k, v in generation["overall"].items()}
    for num, m in generation["by_session"].items():
        mdr.update({f"generation/session_{num}/{k}": v for k, v in m.items() if k in ("bleu-1", "rouge-l")})
    return mdr


def _extraction_section(ctx) -> tuple[str, dict]:
    """G-Long's extractor: triplet precision / recall / F1 on each dataset's held-back utterances, of the
    fine-tuned model and (a pretrained base) of the same base prompted zero-shot (pipelines.glong.stage)."""
    import json

    from pipelines.glong.extractor import extraction_table

    scores = json.loads((ctx.path(output("glong_extractor")) / GLONG_EVAL).read_text())
    base = ((ctx.config.get("glong") or {}).get("extractor") or {}).get("model", "tiny")
    zero_shot = ("the same base prompted zero-shot with the same prompt and parser is the row beside it"
                 if any(k.startswith("zero_shot/") or "/zero_shot/" in k for k in scores)
                 else "a base initialised at random has no zero-shot row")
    md = "\n".join([
        "## Triplet extraction (G-Long extractor)", "",
        f"Greedy JSON output of the LoRA-tuned extractor (profile `{ctx.profile}`, base `{base}`) on the held-back "
        f"utterances of each training dataset (glong.sources; never trained on), parsed strictly; exact match of "
        f"normalised (subject, relation, object); {zero_shot}. The graph strategy of the synthetic suite stores "
        "the ground-truth triplets, so its retrieval figures do not depend on this extractor.", "",
        extraction_table(scores)])
    return md, {f"extraction/{k}": float(v) for k, v in scores.items()}


def _profile_note(ctx) -> str:
    """What the models of this run are, from the config actually used (e.g. "profile `tiny`: a 2x64 GPT-2
    decoder initialised at random and trained on the synthetic data")."""
    from pipelines.models.gpt2 import resolve_gpt2_spec

    model = (ctx.config.get("mdr") or {}).get("model", "tiny")
    spec = resolve_gpt2_spec(model) if isinstance(model, (str, dict)) else None
    what = (f"a {spec.n_layer}x{spec.n_embd} GPT-2 decoder initialised at random" if spec is not None
            else f"the pretrained `{model}` decoder")
    return f"profile `{ctx.profile}`: {what}, trained on the synthetic data"


def _retriever_model(ctx) -> str:
    """The checkpoint the EMMA retriever was initialised from, as the config used names it (the untrained
    row of the retriever table): params.yaml / profile ``emma.retriever.model``, default the shipped MiniLM."""
    model = ((ctx.config.get("emma") or {}).get("retriever") or {}).get("model")
    return str(model) if model else "all-MiniLM-L6-v2, shipped"


EMMA_COLUMNS = ("bleu-1", "bleu-2", "rouge-l", "dist-1", "dist-2", "c_dist-1", "c_dist-2")
EMMA_SESSION_COLUMNS = ("bleu-1", "bleu-2", "rouge-l", "dist-1", "dist-2")


def _emma_section(ctx, split: str, settings: dict | None = None) -> tuple[str, dict]:
    """EMMA: the retriever's Recall@1 / MRR untrained vs trained, and the dialogue module's responses scored
    with BLEU, ROUGE-L and Distinct, overall and per session number.

    The responses are EMMA's system under the temporal protocol: for each generation test turn (the first
    ``emma.eval_examples`` of emma_examples' split), the egocentric strategy (``settings``: by default
    memories written by the dialogue module's summariser and linked by its linker, the trained retriever)
    holds the sessions before the turn's own; its top-1 memory and the memories linked to it fill the
    generation sequence's memory block (pipelines.evaluate.generation.temporal_generation_inputs); the
    dialogue module answers it, greedy. A second row, an oracle, answers the emma_examples inputs, whose
    memory block is the turn's gold memory tags (with their links)."""
    import json

    from pipelines.data.stage import training_sources, training_split
    from pipelines.emma.formats import iter_examples
    from pipelines.emma.retriever_check import beats_untrained
    from pipelines.errors import ModelNotTrained
    from pipelines.evaluate.generation import temporal_generation_inputs
    from pipelines.text_metrics import by_session
    from pipelines.evaluate.tables import markdown_table
    from pipelines.evaluate.suite import strategy_defaults
    from pipelines.memory import build_strategy, missing_models
    from pipelines.memory.egocentric import load_dialogue

    emma_cfg = ctx.config.get("emma") or {}
    lines = ["## EMMA", "", "### Retriever (dual encoder, triplet loss on cosine distance, margin 0.2)", ""]
    emma: dict[str, float] = {}
    eval_file = ctx.path(output("emma_retriever")) / EMMA_RETRIEVER_EVAL
    if eval_file.is_file():
        scores = json.loads(eval_file.read_text())
        u, t = scores["untrained"], scores["trained"]
        lines += [f"The {split} split of emma.sources: tagged main-speaker turns (candidates: the memories written "
                  "in earlier sessions of the episode), and the questions of each kind of emma.retriever.pairs "
                  "(candidates: the episode's earlier turns).", "",
                  "| queries of | encoder | recall@1 | mrr | queries |", "| --- | --- | ---: | ---: | ---: |"]
        encoders = ((f"untrained ({_retriever_model(ctx)})", u), (f"trained (profile `{ctx.profile}`)", t))
        for kind in [""] + sorted({k.split("/")[0] + "/" for k in t if "/" in k}):   # "": the tagged turns
            if f"{kind}queries" not in t:       # no tagged turn in the split: not measured (pipelines.emma.stage)
                continue
            name = kind.rstrip("/") or "tagged turns"
            lines += [f"| {name} | {which} | {v[f'{kind}recall@1']:.3f} | {v[f'{kind}mrr']:.3f} | "
                      f"{int(v[f'{kind}queries'])} |" for which, v in encoders]
        lines.append("")
        check = beats_untrained({f"test_{w}_{k}": v for w, vals in scores.items() for k, v in vals.items()},
                                training_sources(emma_cfg, "emma"))
        if not check.passed:            # said here too, not only in the stage's check (issue #47, point 4)
            lines += [f"**The trained encoder ranks below the untrained one:** {check.examples[0]} (the "
                      f"emma_retriever stage's check `{check.name}` fails).", ""]
        emma.update({f"retriever/{w}/{k}": float(v) for w, vals in scores.items() for k, v in vals.items()})
    else:
        lines += [f"Not scored: the emma_retriever stage wrote no {EMMA_RETRIEVER_EVAL} (emma.sources has no "
                  "test split).", ""]

    settings = dict(settings if settings is not None else strategy_defaults(["egocentric"], ctx.root)["egocentric"])
    limit = int(emma_cfg.get("eval_examples", 64))
    examples_file = ctx.path(f"{output('emma_examples')}/{split}.jsonl")
    examples = ([e for e in iter_examples(examples_file) if e.task == "generation"][:limit]
                if examples_file.is_file() else [])
    lines += [f"### Dialogue module ({_model_sizes(ctx).get('emma_dialogue', '?')}): generation", ""]
    absent = missing_models("egocentric", settings)
    if not examples or absent:
        why = "; ".join(str(e) for e in absent) or f"no generation example in {output('emma_examples')}/{split}.jsonl"
        return "\n".join(lines + [f"Not scored: {why}.", ""]), emma

    wanted = {e.episode_id for e in examples}
    episodes = [e for _, eps in training_split(ctx, "emma", split) for e in eps if e.id in wanted]
    try:
        strategy = build_strategy("egocentric", **settings)
        # the responses are the trained module's, whoever writes the memories (a language model: dialogue_llm)
        dialogue = (None if strategy.config.needs_llm else strategy.dialogue) or load_dialogue(
            settings.get("dialogue") or ctx.path(output("emma_dialogue")), strategy.config.dialogue_batch_size)
    except ModelNotTrained as exc:
        return "\n".join(lines + [f"Not scored: {exc}.", ""]), emma
    budget = int((emma_cfg.get("dialogue") or {}).get("max_source_length", 1024))
    stats: dict[str, float] = {}
    inputs = temporal_generation_inputs(strategy, episodes, {e.ref for e in examples},
                                        count_tokens=lambda text: len(text.split()), budget=budget, stats=stats)
    examples = [e for e in examples if e.ref in inputs]
    max_new = 32
    refs = [e.target for e in examples]
    sessions = [inputs[e.ref][0] for e in examples]
    systems = {
        "emma": ("EMMA: top-1 + linked memories (trained retriever; memories "
                 + {"model": "written and linked by the dialogue module", "llm": "written and linked by "
                    "the language model of dialogue_llm"}.get(strategy.config.memory_source, "from the dataset")
                 + ")", [inputs[e.ref][1] for e in examples]),
        "oracle": ("oracle: the turn's gold memory tags and their links", [e.source for e in examples]),
    }
    results, hyps = {}, {}
    for key, (_, sources) in systems.items():
        hyps[key] = dialogue(sources, max_new)
        results[key] = by_session(hyps[key], refs, sessions)

    decimals = {c: (2 if c.startswith(("bleu", "rouge")) else 3) for c in EMMA_COLUMNS}
    decimals["responses"] = 0
    overall = {label: {"responses": float(len(refs)), **results[key][0]} for key, (label, _) in systems.items()}
    per = {f"{label.split(':')[0]}, session {num}": m
           for key, (label, _) in systems.items() for num, m in results[key][1].items()}
    source = {"model": "the dialogue module's own summaries", "llm": "the summaries of the language model of "
              "dialogue_llm"}.get(strategy.config.memory_source, "the dataset's memories")
    lines += [
        f"{len(examples)} main-speaker turns of the {split} split (the first emma.eval_examples = {limit} generation "
        f"examples), greedy, at most {max_new} new tokens; {len(episodes)} episodes replayed under the temporal "
        "protocol: before each turn the egocentric memory holds the sessions before the turn's own, its top-1 "
        "memory by the trained retriever and the memories linked to it fill the [MEMORY] block of the generation "
        f"sequence (memories from {source}; {stats.get('memories', 0):.0f} memories, "
        f"{stats.get('distinct_memories', 0):.0f} distinct sentences and {stats.get('links', 0):.0f} links written "
        f"over those episodes; {stats.get('empty', 0):.0f} turns with no memory to show). The oracle row answers "
        "the same turns with the dataset's memory tags as the block. BLEU (sacrebleu, corpus) and ROUGE-L "
        "(rouge-score) on 0-100, Distinct-n over all responses (dist) and per response (c_dist). EMMA's "
        "published evaluation is human judgement on MiSC: not comparable with these figures.", "",
        markdown_table(overall, ["responses", *EMMA_COLUMNS], row_label="system",
                       ranked_rows=[systems["emma"][0]], decimals=decimals), "",
        "By session (the session number of the turn, from 1):", "",
        markdown_table(per, ["responses", *EMMA_SESSION_COLUMNS], ranked=(), row_label="system, session",
                       decimals=decimals), "",
        "Samples:", "", "| reference | EMMA | oracle |", "| --- | --- | --- |",
        *[f"| {refs[i]} | {hyps['emma'][i]} | {hyps['oracle'][i]} |".replace("\n", " ")
          for i in range(0, len(refs), max(1, len(refs) // 3))][:3], ""]
    for key, prefix in (("emma", "generation"), ("oracle", "generation_oracle")):
        overall_m, per_m = results[key]
        emma.update({f"{prefix}/{k}": float(v) for k, v in overall_m.items()})
        for num, m in per_m.items():
            emma.update({f"{prefix}/session_{num}/{k}": float(m[k]) for k in ("responses", *EMMA_SESSION_COLUMNS)})
    emma.update({f"generation/memory/{k}": float(v) for k, v in stats.items()})
    writing, writing_metrics = _emma_memory_writing(ctx, split, dialogue, strategy.config)
    emma.update(writing_metrics)
    return "\n".join(lines + writing), emma


EMMA_WRITING_EXAMPLES = 24   # summarise inputs per dataset, and link inputs, scored in the EMMA section


def _writing_judge(ctx):
    """The configured ``llm.judge`` (None when it is null: the summaries are then scored by ROUGE-L only; the
    reader does not stand in for a judge here, as a small reader's verdicts on its own kind of text say little)."""
    llm = ctx.config.get("llm") or {}
    if not llm.get("judge"):
        return None
    from pipelines.evaluate.answers.run import AnswerLLMs

    return AnswerLLMs(llm, ctx.path(LLM_CACHE)).judge


def _judge_summaries(judge, targets: list[str], written: list[str]) -> dict[str, float]:
    """RealMem's memory recall (``realmem_memory_recall``: the share of ground-truth memories whose meaning the
    retrieved memory holds) of each written summary against its target, both split at [SEP] into memories; a
    target of [NONE] is not judged. Returns the mean recall over parsed verdicts and the unparseable count."""
    from pipelines.emma.formats import parse_summary
    from pipelines.evaluate.answers.judges import RealMemMemoryJudge, run_judges
    from pipelines.evaluate.answers.types import AnswerItem, AnswerRecord

    recall = RealMemMemoryJudge("realmem_memory_recall", "memory_recall", 1.0)
    records = []
    for n, (target, summary) in enumerate(zip(targets, written)):
        gold, said = parse_summary(target), parse_summary(summary)
        if not gold:
            continue
        item = AnswerItem(suite="emma_writing", reader="emma_summariser", setting="summary", episode_id="",
                          query_id=f"summary-{n}", question="What should be remembered from this session?",
                          reference="", context="\n".join(said) or "(nothing)", context_tokens=0,
                          evidence=tuple(gold))
        records.append(AnswerRecord(item=item, answer=""))
    run_judges([recall], records, judge)
    summary = recall.summary([r.verdicts[recall.name] for r in records if recall.name in r.verdicts])
    return {"judge recall": summary.get("score", 0.0), "judge unparseable": float(summary["unparseable"])}


def _emma_memory_writing(ctx, split: str, dialogue, config) -> tuple[list[str], dict[str, float]]:
    """The dialogue module's memory writing on the split's summarise and link examples (emma_examples), as the
    egocentric strategy asks it (its ``max_new_tokens`` / ``link_max_new_tokens``): ROUGE-L of each summary
    against its target (the dataset's memories; LoCoMo's per-session observations when LoCoMo is one of
    emma.sources), per dataset, and the linker's accuracy and positive recall. At most
    :data:`EMMA_WRITING_EXAMPLES` of each, evenly spaced."""
    from pipelines.data.stage import training_split
    from pipelines.emma.formats import iter_examples, parse_link
    from pipelines.text_metrics import rouge_l
    from pipelines.data.sampling import evenly_spaced

    examples_file = ctx.path(f"{output('emma_examples')}/{split}.jsonl")
    examples = list(iter_examples(examples_file)) if examples_file.is_file() else []
    dataset = {e.id: path.parent.name for path, eps in training_split(ctx, "emma", split) for e in eps}
    rows: dict[str, dict[str, float]] = {}
    metrics: dict[str, float] = {}
    samples: list[str] = []
    by_dataset: dict[str, list] = {}
    for ex in examples:
        if ex.task == "summarize":
            by_dataset.setdefault(dataset.get(ex.episode_id, "?"), []).append(ex)
    judge = _writing_judge(ctx) if by_dataset else None
    for name, items in sorted(by_dataset.items()):
        items = evenly_spaced(items, EMMA_WRITING_EXAMPLES)
        written = dialogue([ex.source for ex in items], config.max_new_tokens)
        what = "observations" if name == "locomo" else "memories"
        score = rouge_l(written, [ex.target for ex in items])
        rows[f"summarise: {name} ({what})"] = {"examples": float(len(items)), "rouge-l": score}
        metrics.update({f"writing/summarize/{name}/rouge-l": score, f"writing/summarize/{name}/examples": len(items)})
        if judge is not None:
            recall = _judge_summaries(judge, [ex.target for ex in items], written)
            rows[f"summarise: {name} ({what})"].update(recall)
            metrics.update({f"writing/summarize/{name}/{k.replace(' ', '_')}": v for k, v in recall.items()})
        samples.append(f"| {name} | {items[0].target} | {written[0]} |".replace("\n", " "))
    links = evenly_spaced([ex for ex in examples if ex.task == "link"], EMMA_WRITING_EXAMPLES)
    if links:
        said = [parse_link(out) for out in dialogue([ex.source for ex in links], config.link_max_new_tokens)]
        gold = [parse_link(ex.target) for ex in links]
        accuracy = sum(s == g for s, g in zip(said, gold)) / len(links)
        recall = sum(s and g for s, g in zip(said, gold)) / sum(gold) if any(gold) else 0.0
        rows["link"] = {"examples": float(len(links)), "accuracy": accuracy, "positive recall": recall,
                        "positive share (gold)": sum(gold) / len(links)}
        metrics.update({"writing/link/accuracy": accuracy, "writing/link/positive_recall": recall,
                        "writing/link/examples": float(len(links))})
    if not rows:
        return [], {}
    from pipelines.evaluate.tables import markdown_table

    if judge is not None:
        judge.close()
    columns = ["examples", "rouge-l", "judge recall", "judge unparseable", "accuracy", "positive recall",
               "positive share (gold)"]
    lines = ["### Memory writing (summarise and link)", "",
             f"The dialogue module's summaries of the {split} split's sessions against their targets (the dataset's "
             "memories of the speaker; LoCoMo's observations of the session) and its link answers against the gold "
             f"links, asked as the egocentric strategy asks them (at most {config.max_new_tokens} and "
             f"{config.link_max_new_tokens} new tokens, greedy); at most {EMMA_WRITING_EXAMPLES} examples of each, "
             "evenly spaced. ROUGE-L on 0-100 (rouge-score, stemmed). " + (
                 "judge recall: the share of the target's memories the summary states, read by llm.judge with "
                 "RealMem's memory-recall prompt (each target memory and each written one a numbered item; "
                 "mean over the parsed verdicts, unparseable ones counted)." if judge is not None else
                 "No judge reads them (llm.judge is null: set it to a model to add RealMem's memory recall)."), "",
             markdown_table(rows, columns, ranked=(), row_label="task",
                            decimals={"examples": 0, "rouge-l": 2, "judge unparseable": 0}), "",
             "| dataset | target | summary written |", "| --- | --- | --- |", *samples, ""]
    return lines, metrics
