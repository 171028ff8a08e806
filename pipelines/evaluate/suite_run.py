"""Running a benchmark suite: every strategy of a suite through the temporal protocol, then its generators.

:func:`evaluate_suite` runs every strategy of a :class:`~pipelines.evaluate.suite.Suite` through RealMem's
temporal protocol (:mod:`pipelines.evaluate.protocol`), episode by episode (:mod:`pipelines.evaluate.shards`: one
shard, or shard i of N, resumable), then the suite's response generators (MDR's, :func:`run_generation`), and
returns a :class:`SuiteRun`, which :mod:`pipelines.evaluate.report` writes. A strategy that cannot run on the
suite's data (its class's ``unavailable``: ``session_summary`` without session summaries, ``egocentric_gold``
without memories, ``graph`` reading triplets the data does not have) or whose trained model does not exist is not
run and is recorded as *missing* with the reason (:func:`plan_strategies`), never dropped and never scored 0; a
strategy that ran but retrieved nothing for any query is flagged (:meth:`SuiteRun.retrieved_nothing`, a logged
warning).

A run of N shards is planned once (:func:`plan_run` -> :class:`RunPlan`: the protocol, the token counter, the
strategies that run, the run's fingerprint), each shard run on its own (:func:`run_planned_shard`), and the
shards merged (:func:`merged_results`). A :class:`Provenance` says where the values given outside the suite file
came from (``--set``, params.yaml, the data's settings): a bad strategy setting, and a merge of shards that differ,
name the option or key as the user typed it. :class:`SuiteRun` also gives the flat figures of metrics.json
(:meth:`SuiteRun.metrics`: retrieval, the language-model writers' calls, :func:`writer_rows`, and the
generators', :func:`flat_generation_metrics`).

Nothing here reads the answers of a suite: the protocol records the readers' contexts when it is given an
``answers`` request, and :mod:`pipelines.evaluate.answers.run` answers from them.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pipelines.data.schema import Episode
from pipelines.errors import ConfigError, ModelNotTrained, NothingToScore
from pipelines.evaluate.protocol import ProtocolConfig, ProtocolResult, flat_metrics
from pipelines.evaluate.shards import (ShardError, ShardSpec, ShardStore, differences, merge, results_from_records,
                                       run_fingerprint, run_shard, shard_dir)
from pipelines.evaluate.suite import StreamedEpisodes, Suite, generation_defaults
from pipelines.memory import STRATEGIES, TokenCounter, build_strategy, missing_models

GLONG_SESSIONS = (2, 3, 4, 5)  # G-Long's tables: sessions 2-5 (and their average)
EMPTY_BY_DESIGN = ("no_history",)  # strategies whose memory is empty on purpose (the floor), never flagged empty


@dataclass
class SuiteRun:
    """Every strategy of one suite through the protocol (or the reason it is missing)."""

    suite: Suite
    episodes: int
    results: dict[str, ProtocolResult]
    missing: dict[str, str]   # strategy -> why it was not run (model not trained, or nothing to read in the data)
    counter: TokenCounter
    generation: dict[str, dict] = field(default_factory=dict)  # generator -> evaluate_mdr_episodes' result
    generation_missing: dict[str, str] = field(default_factory=dict)  # generator -> why it was not scored

    def metrics(self) -> dict[str, dict[str, float | str]]:
        """Strategy -> flat metrics, in the suite's order; a strategy or generator that was not run has
        ``{"missing": why}`` instead (never zeros)."""
        out: dict[str, dict[str, float | str]] = {}
        for name in dict.fromkeys([*self.suite.strategies, *self.results, *self.missing]):
            if name in self.results:
                out[name] = flat_metrics(self.results[name].aggregate()["overall"])
            elif name in self.missing:
                out[name] = {"missing": self.missing[name]}
        for row, figures in writer_rows(self).items():     # "writer/<role>/<figure>" beside its strategy's metrics
            name, role = row.split(": ", 1)
            role = role.rsplit(" (", 1)[0]
            out[name].update({f"writer/{role}/{k.replace(' ', '_')}": v for k, v in figures.items()})
        for name in dict.fromkeys([*self.generation, *self.generation_missing]):
            out[f"{name}_generation"] = (flat_generation_metrics(self.generation[name]) if name in self.generation
                                         else {"missing": self.generation_missing[name]})
        return out

    def retrieved_nothing(self) -> list[str]:
        """The strategies that ran but retrieved nothing for any scored query (their memory stayed empty on
        this data), besides those that keep nothing by design (``no_history``)."""
        return [name for name, r in self.results.items() if name not in EMPTY_BY_DESIGN and r.retrieved_nothing()]

    def why_empty(self, name: str) -> str:
        """What the language-model writers of strategy ``name`` say about an empty memory: the model, the prompts
        over its window, the answers the product could not read, the product's errors (empty when none)."""
        parts = []
        for w in self.results[name].writers:
            counts = [f"{w[key]} {label}" for key, label in (("refused_too_long", "prompts over the model's window"),
                                                              ("unreadable", "answers the product could not read"),
                                                              ("product_errors", "product errors"))
                      if w.get(key)]
            if counts:
                parts.append(f"{w['model']}: {', '.join(counts)}")
        return "; ".join(parts)

    def counts(self) -> dict[str, dict[str, int]]:
        """Strategy -> queries scored and queries excluded, by reason (the report's "Queries" table)."""
        return {name: {"scored": r.aggregate()["overall"]["queries"], **r.exclusion_counts()}
                for name, r in self.results.items()}

    def memory_written(self) -> dict[str, dict[str, float]]:
        """Strategy -> what its memory held after each episode's last session (items, sessions, items per
        session), for the strategies that keep something."""
        return {name: r.memory_written() for name, r in self.results.items()
                if r.memory and name not in EMPTY_BY_DESIGN}


# the tokens of every request, answered now or from the response cache (the same figures on a rerun or a resume);
# "seconds" are this run's wall seconds of the calls
WRITER_COLUMNS = {"calls": "requests", "hits": "cache hits", "misses": "asked",
                  "request_prompt_tokens": "prompt tokens", "request_completion_tokens": "completion tokens",
                  "seconds": "seconds", "truncated": "cut to window",
                  "utterances": "utterances", "triplets": "triplets", "parse/valid": "parsed",
                  "parse/repaired": "repaired", "parse/dropped": "unparseable",
                  # a memory product's calls (pipelines/memory/peers, LLMChat): prompts refused for the model's
                  # window, and what the product made of the answers
                  "refused_too_long": "over the window", "memories_written": "memories written",
                  "unreadable": "answers the product could not read", "product_errors": "product errors"}


def writer_rows(run: SuiteRun) -> dict[str, dict[str, float]]:
    """``"<strategy>: <role> (<model>)"`` -> the figures of :data:`WRITER_COLUMNS` of each language-model writer a
    strategy of the suite called (:attr:`ProtocolResult.writers`: this suite's calls only)."""
    rows = {}
    for name, result in run.results.items():
        for w in result.writers:
            flat = {**{k: v for k, v in w.items() if not isinstance(v, dict)},
                    **{f"{k}/{kk}": vv for k, v in w.items() if isinstance(v, dict) for kk, vv in v.items()}}
            rows[f"{name}: {w['role']} ({w['model']})"] = {label: float(flat[key]) for key, label in
                                                          WRITER_COLUMNS.items() if isinstance(flat.get(key),
                                                                                               (int, float))}
    return rows


@dataclass(frozen=True)
class Provenance:
    """Where the values of a run given outside its suite file came from, for the messages that name one (a bad
    strategy setting, a merge of shards that differ): ``origins`` maps a key of the run's fingerprint values
    (:func:`~pipelines.evaluate.shards.run_fingerprint`: ``settings.<strategy>.<setting>``, ``data``, ``data.<key>``,
    ``protocol.answers``, ``shards``) to the option or file key that gave it, as the user typed it (``--set
    benchmark.strategy_settings.bm25.k1``, ``benchmark.strategy_settings.bm25.k1 in params.yaml``); ``data`` holds what
    made the data when no file did (the synthetic generator's settings). The suite's own fields name themselves
    (:meth:`Suite.where <pipelines.evaluate.suite.Suite.where>`: the suite file's key, or ``--strategies``...)."""

    origins: Mapping[str, str] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)

    def setting(self, suite: Suite, strategy: str, key: str) -> str:
        """Where strategy setting ``key`` of ``strategy`` came from: the suite file (whose ``strategy_settings`` win)
        or the settings given to the run."""
        if key in suite.strategy_settings.get(strategy, {}):
            return suite.where(f"strategy_settings.{strategy}.{key}")
        return self.origins.get(f"settings.{strategy}.{key}") or f"benchmark.strategy_settings.{strategy}.{key}"


def check_settings(suite: Suite, name: str, merged: Mapping[str, Any], provenance: Provenance | None = None) -> None:
    """A ConfigError naming where a bad setting of strategy ``name`` came from (the suite file's key, the ``--set``,
    the params.yaml key) when ``merged`` is not a valid config of the strategy: an unknown key, or a value its config
    class refuses; checked before anything runs."""
    provenance = provenance or Provenance()
    cls = STRATEGIES[name]
    known = {f.name for f in fields(cls.config_class)}
    unknown = sorted(set(merged) - known)
    if unknown:
        where = ", ".join(dict.fromkeys(provenance.setting(suite, name, k) for k in unknown))
        raise ConfigError(f"{where}: memory strategy {name!r} has no setting(s) {unknown}; its settings are "
                          f"{sorted(known)}.")
    try:
        cls.config_class(**merged)
    except ModelNotTrained:
        pass   # a model not trained yet: the strategy is listed as missing, as when it is built
    except (ConfigError, TypeError, ValueError) as exc:
        named = [k for k in merged if re.search(rf"\.{re.escape(str(k))}\b", str(exc))]  # "bm25.k1 must be ..."
        named = named or [k for k in merged if k in suite.strategy_settings.get(name, {})
                          or f"settings.{name}.{k}" in provenance.origins]
        where = ", ".join(dict.fromkeys(provenance.setting(suite, name, k) for k in named))
        raise ConfigError(f"{where or f'the settings of strategy {name!r}'}: {exc}") from exc


def plan_strategies(suite: Suite, episodes: Sequence[Episode], settings: Mapping[str, Mapping[str, Any]] | None = None,
                    provenance: Provenance | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(strategy -> merged settings of those that run, strategy -> why not run): a strategy that cannot run on
    ``episodes`` (its class's ``unavailable``: e.g. session summaries that the data does not have) or whose
    model is not trained is not run; ``settings`` go under the suite's own ``strategy_settings``. A bad setting is a
    ConfigError naming where it came from (:func:`check_settings`; ``provenance``: the origins of ``settings``)."""
    settings = settings or {}
    unknown = sorted(set(settings) - set(suite.strategies))
    if unknown:
        raise ConfigError(f"settings are given for strategies {unknown} that suite {suite.name!r} does not run.")
    to_run: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    for name in suite.strategies:
        merged = {**settings.get(name, {}), **suite.strategy_settings.get(name, {})}
        check_settings(suite, name, merged, provenance)
        why = STRATEGIES[name].unavailable(episodes, merged)  # the data lacks what it reads: not run, not scored
        if why:
            missing[name] = f"cannot run on this data: {why}"
            continue
        absent = missing_models(name, merged)
        if absent:
            missing[name] = "; ".join(str(e) for e in absent)
            continue
        to_run[name] = merged
    return to_run, missing


def protocol_config(suite: Suite, show_progress: bool = True, depth: int | None = None,
                    answers: Any = None) -> ProtocolConfig:
    """The protocol settings of ``suite`` (its ks, budget and session scoring); ``answers``: the readers' request."""
    return ProtocolConfig(ks=suite.ks, budget_tokens=suite.budget_tokens, depth=depth,
                          show_progress=show_progress, session_scoring=suite.session_scoring, answers=answers)


def run_suite_shard(suite: Suite, episodes: Iterable[Episode], to_run: Mapping[str, Mapping[str, Any]],
                    config: ProtocolConfig, counter: TokenCounter, shard: ShardSpec = ShardSpec(),
                    store: ShardStore | None = None, prepare_block: int | None = None, total: int | None = None,
                    missing: dict[str, str] | None = None) -> dict[int, dict]:
    """The retrieval of one shard of ``suite`` (:func:`pipelines.evaluate.shards.run_shard`): every strategy of
    ``to_run`` built with its settings and ``counter``, episode by episode, each finished episode in ``store``."""
    from tqdm.auto import tqdm

    def build(name: str):
        return build_strategy(name, counter=counter, **dict(to_run[name]))

    bar = tqdm(total=total, desc=f"benchmark {suite.name} shard {shard.label}", unit="episode",
               disable=not config.show_progress)
    try:
        return run_shard(episodes, list(to_run), build, config, shard, store, prepare_block=prepare_block,
                         progress=bar.update, missing=missing)
    finally:
        bar.close()


@dataclass
class RunPlan:
    """What every shard of one run of a suite shares: the protocol, the token counter, the strategies that run
    (with their merged settings) and those that do not (with why), and the run's fingerprint."""

    suite: Suite
    config: ProtocolConfig
    counter: TokenCounter
    to_run: dict[str, dict[str, Any]]
    missing: dict[str, str]
    fingerprint: dict[str, Any]
    shards: int = 1


def plan_run(suite: Suite, episodes: Sequence[Episode], settings: dict[str, dict[str, Any]] | None = None,
             tokenizer: str | None = None, show_progress: bool = True, depth: int | None = None, answers: Any = None,
             data_id: str = "", shards: int = 1, provenance: Provenance | None = None) -> RunPlan:
    """The :class:`RunPlan` of ``suite`` over ``episodes`` split into ``shards`` (a streamed suite's strategies are
    checked against its first block of episodes: reading them all would read the whole file once more).
    ``provenance``: where the values given outside the suite file came from (named by errors and by a merge)."""
    ShardSpec(0, shards)  # the count is checked before anything runs
    provenance = provenance or Provenance()
    config = protocol_config(suite, show_progress, depth, answers)
    if isinstance(episodes, StreamedEpisodes):
        episodes = list(itertools.islice(episodes, suite.stream_block))
    to_run, missing = plan_strategies(suite, episodes, settings, provenance)
    return RunPlan(suite, config, TokenCounter.from_config(tokenizer), to_run, missing,
                   suite_fingerprint(suite, to_run, config, data_id, shards, provenance), shards)


def suite_fingerprint(suite: Suite, to_run: Mapping[str, Mapping[str, Any]], config: ProtocolConfig, data_id: str,
                      shards: int, provenance: Provenance | None = None) -> dict[str, Any]:
    """The run fingerprint (:func:`~pipelines.evaluate.shards.run_fingerprint`) of ``suite`` (its header and its
    ``max_episodes``: the episodes it reads) running ``to_run``, each value with its origin."""
    provenance = provenance or Provenance()
    header = {"answers": None, **suite.header(), "max_episodes": suite.max_episodes}  # answers: None (--no-answers)
    origins = {f"suite.{k}": suite.where("name" if k == "suite" else k) for k in header}
    origins["strategies"] = f"{suite.where('strategies')} (the strategies that run)"
    origins.update({f"settings.{name}.{k}": provenance.setting(suite, name, k)
                    for name, values in to_run.items() for k in values})
    origins.update({k: v for k, v in provenance.origins.items() if not k.startswith("settings.")})
    return run_fingerprint(header, to_run, config, data_id, shards, origins=origins, data_settings=provenance.data)


def run_planned_shard(plan: RunPlan, episodes: Iterable[Episode], run_dir: str | os.PathLike, shard: ShardSpec,
                      prepare_block: int | None = None, total: int | None = None) -> ShardStore:
    """Shard ``shard`` of ``plan`` into ``run_dir/shards/<suite>/<i>-of-<N>`` (resuming what it finished)."""
    if shard.count != plan.shards:
        raise ShardError(f"shard {shard.label} does not belong to a run of {plan.shards} shard(s).")
    store = ShardStore(shard_dir(run_dir, plan.suite.name, shard), plan.fingerprint, shard, plan.suite.name,
                       plan.missing)
    if prepare_block is None and isinstance(episodes, StreamedEpisodes):
        prepare_block = plan.suite.stream_block  # one block of the file in memory at a time
    try:
        run_suite_shard(plan.suite, episodes, plan.to_run, plan.config, plan.counter, shard, store,
                        prepare_block=prepare_block, total=total)
    finally:
        store.close()
    return store


def merged_results(plan: RunPlan, run_dir: str | os.PathLike | None = None,
                   folders: Sequence[str | os.PathLike] | None = None
                   ) -> tuple[dict[str, ProtocolResult], dict[str, str]]:
    """The N shards of ``plan`` joined (:func:`pipelines.evaluate.shards.merge`), from ``folders`` (shard i's folder
    at index i) or from ``run_dir``'s layout: each strategy's ProtocolResult and the strategies that did not run.
    ShardError names missing, unfinished or foreign shards."""
    if folders is None:
        folders = [shard_dir(run_dir, plan.suite.name, ShardSpec(i, plan.shards)) for i in range(plan.shards)]
    folders = [Path(f) for f in folders]
    absent = [ShardSpec(i, plan.shards).label for i, f in enumerate(folders) if not (f / "manifest.json").is_file()]
    if absent:
        raise ShardError(f"cannot merge suite {plan.suite.name!r}: missing shard(s) {', '.join(absent)} ("
                         f"{', '.join(str(folders[int(a.split('-')[0])]) for a in absent)}): run them with "
                         f"`benchmark ... --shards {plan.shards} --shard <i>` and the same --out.")
    merged = merge(folders)
    if merged.fingerprint["run"] != plan.fingerprint["run"]:
        differ = differences(merged.fingerprint, plan.fingerprint, "the shards", "this command")
        raise ShardError(f"the shards of suite {plan.suite.name!r} under {run_dir or folders[0].parent} were run with "
                         f"other settings or data than this command (they differ in: {'; '.join(differ)}): merge "
                         f"with the command the shards ran, or run the shards again.")
    missing = {**plan.missing, **merged.missing}
    return results_from_records(merged.records, list(plan.to_run), missing), missing


def evaluate_suite(suite: Suite, episodes: Sequence[Episode], settings: dict[str, dict[str, Any]] | None = None,
                   tokenizer: str | None = None, show_progress: bool = True, depth: int | None = None,
                   generation: dict[str, dict[str, Any]] | None = None, answers: Any = None,
                   run_dir: str | os.PathLike | None = None, data_id: str = "", shards: int = 1,
                   shard_folders: Sequence[str | os.PathLike] | None = None,
                   provenance: Provenance | None = None) -> SuiteRun:
    """Run each strategy of ``suite`` over ``episodes``, then the suite's generators; ``settings``
    (strategy -> config fields) go under the suite's own ``strategy_settings``; ``generation``
    (generator -> settings: ``teacher`` / ``student`` / ``decoder`` folders, ``max_new_tokens``,
    ``seed``, ``device``) goes over the project defaults (:func:`generation_defaults` under the
    project root). A strategy that cannot run on ``episodes`` (:func:`plan_strategies`) or whose model is not
    trained is not run and is recorded in ``missing`` with the reason; a generator whose model is missing in
    ``generation_missing``. A strategy that ran but retrieved nothing for any query is logged as a warning (and
    noted in the report). ``answers`` (a protocol AnswerRequest, pipelines.evaluate.answers.readers.answer_request)
    makes the protocol record the readers' contexts of those questions in each ProtocolResult (the retrieval
    figures do not change).

    The strategies run episode by episode (:mod:`pipelines.evaluate.shards`). With ``run_dir`` each finished
    episode is kept under ``run_dir/shards/<suite>/<i>-of-<N>`` (``data_id`` names the data in the run's
    fingerprint): with ``shards`` 1 the one shard runs here (a killed run started again resumes after the
    episodes it finished); with more, the shards must have been run (``run_planned_shard``) and are merged (from
    ``shard_folders``, shard i's folder at index i, when given: the benchmark stage's layout). ``provenance``: where the
    values given outside the suite file came from (:class:`Provenance`)."""
    plan = plan_run(suite, episodes, settings, tokenizer, show_progress, depth, answers, data_id, shards, provenance)
    if shards > 1 or shard_folders is not None:
        if run_dir is None and shard_folders is None:
            raise ConfigError(f"merging {shards} shards needs the folder they were written to (run_dir).")
        results, missing = merged_results(plan, run_dir, shard_folders)
    elif run_dir is not None:
        run_planned_shard(plan, episodes, run_dir, ShardSpec(), total=len(episodes))
        results, missing = merged_results(plan, run_dir)
    else:
        block = suite.stream_block if isinstance(episodes, StreamedEpisodes) else None
        missing = dict(plan.missing)  # with the strategies whose model turns out not trained while running
        records = run_suite_shard(suite, episodes, plan.to_run, plan.config, plan.counter, prepare_block=block,
                                  total=len(episodes), missing=missing)
        results = results_from_records(records.values(), list(plan.to_run), missing)
    return finish_suite(suite, episodes, results, missing, plan.counter, generation, answers, show_progress)


def finish_suite(suite: Suite, episodes: Sequence[Episode], results: dict[str, ProtocolResult],
                 missing: dict[str, str], counter: TokenCounter, generation: dict[str, dict[str, Any]] | None = None,
                 answers: Any = None, show_progress: bool = True) -> SuiteRun:
    """The SuiteRun of a suite whose retrieval is done (``results``, in the suite's order): the checks that
    something was scored, then the suite's generators."""
    results = {name: results[name] for name in suite.strategies if name in results}
    require_scored_queries(suite, episodes, results)
    scored, not_scored = run_generation(suite, episodes, generation, show_progress)
    answering = answers is not None and bool(answers.queries)  # the answers of its questions are scored
    if not scored and not answering and not any(r.scores for r in results.values()):  # nothing scored at all
        error = NothingToScore(f"benchmark suite {suite.name!r} scores nothing on its {len(episodes)} episodes: "
                               f"{sum(len(e.queries) for e in episodes)} queries, no strategy scored one ("
                               f"ran: {', '.join(results) or 'none'}{_not_run(missing)}), and no response generation "
                               f"was scored ("
                               + (", ".join(f"{g}: {why}" for g, why in not_scored.items()) or "none configured")
                               + ").")
        if (missing and not results) or not_scored:   # the data may be fine: what was asked could not run
            error.hint = ("each strategy or generator asked says above why it did not run: train or name its model "
                          "(the stage named there), or ask for strategies that run on this data (--strategies).")
        raise error
    run = SuiteRun(suite, len(episodes), results, dict(missing), counter, scored, not_scored)
    for name in run.retrieved_nothing():
        logging.getLogger("mnemos").warning("strategy %s retrieved nothing for any of the %d scored queries of "
                                            "suite %s", name, results[name].aggregate()["overall"]["queries"],
                                            suite.name)
    return run


def _not_run(missing: Mapping[str, str]) -> str:
    """``"; not run: rerank (why)"``: the strategies asked and not run, each with its reason (empty without)."""
    return "; not run: " + "; ".join(f"{name} ({why})" for name, why in missing.items()) if missing else ""


def require_scored_queries(suite: Suite, episodes: Sequence[Episode],
                           results: Mapping[str, ProtocolResult]) -> None:
    """NothingToScore when the episodes hold queries but the strategies that ran scored none of them (every one
    excluded: abstention, no evidence, ...), naming the suite and the exclusions.

    Dialogue-only data (ConvAI2, MSC, CC: no question at all, its suites score generation) is not an error; a
    source that publishes questions and loads none fails at load (rule ``load_loss_within_limit``).
    """
    if not results or any(r.scores for r in results.values()):
        return
    queries = sum(len(e.queries) for e in episodes)  # (a streamed suite reads its file again, only here)
    if queries == 0:
        return
    strategy, result = next(iter(results.items()))
    reasons = ", ".join(f"{reason}: {n}" for reason, n in result.exclusion_counts().items() if n)
    raise NothingToScore(f"benchmark suite {suite.name!r} scores no query: all {queries} queries of its "
                         f"{len(episodes)} episodes were excluded ({reasons}; for {strategy}).")


def run_generation(suite: Suite, episodes: Sequence[Episode], settings: dict[str, dict[str, Any]] | None = None,
                   show_progress: bool = True) -> tuple[dict[str, dict], dict[str, str]]:
    """The suite's generators over ``episodes`` -> (generator -> result, generator -> why not scored)."""
    from tqdm.auto import tqdm

    from pipelines.config import ROOT
    from pipelines.mdr.evaluate import check_models, evaluate_mdr_episodes

    settings = settings or {}
    unknown = sorted(set(settings) - set(suite.generation))
    if unknown:
        raise ConfigError(f"generation settings are given for {unknown}, which suite {suite.name!r} does not "
                          f"score (its generation: {list(suite.generation)}).")
    defaults = generation_defaults(suite.generation, ROOT)
    scored: dict[str, dict] = {}
    not_scored: dict[str, str] = {}
    for name in suite.generation:  # only "mdr" is known (Suite validates the names)
        merged = {**defaults.get(name, {}), **settings.get(name, {})}
        absent = check_models(merged.get("teacher"), merged.get("student"), merged.get("decoder"))
        if absent:
            not_scored[name] = "; ".join(str(e) for e in absent)
            continue
        bars = []

        def progress(total: int, _name: str = name):
            bar = tqdm(total=total, desc=f"{suite.name} {_name} generation", unit="response",
                       disable=not show_progress)
            bars.append(bar)
            return bar.update

        try:
            result = evaluate_mdr_episodes(
                episodes, merged["teacher"], merged["student"], merged["decoder"],
                max_examples=suite.max_generation_examples, max_new_tokens=int(merged.get("max_new_tokens", 32)),
                samples=int(merged.get("samples", 5)), seed=int(merged.get("seed", 2022)),
                device=merged.get("device"), source=f"suite {suite.name}", progress_factory=progress)
        except ConfigError as exc:  # ModelNotTrained, or a model folder without its saved settings
            not_scored[name] = str(exc)
            continue
        finally:
            for bar in bars:
                bar.close()
        if not result["examples_scored"]:
            not_scored[name] = (f"no (Q, R) round in the suite's {len(episodes)} episodes (a round is a "
                                f"main-speaker turn answering the partner)")
            continue
        scored[name] = result
    return scored, not_scored


def flat_generation_metrics(result: dict) -> dict[str, float]:
    """One generator's result as flat metrics: overall, ``session_<n>/<m>`` and ``sessions_2-5/<m>``."""
    out = {k: float(v) for k, v in result["overall"].items()}
    out["examples_total"] = float(result.get("examples_total", out.get("responses", 0.0)))
    for num, values in result["by_session"].items():
        out.update({f"session_{num}/{k}": float(v) for k, v in values.items()})
    mean = glong_session_mean(result)
    out.update({f"sessions_2-5/{k}": v for k, v in mean.items()})
    return out


def glong_session_mean(result: dict) -> dict[str, float]:
    """The mean over sessions 2-5 of each per-session metric, as G-Long averages its tables (only the
    sessions present; empty when none of 2-5 is). ``responses`` is their sum."""
    per = [values for num, values in result["by_session"].items() if num in GLONG_SESSIONS]
    if not per:
        return {}
    keys = [k for k in per[0] if all(k in v for v in per)]
    return {k: float(sum(v[k] for v in per)) if k == "responses" else sum(v[k] for v in per) / len(per)
            for k in keys}
