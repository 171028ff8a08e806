"""The benchmark's answers as MLflow traces: one trace per answer to a sampled question, a span for the reader and
one per judge, so a person reads a reader's prompt, its answer and each verdict side by side in MLflow's Traces tab.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable

from pipelines.errors import ConfigError
from pipelines.evaluate.answers.aggregate import judge_of
from pipelines.evaluate.answers.prompts import reader_messages as style_messages
from pipelines.evaluate.answers.run import AnswerRun
from pipelines.evaluate.answers.types import AnswerItem
from pipelines.tracking import Tracker


def traced_questions(run: AnswerRun, sample: float, seed: int = 2022) -> set[tuple[str, str]]:
    """The (episode, query) pairs of an answer run whose answers become traces: each question is drawn with
    probability ``sample`` by a hash of (seed, suite, episode, query), so a rerun traces the same questions and
    every reader's answer to a drawn question is traced (readers compare side by side in the Traces tab)."""
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0 <= sample <= 1:
        raise ConfigError(f"llm.trace_sample must be a share in [0, 1], got {sample!r}.")
    questions = {(r.item.episode_id, r.item.query_id) for r in run.records}
    return {q for q in questions
            if int.from_bytes(hashlib.sha256(f"{seed}:{run.suite}:{q[0]}:{q[1]}".encode()).digest()[:8], "big")
            < sample * 2 ** 64}


def log_answer_traces(tracker: Tracker, run: AnswerRun, sample: float = 1.0, seed: int = 2022,
                      reader_messages: Callable[[AnswerItem], list[dict[str, str]]] | None = None,
                      judges: dict[str, Any] | None = None) -> int:
    """Record the answers of ``run`` (an AnswerRun) as MLflow traces of the tracker's run; returns how many.

    One trace ``answer`` per answer to a sampled question (:func:`traced_questions`): inputs the question, the
    reader and the setting, outputs the answer and each judge's verdict, tags ``mnemos.suite`` / ``.reader`` /
    ``.setting`` / ``.query`` / ``.category``; a child span ``reader`` (inputs: the prompt messages; output: the
    answer; attributes: the reader model, tokens, latency, whether the response cache served it) and one child
    span per judge, named after it (inputs: the judge's prompt messages, or the answer and the reference for a
    model-free metric; outputs: score, label, parsed, the judge's raw output). The calls were batched, so they
    are recorded after the fact: each span starts when it is logged and lasts the call's latency (its share of
    the batch), also in attribute ``latency_s``. ``reader_messages(item)`` rebuilds the reader's prompt
    (default: the run's reader prompt style, pipelines.evaluate.answers.prompts); ``judges`` maps a judge name
    to the judge that rebuilds its prompt (default: the registry). Only prompts, answers, verdicts and model
    labels are recorded: never a key (an LLM label names the model, the config names the key's variable). The
    answer figures themselves reach the run as metrics through metrics.json (the stage's metrics)."""
    from mlflow.entities import SpanType
    from mlflow.tracing.constant import SpanAttributeKey

    questions = traced_questions(run, sample, seed)
    records = [r for r in run.records if (r.item.episode_id, r.item.query_id) in questions]
    if not records:
        return 0
    if reader_messages is None:
        def reader_messages(item, _style=run.reader_prompt):
            return style_messages(_style, item)
    if judges is None:
        judges = {name: judge_of(name) for name in dict.fromkeys(n for r in records for n in r.verdicts)}
    mlflow = tracker._mlflow
    client = mlflow.MlflowClient()
    run_id = tracker.run_id

    def usage(prompt: int, completion: int) -> dict[str, int]:
        return {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}

    for record in records:
        item = record.item
        start = time.time_ns()
        root = client.start_trace(
            "answer", span_type=SpanType.CHAIN, experiment_id=tracker.experiment_id, run_id=run_id,
            start_time_ns=start,
            inputs={"question": item.question, "question_date": item.question_date, "reader": item.reader,
                    "setting": item.setting, "episode_id": item.episode_id, "query_id": item.query_id},
            attributes={"suite": run.suite, "category": item.category, "abstention": item.abstention},
            tags={"mnemos.suite": run.suite, "mnemos.reader": item.reader, "mnemos.setting": item.setting,
                  "mnemos.query": f"{item.episode_id}/{item.query_id}", "mnemos.category": item.category})
        end = start + int(record.latency_s * 1e9)
        span = client.start_span("reader", root.trace_id, root.span_id, span_type=SpanType.CHAT_MODEL,
                                 inputs={"messages": reader_messages(item)}, start_time_ns=start,
                                 attributes={SpanAttributeKey.MODEL: run.reader, "model": run.reader,
                                             "context_tokens": item.context_tokens, "cached": record.cached,
                                             "latency_s": record.latency_s, "prompt_tokens": record.prompt_tokens,
                                             "completion_tokens": record.completion_tokens,
                                             SpanAttributeKey.CHAT_USAGE: usage(record.prompt_tokens,
                                                                                record.completion_tokens)})
        client.end_span(root.trace_id, span.span_id, outputs={"answer": record.answer}, end_time_ns=end)
        for name, verdict in record.verdicts.items():
            judge = judges.get(name)
            llm_judge = bool(getattr(judge, "needs_llm", False))
            inputs = ({"messages": judge.messages(item, record.answer)} if llm_judge else
                      {"answer": record.answer, "reference": item.reference})
            latency = verdict.latency_s
            attributes = {"model": run.judge if llm_judge else "none (a metric without a model)",
                          "cached": verdict.cached, "latency_s": latency, "prompt_tokens": verdict.prompt_tokens,
                          "completion_tokens": verdict.completion_tokens, "score": verdict.score,
                          "parsed": verdict.parsed}
            if llm_judge:
                attributes[SpanAttributeKey.MODEL] = run.judge
                attributes[SpanAttributeKey.CHAT_USAGE] = usage(verdict.prompt_tokens, verdict.completion_tokens)
            span = client.start_span(name, root.trace_id, root.span_id, span_type=SpanType.EVALUATOR,
                                     inputs=inputs, attributes=attributes, start_time_ns=end)
            end += int(latency * 1e9)
            client.end_span(root.trace_id, span.span_id, end_time_ns=end,
                            outputs={"score": verdict.score, "label": verdict.label, "parsed": verdict.parsed,
                                     "raw": verdict.raw})
        client.end_trace(root.trace_id, end_time_ns=end, outputs={
            "answer": record.answer, "reference": item.reference,
            "verdicts": {name: {"score": v.score, "label": v.label, "parsed": v.parsed}
                         for name, v in record.verdicts.items()}})
    mlflow.flush_trace_async_logging()  # in the store before the stage's run ends
    tracker.set_tags({f"mnemos.answers.{run.suite}.reader": run.reader,
                      f"mnemos.answers.{run.suite}.judge": run.judge,
                      f"mnemos.answers.{run.suite}.traces": str(len(records))})
    return len(records)
