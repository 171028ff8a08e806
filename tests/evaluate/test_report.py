import csv
import json

import pytest

from pipelines.errors import ConfigError
from pipelines.evaluate.report import run_benchmark
from pipelines.evaluate.tables import headline_k, markdown_table

STRATEGIES = ["no_history", "long_context", "bm25"]
KEYS = ({f"{g}/{m}@{k}" for g in ("turn", "session") for m in ("recall", "recall_any", "recall_all", "ndcg_any")
         for k in (1, 3)} | {"turn/mrr", "session/mrr", "context_tokens", "queries", "latency_ms_p50"})


@pytest.fixture
def report(episode, tmp_path):
    out = run_benchmark([episode], STRATEGIES, ks=(3, 1), out_dir=tmp_path / "reports", profile="tiny",
                        budget_tokens=100, suite="synthetic",
                        strategy_settings={"long_context": {"include_dates": False}}, show_progress=False)
    return out, tmp_path / "reports"


def test_metrics_json_is_suite_strategy_metric(report):
    out, root = report
    metrics = json.loads((root / "metrics.json").read_text())
    assert metrics == out["metrics"]
    assert list(metrics) == ["synthetic"] and list(metrics["synthetic"]) == STRATEGIES
    for name in STRATEGIES:
        assert set(metrics["synthetic"][name]) == KEYS
    lc = metrics["synthetic"]["long_context"]
    assert lc["turn/recall@1"] == pytest.approx(1 / 3) and lc["turn/mrr"] == pytest.approx(2 / 3)
    assert lc["context_tokens"] == 28.0 and lc["queries"] == 3.0
    assert metrics["synthetic"]["no_history"]["session/recall@3"] == 0.0
    assert metrics["synthetic"]["no_history"]["context_tokens"] == 0.0


def test_what_each_memory_wrote_is_counted_per_session(report, episode):
    out, root = report
    turns, sessions = sum(len(s.turns) for s in episode.sessions), len(episode.sessions)
    written = out["memory"]["synthetic"]
    assert "no_history" not in written                     # empty by design
    assert written["bm25"] == {"items": turns, "sessions": sessions, "items_per_session": turns / sessions}
    md = (root / "benchmark.md").read_text()
    assert "### Memory written" in md and f"| bm25 | {turns} | {sessions} | {turns / sessions:.2f} |" in md


def test_benchmark_md_has_header_tables_and_bold_best(report):
    out, root = report
    md = (root / "benchmark.md").read_text()
    assert md.startswith("# Memory benchmark: synthetic\n")
    assert "- profile: `tiny`" in md and ", 1 episodes;" in md and "context budget: 100 tokens (regex tokens)" in md
    assert "## Suite `synthetic` (version 1)" in md
    assert "### turn granularity" in md and "### session granularity" in md and "### memory granularity" not in md
    assert "### Per category: recall@3" in md and "| strategy | multi-session | single-session | uncategorised |" in md
    session_rows = md.split("### session granularity")[1].split("\n\n")[1].splitlines()
    long_context = next(r for r in session_rows if r.startswith("| long_context |")).split(" | ")
    assert long_context[2] == "**1.0000**"  # session recall@3: every evidence session is in the top 3
    assert session_rows[0].endswith("| mrr | context_tokens | latency_ms_p50 | queries |")
    latency = out["metrics"]["synthetic"]["long_context"]["latency_ms_p50"]
    assert latency > 0 and long_context[-3:] == ["28.0", f"{latency:.3f}", "3 |"]   # tokens, median ms, queries
    no_history = next(r for r in session_rows if r.startswith("| no_history |"))
    assert "**" not in no_history
    assert "| no_history | 3 | 1 | 3 | 1 | 1 |" in md  # scored, abstention, not earlier, no evidence, no granularity
    tables = out["markdown"]["synthetic"]
    assert tables.startswith("### turn granularity") and "| long_context |" in tables
    assert out["counts"]["synthetic"]["bm25"] == {"scored": 3, "abstention": 1, "evidence_not_earlier": 3, "no_evidence": 1,
                                     "no_scored_granularity": 1}


def test_plots_and_dvc_csv(report):
    out, root = report
    plots = root / "plots" / "synthetic"
    for name in ("recall_at_k.png", "recall_by_session.png", "tokens_vs_recall.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.reader(open(plots / "recall_at_k.csv")))
    assert rows[0] == ["k", "turn/no_history", "turn/long_context", "turn/bm25",
                       "session/no_history", "session/long_context", "session/bm25"]
    assert [r[0] for r in rows[1:]] == ["1", "3"]
    assert rows[1][2] == "0.333333" and rows[2][2] == "1.000000" and rows[2][1] == "0.000000"
    assert out["plots"] == [plots / "recall_at_k.png", plots / "recall_by_session.png",
                            plots / "tokens_vs_recall.png", plots / "recall_at_k.csv"]
    assert out["dvc_plot"]["x"] == "k" and out["dvc_plot"]["y"] == rows[0][1:]
    assert sum(1 for _ in open(root / "queries.jsonl")) == 3 * (2 * 3)  # strategies x (queries x granularities)


def test_missing_model_is_listed_not_dropped(episode, tmp_path):
    out = run_benchmark([episode], ["bm25", "mdr"], ks=(1,), out_dir=tmp_path,
                        strategy_settings={"mdr": {"teacher": str(tmp_path / "no-teacher")}}, show_progress=False)
    assert list(out["metrics"]["synthetic"]) == ["bm25", "mdr"]
    assert out["metrics"]["synthetic"]["mdr"] == {"missing": out["missing"]["synthetic"]["mdr"]}  # never zeros
    assert "run stage 'mdr_teacher' first" in out["missing"]["synthetic"]["mdr"]
    md = (tmp_path / "benchmark.md").read_text()
    assert "(missing: mdr)" in md and "| mdr | missing: strategy 'mdr'" in md


def test_markdown_table_bolds_the_best_of_each_ranked_column():
    rows = {"a": {"r@1": 0.5, "mrr": 0.25, "context_tokens": 10.0}, "b": {"r@1": 0.5, "mrr": 0.75, "context_tokens": 3.0},
            "c": {"r@1": 0.125, "mrr": 0.75}}
    assert markdown_table(rows, ["r@1", "mrr", "context_tokens"], ranked=["r@1", "mrr"]) == "\n".join([
        "| strategy | r@1 | mrr | context_tokens |",
        "| --- | ---: | ---: | ---: |",
        "| a | **0.5000** | 0.2500 | 10.0 |",
        "| b | **0.5000** | **0.7500** | 3.0 |",
        "| c | 0.1250 | **0.7500** | – |"])
    tie = markdown_table({"a": {"x": 1.0}, "b": {"x": 1.0}}, ["x"])
    assert "**" not in tie  # no best when every value ties


def test_headline_k():
    assert headline_k((1, 3, 5, 10)) == 5 and headline_k((1, 3)) == 3


@pytest.mark.parametrize("strategies, settings, match", [
    ([], None, "empty"), (["bm25", "bm25"], None, "repeats"), (["bm25"], {"dense": {}}, "does not run"),
])
def test_bad_benchmark_settings(episode, tmp_path, strategies, settings, match):
    with pytest.raises(ConfigError, match=match):
        run_benchmark([episode], strategies, out_dir=tmp_path, strategy_settings=settings, show_progress=False)


def test_an_oracle_is_labelled_explained_and_never_bold(episode, tmp_path, monkeypatch):
    """egocentric_gold reads the dataset's own memories: its rows say "(oracle)", never take the bold, a note
    says why; metrics.json keeps the strategy's name."""
    import torch

    from pipelines.memory.egocentric import strategy as ego

    class Words:  # a bag-of-words retriever over the fixture's words (test double)
        vocab = ("red", "kite", "blue", "boat", "green", "tea", "grey", "cat", "pink", "rose", "gold", "coin",
                 "flies", "sails", "steeps", "blooms", "dries", "ana")

        def _vec(self, texts):
            return torch.tensor([[float(w in t.lower()) for w in self.vocab] for t in texts])

        encode_memory = encode_context = _vec

    monkeypatch.setattr(ego, "_load_retriever", lambda ref, device: Words())
    episode = episode.model_copy(update={"sessions": [s.model_copy(update={"partner": "Bo"}) for s in episode.sessions]})
    run_benchmark([episode], ["no_history", "bm25", "egocentric_gold"], ks=(1, 3), out_dir=tmp_path,
                  strategy_settings={"egocentric_gold": {"retriever": "minilm"}}, show_progress=False)
    md = (tmp_path / "benchmark.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| egocentric_gold")]
    assert rows and all(line.startswith("| egocentric_gold (oracle) |") and "**" not in line for line in rows)
    session = md.split("### session granularity")[1].split("\n\n")[1]
    assert "**" in next(r for r in session.splitlines() if r.startswith("| bm25 |"))   # the real systems compete
    assert ("Oracle rows (labelled, never bold: they read what a real system has to produce): `egocentric_gold`: "
            "the dataset's own (gold) memories and links") in md
    assert "### memory granularity" in md             # scored at memory level (the dataset's memory ids)
    assert "egocentric_gold" in json.loads((tmp_path / "metrics.json").read_text())["synthetic"]


def test_sections_are_composed_into_the_report_and_every_file_is_written_whole(episode, tmp_path):
    """The benchmark stage's MDR / G-Long / EMMA sections go into the one write of benchmark.md and
    metrics.json (they were appended by reading the report back); no temporary file is left."""
    from pipelines.evaluate.report import write_report
    from pipelines.evaluate.suite import Suite
    from pipelines.evaluate.suite_run import evaluate_suite

    suite = Suite(name="synthetic", version=1, source="canonical", strategies=("bm25",), ks=(1, 3),
                  budget_tokens=100)
    run = evaluate_suite(suite, [episode], show_progress=False)
    out_dir = tmp_path / "reports"
    for _ in range(2):  # a second run over the first one's files replaces them
        out = write_report([run], out_dir, sections=["## EMMA\n\nresponses\n", "## Extra\n"],
                           section_metrics={"synthetic": {"emma": {"generation/bleu-1": 3.0}}})
    md = (out_dir / "benchmark.md").read_text(encoding="utf-8")
    assert md.count("## EMMA") == 1 and md.endswith("\n## EMMA\n\nresponses\n\n## Extra\n")
    assert md.index("## Suite `synthetic`") < md.index("## EMMA")
    metrics = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
    assert metrics == out["metrics"] and list(metrics["synthetic"]) == ["bm25", "emma"]
    assert metrics["synthetic"]["emma"] == {"generation/bleu-1": 3.0}
    assert not [p for p in out_dir.rglob("*") if p.name.endswith(".tmp")]


def test_the_ablation_names_the_steps_that_lose_and_which_are_trained():
    from pipelines.evaluate.report import ablation_losses

    metrics = ["session/recall_all@5", "session/ndcg_any@10"]
    rows = [{"strategy": "bm25", "session/recall_all@5": 0.5, "gain session/recall_all@5": None,
             "session/ndcg_any@10": 0.6, "gain session/ndcg_any@10": None},
            {"strategy": "fusion_threads", "gain session/recall_all@5": 0.1, "gain session/ndcg_any@10": 0.05},
            {"strategy": "trained_dense", "missing": "not trained"},
            {"strategy": "rerank", "gain session/recall_all@5": -0.0125, "gain session/ndcg_any@10": 0.01}]
    assert ablation_losses(rows, metrics) == [
        "`rerank` (a trained model) below `fusion_threads` on session/recall_all@5 (-0.0125)"]
    rows[1]["gain session/ndcg_any@10"] = -0.02
    assert ablation_losses(rows, metrics)[0] == "`fusion_threads` below `bm25` on session/ndcg_any@10 (-0.0200)"
