"""Command line: ``python -m pipelines ...`` (also installed as ``mnemos``).

  run STAGE [STAGE ...] [--partition KEY] [--set section.key=value ...] [--profile tiny|paper] [--no-track]
      [--no-wait | --lock-timeout S]
                             the stages in the order given, the first failure stopping the rest; a JSON
                             line of each one's figures
  list                       the registered stages, in order, with their groups and inputs
  dvc-yaml                   print dvc.yaml as generated from the registry
  ingest --source NAME --path PATH --out DIR [--set ingest.max_dropped_turn_share=0.05]
                             load a published dataset, validate it, write canonical data;
                             the last line of stdout is a JSON object of counts
  benchmark --suite NAME [--path P] [--strategies a,b] --out DIR [--no-answers] [--set llm.reader.model=...]
                             run a benchmark suite (pipelines/evaluate/suites/NAME.yaml, or a
                             suite file) on its data or on P, and answer its questions with params.yaml
                             llm.reader, judged by llm.judge (unless --no-answers); the last line of stdout
                             is the content of DIR/metrics.json (suite -> strategy -> metric -> value);
                             each finished episode is kept under DIR/shards/, so the same command after a
                             kill resumes where it stopped
  benchmark ... --shards N --shard I
                             only shard I of N (the episodes at positions p with p mod N == I)
  merge ... --shards N       (= benchmark ... --shards N) join the N shards under DIR into the report
  suites                     the shipped benchmark suites, one per line
  serve-llm [--model M] [--dtype D] [--batch-size B] [--port P]
                             a local model behind an OpenAI-compatible server that batches the requests in
                             flight (pipelines/llm/batch_server.py): shards of a benchmark whose memory products
                             ask one request at a time share one model, answered in batches

An error a user can cause ends as ``error: <what is wrong>`` and ``hint: <what to do>`` on stderr, with an exit code
per kind of error (pipelines.errors.EXIT_CODES, listed by ``--help``); ``-v`` prints its traceback too.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from pathlib import Path

from pipelines.errors import EXIT_CODES, ConfigError, MnemosError, describe, exit_code


def _overrides(args) -> dict:
    """``--set`` and ``--profile`` as one overrides dict; an unknown ``--set`` key is a ConfigError naming it.
    Every command that resolves a config reads its overrides here, after the stage packages have declared the
    config sections (importing them loads torch: ``--help`` does not)."""
    import pipelines.stages  # noqa: F401
    from pipelines.config import parse_overrides

    merged = parse_overrides(getattr(args, "set", None) or [], "--set")
    if getattr(args, "profile", None):
        merged["profile"] = args.profile
    return merged


def cmd_run(args) -> int:
    """Each stage named, in the order given (as ``a && b`` would: the first failure stops the rest), with the same
    ``--set``; one JSON line of its figures each (with ``"stage"`` when several are named). Every name is looked up
    before the first stage runs, so a misspelt last stage refuses the command before anything is written."""
    from pipelines.config import resolve
    from pipelines.runner import run_stage
    from pipelines.stages import stage_for_run

    overrides = _overrides(args)
    if len(args.stages) > 1:
        if args.partition is not None:
            error = ConfigError(f"--partition names a partition of one stage; {len(args.stages)} stages were "
                                f"named ({', '.join(args.stages)}).")
            error.hint = "run the partitioned stage on its own with --partition."
            raise error
        resolved = resolve(overrides)
        for name in args.stages:
            stage_for_run(name, resolved)          # UnknownName, before any stage runs
    # An unknown stage, an unconfigured source, a bad partition or a missing input is refused by run_stage before
    # anything is written, in one message (main prints it).
    lock_timeout = 0.0 if args.no_wait else args.lock_timeout if args.lock_timeout is not None else "env"
    for name in args.stages:
        result = run_stage(name, overrides, track=not args.no_track, lock_timeout=lock_timeout,
                           partition=args.partition)
        summary = {k: v for k, v in result.metadata.items() if isinstance(v, (int, float, str, bool, dict))}
        failed = [c.name for c in result.checks if not c.passed]
        if failed:
            summary["failed_checks"] = failed
        if len(args.stages) > 1:
            summary = {"stage": name, **summary}
        print(json.dumps(summary, default=str), flush=True)
    return 0


def cmd_list(args) -> int:
    from pipelines.stages import STAGES, upstream

    for stage in STAGES.values():
        deps = ", ".join(upstream(stage)) or "-"
        print(f"{stage.name:24s} {stage.group:9s} after: {deps}")
    return 0


def cmd_dvc_yaml(args) -> int:
    from pipelines.stages import dvc_yaml

    sys.stdout.write(dvc_yaml())
    return 0


def cmd_ingest(args) -> int:
    from pipelines.config import resolve
    from pipelines.data.ingest import ingest

    counts = ingest(args.source, args.path, args.out, config=resolve(_overrides(args)), report=True)
    print(json.dumps(counts, sort_keys=True))
    return 0


def _data_id(suite, path, config, overrides: dict) -> tuple[str, dict, dict[str, str]]:
    """The fingerprint of a benchmark's data: the bytes of ``--path`` (or the suite's own path), else the synthetic
    generator's settings; with those settings (none for a file) and where each came from (``data``, ``data.<key>``:
    as :class:`~pipelines.evaluate.suite_run.Provenance` holds them)."""
    from pipelines.config import value_origin
    from pipelines.evaluate.shards import data_digest

    given = path is not None
    path = path if given else suite.path
    if path is not None and Path(path).exists():
        where = f"--path {path}" if given else suite.where("path")
        return data_digest([path]), {}, {"data": f"the bytes of the data ({where})"}
    synthetic = config.get("synthetic", {})
    knobs = {"seed": config.get("seed", 2022), **synthetic, **suite.synthetic}
    origins = {"data": "the synthetic data"}
    for key in knobs:
        origins[f"data.{key}"] = (suite.where(f"synthetic.{key}") if key in suite.synthetic
                                  else value_origin(f"synthetic.{key}", overrides) if key in synthetic
                                  else value_origin(key, overrides)) + " (the synthetic data)"
    return data_digest(extra=knobs), knobs, origins


def _settings_origins(settings: dict, config: dict, overrides: dict, models_root: str | None,
                      root: Path) -> dict[str, str]:
    """``settings.<strategy>.<setting>`` -> where the benchmark's value of each strategy setting came from, as the user
    would name it (``--set benchmark.strategy_settings.<strategy>.<setting>``, the params.yaml key, ``--models-root``);
    the suite file's own ``strategy_settings`` name themselves."""
    from pipelines.config import value_origin
    from pipelines.evaluate.suite import trained_models

    configured = (config.get("benchmark") or {}).get("strategy_settings") or {}
    origins = {}
    for name, values in settings.items():
        models = trained_models(name, root)
        for key in values:
            if key in (configured.get(name) or {}):
                where = value_origin(f"benchmark.strategy_settings.{name}.{key}", overrides)
            elif key == "batch_size":
                where = value_origin("benchmark.embedding_batch_size", overrides)
            elif key in models:
                where = f"--models-root {models_root}" if models_root else "the project's models/ (--models-root)"
            else:
                where = f"benchmark.strategy_settings.{name}.{key} (the project's default)"
            origins[f"settings.{name}.{key}"] = where
    return origins


def cmd_benchmark(args) -> int:
    import dataclasses

    from pipelines.config import ROOT, resolve, value_origin
    from pipelines.evaluate.answers.run import AnswerLLMs, AnswerSettings, evaluate_and_answer, evaluate_shard
    from pipelines.evaluate.report import write_report
    from pipelines.evaluate.shards import ShardSpec
    from pipelines.evaluate.suite import generation_defaults, load_suite, strategy_defaults, suite_episodes
    from pipelines.evaluate.suite_run import Provenance

    merge_only = getattr(args, "merge_only", False)
    shards = args.shards if args.shards is not None else 1
    shard = ShardSpec(args.shard if args.shard is not None else 0, shards)  # checked before any data is read
    if merge_only and args.shard is not None:
        raise ConfigError("merge takes no --shard: it joins all the --shards N shards written under --out.")
    if args.shard is not None and args.shards is None:
        raise ConfigError("--shard needs --shards N, the number of shards the suite is split into.")
    overrides = _overrides(args)
    config = resolve(overrides, overrides_origin="--set")
    suite = load_suite(args.suite)
    # an option replaces the suite file's value: an error about it, or a merge of shards that differ, names the option
    if args.strategies is not None:
        suite = suite.with_overrides(strategies=tuple(s.strip() for s in args.strategies.split(",") if s.strip()),
                                     origin="--strategies")
    if args.max_episodes is not None:
        suite = suite.with_overrides(max_episodes=args.max_episodes, origin="--max-episodes")
    if args.no_answers:
        suite = dataclasses.replace(suite, answers=None, given={**suite.given, "answers": "--no-answers"})
    if args.stream:
        suite = dataclasses.replace(suite, stream=True, given={**suite.given, "stream": "--stream"})
    if suite.stream and (suite.answers is not None or suite.generation):
        raise ConfigError(f"suite {suite.name!r} streams its data (stream: true), and a streamed run scores the "
                          f"retrieval only: add --no-answers" + (" and run a copy of the suite without "
                                                                 "'generation'" if suite.generation else "") + ".")
    published = suite_episodes(suite, args.path, synthetic_defaults={"seed": config.get("seed", 2022),
                                                                     **config.get("synthetic", {})},
                               config=config, corpus=False,
                               memo=None if args.validated_cache == "none" else args.validated_cache)
    data_id, data_settings, data_origins = _data_id(suite, args.path, config, overrides)
    root = Path(args.models_root) if args.models_root else ROOT
    settings = strategy_defaults(suite.strategies, root,
                                 embedding_batch_size=config.get("benchmark", {}).get("embedding_batch_size"))
    if args.cache_dir:
        for values in settings.values():
            if "cache_dir" in values:
                values["cache_dir"] = args.cache_dir
    if args.llm_cache_dir:   # the memory writers' language-model calls share the readers' response cache
        for values in settings.values():
            if "llm_cache_dir" in values:
                values["llm_cache_dir"] = args.llm_cache_dir
    for strategy, values in (config.get("benchmark", {}).get("strategy_settings") or {}).items():
        if strategy in suite.strategies:
            settings.setdefault(strategy, {}).update(values)
    llm = config.get("llm") or {}
    answer_settings = AnswerSettings.from_config(llm, config.get("seed", 2022))
    provenance = Provenance(origins={
        **_settings_origins(settings, config, overrides, args.models_root, root), **data_origins, "shards": "--shards",
        "protocol.answers": f"the questions the readers answer ({suite.where('answers')}, "
                            f"{value_origin('llm.max_questions', overrides)})"}, data=data_settings)
    if args.shard is not None:   # one shard of N: its episodes' results under --out, merged later
        store = evaluate_shard(suite, published, settings, suite.answers is not None, answer_settings, shard,
                               args.out, data_id=data_id, show_progress=not args.quiet, provenance=provenance)
        print(json.dumps({"suite": suite.name, "shard": shard.label, "episodes": len(store.done),
                          "missing": store.missing, "folder": str(store.folder)}))
        return 0
    generation = generation_defaults(suite.generation, root)
    for values in generation.values():  # MDR's generation settings (params.yaml mdr.generation, seed)
        values.update(max_new_tokens=(config.get("mdr", {}).get("generation") or {}).get("max_new_tokens", 32),
                      seed=config.get("seed", 2022))
    llms = AnswerLLMs(llm, Path(args.llm_cache_dir) if args.llm_cache_dir else ROOT / ".cache" / "llm")
    try:
        run, answered = evaluate_and_answer(suite, published, settings, llms, answer_settings,
                                            show_progress=not args.quiet, generation=generation,
                                            run_dir=args.out, data_id=data_id, shards=shards,
                                            provenance=provenance)
    finally:
        llms.close()
    out = write_report([run], args.out, profile=config.get("profile", "tiny"),
                       answers=[answered] if answered is not None else [])
    for strategy, why in out["missing"][suite.name].items():
        logging.getLogger("mnemos").warning("strategy %s is missing: %s", strategy, why)
    if answered is not None:
        logging.getLogger("mnemos").info("answers of suite %s: %d questions per reader, reader %s, judge %s",
                                         suite.name, answered.questions, answered.reader, answered.judge)
    for generator, why in out["generation_missing"][suite.name].items():
        logging.getLogger("mnemos").warning("generation %s is missing: %s", generator, why)
    print(json.dumps(json.loads(Path(out["files"]["metrics"]).read_text(encoding="utf-8"))))
    return 0


def cmd_serve_llm(args) -> int:
    from pipelines.config import ROOT
    from pipelines.llm import LLMConfig, build_llm
    from pipelines.llm.batch_server import BatchingServer, served_name

    config = LLMConfig(backend="local", model=args.model, gguf_file=args.gguf_file, dtype=args.dtype,
                       device=args.device, batch_size=args.batch_size, adapter=args.adapter,
                       prompt_format=args.prompt_format, cache=False)   # the clients keep the response cache
    llm = build_llm(config, args.llm_cache_dir or ROOT / ".cache" / "llm")
    llm.loaded_model()                                  # converted and loaded before the first request
    name = args.name or served_name(args.model, llm.dtype)
    server = BatchingServer(llm, name, host=args.host, port=args.port, batch_size=args.batch_size,
                            gather_s=args.gather_ms / 1000, max_pad_ratio=args.max_pad_ratio)
    logging.getLogger("mnemos").info(
        "serving %s (%s, %s, batches of up to %d) at %s; a strategy's or reader's llm: {backend: openai, base_url: "
        "%s, model: %s}", name, llm.dtype, llm.device, args.batch_size, server.base_url, server.base_url, name)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def cmd_merge(args) -> int:
    if args.shards is None:
        raise ConfigError("merge needs --shards N, the number of shards the suite was split into.")
    args.merge_only = True
    return cmd_benchmark(args)


def _print_broken(group: str) -> None:
    from pipelines.plugins import broken

    left_out = broken(group)
    if left_out:
        print("\nleft out (installed plugins that cannot be used):")
        for name, plugin in sorted(left_out.items()):
            print(f"  {name:20s} {plugin.package}: {plugin.error}")


def cmd_suites(args) -> int:
    from pipelines.evaluate.suite import SUITE_PLUGINS, list_suites, load_suite, suite_origin

    for name in list_suites():
        suite = load_suite(name)
        print(f"{name:20s} v{suite.version}  source={suite.source:12s} [{suite_origin(name)}] {suite.description}")
    _print_broken(SUITE_PLUGINS)
    return 0


def cmd_strategies(args) -> int:
    from pipelines.memory import STRATEGIES
    from pipelines.memory.base import PLUGIN_GROUP
    from pipelines.plugins import origin

    for name, cls in sorted(STRATEGIES.items()):
        doc = (cls.__doc__ or "").strip().splitlines()
        what = cls.ingredient or (doc[0] if doc else "")
        print(f"{name:20s} {'/'.join(cls.granularities):22s} [{origin(PLUGIN_GROUP, name)}] {what}")
    _print_broken(PLUGIN_GROUP)
    return 0


def cmd_sources(args) -> int:
    from pipelines.data.loaders import LOADERS
    from pipelines.data.loaders.registry import PLUGIN_GROUP
    from pipelines.plugins import origin

    for name, fn in sorted(LOADERS.items()):
        doc = (fn.__doc__ or sys.modules[fn.__module__].__doc__ or "").strip().splitlines()
        print(f"{name:20s} [{origin(PLUGIN_GROUP, name)}] {doc[0] if doc else ''}")
    _print_broken(PLUGIN_GROUP)
    return 0


def _benchmark_arguments(bench: argparse.ArgumentParser) -> None:
    from pipelines.config import PROFILES, ROOT

    bench.add_argument("--suite", required=True, help="a shipped suite name (see `suites`) or a suite .yaml file")
    bench.add_argument("--path", help="the suite's data: the published file/folder, or canonical .jsonl data")
    bench.add_argument("--strategies", help="comma-separated subset of the suite's strategies (or others)")
    bench.add_argument("--out", required=True, help="report folder (benchmark.md, metrics.json, plots/; each finished "
                                                    "episode under shards/, so a killed run resumes)")
    bench.add_argument("--max-episodes", type=int, help="evaluate the first N episodes only")
    bench.add_argument("--models-root", help="project folder whose models/ holds the trained models (default: this one)")
    bench.add_argument("--cache-dir", help="embedding cache folder (default: .cache/embeddings of the project)")
    bench.add_argument("--validated-cache", default=str(ROOT / ".cache" / "validated"),
                       help="verdicts of published files that passed validation, by content: the same bytes are not "
                            "validated again by the next run, shard or merge ('none': validate every time; default: "
                            ".cache/validated of the project)")
    bench.add_argument("--no-answers", action="store_true",
                       help="score the retrieval only: no reader model answers the suite's questions")
    bench.add_argument("--llm-cache-dir", help="the response cache and converted models of the reader, the judges and "
                                               "the memory writers (default: .cache/llm of the project)")
    bench.add_argument("--shards", type=int, metavar="N",
                       help="the suite's episodes are split into N shards (episode p in shard p mod N); without "
                            "--shard, the N shards written under --out are merged into the report")
    bench.add_argument("--stream", action="store_true",
                       help="read the published file one block of episodes at a time (the suite's stream: true; "
                            "LongMemEval M): memory of one block, whatever the file's size; retrieval only")
    bench.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a params.yaml value")
    bench.add_argument("--profile", choices=sorted(PROFILES), help="override params.yaml's profile")
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    from pipelines.config import PROFILES

    epilog = "exit codes:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_CODES.items())
    parser = argparse.ArgumentParser(prog="python -m pipelines", description="mnemos pipeline stages", epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging, and the traceback of an error (otherwise one error line and a hint)")
    sub = parser.add_subparsers(dest="cmd", required=True)

    run = sub.add_parser("run", help="run stages, in the order given (what dvc repro and the Dagster assets call)")
    run.add_argument("stages", nargs="+", metavar="stage", help="a stage (`python -m pipelines list`); several run "
                                                                "one after the other, the first failure stopping "
                                                                "the rest")
    run.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a params.yaml value")
    run.add_argument("--profile", choices=sorted(PROFILES), help="override params.yaml's profile")
    run.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    run.add_argument("--partition", metavar="KEY", help="the partition of a partitioned stage to run (benchmark_shard: "
                                                        "a shard index, 0 to params.yaml benchmark.shards - 1)")
    wait = run.add_mutually_exclusive_group()
    wait.add_argument("--no-wait", action="store_true",
                      help="refuse at once when another process runs the stage (default: wait for it)")
    wait.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                      help="wait at most this long for another process running the stage (default: "
                           "MNEMOS_LOCK_TIMEOUT, else as long as it takes)")
    run.set_defaults(func=cmd_run)

    sub.add_parser("list", help="list the registered stages").set_defaults(func=cmd_list)
    sub.add_parser("dvc-yaml", help="print dvc.yaml generated from the registry").set_defaults(func=cmd_dvc_yaml)

    ing = sub.add_parser("ingest", help="load a published dataset into canonical data")
    ing.add_argument("--source", required=True, help="loader name (see pipelines/data/loaders)")
    ing.add_argument("--path", required=True, help="the published file or folder")
    ing.add_argument("--out", required=True, help="output folder for canonical .jsonl files")
    ing.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                     help="override a params.yaml value (e.g. ingest.max_dropped_turn_share=0.1)")
    ing.set_defaults(func=cmd_ingest)

    bench = sub.add_parser("benchmark", help="run a benchmark suite on your data; last stdout line: metrics.json")
    _benchmark_arguments(bench)
    bench.add_argument("--shard", type=int, metavar="I",
                       help="run only shard I (0 to N-1) of --shards N, into --out/shards/<suite>/I-of-N; a later "
                            "`benchmark --shards N` (or `merge`) with the same arguments joins the shards")
    bench.set_defaults(func=cmd_benchmark)
    merge = sub.add_parser("merge", help="join the --shards N shards of a benchmark run under --out into its report "
                                         "(the same arguments as the shards' `benchmark` command, without --shard)")
    _benchmark_arguments(merge)
    merge.set_defaults(func=cmd_merge, shard=None)

    serve = sub.add_parser("serve-llm", help="a local model behind an OpenAI-compatible server that batches the "
                                             "requests in flight (for parallel benchmark shards)")
    serve.add_argument("--model", default="smollm2-135m-instruct",
                       help="as llm.*.model of the local backend: the shipped default, a folder or a .gguf file")
    serve.add_argument("--gguf-file", help="the .gguf file inside the --model folder")
    serve.add_argument("--adapter", help="a peft LoRA adapter folder merged over the model")
    serve.add_argument("--dtype", default="auto", help="auto (float32 on the CPU) | float32 | bfloat16 | float16")
    serve.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    serve.add_argument("--prompt-format", default="auto", help="auto | chat | plain | raw (as llm.*.prompt_format)")
    serve.add_argument("--batch-size", type=int, default=8, help="requests generated together at most (default 8)")
    serve.add_argument("--gather-ms", type=float, default=2000.0,
                       help="the longest a batch waits until as many requests wait as the last batch held: its "
                            "clients ask again (default 2000)")
    serve.add_argument("--max-pad-ratio", type=float, default=2.0,
                       help="a batch's longest prompt at most this many times its shortest: the others wait for the "
                            "next batch rather than be padded (default 2)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--name", help="the model id clients ask for (default: the model's name, with @DTYPE unless "
                                      "float32)")
    serve.add_argument("--llm-cache-dir", help="where converted models live (default: .cache/llm of the project)")
    serve.set_defaults(func=cmd_serve_llm)

    sub.add_parser("suites", help="list the benchmark suites (shipped, and installed packages')").set_defaults(
        func=cmd_suites)
    sub.add_parser("strategies", help="list the memory strategies (built-in, and installed packages')").set_defaults(
        func=cmd_strategies)
    sub.add_parser("sources", help="list the dataset loaders (built-in, and installed packages')").set_defaults(
        func=cmd_sources)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args.func(args)
    except MnemosError as exc:   # every error a user can cause (pipelines.errors): one message, its exit code
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        print(describe(exc), file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    raise SystemExit(main())
