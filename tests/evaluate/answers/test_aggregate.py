"""summarise: per reader and setting, each judge's summary overall and per category, unparseable counted and
never correct, mean tokens, Accuracy@k from the top<k> settings; reference readers last."""

import pytest

from pipelines.errors import ConfigError
from pipelines.evaluate.answers.aggregate import accuracy_at_k, flat, headline_key, judges_in, summarise
from pipelines.evaluate.answers.types import Verdict

from tests.evaluate.answers._answer_runs import answer_run, record


def test_summary_per_reader_and_setting():
    summary = summarise(answer_run())
    assert list(summary) == ["bm25", "no_history", "full_history"]          # strategies first, references last
    assert list(summary["bm25"]) == ["context", "top3"]
    bm25 = summary["bm25"]["context"]
    assert bm25["answered"] == 3
    assert bm25["locomo_llm/accuracy"] == 0.5          # CORRECT + unparseable: the unparseable one is not correct
    assert bm25["unparseable/locomo_llm"] == 1
    assert bm25["token_f1/f1"] == pytest.approx(2.5 / 3) and bm25["unparseable/token_f1"] == 0
    assert bm25["context_tokens"] == 12.0 and bm25["prompt_tokens"] == 62.0 and bm25["completion_tokens"] == 5.0
    assert summary["no_history"]["top3"]["locomo_llm/accuracy"] == 0.0
    assert summary["full_history"]["context"]["locomo_llm/accuracy"] == 1.0
    assert judges_in(summary) == ["locomo_llm", "token_f1"]


def test_per_category_figures_use_the_judges_summary():
    bm25 = summarise(answer_run())["bm25"]["context"]
    assert bm25["locomo_llm/accuracy/single-session"] == 1.0
    assert bm25["locomo_llm/accuracy/multi-session"] == 0.0             # its only verdict was unparseable
    assert "locomo_llm/accuracy/uncategorised" not in bm25              # locomo_llm does not judge abstentions
    assert bm25["token_f1/f1/uncategorised"] == 1.0
    assert not any(k.startswith("unparseable/") and k.count("/") > 1 for k in bm25)


def test_all_unparseable_graded_judge_has_no_score_only_the_count():
    records = [record("bm25", "context", q, "CORRECT", 1.0, 5) for q in ("Q1", "Q2")]
    for r in records:
        r.verdicts = {"realmem_qa": Verdict("realmem_qa", None, parsed=False, raw="?")}
    figures = summarise(records)["bm25"]["context"]
    assert "realmem_qa/score" not in figures                            # no zero for what was never scored
    assert figures["unparseable/realmem_qa"] == 2


def test_headline_key_is_the_judges_metric():
    records = [record("bm25", "context", "Q1", "CORRECT", 1.0, 5)]
    records[0].verdicts = {"realmem_qa": Verdict("realmem_qa", 3.0, label="3")}
    figures = summarise(records)["bm25"]["context"]
    assert headline_key(figures, "realmem_qa") == "realmem_qa/score"     # not hallucination_rate / perfect_rate
    assert figures["realmem_qa/perfect_rate"] == 1.0


def test_accuracy_at_k_is_the_top_k_setting():
    at_k = accuracy_at_k(summarise(answer_run()), "locomo_llm")
    assert at_k == {"bm25": {"accuracy@3": 1.0}, "no_history": {"accuracy@3": 0.0}}   # references have no top k


def test_flat_keys_for_metrics_json():
    keys = flat(summarise(answer_run()))["bm25"]
    assert keys["answers/context/locomo_llm/accuracy"] == 0.5
    assert keys["answers/top3/locomo_llm/accuracy"] == 1.0
    assert keys["answers/context/unparseable/locomo_llm"] == 1


def test_unknown_judge_names_it():
    records = [record("bm25", "context", "Q1", "CORRECT", 1.0, 5)]
    records[0].verdicts = {"nope": Verdict("nope", 1.0)}
    with pytest.raises(ConfigError, match="judge 'nope'"):
        summarise(records)
