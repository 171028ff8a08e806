"""Answer-level evaluation of one suite: every reader answers the same questions, the judges score the answers.

The flow of a suite with ``answers`` (pipelines/evaluate/stage.py and the CLI ``benchmark`` run it):

1. :func:`pipelines.evaluate.answers.readers.select_questions` picks the questions (the same for every reader)
   and :func:`~pipelines.evaluate.answers.readers.answer_request` asks the temporal protocol to record, for each
   of them, every strategy's ``context(query, budget)`` and top-k retrieved items at the question's time;
2. :func:`pipelines.evaluate.suite_run.evaluate_suite` scores the retrieval and records those contexts;
3. :func:`answer_suite` builds one :class:`AnswerItem` per (reader, setting, question) (the strategies that ran,
   in settings ``context`` and ``top<k>``; the reference readers ``full_history`` and ``oracle``), asks the reader
   model for every answer in one batched call (the suite's reader prompt), then has every judge of the suite
   score every answer (:func:`pipelines.evaluate.answers.judges.run_judges`: one batched call per LLM judge);
4. the :class:`AnswerRun` goes to the report (pipelines/evaluate/report.py, aggregate.py) and to MLflow traces.

A strategy that did not run (no trained model, nothing to read in the data) answers nothing and is listed in
``AnswerRun.missing`` with its reason, never scored 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pipelines.data.schema import Episode
from pipelines.errors import ConfigError
from pipelines.evaluate.answers.types import AnswerItem, AnswerRecord
from pipelines.evaluate.suite import corpus_episodes
from pipelines.evaluate.suite_run import evaluate_suite, plan_run, run_planned_shard
from pipelines.llm.base import LLM, GenerationSettings


@dataclass
class AnswerRun:
    """Every answer of one suite and every verdict on it.

    ``records`` hold one :class:`AnswerRecord` per (reader, setting, question): the readers are the suite's
    strategies that ran (settings ``context`` and ``top<k>`` for each k of ``answers.accuracy_ks``) and the
    reference readers (``full_history``, ``oracle``; setting ``context``). Every reader answers the same
    questions (a paired comparison)."""

    suite: str                          # the suite's name (the key in reports/metrics.json)
    reader: str                         # the reader model's label ("local:smollm2-135m-instruct")
    judge: str                          # the judge model's label (the reader's when llm.judge is null)
    records: list[AnswerRecord]
    judges: tuple[str, ...] = ()        # the judges that scored the records (their verdict names, Judge.name)
    task: str = "qa"                    # "qa" (questions) or "response" (the next response of a dialogue)
    reader_prompt: str = "default"      # the reader prompt style (answers.prompts.READER_STYLES)
    accuracy_ks: tuple[int, ...] = ()   # the top<k> settings (G-Long's Accuracy@k)
    reference: dict[str, Any] = field(default_factory=dict)  # the suite's answers.reference: judge, source, rows
    reader_stats: dict[str, Any] = field(default_factory=dict)  # the reader's CachedLLM.stats() ({} uncached)
    judge_stats: dict[str, Any] = field(default_factory=dict)   # the judge's CachedLLM.stats()
    missing: dict[str, str] = field(default_factory=dict)       # reader -> why it answered nothing
    questions: int = 0                  # questions each reader answered
    questions_total: int = 0            # answerable questions in the data (before llm.max_questions)
    not_answered: dict[str, int] = field(default_factory=dict)  # reason -> questions of the data left out

    def readers(self) -> list[str]:
        """The readers that answered, in the order of the records (strategies first, then the references)."""
        return list(dict.fromkeys(r.item.reader for r in self.records))

    def settings(self) -> list[str]:
        """The settings answered ("context", then "top<k>" in k order)."""
        return list(dict.fromkeys(r.item.setting for r in self.records))


@dataclass(frozen=True)
class AnswerSettings:
    """How a suite's questions are answered (params.yaml ``llm``; the reader's generation settings)."""

    max_questions: int | None = None       # questions per reader, evenly spaced over the data (None: all)
    full_history_tokens: int | None = None  # cap of the full-history reader's context (None: the model's window)
    reader: GenerationSettings = field(default_factory=lambda: GenerationSettings(max_new_tokens=64))

    def __post_init__(self) -> None:
        for key in ("max_questions", "full_history_tokens"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"llm.{key} must be a positive integer or null, got {value!r}.")

    @classmethod
    def from_config(cls, llm: Mapping[str, Any], seed: int = 2022) -> "AnswerSettings":
        """From the resolved ``llm`` section: its top keys and the reader's max_new_tokens / temperature."""
        reader = llm.get("reader") or {}
        generation = GenerationSettings(max_new_tokens=int(reader.get("max_new_tokens", 64)),
                                        temperature=float(reader.get("temperature", 0.0)), seed=seed)
        return cls(llm.get("max_questions"), llm.get("full_history_tokens"), generation)


def _stats(llm: LLM) -> dict[str, Any]:
    """The response cache's figures of ``llm`` so far (``CachedLLM.stats()``), {} when it has none."""
    stats = getattr(llm, "stats", None)
    return dict(stats()) if callable(stats) else {}


def _since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of the calls between two :func:`_stats` (the counts are cumulative per model instance, which
    the stage reuses across suites and which reads and judges when the judge is the reader)."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        numbers = isinstance(value, (int, float)) and not isinstance(value, bool)
        out[key] = value - old if numbers and isinstance(old, (int, float)) else value
    return out


def _bar(total: int, desc: str, show: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="answer", disable=not show)


def strategy_items(suite, episodes: Mapping[str, Episode], questions, results) -> list[AnswerItem]:
    """The items of the strategies that ran (``results``: name -> ProtocolResult with recorded contexts), in the
    suite's order, settings ``context`` then ``top<k>`` (RuntimeError when a question's context is missing)."""
    from pipelines.evaluate.answers.readers import base_item

    settings = ["context", *(f"top{k}" for k in suite.answers.accuracy_ks)]
    items: list[AnswerItem] = []
    for name in suite.strategies:
        if name not in results:
            continue
        recorded = {(c.episode_id, c.query_id, c.setting): c for c in results[name].contexts}
        for setting in settings:
            for question in questions:
                context = recorded.get((question.episode_id, question.query.id, setting))
                if context is None:
                    raise RuntimeError(f"suite {suite.name!r}: strategy {name!r} recorded no {setting} context for "
                                       f"query {question.query.id} of episode {question.episode_id}: run "
                                       "evaluate_suite with the answer request of the same questions.")
                episode = episodes[question.episode_id]
                items.append(base_item(suite, episode, question, name, setting, context.text, context.tokens))
    return items


def answer_suite(suite, episodes: Sequence[Episode], results: Mapping[str, Any], reader_llm: LLM,
                 judge_llm: LLM | None = None, settings: AnswerSettings | None = None, *,
                 published: Sequence[Episode] | None = None, counter=None, missing: Mapping[str, str] | None = None,
                 questions=None, show_progress: bool = True) -> AnswerRun:
    """Answer and judge the questions of ``suite`` (see the module docstring).

    ``episodes`` are those the protocol ran on (the questions are selected from them exactly as
    :func:`~pipelines.evaluate.answers.readers.answer_request` selected them for ``evaluate_suite``); ``results``
    the strategies' ProtocolResults (with their recorded contexts); ``published`` the same episodes with every
    turn (the reference readers' dialogue; default ``episodes``); ``counter`` the suite's token counter (the
    items' ``context_tokens``); ``missing`` strategy -> why it did not run; ``questions`` the
    :func:`~pipelines.evaluate.answers.readers.select_questions` already made for the request (default: made
    again, the same). The judge model defaults to the reader. Raises ConfigError when the suite has no
    ``answers``.
    """
    from pipelines.evaluate.answers.judges import count_judgements, make_judges, run_judges
    from pipelines.evaluate.answers.prompts import finish_answer, reader_messages
    from pipelines.evaluate.answers.readers import reference_items, select_questions
    from pipelines.memory import DEFAULT_COUNTER

    if suite.answers is None:
        raise ConfigError(f"suite {suite.name!r} has no 'answers' section: it answers nothing.")
    answers = suite.answers
    settings = settings or AnswerSettings()
    judge_llm = judge_llm or reader_llm
    counter = counter or DEFAULT_COUNTER
    chosen = questions if questions is not None else select_questions(suite, episodes, settings.max_questions)
    asked = chosen.items
    by_id = {e.id: e for e in episodes}
    published_by_id = {e.id: e for e in (published or episodes)}
    not_run = {name: why for name, why in (missing or {}).items() if name in suite.strategies}
    run = AnswerRun(suite=suite.name, reader=reader_llm.label, judge=judge_llm.label, records=[],
                    judges=tuple(j.name for j in make_judges(answers.judges)), task=answers.task,
                    reader_prompt=answers.reader_prompt, accuracy_ks=tuple(answers.accuracy_ks),
                    reference=dict(answers.reference), missing=not_run, questions=len(asked),
                    questions_total=chosen.total, not_answered=dict(chosen.not_answered))
    if not asked:
        run.missing.update({name: "no question to answer in this data" for name in
                            [*(s for s in suite.strategies if s in results), *answers.references]})
        return run

    items = strategy_items(suite, by_id, asked, results)
    items += reference_items(suite, published_by_id, asked, reader_llm, counter,
                             settings.reader.max_new_tokens, settings.full_history_tokens)
    batch = [reader_messages(answers.reader_prompt, item) for item in items]
    reader_before = _stats(reader_llm)
    bar = _bar(len(batch), f"{suite.name} answers ({reader_llm.label})", show_progress)
    try:
        completions = reader_llm.generate(batch, settings.reader, progress=bar.update)
    finally:
        bar.close()
    run.records = [AnswerRecord(item, finish_answer(answers.reader_prompt, item, c.text), c.prompt_tokens,
                                c.completion_tokens, c.latency_s, c.cached) for item, c in zip(items, completions)]
    reader_after, judge_read = _stats(reader_llm), _stats(judge_llm)
    judges = make_judges(answers.judges)
    bar = _bar(count_judgements(judges, run.records), f"{suite.name} judging ({judge_llm.label})", show_progress)
    try:
        run_judges(judges, run.records, judge_llm, progress=bar.update)
    finally:
        bar.close()
    run.reader_stats = _since(reader_before, reader_after)
    run.judge_stats = _since(judge_read, _stats(judge_llm))
    return run


class AnswerLLMs:
    """The reader and judge models of params.yaml ``llm`` (``judge`` null: the reader's settings), built at first
    use (a benchmark whose suites answer nothing loads no model) and closed together. Each is its own
    :func:`~pipelines.llm.config.build_llm` (its own response-cache figures); a local model is loaded once for both
    when they name the same one."""

    def __init__(self, llm: Mapping[str, Any], cache_dir):
        self.config = dict(llm or {})
        self.cache_dir = cache_dir
        self._reader: LLM | None = None
        self._judge: LLM | None = None

    @property
    def reader(self) -> LLM:
        if self._reader is None:
            from pipelines.llm.build import build_llm
            from pipelines.llm.config import LLMConfig

            self._reader = build_llm(LLMConfig.from_dict(self.config.get("reader"), "llm.reader"), self.cache_dir)
        return self._reader

    @property
    def judge(self) -> LLM:
        if self._judge is None:
            from pipelines.llm.build import build_llm
            from pipelines.llm.config import LLMConfig

            judge = self.config.get("judge")
            where = "llm.judge" if judge is not None else "llm.reader"
            self._judge = build_llm(LLMConfig.from_dict(judge if judge is not None else self.config.get("reader"),
                                                        where), self.cache_dir)
        return self._judge

    def close(self) -> None:
        for llm in (self._reader, self._judge):
            if llm is not None:
                llm.close()


def _request(suite, episodes: Sequence[Episode], llms, settings: "AnswerSettings"):
    """(questions, the protocol's AnswerRequest) of a suite that answers with ``llms``, else (None, None)."""
    from pipelines.evaluate.answers.readers import answer_request, select_questions

    if suite.answers is None or llms is None:
        return None, None
    questions = select_questions(suite, episodes, settings.max_questions)
    return questions, answer_request(suite, questions)


def evaluate_and_answer(suite, published: Sequence[Episode], strategy_settings: Mapping[str, Any] | None = None,
                        llms: AnswerLLMs | None = None, settings: AnswerSettings | None = None, *,
                        show_progress: bool = True, generation: Mapping[str, Any] | None = None,
                        run_dir=None, data_id: str = "", shards: int = 1, shard_folders=None, provenance=None):
    """One suite as the benchmark stage and the CLI run it: the retrieval (:func:`~pipelines.evaluate.suite_run.
    evaluate_suite` over ``published`` under the suite's corpus) and, when the suite has ``answers`` and ``llms``
    are given, the answers (:func:`answer_suite`, the contexts recorded by that same protocol run).
    ``run_dir``, ``data_id``, ``shards``: as evaluate_suite's (each finished episode kept under ``run_dir``, so a
    killed run resumes; with ``shards`` > 1 the shards that :func:`evaluate_shard` wrote there, or in
    ``shard_folders``, are merged). ``provenance``: where the values given outside the suite file came from
    (:class:`~pipelines.evaluate.suite_run.Provenance`, named by errors and by a merge of shards that differ).
    Returns (SuiteRun, AnswerRun or None)."""
    settings = settings or AnswerSettings()
    episodes = corpus_episodes(suite, published)
    questions, request = _request(suite, episodes, llms, settings)
    run = evaluate_suite(suite, episodes, dict(strategy_settings or {}), show_progress=show_progress,
                         generation=dict(generation) if generation is not None else None,
                         answers=request, run_dir=run_dir, data_id=data_id, shards=shards,
                         shard_folders=shard_folders, provenance=provenance)
    if questions is None:
        return run, None
    answered = answer_suite(suite, episodes, run.results, llms.reader, llms.judge, settings, published=published,
                            counter=run.counter, missing=run.missing, questions=questions,
                            show_progress=show_progress)
    return run, answered


def evaluate_shard(suite, published: Sequence[Episode], strategy_settings: Mapping[str, Any] | None,
                   answering: bool, settings: AnswerSettings | None, shard, run_dir, *, data_id: str = "",
                   show_progress: bool = True, provenance=None):
    """The retrieval of shard ``shard`` (a :class:`~pipelines.evaluate.shards.ShardSpec`) of a suite, kept under
    ``run_dir/shards/<suite>/<i>-of-<N>`` for :func:`evaluate_and_answer` with ``shards`` N to merge (the readers'
    contexts of the questions it will answer, when ``answering``, are recorded; ``provenance``: as
    :func:`evaluate_and_answer`'s). Returns the shard's store."""
    settings = settings or AnswerSettings()
    episodes = corpus_episodes(suite, published)
    _, request = _request(suite, episodes, True if answering else None, settings)
    plan = plan_run(suite, episodes, dict(strategy_settings or {}), show_progress=show_progress, answers=request,
                    data_id=data_id, shards=shard.count, provenance=provenance)
    total = sum(1 for p in range(len(episodes)) if shard.holds(p))
    return run_planned_shard(plan, episodes, run_dir, shard, total=total)
