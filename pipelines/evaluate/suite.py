"""Benchmark suites: small YAML files naming the data, split, strategies, metrics and cut-offs.

A suite file (``pipelines/evaluate/suites/<name>.yaml``, or any path) holds::

    name: locomo                 # the key of the suite in reports/metrics.json
    version: 1                   # bumped whenever the scoring of the suite changes
    description: ...
    source: locomo               # "synthetic" (the generator), "canonical" (our JSONL) or a loader name
    path: null                   # the published file / folder (``--path`` on the CLI wins)
    synthetic: {}                # generator knobs over params.yaml ``synthetic`` (source synthetic)
    split: all                   # train | valid | test | all
    max_episodes: null           # evaluate the first N episodes only (null: every one)
    strategies: [bm25, dense]    # memory strategies, each through the one memory interface
    strategy_settings: {}        # per strategy, settings over the project defaults (e.g. graph extraction)
    metrics: [recall, recall_any, recall_all, ndcg_any, mrr]
    ks: [1, 3, 5, 10]
    budget_tokens: 1024          # context(query, budget) of every strategy
    corpus: all                  # all turns, or main_speaker: only the main speaker's turns are indexed
    session_scoring: dedup       # dedup, or longmemeval (official turn2session from the turn ranking)
    queries: source              # source (the data's own questions), or memory_tags (see below)
    reference: {...}             # published numbers printed beside ours (see below)
    ablation: {}                 # {steps: [bm25, hybrid, fusion, ...], metrics: [turn/recall@10, ...]} (see below)
    generation: []               # response generation scored on the suite's own data: [mdr] or []
    max_generation_examples: 200 # (Q, R) rounds generated for, evenly spaced over the data (null: all)
    stream: false                # read the published file one episode at a time (LongMemEval M): see below
    stream_block: 16             # streamed: episodes read, embedded and evaluated together (memory: one block)

``generation: [mdr]`` also scores MDR's response generation on the suite's episodes (their
(P, H, Q, R) rounds, :func:`pipelines.mdr.evaluate.evaluate_mdr_episodes`): BLEU-1..4, ROUGE-L,
Distinct-1/2 per response (C-Dist) and over 5 sampled responses (S-Dist), overall and per session
number, beside the suite's reference rows. It needs the trained models/mdr_teacher, mdr_student
and mdr_decoder (:func:`generation_defaults`); when one is missing the generation is listed as
missing. Each kept round costs 1 greedy and 5 sampled generations, slow on a CPU with the paper
profile's GPT-2 124M: ``max_generation_examples`` (default 200) bounds the work. The synthetic
suite keeps generation off: the benchmark stage already scores MDR's generation on that data.

``stream: true`` (a source whose loader streams, ``longmemeval``; the CLI's ``benchmark --stream`` for any suite)
never holds the data whole: the file is validated in a first pass (:func:`pipelines.data.ingest.stream_and_validate`)
and each later pass reads it again, ``stream_block`` episodes at a time, each embedded in one batch and evaluated
episode by episode, then released (:func:`suite_episodes` returns a :class:`StreamedEpisodes`). The figures are
those of the list path. Its answers are not streamed yet: a streamed run scores the retrieval (``--no-answers``).

``ablation`` (absent or {}: no ablation table) names ``steps``, strategies of the suite in order, each adding one
ingredient to the one before (its class's ``ingredient``), and the ``metrics`` the table shows (flat names,
``<granularity>/<metric>@<k>``; default :data:`ABLATION_METRICS` where the suite scores them): the report prints
each step's value and gain over the previous step, and its cost, the median latency of a query's retrieval and
the index size per episode.

``reference`` holds ``{"source": citation, "comparable": bool, "note": str, "rows": {system:
{metric: value}}}``: the report prints the rows beside our table, labelled comparable or not.

``answers`` (absent or null: the suite answers nothing) makes a language model answer from each memory and
judges score the answers (:class:`SuiteAnswers`, pipelines/evaluate/answers/)::

    answers:
      task: qa                     # qa (the data's questions) or response (the next response of a dialogue)
      reader_prompt: longmemeval   # the reader prompt (pipelines.evaluate.answers.prompts.READER_STYLES)
      judges: [longmemeval]        # the judges (pipelines.evaluate.answers.judges.JUDGES)
      accuracy_ks: [3, 5]          # G-Long's Accuracy@k: also answer from each strategy's top k items ([]: none)
      references: [full_history, oracle]   # reference readers beside the strategies
      reference: {judge: gpt-4o-mini, source: "...", note: "...", rows: {system: {metric: value}}}

``answers.reference.judge`` names the judge model of the published rows: the report marks them not comparable
when our judge is another model.

:func:`suite_episodes` loads a suite's data: the synthetic generator, a canonical JSONL file or
folder, or a published dataset loaded and validated exactly as ``ingest`` does
(``pipelines.data.ingest.load_and_validate``: known quirks normalised, the loss policy of
params.yaml ``ingest``; blocking rules raise ValidationFailed naming the file, record and rule;
nothing is benchmarked on bad data). With
``corpus: main_speaker`` the other speakers' turns are removed before the protocol runs, as
LongMemEval's official retrieval code indexes user turns only; a query's turn evidence keeps
its main-speaker turns, and its session evidence becomes the sessions of those turns.

``queries: memory_tags`` (MiSC, which has no questions) makes the queries from the memory tags
instead (:func:`memory_tag_queries`): each main-speaker utterance tagged with memories of earlier
sessions asks, from the dialogue of its session before it, for those memories, as EMMA's retriever
is trained and evaluated (seed 000, section 4.2); evidence: the tagged memories and the sessions
that listed them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml

from pipelines.data.schema import Episode, Query
from pipelines.errors import ConfigError, MissingInput, UnknownName, close_matches
from pipelines.plugins import load as load_plugins
from pipelines.plugins import origin, refuse_broken
from pipelines.registry import output, registered

SUITES_DIR = Path(__file__).resolve().parent / "suites"
RETRIEVAL_METRICS = ("recall", "recall_any", "recall_all", "ndcg_any", "mrr")
SPLITS = ("train", "valid", "test", "all")
CORPORA = ("all", "main_speaker")
SESSION_SCORING = ("dedup", "longmemeval")
QUERY_SOURCES = ("source", "memory_tags")
ABLATION_METRICS = ("turn/recall@10", "session/recall_all@5", "session/ndcg_any@10")
GENERATORS = ("mdr",)  # response generators a suite can score (``generation``)
ANSWER_TASKS = ("qa", "response")


@dataclass(frozen=True)
class SuiteAnswers:
    """A suite's ``answers``: who answers, with which prompt, and who judges (see the module docstring)."""

    reader_prompt: str = "default"
    judges: tuple[str, ...] = ()
    accuracy_ks: tuple[int, ...] = ()
    references: tuple[str, ...] = ()
    task: str = "qa"
    reference: dict[str, Any] = field(default_factory=dict)
    where: str = ""  # the suite file, for error messages

    def __post_init__(self) -> None:
        from pipelines.evaluate.answers.judges import JUDGES
        from pipelines.evaluate.answers.prompts import READER_STYLES
        from pipelines.evaluate.answers.types import REFERENCE_READERS

        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"{self.where}, key 'answers.{key}': {why}")

        if self.task not in ANSWER_TASKS:
            raise bad("task", f"must be one of {', '.join(ANSWER_TASKS)}, got {self.task!r}")
        if self.reader_prompt not in READER_STYLES:
            raise bad("reader_prompt", f"unknown reader prompt {self.reader_prompt!r}; known: {sorted(READER_STYLES)}")
        for key, allowed in (("judges", JUDGES), ("references", REFERENCE_READERS)):
            value = getattr(self, key)
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                raise bad(key, f"must be a list, got {value!r}")
            odd = [v for v in value if v not in allowed]
            if odd:
                raise bad(key, f"unknown name(s) {odd}; known: {sorted(allowed)}")
            if len(set(value)) != len(value):
                raise bad(key, f"a name is given twice: {list(value)}")
            object.__setattr__(self, key, tuple(value))
        if not self.judges:
            raise bad("judges", "name at least one judge (an answer nobody scores measures nothing)")
        ks = self.accuracy_ks
        if (isinstance(ks, str) or not isinstance(ks, (list, tuple))
                or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in ks)):
            raise bad("accuracy_ks", f"must be a list of positive integers ([] for none), got {ks!r}")
        if self.task == "response" and ks:
            raise bad("accuracy_ks", "must be [] for the response task (Accuracy@k scores answers to questions)")
        if self.task == "response" and "oracle" in self.references:
            raise bad("references", "the oracle reads a question's evidence, which a response task does not have")
        object.__setattr__(self, "accuracy_ks", tuple(sorted(set(ks))))
        rows = self.reference.get("rows", {}) if isinstance(self.reference, dict) else None
        if not isinstance(rows, dict) or any(not isinstance(v, dict) for v in rows.values()):
            raise bad("reference", "must be a mapping with 'judge', 'source', 'note' and 'rows' (system -> "
                                   "{metric: value})")
        odd = sorted(set(self.reference) - {"judge", "source", "note", "rows"})
        if odd:
            raise bad("reference", f"unknown key(s) {odd}; keys: judge, source, note, rows")

    def header(self) -> dict[str, Any]:
        """What identifies the answer scoring (joins the suite's header)."""
        return {"task": self.task, "reader_prompt": self.reader_prompt, "judges": list(self.judges),
                "accuracy_ks": list(self.accuracy_ks), "references": list(self.references)}


@dataclass(frozen=True)
class Suite:
    """One benchmark suite (see the module docstring for every field)."""

    name: str
    version: int
    source: str
    description: str = ""
    path: str | None = None
    synthetic: dict[str, Any] = field(default_factory=dict)
    split: str = "all"
    max_episodes: int | None = None
    strategies: tuple[str, ...] = ()
    strategy_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: tuple[str, ...] = RETRIEVAL_METRICS
    ks: tuple[int, ...] = (1, 3, 5, 10)
    budget_tokens: int = 1024
    corpus: str = "all"
    session_scoring: str = "dedup"
    queries: str = "source"
    reference: dict[str, Any] = field(default_factory=dict)
    generation: tuple[str, ...] = ()
    max_generation_examples: int | None = 200
    answers: SuiteAnswers | None = None  # answer-level evaluation (None: the suite answers nothing)
    ablation: dict[str, Any] = field(default_factory=dict)  # {steps: [strategy, ...], metrics: [...]} (see above)
    stream: bool = False      # read the published file one block of episodes at a time (see above)
    stream_block: int = 16    # streamed: episodes per block
    file: str = ""  # where the suite was read from (for error messages)
    # fields given on the command line instead of the suite file: field -> the option, as typed (strategies ->
    # --strategies); the errors about them and a merge of shards that differ name the option (:meth:`where`)
    given: dict[str, str] = field(default_factory=dict)

    def where(self, key: str) -> str:
        """Where the value of ``key`` (a field, or a dotted key under one) came from: the command-line option that gave
        it (:attr:`given`), else the suite file and the key."""
        option = self.given.get(key.split(".")[0])
        return option if option else f"suite file {self.file or self.name}, key '{key}'"

    def __post_init__(self) -> None:
        where = f"suite file {self.file or self.name}"

        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"{self.where(key)}: {why}")

        if not isinstance(self.name, str) or not self.name.strip():
            raise bad("name", "must be a non-empty string")
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            raise bad("version", f"must be a positive integer, got {self.version!r}")
        from pipelines.data.loaders import LOADERS

        if self.source not in ("synthetic", "canonical", *LOADERS):
            raise bad("source", f"{self.source!r} is not 'synthetic', 'canonical' or a loader "
                                f"({', '.join(sorted(LOADERS))})")
        if self.split not in SPLITS:
            raise bad("split", f"must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.max_episodes is not None and (not isinstance(self.max_episodes, int) or self.max_episodes < 1):
            raise bad("max_episodes", f"must be a positive integer or null, got {self.max_episodes!r}")
        if not isinstance(self.stream, bool):
            raise bad("stream", f"must be true or false, got {self.stream!r}")
        if not isinstance(self.stream_block, int) or isinstance(self.stream_block, bool) or self.stream_block < 1:
            raise bad("stream_block", f"must be a positive integer, got {self.stream_block!r}")
        strategies = tuple(self.strategies)
        if not strategies:
            raise bad("strategies", "name at least one memory strategy")
        from pipelines.memory import STRATEGIES
        from pipelines.memory.base import PLUGIN_GROUP

        unknown = [s for s in strategies if s not in STRATEGIES]
        for name in unknown:   # an installed plugin that failed to load: its own error, naming the package
            refuse_broken(PLUGIN_GROUP, name, "memory strategy")
        if unknown:
            raise bad("strategies", f"unknown strategy(ies) {unknown}; registered: {sorted(STRATEGIES)}")
        if len(set(strategies)) != len(strategies):
            raise bad("strategies", f"a strategy is named twice: {list(strategies)}")
        metrics = tuple(self.metrics)
        odd = [m for m in metrics if m not in RETRIEVAL_METRICS]
        if odd or not metrics:
            raise bad("metrics", f"must be a non-empty subset of {list(RETRIEVAL_METRICS)}, got {list(metrics)}")
        ks = tuple(self.ks)
        if not ks or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in ks):
            raise bad("ks", f"must be a non-empty list of positive integers, got {list(ks)}")
        if not isinstance(self.budget_tokens, int) or self.budget_tokens < 0:
            raise bad("budget_tokens", f"must be an integer >= 0, got {self.budget_tokens!r}")
        if self.corpus not in CORPORA:
            raise bad("corpus", f"must be one of {', '.join(CORPORA)}, got {self.corpus!r}")
        if self.session_scoring not in SESSION_SCORING:
            raise bad("session_scoring", f"must be one of {', '.join(SESSION_SCORING)}, got {self.session_scoring!r}")
        if self.queries not in QUERY_SOURCES:
            raise bad("queries", f"must be one of {', '.join(QUERY_SOURCES)}, got {self.queries!r}")
        if not isinstance(self.synthetic, dict) or not isinstance(self.reference, dict):
            raise bad("synthetic/reference", "must be mappings")
        settings = self.strategy_settings
        if not isinstance(settings, dict) or any(not isinstance(v, dict) for v in settings.values()):
            raise bad("strategy_settings", "must map a strategy name to {setting: value}")
        extra = sorted(set(settings) - set(strategies))
        if extra:
            raise bad("strategy_settings", f"settings for strategies the suite does not run: {extra}")
        rows = self.reference.get("rows", {})
        if not isinstance(rows, dict) or any(not isinstance(v, dict) for v in rows.values()):
            raise bad("reference.rows", "must map a system name to {metric: value}")
        generation = self.generation
        if isinstance(generation, str) or not isinstance(generation, (list, tuple)):
            raise bad("generation", f"must be a list of generators ({', '.join(GENERATORS)}), got {generation!r}")
        generation = tuple(generation)
        odd = [g for g in generation if g not in GENERATORS]
        if odd:
            raise bad("generation", f"unknown generator(s) {odd}; known: {list(GENERATORS)}")
        if len(set(generation)) != len(generation):
            raise bad("generation", f"a generator is named twice: {list(generation)}")
        limit = self.max_generation_examples
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise bad("max_generation_examples", f"must be a positive integer or null, got {limit!r}")
        answers = self.answers
        if isinstance(answers, dict):
            known = {f.name for f in fields(SuiteAnswers)} - {"where"}
            odd = sorted(set(answers) - known)
            if odd:
                raise bad("answers", f"unknown key(s) {odd}; keys: {sorted(known)}")
            answers = SuiteAnswers(**answers, where=where)
        elif answers is not None and not isinstance(answers, SuiteAnswers):
            raise bad("answers", f"must be a mapping (or null: answer nothing), got {answers!r}")
        object.__setattr__(self, "answers", answers)
        object.__setattr__(self, "ablation", self._checked_ablation(bad, strategies, ks))
        object.__setattr__(self, "generation", generation)
        object.__setattr__(self, "strategies", strategies)
        object.__setattr__(self, "metrics", metrics)
        object.__setattr__(self, "ks", tuple(sorted(set(ks))))

    def _checked_ablation(self, bad, strategies: Sequence[str], ks: Sequence[int]) -> dict[str, Any]:
        """``ablation`` with its defaults: {"steps": (...), "metrics": (...)}, or {} for none."""
        spec = self.ablation
        if not spec:
            return {}
        if not isinstance(spec, dict) or set(spec) - {"steps", "metrics"}:
            raise bad("ablation", f"must be a mapping with 'steps' (and optionally 'metrics'), got {spec!r}")
        steps = spec.get("steps")
        if isinstance(steps, str) or not isinstance(steps, (list, tuple)) or len(steps) < 2:
            raise bad("ablation.steps", f"must list at least two of the suite's strategies, got {steps!r}")
        odd = [s for s in steps if s not in strategies]
        if odd:
            raise bad("ablation.steps", f"{odd} are not strategies of the suite ({list(strategies)})")
        if len(set(steps)) != len(steps):
            raise bad("ablation.steps", f"a strategy is named twice: {list(steps)}")
        metrics = spec.get("metrics", [m for m in ABLATION_METRICS if int(m.rsplit("@", 1)[1]) in ks])
        if isinstance(metrics, str) or not isinstance(metrics, (list, tuple)) or not metrics:
            raise bad("ablation.metrics", f"must be a non-empty list such as {list(ABLATION_METRICS)}, got {metrics!r}")
        for m in metrics:
            granularity, _, name = str(m).partition("/")
            metric, _, k = name.partition("@")
            if (granularity not in ("turn", "session", "memory") or metric not in RETRIEVAL_METRICS
                    or (metric != "mrr" and (not k.isdigit() or int(k) not in ks))):
                raise bad("ablation.metrics", f"{m!r} is not <granularity>/<metric>@<k> with a metric of "
                                              f"{list(RETRIEVAL_METRICS)} and k one of {list(ks)}")
        return {"steps": tuple(steps), "metrics": tuple(metrics)}

    def with_overrides(self, origin: str | None = None, **changes: Any) -> "Suite":
        """A copy with some fields replaced (None values are ignored); validated again. ``origin``: the command-line
        option that gives them (e.g. ``--strategies``): an error about them names it, not the suite file."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in changes.items() if v is not None})
        if origin:
            values["given"] = {**self.given, **{k: origin for k, v in changes.items() if v is not None}}
        if changes.get("strategies") is not None:  # keep the settings (and ablation steps) of the strategies still run
            values["strategy_settings"] = {k: v for k, v in self.strategy_settings.items()
                                           if k in values["strategies"]}
            if self.ablation:
                steps = [s for s in self.ablation["steps"] if s in values["strategies"]]
                values["ablation"] = {**self.ablation, "steps": steps} if len(steps) >= 2 else {}
        return Suite(**values)

    def header(self) -> dict[str, Any]:
        """What identifies the scoring of this suite: logged as params and printed in the report."""
        return {"suite": self.name, "version": self.version, "source": self.source, "split": self.split,
                "corpus": self.corpus, "session_scoring": self.session_scoring, "queries": self.queries,
                "ks": list(self.ks),
                "budget_tokens": self.budget_tokens,
                **({"generation": list(self.generation), "max_generation_examples": self.max_generation_examples}
                   if self.generation else {}),
                **({"answers": self.answers.header()} if self.answers is not None else {})}


SUITE_PLUGINS = "mnemos.suites"   # installed packages' suites (pipelines.plugins): name -> a suite YAML file
_PLUGIN_SUITES: dict[str, Path] = {}


def _check_suite_file(name: str, obj) -> str | None:
    if not isinstance(obj, (str, os.PathLike)) or not str(obj).endswith((".yaml", ".yml")):
        return f"it must name the path of a suite .yaml file, got {obj!r}"
    if not Path(obj).is_file():
        return f"its suite file {str(obj)!r} does not exist"
    return None


def plugin_suites() -> dict[str, Path]:
    """The suites of installed packages (entry points ``mnemos.suites``), by name; a shipped suite's name is
    refused to a plugin (the shipped one stays)."""
    shipped = {p.stem: p for p in SUITES_DIR.glob("*.yaml")}
    load_plugins(SUITE_PLUGINS, shipped, _check_suite_file,
                 register=lambda name, path: _PLUGIN_SUITES.__setitem__(name, Path(path)))
    return dict(_PLUGIN_SUITES)


def suite_origin(name: str) -> str:
    """``built-in`` for a shipped suite, else the package (and version) that installs it."""
    plugin_suites()
    return origin(SUITE_PLUGINS, name)


def list_suites() -> list[str]:
    """The names of the shipped suites (files in ``pipelines/evaluate/suites``) and of installed packages' suites."""
    return sorted({*(p.stem for p in SUITES_DIR.glob("*.yaml")), *plugin_suites()})


def load_suite(name_or_path: str | os.PathLike) -> Suite:
    """A shipped suite by name, or a suite file by path (ConfigError naming the file and key)."""
    text = str(name_or_path)
    path = Path(text) if text.endswith((".yaml", ".yml")) or os.sep in text else SUITES_DIR / f"{text}.yaml"
    if not path.is_file() and path.parent == SUITES_DIR and text == path.stem:
        refuse_broken(SUITE_PLUGINS, text, "benchmark suite")
        path = plugin_suites().get(text, path)
    if not path.is_file():
        if path.parent == SUITES_DIR and text == path.stem:   # a name: the close shipped ones
            raise UnknownName(f"benchmark suite {text!r} not found (looked for {path})"
                              f"{close_matches(text, list_suites())}; shipped suites: {', '.join(list_suites())}.",
                              hint="`python -m pipelines suites` lists them; --suite also takes a suite .yaml file.")
        raise MissingInput(f"benchmark suite file {text!r} does not exist.", file=str(path))
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"suite file {path}: not valid YAML ({exc}).") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"suite file {path}: must be a mapping of keys, got {type(raw).__name__}.")
    known = {f.name for f in fields(Suite)} - {"file", "given"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"suite file {path}: unknown key(s) {unknown}; keys: {sorted(known)}.")
    missing = [k for k in ("name", "version", "source", "strategies") if k not in raw]
    if missing:
        raise ConfigError(f"suite file {path}: missing key(s) {missing}.")
    return Suite(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items()}, file=str(path))


# --- data -----------------------------------------------------------------------


def suite_episodes(suite: Suite, path: str | os.PathLike | None = None,
                   synthetic_defaults: dict[str, Any] | None = None,
                   config: dict[str, Any] | None = None, corpus: bool = True,
                   memo: str | os.PathLike | None = None) -> list[Episode]:
    """The episodes a suite evaluates: loaded, validated, split-filtered, corpus-filtered.

    ``path`` (the CLI's ``--path``) wins over the suite's ``path``. For ``source: synthetic``
    without a path the generator runs with ``synthetic_defaults`` (params.yaml) under the
    suite's own knobs; with a path, the path is canonical data (a folder of ``<split>.jsonl``
    or one ``.jsonl`` file). ``config`` (the resolved configuration) gives the ``ingest`` settings
    a published dataset is loaded under (None: their defaults). ``corpus=False`` leaves every turn
    (:func:`corpus_episodes` applies the suite's corpus later): the reference readers of ``answers`` read
    the dialogue as published. ``memo``: a folder of kept validation verdicts (:mod:`pipelines.validate.memo`):
    a published file whose bytes passed before is not validated again (each shard of a run, and its merge).
    """
    path = path if path is not None else suite.path
    if suite.stream and suite.source not in ("synthetic", "canonical") and path is not None:
        return StreamedEpisodes(suite, _stream_published(suite.source, Path(path), config, memo), corpus)
    if suite.source == "synthetic" and path is None:
        from pipelines.data.synthetic import SyntheticConfig, generate

        episodes = generate(SyntheticConfig(**{**(synthetic_defaults or {}), **suite.synthetic}))
    elif suite.source in ("synthetic", "canonical"):
        if path is None:
            raise ConfigError(f"suite {suite.name!r} reads canonical data: give --path (a folder of "
                              f"<split>.jsonl files or one .jsonl file).")
        episodes = _read_canonical(Path(path), suite.split)
    else:
        if path is None:
            raise ConfigError(f"suite {suite.name!r} needs the published {suite.source} data: give --path "
                              f"(or set 'path' in the suite file).")
        episodes = _load_published(suite.source, Path(path), config, memo)
    if suite.split != "all":
        episodes = [e for e in episodes if e.split == suite.split]
    if suite.max_episodes is not None:
        episodes = episodes[: suite.max_episodes]
    if not episodes:
        raise ConfigError(f"suite {suite.name!r}: no episode in split {suite.split!r} of {path or 'the generator'}.")
    if suite.queries == "memory_tags":
        episodes = [memory_tag_queries(e) for e in episodes]
    return corpus_episodes(suite, episodes) if corpus else episodes


class StreamedEpisodes:
    """A suite's episodes read one at a time from a validated published file (``suite.stream``).

    Each iteration reads the file again (:meth:`pipelines.data.ingest.StreamedIngestion.episodes`) and yields the
    episodes :func:`suite_episodes` would list, in the same order: the suite's split, its first ``max_episodes``,
    its queries (``memory_tags``) and, with ``corpus``, its corpus. No episode is kept once the caller drops it.
    ``len`` is their number (from the validation pass: no extra read).
    """

    def __init__(self, suite: Suite, ingestion: Any, corpus: bool = True):
        self.suite, self.ingestion, self.corpus = suite, ingestion, corpus
        counts = ingestion.splits
        total = sum(counts.values()) if suite.split == "all" else counts.get(suite.split, 0)
        self._len = min(total, suite.max_episodes) if suite.max_episodes else total
        if not self._len:
            raise ConfigError(f"suite {suite.name!r}: no episode in split {suite.split!r} of {ingestion.path}.")

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Episode]:
        taken = 0
        for episode in self.ingestion.episodes():
            if taken == self._len:
                break
            if self.suite.split != "all" and episode.split != self.suite.split:
                continue
            taken += 1
            if self.suite.queries == "memory_tags":
                episode = memory_tag_queries(episode)
            yield corpus_episodes(self.suite, [episode])[0] if self.corpus else episode

    def with_corpus(self) -> "StreamedEpisodes":
        """The same episodes as the suite's corpus indexes them."""
        return StreamedEpisodes(self.suite, self.ingestion, corpus=True)


def _stream_published(source: str, path: Path, config: dict[str, Any] | None = None,
                      memo: str | os.PathLike | None = None):
    """Validate a published file in one streamed pass (blocking failures raise); its episodes are read later."""
    from pipelines.data.ingest import stream_and_validate

    checked = stream_and_validate(source, path, config=config, memo=memo)
    checked.report.raise_if_blocking()
    return checked


def corpus_episodes(suite: Suite, episodes: Sequence[Episode]) -> list[Episode]:
    """``episodes`` as the suite's ``corpus`` indexes them (``main_speaker``: :func:`main_speaker_corpus`)."""
    if isinstance(episodes, StreamedEpisodes):
        return episodes.with_corpus()  # type: ignore[return-value] - streamed, never a list
    if suite.corpus == "main_speaker":
        return [main_speaker_corpus(e) for e in episodes]
    return list(episodes)


def _read_canonical(path: Path, split: str) -> list[Episode]:
    from pipelines.data.schema import iter_episodes

    if path.is_dir():
        files = [path / f"{split}.jsonl"] if split != "all" else sorted(path.glob("*.jsonl"))
        files = [f for f in files if f.is_file()]
        if not files:
            raise ConfigError(f"{path} holds no canonical {split if split != 'all' else '<split>'}.jsonl file.")
    elif path.is_file():
        files = [path]
    else:
        raise ConfigError(f"canonical data path {path} does not exist.")
    return [e for f in files for e in iter_episodes(f)]


def _load_published(source: str, path: Path, config: dict[str, Any] | None = None,
                    memo: str | os.PathLike | None = None) -> list[Episode]:
    """Load and validate as ``ingest`` does (quirks normalised, loss policy); blocking failures raise."""
    from pipelines.data.ingest import load_and_validate

    checked = load_and_validate(source, path, config=config, memo=memo)
    checked.report.raise_if_blocking()
    return list(checked.loaded.episodes)


def main_speaker_corpus(episode: Episode) -> Episode:
    """Keep only the main speaker's turns (LongMemEval's official index: user turns only).

    Turn evidence keeps the main speaker's evidence turns. Session evidence, for a query with
    turn evidence, becomes the sessions of those kept turns (the official code marks a session
    relevant through its user turns with ``has_answer``); a query left with no evidence is then
    excluded by the protocol as ``no_evidence``.
    """
    main = episode.main_speaker
    sessions, kept = [], set()
    for s in episode.sessions:
        turns = [t for t in s.turns if t.speaker == main]
        kept.update(t.id for t in turns)
        sessions.append(s.model_copy(update={"turns": turns}))
    turn_session = {t.id: s.id for s in sessions for t in s.turns}
    queries = []
    for q in episode.queries:
        if q.evidence_turns:
            ev = [t for t in q.evidence_turns if t in kept]
            sess = list(dict.fromkeys(turn_session[t] for t in ev))
            q = q.model_copy(update={"evidence_turns": ev, "evidence_sessions": sess})
        queries.append(q)
    return episode.model_copy(update={"sessions": sessions, "queries": queries})


def memory_tag_queries(episode: Episode) -> Episode:
    """The episode with one query per main-speaker utterance tagged with earlier memories.

    For the turn at position i of session s whose ``memory_tags`` name memories listed in sessions
    before s: question = the turns 0..i-1 of s as "Speaker: text" lines, one per turn (the egocentric
    strategies read such a question back as those turns, in the generation format EMMA's retriever is
    trained on: ``[Leo] ... [Mia] ... [Mia]``), answer = the tagged utterance, evidence_memories = those tags,
    evidence_sessions = the sessions that listed them, asked in s (so answered from the memory of
    the sessions before s only). Tags of memories written in s itself or later are not evidence; a
    turn left with none, or opening its session (no context), asks nothing. The episode's own
    queries are replaced.
    """
    listed_in = {m.id: s.id for s in episode.sessions for m in s.memories}
    order = {s.id: pos for pos, s in enumerate(episode.sessions)}
    queries = []
    for pos, session in enumerate(episode.sessions):
        for i, turn in enumerate(session.turns):
            if turn.speaker != episode.main_speaker or not turn.memory_tags or i == 0:
                continue
            tags = [m for m in dict.fromkeys(turn.memory_tags)
                    if m in listed_in and order[listed_in[m]] < pos]
            if not tags:
                continue
            context = "\n".join(f"{t.speaker}: {' '.join(t.text.split())}" for t in session.turns[:i])
            queries.append(Query(id=f"{turn.id}:memory_tags", session_id=session.id, question=context,
                                 answer=turn.text, evidence_memories=tags,
                                 evidence_sessions=list(dict.fromkeys(listed_in[m] for m in tags)),
                                 category="memory_tag", timestamp=session.timestamp))
    return episode.model_copy(update={"queries": queries})


def trained_models(name: str, root: Path) -> dict[str, str]:
    """The settings of strategy ``name`` that name a trained model (its class's ``model_settings``: setting -> the
    stage that trains it), each that stage's output under ``root``, asked of the registry."""
    from pipelines.memory import STRATEGIES

    cls = STRATEGIES.get(name)
    stages = registered()   # a plugin's model made by no stage of this project gets no default
    return {setting: str(root / output(stage)) for setting, stage in (cls.model_settings if cls else {}).items()
            if stage in stages}


def strategy_defaults(strategies: Sequence[str], root: Path,
                      embedding_batch_size: int | None = None) -> dict[str, dict[str, Any]]:
    """Project defaults of the strategies' settings: caches under ``root/.cache`` (embeddings; the LLM layer's
    response cache of the memory writers, ``llm_cache_dir``, as the benchmark's), trained models where their stages
    put them under ``root`` (:func:`trained_models`; a strategy whose model is not there is listed as missing)."""
    cache = str(root / ".cache" / "embeddings")
    llm_cache = str(root / ".cache" / "llm")
    defaults: dict[str, dict[str, Any]] = {
        "dense": {"cache_dir": cache, "batch_size": embedding_batch_size},
        "hybrid": {"cache_dir": cache, "batch_size": embedding_batch_size},
        **{name: {"cache_dir": cache, "batch_size": embedding_batch_size, "llm_cache_dir": llm_cache}
           for name in ("fusion", "fusion_sessions", "fusion_time", "fusion_context", "fusion_threads", "fusion_keys")},
        # the cross-encoder of the reranker stage over fusion_threads' top turns
        "rerank": {"cache_dir": cache, "batch_size": embedding_batch_size, "llm_cache_dir": llm_cache},
        # EMMA: memories written and linked by the trained dialogue module, retrieved by the trained retriever;
        # egocentric_gold: the oracle, the dataset's own memories and links, the same retriever
        "egocentric": {"llm_cache_dir": llm_cache},
        "egocentric_gold": {"llm_cache_dir": llm_cache},
        "graph": {"importance": "model", "cache_dir": cache, "llm_cache_dir": llm_cache},
        "session_summary": {"llm_cache_dir": llm_cache},
        "mdr": {},
        "trained_dense": {},
    }
    from pipelines.memory import STRATEGIES

    for name in strategies:   # any other strategy (the products' adapters, a plugin's): the caches its config has
        if name not in defaults and name in STRATEGIES:
            fields_ = {f.name for f in fields(STRATEGIES[name].config_class)}
            caches = {key: value for key, value in (("cache_dir", cache), ("llm_cache_dir", llm_cache),
                                                    ("batch_size", embedding_batch_size)) if key in fields_}
            if caches:
                defaults[name] = caches
    return {name: {**defaults[name], **trained_models(name, root)} for name in strategies if name in defaults}


def generation_defaults(generation: Sequence[str], root: Path) -> dict[str, dict[str, Any]]:
    """Project defaults of a suite's generators: the trained models where their stages put them under ``root`` (a
    generator whose model is not there is listed as missing)."""
    defaults: dict[str, dict[str, Any]] = {
        "mdr": {part: str(root / output(f"mdr_{part}")) for part in ("teacher", "student", "decoder")},
    }
    return {name: dict(defaults[name]) for name in generation if name in defaults}
