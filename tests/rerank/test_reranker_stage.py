"""The reranker stage: LCE training on question -> evidence pairs, one model per fold of a LoCoMo-like dataset, each
listing what it saw, the re-ranking figures against BM25's order; bad settings named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.data.schema import write_episodes
from pipelines.data.synthetic import SyntheticConfig, generate, write_splits
from pipelines.errors import ConfigError
from pipelines.rerank import stage as S
from pipelines.runner import StageContext
from pipelines.stages import STAGES
from tests.emma._tiny_retriever import write_tiny_encoder
from tests.emma.test_retriever_folds import CONVERSATIONS, _conversation  # the same LoCoMo-like conversations

SYNTHETIC = SyntheticConfig(episodes=6, sessions=3, turns=6, partners=2, queries_per_session=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("tiny") / "encoder")


@pytest.fixture
def ctx(tmp_path, tiny):
    write_splits(generate(SYNTHETIC), tmp_path / "data/canonical/synthetic")
    write_episodes(tmp_path / "data/canonical/locomo/test.jsonl", [_conversation(e) for e in CONVERSATIONS])
    rerank = {"sources": ["synthetic", "locomo"],
              "model": {"model": str(tiny), "max_length": 64, "batch_size": 4, "group_size": 3, "max_epochs": 1},
              "train": {"max_steps": 2, "eval_every": 1000, "save_every": 1000, "early_stopping_patience": None},
              "folds": {"k": 2, "sources": ["locomo"], "valid_share": 0.5}}
    return StageContext(stage=STAGES["reranker"], config={"profile": "tiny", "seed": 2022, "rerank": rerank},
                        root=tmp_path)


def test_the_stage_is_registered_with_its_params_inputs_and_model():
    stage = STAGES["reranker"]
    assert stage.params == ("rerank",) and stage.outputs == (S.RERANKER,)
    assert "benchmark" in [s.name for s in STAGES.values() if S.RERANKER in s.inputs]


def test_folds_never_train_on_their_held_out_conversations_and_report_against_bm25(ctx):
    result = S.reranker(ctx)
    root = ctx.root / S.RERANKER
    manifest = json.loads((root / "folds" / "folds.json").read_text())
    held = [set(f["held_out"]) for f in manifest["folds"]]
    assert held[0] | held[1] == set(CONVERSATIONS) and not held[0] & held[1]
    synthetic_train = {e.id for e in generate(SYNTHETIC) if e.split == "train"}
    for i in range(2):
        saw = set(json.loads((root / "folds" / f"fold-{i}" / "trained_on.json").read_text())["episodes"])
        assert not saw & held[i] and synthetic_train <= saw
        assert (root / "folds" / f"fold-{i}" / "reranker.json").exists()
        assert result.metrics[f"folds/fold-{i}/trained/queries"] == 4.0          # 2 conversations x 2 questions
        assert f"folds/fold-{i}/untrained/queries" not in result.metrics         # a random head is no baseline
        for key in ("recall@1", "mrr", "bm25_recall@1", "bm25_mrr"):
            assert 0.0 <= result.metrics[f"folds/fold-{i}/trained/{key}"] <= 1.0
    assert result.metrics["folds/trained/queries"] == 8.0
    assert "folds/trained/bm25_mrr" in result.metrics
    main = set(json.loads((root / "trained_on.json").read_text())["episodes"])
    assert set(CONVERSATIONS) <= main
    assert result.metadata["test_episodes_scored"] == 1                          # synthetic's test split
    assert json.loads((root / S.RERANKER_EVAL).read_text())["trained"]["queries"] > 0
    assert result.metadata["examples_groups"] > 0
    assert not [p for p in (ctx.root / "models" / ".runs").iterdir()]            # run folders cleaned
    [check] = result.checks                                                      # said in failed_checks when it loses
    test = json.loads((root / S.RERANKER_EVAL).read_text())["trained"]
    assert check.name == S.BEATS and not check.blocking and check.metadata["measured_on"] == "the test split"
    assert check.passed == (test["recall@1"] >= test["bm25_recall@1"])


def test_each_saved_model_is_scored_as_the_benchmarks_rerank_strategy_runs_it(ctx, monkeypatch):
    import torch

    from pipelines.rerank import cross_encoder as CE

    real, loaded = CE.load_scorer, []

    def recording(path, *args, **kwargs):      # the model's digest (its run folder is gone after the stage)
        loaded.append((CE.saved_digest(Path(path)), real(path, *args, **kwargs)))
        return loaded[-1][1]

    monkeypatch.setattr(CE, "load_scorer", recording)
    result = S.reranker(ctx)
    assert len(loaded) == 3                          # the two fold models, then the main one on synthetic's test split
    runtime = CE.CrossEncoder if torch.cuda.is_available() else CE.RuntimeCrossEncoder   # auto: its export on a CPU
    assert all(isinstance(scorer, runtime) for _, scorer in loaded)
    digests = [CE.saved_digest(ctx.root / S.RERANKER / "folds" / f"fold-{i}") for i in range(2)]
    assert digests + [CE.saved_digest(ctx.root / S.RERANKER)] == [digest for digest, _ in loaded]
    assert result.metrics["folds/trained/queries"] == 8.0


def test_held_out_scoring_and_validation_are_capped(ctx):
    ctx.config["rerank"]["model"].update(max_eval_examples=1, max_valid_examples=1)
    result = S.reranker(ctx)
    for i in range(2):
        assert result.metrics[f"folds/fold-{i}/trained/queries"] == 1.0          # 4 held-out questions, 1 scored
    assert result.metadata["test_trained_queries"] == 1.0


def test_a_model_below_bm25s_order_fails_its_check_and_says_what_it_learnt_from():
    lost = S.beats_first_stage({"test_trained_recall@1": 0.32, "test_trained_bm25_recall@1": 0.37,
                                "folds_trained_recall@1": 0.9, "folds_trained_bm25_recall@1": 0.1}, ["synthetic"])
    assert not lost.passed and not lost.blocking and lost.metadata["measured_on"] == "the test split"
    assert "32.0%" in lost.examples[0] and "37.0%" in lost.examples[0] and "learnt from synthetic" in lost.examples[0]
    folds = S.beats_first_stage({"folds_trained_recall@1": 0.5, "folds_trained_bm25_recall@1": 0.4}, ["locomo"])
    assert folds.passed and folds.metadata["measured_on"] == "the episodes each fold model held out"
    unmeasured = S.beats_first_stage({"test_scores": "none"}, ["locomo"])
    assert unmeasured.passed and unmeasured.metadata == {"measured_on": "none"}


def test_without_folds_it_trains_one_model_and_the_strategy_scores_with_it(ctx):
    from pipelines.memory import build_strategy

    del ctx.config["rerank"]["folds"]
    ctx.config["rerank"]["sources"] = ["synthetic"]
    S.reranker(ctx)
    strategy = build_strategy("rerank", reranker_path=str(ctx.root / S.RERANKER), depth=5)
    episode = next(e for e in generate(SYNTHETIC) if e.split == "test")
    for session in episode.sessions:
        strategy.observe(episode, session)
    assert len(strategy.retrieve(episode.queries[0], 3)) == 3 and strategy.rerank_ms


@pytest.mark.parametrize("change, message", [
    ({"folds": {"k": 2, "sources": ["realmem"]}}, "not in rerank.sources"),
    ({"folds": {"k": 1, "sources": ["locomo"]}}, "rerank.folds.k must be an integer >= 2"),
    ({"folds": {"k": 2, "sources": ["locomo"], "shuffle": True}}, "rerank.folds has no setting"),
    ({"model": {"group_size": 1}}, "rerank.model.group_size"),
    ({"model": {"depth": 3}}, "CrossEncoderConfig has no setting"),
])
def test_bad_settings_are_named_before_training(ctx, change, message):
    ctx.config["rerank"].update(change)
    with pytest.raises(ConfigError, match=message):
        S.reranker(ctx)
