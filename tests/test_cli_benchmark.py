"""``python -m pipelines benchmark``: the synthetic suite end to end, and its errors.

Every run is a subprocess with MNEMOS_ROOT pointing at a temporary project folder holding only a
copy of params.yaml, so nothing is written into the repository and no trained model is found
there (mdr must then be listed as missing, not dropped).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._cli import REPO, locomo_without_text, run_cli, tmp_project

LONGMEMEVAL = REPO / "tests" / "fixtures" / "longmemeval_official" / "longmemeval_tiny.json"
SMALL = ["--set", "synthetic.episodes=6", "--set", "synthetic.sessions=3"]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli_synthetic")
    root, out = tmp_project(tmp / "project"), tmp / "report"
    proc = run_cli(["benchmark", "--suite", "synthetic", "--strategies", "no_history,bm25,mdr", "--out", str(out),
                    "--cache-dir", str(tmp / "cache"), "--no-answers", "-q", *SMALL], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out, root


def test_last_stdout_line_is_metrics_json(synthetic_run):
    proc, out, _ = synthetic_run
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last == json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert list(last) == ["synthetic"]
    assert set(last["synthetic"]) == {"no_history", "bm25", "mdr"}
    assert set(last["synthetic"]["mdr"]) == {"missing"}  # mdr could not run: its reason, no metrics (never zeros)
    bm25, none = last["synthetic"]["bm25"], last["synthetic"]["no_history"]
    assert bm25["queries"] > 0 and bm25["queries"] == none["queries"]
    for key in ("turn/recall@5", "turn/recall_any@1", "turn/recall_all@10", "session/ndcg_any@3", "turn/mrr",
                "context_tokens"):
        assert key in bm25
    assert 0 < bm25["turn/recall@10"] <= 1 and none["turn/recall@10"] == 0.0  # no memory retrieves nothing
    assert all(0.0 <= v <= 1.0 for k, v in bm25.items() if "/" in k)


def test_missing_strategy_is_listed_not_dropped(synthetic_run):
    proc, out, _ = synthetic_run
    md = (out / "benchmark.md").read_text(encoding="utf-8")
    assert "## Suite `synthetic`" in md
    assert "(missing: mdr)" in md
    rows = [line for line in md.splitlines() if line.startswith("| mdr | missing:")]
    assert len(rows) == 2 and all("mdr_teacher" in r for r in rows)  # one row per granularity table, with why
    assert "| bm25 |" in md and "| no_history |" in md
    assert "strategy mdr is missing" in proc.stderr


def test_plots_and_queries_are_written(synthetic_run):
    _, out, root = synthetic_run
    folder = out / "plots" / "synthetic"
    for name in ("recall_at_k.png", "recall_by_session.png", "tokens_vs_recall.png"):
        data = (folder / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, name
    header = (folder / "recall_at_k.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[0] == "k" and {"turn/bm25", "turn/no_history", "session/bm25"} <= set(header)
    rows = [json.loads(line) for line in (out / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows and {r["strategy"] for r in rows} == {"no_history", "bm25"}
    assert sorted(p.name for p in root.iterdir()) == ["params.yaml"]  # nothing written into the project


def test_unknown_suite_names_the_shipped_ones(tmp_path):
    proc = run_cli(["benchmark", "--suite", "nope", "--out", str(tmp_path / "out"), "-q"], tmp_project(tmp_path / "p"))
    assert proc.returncode != 0
    assert "'nope' not found" in proc.stderr
    assert "shipped suites:" in proc.stderr and "synthetic" in proc.stderr and "longmemeval_s" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_suite_file_with_unknown_key(tmp_path):
    text = (REPO / "pipelines" / "evaluate" / "suites" / "synthetic.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "my_suite.yaml"
    bad.write_text(text + "\nbudget_tokns: 512\n", encoding="utf-8")
    proc = run_cli(["benchmark", "--suite", str(bad), "--out", str(tmp_path / "out"), "-q", *SMALL],
                   tmp_project(tmp_path / "p"))
    assert proc.returncode != 0
    assert str(bad) in proc.stderr and "budget_tokns" in proc.stderr and "unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_missing_data_path(tmp_path):
    missing = tmp_path / "nowhere" / "longmemeval_s.json"
    proc = run_cli(["benchmark", "--suite", "longmemeval_s", "--path", str(missing), "--strategies", "bm25",
                    "--out", str(tmp_path / "out"), "-q"], tmp_project(tmp_path / "p"))
    assert proc.returncode != 0
    assert str(missing) in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_bad_record_names_file_record_and_field(tmp_path):
    records = json.loads(LONGMEMEVAL.read_text(encoding="utf-8"))
    del records[1]["question"]  # item 1 is q2_hobbies
    bad = tmp_path / "longmemeval_bad.json"
    bad.write_text(json.dumps(records), encoding="utf-8")
    out = tmp_path / "out"
    proc = run_cli(["benchmark", "--suite", "longmemeval_s", "--path", str(bad), "--strategies", "bm25",
                    "--out", str(out), "-q"], tmp_project(tmp_path / "p"))
    assert proc.returncode != 0
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, proc.stderr[-2000:]
    assert str(bad) in error[0] and "q2_hobbies" in error[0] and "'question'" in error[0]
    assert "Traceback" not in proc.stderr
    assert not (out / "metrics.json").exists()
    assert proc.stdout.strip() == "" or not proc.stdout.strip().splitlines()[-1].startswith("{")


# --- issue 15: real published files load as published; broken input never passes silently -----------------------

LOADER_FIXTURES = REPO / "tests" / "data" / "loaders" / "fixtures"
LME_QUIRKS = LOADER_FIXTURES / "longmemeval_s_quirks.json"      # dates out of order, blank turns
REALMEM_QUIRKS = LOADER_FIXTURES / "realmem_quirks"             # current_time going back, blank turns
LOCOMO = LOADER_FIXTURES / "locomo10_fixture.json"


def _error(proc) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize("suite, path, dropped", [("longmemeval_s", LME_QUIRKS, {"blank_turn": 3}),
                                                  ("realmem", REALMEM_QUIRKS, {"blank_turn": 3})])
def test_published_quirks_ingest_and_benchmark(tmp_path, suite, path, dropped):
    """The issue: turn_text_nonempty (a blank turn) and timestamps_non_decreasing stopped both commands."""
    root = tmp_project(tmp_path / "p")
    source = "longmemeval" if suite.startswith("longmemeval") else suite
    proc = run_cli(["ingest", "--source", source, "--path", str(path), "--out", str(tmp_path / "data")], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["dropped"] == dropped and len(counts["examples"]["blank_turn"]) == 3
    if source == "longmemeval":
        assert counts["flagged"] == {"sessions_sorted_by_date": 2}
        assert [e.split(": ")[0] for e in counts["examples"]["sessions_sorted_by_date"]] == [
            f"{path} item 0 (qs_garden)", f"{path} item 2 (qs_cat_abs)"]
    else:
        assert counts["warnings"]["file_order_timestamps"] == 1 and counts["flagged"] == {}
    assert "great_expectations" not in proc.stderr  # its INFO chatter stays out unless -v
    html = (tmp_path / "data.validation.html").read_text(encoding="utf-8")
    assert "<h2>Normalised on load</h2>" in html and "<code>blank_turn</code>" in html

    out = tmp_path / "report"
    proc = run_cli(["benchmark", "--suite", suite, "--path", str(path), "--strategies", "bm25", "--out", str(out),
                    "--no-answers", "-q"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])[suite]["bm25"]["queries"] > 0


def test_ingest_refuses_a_load_that_lost_every_turn(tmp_path):
    bad, out = locomo_without_text(tmp_path), tmp_path / "out"
    proc = run_cli(["ingest", "--source", "locomo", "--path", str(bad), "--out", str(out)], tmp_project(tmp_path / "p"))
    assert proc.returncode != 0
    error = _error(proc)
    assert str(bad) in error and "rule 'load_loss_within_limit'" in error
    assert "every one of the 22 turns read was left out: bad_turn: 22" in error and "field 'text'" in error
    assert not out.exists() and proc.stdout.strip() == ""


def test_ingest_refuses_a_file_without_episodes(tmp_path):
    empty = tmp_path / "locomo10.json"
    empty.write_text("[]", encoding="utf-8")
    proc = run_cli(["ingest", "--source", "locomo", "--path", str(empty), "--out", str(tmp_path / "out")],
                   tmp_project(tmp_path / "p"))
    assert proc.returncode != 0 and "no episode was loaded" in _error(proc)
    assert not (tmp_path / "out").exists()


def test_dropped_turn_share_is_set_on_the_command_line(tmp_path):
    """The LoCoMo fixture drops 1 of its 22 turns (4.5%): under the default 5%, over a 1% limit."""
    root = tmp_project(tmp_path / "p")
    proc = run_cli(["ingest", "--source", "locomo", "--path", str(LOCOMO), "--out", str(tmp_path / "out"),
                    "--set", "ingest.max_dropped_turn_share=0.01"], root)
    assert proc.returncode != 0
    assert "1 of the 22 turns read (4.5%) were left out, more than ingest.max_dropped_turn_share = 0.01" in _error(proc)
    proc = run_cli(["benchmark", "--suite", "locomo", "--path", str(LOCOMO), "--strategies", "bm25",
                    "--out", str(tmp_path / "report"), "-q", "--set", "ingest.max_dropped_turn_share=0.01"], root)
    assert proc.returncode != 0 and "load_loss_within_limit" in _error(proc)
    assert not (tmp_path / "report" / "metrics.json").exists()


def test_benchmark_refuses_a_load_that_lost_every_turn(tmp_path):
    bad = locomo_without_text(tmp_path)
    proc = run_cli(["benchmark", "--suite", "locomo", "--path", str(bad), "--strategies", "bm25",
                    "--out", str(tmp_path / "out"), "-q"], tmp_project(tmp_path / "p"))
    assert proc.returncode != 0 and "every one of the 22 turns read was left out" in _error(proc)
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_benchmark_that_scores_no_query_fails(tmp_path):
    records = json.loads(LONGMEMEVAL.read_text(encoding="utf-8"))
    for record in records:  # every question an abstention question: nothing left to score
        record["question_id"] = record["question_id"].removesuffix("_abs") + "_abs"
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    proc = run_cli(["benchmark", "--suite", "longmemeval_s", "--path", str(path), "--strategies", "bm25",
                    "--out", str(tmp_path / "out"), "-q"], tmp_project(tmp_path / "p"))
    assert proc.returncode != 0
    error = _error(proc)
    assert "benchmark suite 'longmemeval_s' scores no query" in error and "abstention: 4" in error
    assert not (tmp_path / "out" / "metrics.json").exists()




@pytest.mark.slow
def test_the_synthetic_suite_is_answered_and_judged_by_the_local_default_model(tmp_path, smollm2_models,
                                                                              monkeypatch):
    """The issue's make-run path in small: SmolLM2-135M-Instruct (the shipped GGUF, converted once) answers 2
    questions per reader and judges them (LongMemEval's yes/no answer check), token F1 beside it, through the CLI."""
    monkeypatch.setenv("MNEMOS_LLM_MODELS", str(smollm2_models))
    root, out, cache = tmp_project(tmp_path / "p"), tmp_path / "report", tmp_path / "llm"
    proc = run_cli(["benchmark", "--suite", "synthetic", "--strategies", "bm25", "--out", str(out),
                    "--cache-dir", str(tmp_path / "embeddings"), "--llm-cache-dir", str(cache), "-q", *SMALL,
                    "--set", "llm.max_questions=2", "--set", "llm.reader.max_new_tokens=8",
                    "--set", "llm.full_history_tokens=64"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])["synthetic"]
    assert {"bm25", "full_history", "oracle"} <= set(metrics)
    rows = [json.loads(line) for line in (out / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    answers = [r for r in rows if r["kind"] == "answer"]
    readers = {}
    for r in answers:
        readers.setdefault(r["reader"], set()).add(r["query_id"])
        assert isinstance(r["answer"], str) and r["completion_tokens"] <= 8 and "token_f1" in r["verdicts"]
        assert "answer_check" in r["verdicts"]  # the model judged it (a verdict, or counted unparseable)
    assert set(readers) == {"bm25", "full_history", "oracle"} and any(r["answer"] for r in answers)
    assert len({frozenset(q) for q in readers.values()}) == 1 and len(next(iter(readers.values()))) == 2
    full = [r for r in answers if r["reader"] == "full_history"]
    assert full and all(0 < len(r["context"].split()) <= 64 for r in full)  # llm.full_history_tokens caps it
    assert "local:smollm2-135m-instruct" in (out / "benchmark.md").read_text(encoding="utf-8")
    assert any((cache / "responses").rglob("*.json"))  # the responses cache, where the option put it
    assert sorted(p.name for p in root.iterdir()) == ["params.yaml"]  # nothing written into the project
