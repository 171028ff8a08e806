"""The benchmark's DVC metrics: a handful of headline figures per suite and strategy, one small file each."""

import json

import pytest

from pipelines.evaluate.report import headline, write_headline
from pipelines.evaluate.suite import Suite
from pipelines.evaluate.suite_run import evaluate_suite

HEADLINE_KEYS = {"session/recall_all@3", "session/ndcg_any@3", "turn/recall_all@3", "turn/ndcg_any@3",
                 "context_tokens"}


@pytest.fixture
def run(episode, tmp_path):
    suite = Suite(name="synthetic", version=1, source="canonical", ks=(1, 3), budget_tokens=100,
                  strategies=("no_history", "long_context", "bm25", "mdr"))
    return evaluate_suite(suite, [episode], {"mdr": {"teacher": str(tmp_path / "no-teacher")}}, show_progress=False)


def test_headline_is_a_handful_of_the_full_tables_figures_at_the_headline_k(run):
    figures, metrics = headline(run), run.metrics()
    assert list(figures) == ["no_history", "long_context", "bm25", "mdr"]
    for strategy in ("no_history", "long_context", "bm25"):
        assert set(figures[strategy]) == HEADLINE_KEYS  # k = 3: the largest cut-off when 5 is not measured
        assert figures[strategy] == {k: pytest.approx(metrics[strategy][k], abs=5e-5) for k in HEADLINE_KEYS}
    assert figures["long_context"]["context_tokens"] == metrics["long_context"]["context_tokens"] > 0
    assert figures["mdr"] == {}  # not run (no trained teacher): a row of dashes in `dvc metrics show`, never zeros


def test_write_headline_writes_one_small_file_per_suite_and_strategy(run, tmp_path):
    written = write_headline([run], tmp_path / "headline")
    assert [p.relative_to(tmp_path / "headline").as_posix() for p in written] == [
        f"synthetic/{s}.json" for s in ("no_history", "long_context", "bm25", "mdr")]
    for path in written:
        assert json.loads(path.read_text()) == headline(run)[path.stem]
        assert path.stat().st_size < 300
