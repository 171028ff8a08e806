"""The report's answers (write_report(..., answers=...)) from a hand-built answer run, no model: the Answers
section, "not comparable" beside published rows, metrics.json keys, queries.jsonl lines, the plot, the DVC
headline files and the Dagster tables."""

import json

import pytest

from pipelines.errors import ConfigError
from pipelines.evaluate.report import write_headline, write_report
from pipelines.evaluate.suite import Suite
from pipelines.evaluate.suite_run import evaluate_suite

from tests.evaluate.answers._answer_runs import answer_run
from tests.evaluate.conftest import build_episode


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    suite = Suite(name="synthetic", version=2, source="canonical", ks=(1, 3), budget_tokens=100,
                  strategies=("no_history", "bm25", "mdr"))
    return evaluate_suite(suite, [build_episode()], {"mdr": {"teacher": str(tmp_path_factory.mktemp("none"))
                                                             + "/no-teacher"}}, show_progress=False)


@pytest.fixture(scope="module")
def report(suite_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    return write_report([suite_run], root, answers=[answer_run()]), root


def _block(md: str, title: str) -> list[str]:
    """The table lines under the heading that starts with ``title``."""
    part = md.split(title, 1)[1].split("\n\n")
    return next(p for p in part if p.startswith("|")).splitlines()


def _row(lines: list[str], label: str) -> list[str]:
    return next(line for line in lines if line.startswith(f"| {label} |")).strip("| ").split(" | ")


def test_answers_section_names_models_calls_and_labels_rows(report):
    _, root = report
    md = (root / "benchmark.md").read_text()
    assert "### Answers (qa)" in md
    assert "- reader: `local:smollm2-135m-instruct` (prompt `default`); judge: `local:smollm2-135m-instruct`" in md
    assert ("- reader calls: 15 (5 from the response cache, 10 asked), 1,234 prompt and 56 completion tokens asked, "
            "cost not priced (no price configured), 2.5 s") in md
    assert "- judge calls: 10 (0 from the response cache, 10 asked), 4,321 prompt and 99 completion tokens asked, " \
           "cost $0.0123" in md
    assert "- questions: 3 per reader of the 5 answerable" in md and "evidence_not_earlier: 2" in md
    table = _block(md, "#### Setting `context`")
    assert table[0] == ("| reader | locomo_llm/accuracy | unparseable/locomo_llm | token_f1/f1 | unparseable/token_f1 "
                        "| answered | context_tokens | prompt_tokens |")
    assert _row(table, "bm25")[:5] == ["bm25", "**0.5000**", "1", "**0.8333**", "0"]  # unparseable: not correct
    full = _row(table, "full_history (reference)")
    assert full[1] == "1.0000" and "**" not in " ".join(full)        # the best figure, but a reference: never bold
    assert _row(table, "mdr")[1].startswith("missing: strategy 'mdr'")   # not run: why, never zeros
    assert _row(table, "oracle (reference)")[1] == "missing: no evidence session before the question"
    top3 = _block(md, "#### Setting `top3`")
    assert _row(top3, "bm25")[1] == "**1.0000**" and not any(r.startswith("| full_history") for r in top3)
    per_category = _block(md, "#### Per category (setting `context`): `locomo_llm/accuracy`")
    assert per_category[0] == "| reader | single-session | multi-session |"
    assert _row(per_category, "bm25")[1:] == ["**1.0000**", "0.0000"]


def test_published_rows_are_not_comparable_when_our_judge_is_not_the_papers(report, suite_run, tmp_path):
    md = (report[1] / "benchmark.md").read_text()
    assert "#### Published answers (not comparable)" in md
    assert "our judge is `local:smollm2-135m-instruct`, the paper's judge is `gpt-4o-mini`" in md
    published = _block(md, "#### Published answers")
    assert _row(published, "G-Long (published, not comparable)") == ["G-Long (published, not comparable)", "0.5783"]
    assert _row(published, "bm25 (this run)")[1] == "**1.0000**"     # ours, beside them; published rows never bold
    same = write_report([suite_run], tmp_path / "same", answers=[answer_run(judge="openai:gpt-4o-mini")])
    md = (tmp_path / "same" / "benchmark.md").read_text()
    assert "not comparable" not in md.split("### Answers")[1].split("### Published reference")[0]
    assert "| G-Long (published, same judge model) | 0.5783 |" in md and same["answers"]


def test_metrics_json_gains_answer_keys_per_reader(report):
    out, root = report
    metrics = json.loads((root / "metrics.json").read_text())["synthetic"]
    assert metrics == out["metrics"]["synthetic"]
    bm25 = metrics["bm25"]
    assert bm25["turn/recall@1"] == out["metrics"]["synthetic"]["bm25"]["turn/recall@1"]   # retrieval kept
    assert bm25["answers/context/locomo_llm/accuracy"] == 0.5
    assert bm25["answers/context/unparseable/locomo_llm"] == 1
    assert bm25["answers/context/locomo_llm/accuracy/multi-session"] == 0.0
    assert bm25["answers/top3/locomo_llm/accuracy"] == 1.0
    assert metrics["full_history"]["answers/context/locomo_llm/accuracy"] == 1.0
    assert metrics["oracle"] == {"answers/missing": "no evidence session before the question"}
    assert set(metrics["mdr"]) == {"missing"}                                   # never zeros
    assert metrics["llm"]["reader/hits"] == 5 and metrics["llm"]["judge/cost_usd"] == 0.0123
    assert metrics["llm"]["reader/cost_usd"] is None                            # no price: no cost, not 0
    assert out["answers_missing"]["synthetic"]["oracle"] == "no evidence session before the question"


def test_queries_jsonl_has_retrieval_and_answer_lines(report):
    _, root = report
    rows = [json.loads(line) for line in (root / "queries.jsonl").read_text().splitlines()]
    kinds = {row["kind"] for row in rows}
    assert kinds == {"retrieval", "answer"}
    answers = [row for row in rows if row["kind"] == "answer"]
    assert len(answers) == len(answer_run().records) == 15
    bm25_q2 = next(r for r in answers if r["reader"] == "bm25" and r["setting"] == "context" and r["query_id"] == "Q2")
    assert bm25_q2["suite"] == "synthetic" and bm25_q2["suite_version"] == 2
    assert bm25_q2["answer"] == "answer of bm25 to Q2" and bm25_q2["question"] == "What sails and steeps?"
    assert bm25_q2["verdicts"]["locomo_llm"] == {"judge": "locomo_llm", "score": None, "parsed": False, "label": "",
                                                 "raw": "I cannot tell.", "prompt_tokens": 300,
                                                 "completion_tokens": 4, "cached": False,
                                                 "latency_s": 0.5}
    assert all("strategy" in r and "granularity" in r for r in rows if r["kind"] == "retrieval")


def test_accuracy_vs_tokens_plot(report):
    out, root = report
    path = root / "plots" / "synthetic" / "accuracy_vs_tokens.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path in out["plots"] and out["files"]["plots/synthetic/accuracy_vs_tokens.png"] == path


def test_dagster_tables_include_the_answers(report):
    tables = report[0]["markdown"]["synthetic"]
    assert tables.startswith("### turn granularity")
    assert "### Answers" in tables and "| full_history (reference) | 1.0000 |" in tables


def test_headline_files_gain_the_answer_figure(suite_run, tmp_path):
    written = write_headline([suite_run], tmp_path, answers=[answer_run()])
    names = [p.relative_to(tmp_path).as_posix() for p in written]
    assert names == ["synthetic/no_history.json", "synthetic/bm25.json", "synthetic/mdr.json",
                     "synthetic/full_history.json"]                          # oracle answered nothing: no file
    bm25 = json.loads((tmp_path / "synthetic" / "bm25.json").read_text())
    assert bm25["answers/context/locomo_llm/accuracy"] == 0.5 and "turn/recall_all@3" in bm25
    assert json.loads((tmp_path / "synthetic" / "full_history.json").read_text()) == {
        "answers/context/locomo_llm/accuracy": 1.0}
    assert json.loads((tmp_path / "synthetic" / "mdr.json").read_text()) == {}   # not run: dashes, never zeros


def test_answers_for_a_suite_not_reported_is_an_error(suite_run, tmp_path):
    other = answer_run()
    other.suite = "locomo"
    with pytest.raises(ConfigError, match="answers are given for suites \\['locomo'\\]"):
        write_report([suite_run], tmp_path, answers=[other])


def test_no_answers_keeps_the_retrieval_report(suite_run, tmp_path):
    out = write_report([suite_run], tmp_path)
    assert "### Answers" not in (tmp_path / "benchmark.md").read_text()
    assert not (tmp_path / "plots" / "synthetic" / "accuracy_vs_tokens.png").exists()
    assert out["answers"] == {} and all("answers/" not in k for v in out["metrics"]["synthetic"].values() for k in v)


def test_published_response_scores_match_the_geval_judges_and_the_note_shows():
    from pipelines.evaluate.answers.section import answers_markdown
    from pipelines.evaluate.answers.types import Verdict

    run = answer_run(reference={"judge": "gpt-4o-mini", "source": "G-Long Table 2", "note": "G-Eval 1-5.",
                                "rows": {"G-Long (paper)": {"geval_coherence": 4.87}}})
    run.task, run.judges = "response", ("geval_coherence",)
    for r in run.records:
        r.verdicts = {"geval_coherence": Verdict("geval_coherence", 4.0 if r.item.reader == "bm25" else None,
                                                 parsed=r.item.reader == "bm25", label="4")}
    md, _ = answers_markdown(run)
    published = _block(md, "#### Published responses (not comparable)")
    assert published[0] == "| system | geval_coherence |"
    assert _row(published, "bm25 (this run)")[1] == "4.0000"               # the judge's headline figure: score
    assert not any(r.startswith("| no_history (this run)") for r in published)   # nothing parsed: no figure
    assert "G-Eval 1-5." in md
    assert _row(_block(md, "#### Setting `context`"), "no_history")[1:3] == ["–", "3"]   # unparseable, not 0
    run.reference = {"judge": "gpt-4o-mini", "source": "mem0's judge", "note": "No published figure.", "rows": {}}
    md, _ = answers_markdown(run)
    assert "#### Published responses\n\nmem0's judge. No published figure." in md


def test_only_the_judges_headline_figure_is_ranked():
    from pipelines.evaluate.answers.section import answers_markdown
    from pipelines.evaluate.answers.types import Verdict

    run = answer_run()
    run.judges = ("realmem_qa",)
    for r in run.records:
        score = 3.0 if r.item.reader == "bm25" else 0.0
        r.verdicts = {"realmem_qa": Verdict("realmem_qa", score, label=f"{score:g}")}
    table = _block(answers_markdown(run)[0], "#### Setting `context`")
    assert table[0].startswith("| reader | realmem_qa/score | realmem_qa/hallucination_rate | "
                               "realmem_qa/perfect_rate |")
    assert _row(table, "bm25")[1] == "**3.0000**"
    assert _row(table, "no_history")[2] == "1.0000"          # the highest hallucination rate is not "best"
