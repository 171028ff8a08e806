"""answer_suite: every reader answers the same questions, in one batched call, and every judge scores them."""

from __future__ import annotations

from collections import defaultdict

import pytest

from pipelines.errors import ConfigError
from pipelines.evaluate.answers.run import AnswerLLMs, AnswerSettings, answer_suite, evaluate_and_answer
from pipelines.evaluate.suite import Suite
from pipelines.llm import CachedLLM, ResponseCache
from tests.evaluate.answers._fakes import FakeLLM

STRATEGIES = ("no_history", "long_context", "bm25", "session_summary")


def suite(**answers) -> Suite:
    return Suite(name="t", version=1, source="canonical", strategies=STRATEGIES, ks=(1, 3), budget_tokens=100,
                 answers={"judges": ["token_f1", "locomo_llm"], "references": ["full_history", "oracle"],
                          "accuracy_ks": [1], **answers})


class Pair:
    """AnswerLLMs' two attributes: one model reads and judges."""

    def __init__(self, llm):
        self.reader = self.judge = llm


def run(episode, llm, settings=None, the_suite=None):
    return evaluate_and_answer(the_suite or suite(), [episode], {}, Pair(llm), settings or AnswerSettings(),
                               show_progress=False)


def test_every_reader_answers_the_same_questions_in_one_batched_call(episode):
    llm = FakeLLM()
    retrieval, answers = run(episode, llm)
    asked = defaultdict(set)
    for r in answers.records:
        asked[r.item.reader, r.item.setting].add((r.item.episode_id, r.item.query_id))
    # session_summary cannot run (no summaries in the data): listed as missing, answers nothing
    assert answers.missing == {"session_summary": retrieval.missing["session_summary"]}
    assert sorted(asked) == [("bm25", "context"), ("bm25", "top1"), ("full_history", "context"),
                             ("long_context", "context"), ("long_context", "top1"), ("no_history", "context"),
                             ("no_history", "top1"), ("oracle", "context")]
    questions = {("p1", q) for q in ("Q1", "Q2", "Q5", "Q6", "Q8", "Q9")}
    assert all(ids == questions for ids in asked.values())     # paired: the same questions for every reader
    assert answers.readers() == ["no_history", "long_context", "bm25", "full_history", "oracle"]
    assert answers.not_answered == {"evidence_not_earlier": 3} and answers.questions == answers.questions_total == 6
    reads = [batch for batch, settings in llm.calls if settings.max_new_tokens == 64]
    assert len(reads) == 1 and len(reads[0]) == len(answers.records) == 8 * 6   # all reader calls in one batch
    judged = [batch for batch, _ in llm.calls[1:]]
    assert len(judged) == 1  # one batched call for the LLM judge (token_f1 needs no model)
    for record in answers.records:
        assert record.answer == "fake answer" and record.prompt_tokens > 0
        assert record.verdicts["token_f1"].judge == "token_f1"
        assert ("locomo_llm" in record.verdicts) == (not record.item.abstention)  # mem0 does not judge abstentions
    assert answers.judges == ("token_f1", "locomo_llm") and (answers.reader, answers.judge) == ("fake:fake-model",) * 2
    abstention = [r for r in answers.records if r.item.query_id == "Q5"]
    assert abstention and all(r.item.abstention for r in abstention)  # answered (a refusal is expected), judged
    assert retrieval.results["bm25"].exclusion_counts()["abstention"] == 1  # and still out of the retrieval figures


def test_max_questions_caps_every_reader_alike(episode):
    _, answers = run(episode, FakeLLM(), AnswerSettings(max_questions=2))
    assert answers.questions == 2 and answers.questions_total == 6
    per_reader = defaultdict(set)
    for r in answers.records:
        per_reader[r.item.reader].add(r.item.query_id)
    assert set(map(frozenset, per_reader.values())) == {frozenset({"Q1", "Q6"})}


def test_the_contexts_are_those_of_the_protocol_and_the_reference_readers(episode):
    _, answers = run(episode, FakeLLM(), AnswerSettings(max_questions=None))
    got = {(r.item.reader, r.item.setting, r.item.query_id): r.item for r in answers.records}
    assert got["no_history", "context", "Q2"].context == ""
    assert got["long_context", "context", "Q2"].context.splitlines() == [
        "Ana: red kite flies.", "Ana: blue boat sails.", "Ana: green tea steeps.", "Ana: grey cat sleeps."]
    assert got["long_context", "top1", "Q2"].context == "Ana: grey cat sleeps."
    assert got["oracle", "context", "Q1"].context.splitlines() == ["Ana: red kite flies.", "Ana: blue boat sails."]
    assert got["full_history", "context", "Q6"].context_tokens == 48  # every turn: 8 lines of 6 regex tokens


def test_a_rerun_is_answered_from_the_response_cache(episode, tmp_path):
    first = CachedLLM(FakeLLM(), ResponseCache(tmp_path / "responses"))
    _, answers = run(episode, first, AnswerSettings(max_questions=3))
    assert answers.reader_stats["misses"] > 0 and answers.reader_stats["calls"] == len(answers.records)
    assert answers.judge_stats["calls"] > 0
    backend = FakeLLM()
    again = CachedLLM(backend, ResponseCache(tmp_path / "responses"))
    _, rerun = run(episode, again, AnswerSettings(max_questions=3))
    assert not backend.calls  # nothing asked again
    assert rerun.reader_stats["hits"] == len(rerun.records) and rerun.reader_stats["misses"] == 0
    assert [r.answer for r in rerun.records] == [r.answer for r in answers.records]
    assert all(r.cached for r in rerun.records)


def test_a_suite_without_answers_answers_nothing(episode):
    plain = Suite(name="t", version=1, source="canonical", strategies=("bm25",), ks=(1,))
    retrieval, answers = run(episode, FakeLLM(), the_suite=plain)
    assert answers is None and not retrieval.results["bm25"].contexts
    with pytest.raises(ConfigError, match="no 'answers' section"):
        answer_suite(plain, [episode], retrieval.results, FakeLLM())


def test_no_question_to_answer_lists_every_reader_as_missing(episode):
    unanswerable = episode.model_copy(update={"queries": [q for q in episode.queries if q.id in ("Q3", "Q4")]})
    answers = answer_suite(suite(), [unanswerable], {"bm25": None}, FakeLLM(), missing={"session_summary": "why"})
    assert answers.records == [] and answers.questions == 0
    assert answers.not_answered == {"evidence_not_earlier": 2}
    assert answers.missing == {"session_summary": "why", "bm25": "no question to answer in this data",
                               "full_history": "no question to answer in this data",
                               "oracle": "no question to answer in this data"}


def test_answer_llms_build_the_reader_and_judge_from_params_at_first_use(tmp_path):
    llms = AnswerLLMs({"reader": {"model": "smollm2-135m-instruct", "cache": False}, "judge": None}, tmp_path)
    assert llms._reader is None  # nothing built (nor loaded) before a suite answers
    assert llms.reader.label == llms.judge.label == "local:smollm2-135m-instruct"
    assert llms.reader is not llms.judge  # each its own response-cache figures (one loaded model underneath)
    other = AnswerLLMs({"reader": {}, "judge": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1",
                                                "model": "judge-model"}}, tmp_path)
    assert other.judge.label == "openai:judge-model"
    with pytest.raises(ConfigError, match="llm.judge.backend"):
        _ = AnswerLLMs({"reader": {}, "judge": {"backend": "nope"}}, tmp_path).judge
    llms.close()
    other.close()


def test_answer_settings_from_params():
    settings = AnswerSettings.from_config({"reader": {"max_new_tokens": 12, "temperature": 0.5}, "max_questions": 4},
                                          seed=7)
    assert (settings.max_questions, settings.reader.max_new_tokens, settings.reader.temperature,
            settings.reader.seed) == (4, 12, 0.5, 7)
    with pytest.raises(ConfigError, match="llm.max_questions"):
        AnswerSettings(max_questions=0)


def test_the_benchmark_stage_answers_reports_and_traces(tmp_path, mlflow_store, monkeypatch):
    """run_stage('benchmark'): the synthetic suite answered by the reader of params.yaml ``llm`` (a fake here),
    the answers in the report, metrics.json, queries.jsonl and the asset metadata, one MLflow trace each."""
    import json
    import shutil

    from mlflow import MlflowClient

    import pipelines.evaluate.answers.run as answers_run
    import pipelines.evaluate.stage as bench
    from pipelines.data.synthetic import SyntheticConfig, generate, write_splits
    from pipelines.runner import run_stage
    from tests._cli import REPO

    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    write_splits(generate(SyntheticConfig(episodes=6, sessions=3, turns=6, partners=2, queries_per_session=2)),
                 root / "data/canonical/synthetic")
    from tests.evaluate.test_benchmark_concurrency import trained_inputs

    for rel in trained_inputs():
        (root / rel).mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(bench, "_mdr_generation", lambda ctx, episodes, split: {
        "overall": {"bleu-1": 1.0}, "by_session": {}, "markdown": "## Response generation (MDR)\n\nstub\n"})
    monkeypatch.setattr(bench, "_extraction_section", lambda ctx: ("## G-Long stub\n", {"extraction/f1": 0.5}))
    monkeypatch.setattr(bench, "_emma_section", lambda ctx, split, settings=None: ("## EMMA stub\n", {}))
    built = []

    class FakeLLMs:
        def __init__(self, llm, cache_dir):
            built.append((llm, cache_dir))
            self.reader = self.judge = FakeLLM()

        def close(self):
            pass

    monkeypatch.setattr(answers_run, "AnswerLLMs", FakeLLMs)
    absent = str(tmp_path / "not-trained")  # the stage's inputs exist (empty): point the trained models elsewhere
    untrained = {"egocentric": {"retriever": absent}, "egocentric_gold": {"retriever": absent},
                 "graph": {"importance_model": absent}, "mdr": {"teacher": absent}, "rerank": {"reranker_path": absent}}
    overrides = {"llm": {"max_questions": 2}, "benchmark": {"strategy_settings": untrained}}
    run_stage("benchmark_shard", overrides, root=root, track=False)  # the retrieval, with the answers' contexts
    result = run_stage("benchmark", overrides, root=root)
    [(llm, cache_dir)] = built
    assert llm["judge"] is None and llm["reader"]["model"] == "smollm2-135m-instruct"
    assert cache_dir == root / ".cache" / "llm"
    assert result.metadata["answers"]["synthetic"]["questions"] == 2
    metrics = json.loads((root / "reports/metrics.json").read_text(encoding="utf-8"))["synthetic"]
    assert {"full_history", "oracle"} <= set(metrics) and any(k.startswith("answers/") for k in metrics["bm25"])
    lines = [json.loads(line) for line in (root / "reports/queries.jsonl").read_text(encoding="utf-8").splitlines()]
    answered = [r for r in lines if r["kind"] == "answer"]
    assert answered and {r["reader"] for r in answered} >= {"bm25", "full_history", "oracle"}
    client = MlflowClient(mlflow_store)
    run = client.get_run(result.metadata["mlflow_run_id"])
    assert run.data.params["llm.max_questions"] == "2"  # the llm section is among the stage's params
    experiment = run.info.experiment_id
    traces = client.search_traces(locations=[experiment])
    assert len(traces) == len(answered)
