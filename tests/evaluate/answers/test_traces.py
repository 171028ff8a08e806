"""The answers as MLflow traces in a real SQLite store: one trace per answer of a sampled question, a reader
span and one span per judge with the prompt, the answer, the verdict, tokens, latency and the cache flag."""

import json

import pytest
from mlflow import MlflowClient

from pipelines import tracking
from pipelines.evaluate.answers import traces as answer_traces
from pipelines.errors import ConfigError
from pipelines.evaluate.answers.judges import Mem0Judge
from pipelines.evaluate.answers.prompts import reader_messages

from tests.evaluate.answers._answer_runs import answer_run


def _traces(uri: str, run_id: str, experiment_id: str):
    return MlflowClient(uri).search_traces(locations=[experiment_id], run_id=run_id, max_results=1000)


def test_every_answer_is_a_trace_with_reader_and_judge_spans(mlflow_store, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-in-a-trace")
    run = answer_run()
    with tracking.stage_run("benchmark", "mnemos-test", {"profile": "tiny"}) as tracker:
        assert answer_traces.log_answer_traces(tracker, run, sample=1.0, seed=7) == len(run.records) == 15
        run_id, experiment_id = tracker.run_id, tracker.experiment_id
    traces = _traces(mlflow_store, run_id, experiment_id)
    assert len(traces) == 15
    found = {(t.info.tags["mnemos.reader"], t.info.tags["mnemos.setting"], t.info.tags["mnemos.query"]): t
             for t in traces}
    trace = found[("bm25", "context", "p1/Q2")]
    assert trace.info.tags["mnemos.suite"] == "synthetic" and trace.info.tags["mnemos.category"] == "multi-session"
    spans = {s.name: s for s in trace.data.spans}
    assert set(spans) == {"answer", "reader", "locomo_llm", "token_f1"}
    root, reader, judge = spans["answer"], spans["reader"], spans["locomo_llm"]
    assert reader.parent_id == root.span_id and judge.parent_id == root.span_id
    assert root.inputs["question"] == "What sails and steeps?" and root.inputs["reader"] == "bm25"
    assert root.outputs["answer"] == "answer of bm25 to Q2"
    assert root.outputs["verdicts"]["locomo_llm"] == {"score": None, "label": "", "parsed": False}
    record = next(r for r in run.records
                  if (r.item.reader, r.item.setting, r.item.query_id) == ("bm25", "context", "Q2"))
    assert reader.inputs == {"messages": reader_messages("default", record.item)}     # the prompt the reader saw
    assert reader.outputs == {"answer": "answer of bm25 to Q2"}
    assert reader.attributes["model"] == "local:smollm2-135m-instruct"
    assert reader.attributes["prompt_tokens"] == 68 and reader.attributes["completion_tokens"] == 5
    assert reader.attributes["cached"] is False and reader.attributes["latency_s"] == 0.25
    assert (reader.end_time_ns - reader.start_time_ns) == 250_000_000                    # the call's latency
    assert judge.inputs == {"messages": Mem0Judge().messages(record.item, record.answer)}
    assert judge.outputs == {"score": None, "label": "", "parsed": False, "raw": "I cannot tell."}
    assert judge.attributes["prompt_tokens"] == 300 and judge.attributes["parsed"] is False
    assert judge.attributes["latency_s"] == 0.5 and judge.attributes["model"] == "local:smollm2-135m-instruct"
    assert judge.start_time_ns == reader.end_time_ns and judge.end_time_ns - judge.start_time_ns == 500_000_000
    f1 = spans["token_f1"]
    assert f1.inputs == {"answer": "answer of bm25 to Q2", "reference": "blue boat and green tea"}
    assert f1.outputs["score"] == 0.5 and f1.attributes["model"].startswith("none")
    cached = found[("no_history", "context", "p1/Q1")]
    assert {s.name: s for s in cached.data.spans}["reader"].attributes["cached"] is True
    assert all("sk-never-in-a-trace" not in json.dumps(t.to_dict()) for t in traces)   # never a key
    tags = MlflowClient(mlflow_store).get_run(run_id).data.tags
    assert tags["mnemos.answers.synthetic.judge"] == "local:smollm2-135m-instruct"
    assert tags["mnemos.answers.synthetic.traces"] == "15"


def test_sampling_draws_questions_deterministically_with_every_reader():
    run = answer_run()
    half = answer_traces.traced_questions(run, 0.5, seed=1)
    assert half == answer_traces.traced_questions(run, 0.5, seed=1)                  # a rerun traces the same ones
    assert answer_traces.traced_questions(run, 1.0, seed=1) == {("p1", "Q1"), ("p1", "Q2"), ("p1", "Q5")}
    assert answer_traces.traced_questions(run, 0.0, seed=1) == set()
    draws = [len(answer_traces.traced_questions(run, 0.5, seed=s)) for s in range(40)]
    assert 0 in draws or 3 in draws or len(set(draws)) > 1                       # it depends on the seed
    assert 20 <= sum(draws) <= 100                                               # about half of 40 x 3
    with pytest.raises(ConfigError, match="llm.trace_sample must be a share in \\[0, 1\\], got 1.5"):
        answer_traces.traced_questions(run, 1.5)


def test_sampled_traces_in_the_store(mlflow_store):
    run = answer_run()
    questions = answer_traces.traced_questions(run, 0.5, seed=2)
    assert 0 < len(questions) < 3                                     # seed 2 draws some of the questions
    with tracking.stage_run("benchmark", "mnemos-test", {"profile": "tiny"}) as tracker:
        logged = answer_traces.log_answer_traces(tracker, run, sample=0.5, seed=2)
        assert answer_traces.log_answer_traces(tracker, run, sample=0.0) == 0
        run_id, experiment_id = tracker.run_id, tracker.experiment_id
    traces = _traces(mlflow_store, run_id, experiment_id)
    assert logged == len(traces) == 5 * len(questions)                # every reader and setting of a drawn question
    assert {tuple(t.info.tags["mnemos.query"].split("/")) for t in traces} == questions
