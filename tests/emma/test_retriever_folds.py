"""The emma_retriever stage with ``emma.retriever_folds``: one model per fold of a one-split dataset (LoCoMo-like),
manifests of who trained on what, fold metrics, and finished folds kept across an interrupted run."""

from __future__ import annotations

import json

import pytest

from pipelines.data.schema import Query, write_episodes
from pipelines.data.synthetic import SyntheticConfig, generate, write_splits
from pipelines.emma import stage as S
from pipelines.runner import StageContext
from pipelines.stages import STAGES
from tests.emma.conftest import mia_episode
from tests.emma._tiny_retriever import write_tiny_encoder

CONVERSATIONS = [f"conv-{n}" for n in range(4)]


def _conversation(eid: str):
    """Mia's episode as a LoCoMo-like conversation: published in the test split, with two questions."""
    ep = mia_episode().model_copy(update={"id": eid, "source": "locomo"})
    ep.queries = [Query(id=f"{eid}:q1", question="Where is Leo moving?", evidence_turns=["E1:S1:T2"]),
                  Query(id=f"{eid}:q2", session_id="E1:S3", question="What did Mia adopt?",
                        evidence_turns=["E1:S1:T1"])]
    return ep


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("tiny") / "encoder")


@pytest.fixture
def ctx(tmp_path, tiny):
    write_splits(generate(SyntheticConfig(episodes=6, sessions=3, turns=6, partners=2, queries_per_session=1)),
                 tmp_path / "data/canonical/synthetic")
    write_episodes(tmp_path / "data/canonical/locomo/test.jsonl", [_conversation(e) for e in CONVERSATIONS])
    emma = {"sources": ["synthetic", "locomo"],
            "retriever": {"model": str(tiny), "pairs": ["memory_tags", "questions"], "context_max_length": 128,
                          "memory_max_length": 64, "batch_size": 4, "max_negatives": 4},
            "retriever_train": {"max_steps": 2, "eval_every": 1000, "save_every": 1000,
                                "early_stopping_patience": None},
            "retriever_folds": {"k": 2, "sources": ["locomo"], "valid_share": 0.5}}
    return StageContext(stage=STAGES["emma_retriever"], config={"profile": "tiny", "seed": 2022, "emma": emma},
                        root=tmp_path)


def _ids(path):
    return set(json.loads(path.read_text())["episodes"])


def test_folds_train_on_the_other_folds_and_list_what_they_saw(ctx, monkeypatch):
    import pipelines.training.stage as T

    calls = []
    real = T.train_stage

    def counted(ctx_, task, knobs, out_rel, folder=None):
        calls.append(out_rel)
        if out_rel == S.RETRIEVER and len(calls) == 3:      # the first run dies while training the main model
            raise KeyboardInterrupt
        return real(ctx_, task, knobs, out_rel, folder=folder)

    monkeypatch.setattr(T, "train_stage", counted)
    with pytest.raises(KeyboardInterrupt):
        S.emma_retriever(ctx)
    assert len(calls) == 3
    result = S.emma_retriever(ctx)               # started again: the two finished folds are not trained again
    assert calls[3:] == [S.RETRIEVER]

    root = ctx.root / S.RETRIEVER
    manifest = json.loads((root / "folds" / "folds.json").read_text())
    assert manifest["k"] == 2 and manifest["sources"] == ["locomo"]
    held = [set(f["held_out"]) for f in manifest["folds"]]
    assert [len(h) for h in held] == [2, 2] and held[0] | held[1] == set(CONVERSATIONS)
    synthetic_train = {e.id for e in generate(SyntheticConfig(episodes=6, sessions=3, turns=6, partners=2,
                                                              queries_per_session=1)) if e.split == "train"}
    for i, fold in enumerate(manifest["folds"]):
        saw = _ids(root / "folds" / f"fold-{i}" / "trained_on.json")
        assert not saw & held[i]                                    # never its own held-out conversations
        assert saw == set(fold["trained_on"]) | set(fold["valid"])
        assert synthetic_train <= saw and set(CONVERSATIONS) - held[i] <= saw
        assert (root / "folds" / f"fold-{i}" / "retriever.json").exists()
        for which in ("trained", "untrained"):
            assert result.metrics[f"folds/fold-{i}/{which}/questions/queries"] == 4.0   # 2 conversations x 2
            assert 0.0 <= result.metrics[f"folds/fold-{i}/{which}/questions/recall@1"] <= 1.0
    assert result.metrics["folds/trained/questions/queries"] == 8.0
    # the main model trained on every conversation: the benchmark scores them with the fold models
    assert set(CONVERSATIONS) <= _ids(root / "trained_on.json")
    assert result.metadata["test_episodes_trained_on"] == 0 and result.metadata["test_episodes_scored"] == 1
    assert "test/trained/questions/recall@1" in result.metrics
    assert not [p for p in (ctx.root / "models" / ".runs").iterdir()]   # run folders and staged folds cleaned
    [check] = result.checks                     # a model below the encoder it starts from is said to lose
    test = json.loads((root / S.RETRIEVER_EVAL).read_text())
    kinds = [k.removesuffix("recall@1") for k in test["trained"] if k.endswith("recall@1")]
    assert check.name == "beats_untrained" and not check.blocking and check.metadata["measured_on"] == "the test split"
    assert check.passed == all(test["trained"][f"{k}recall@1"] >= test["untrained"][f"{k}recall@1"] for k in kinds)


def test_folds_need_question_pairs_and_sources_of_emma(ctx):
    from pipelines.errors import ConfigError

    ctx.config["emma"]["retriever"]["pairs"] = ["memory_tags"]
    with pytest.raises(ConfigError, match="add 'questions'"):
        S.emma_retriever(ctx)
    ctx.config["emma"]["retriever"]["pairs"] = ["questions"]
    ctx.config["emma"]["retriever_folds"]["sources"] = ["realmem"]
    with pytest.raises(ConfigError, match="not in emma.sources"):
        S.emma_retriever(ctx)


def test_held_out_scores_name_only_what_was_measured(tiny):
    """Episodes without a tagged turn (a user's RealMem files) give no tagged-turn figures, never a recall of 0 over
    no query; their questions are scored."""
    from pipelines.emma.retriever import DualEncoder, RetrieverConfig

    cfg = RetrieverConfig(model=str(tiny), pairs=("questions",), context_max_length=128, memory_max_length=64)
    tagged = _conversation("conv-t")
    untagged = tagged.model_copy(update={"sessions": [
        s.model_copy(update={"turns": [t.model_copy(update={"memory_tags": []}) for t in s.turns]})
        for s in tagged.sessions]})
    model = DualEncoder.from_pretrained(cfg)
    assert {"recall@1", "mrr", "queries", "questions/recall@1"} <= set(S._scores(model, cfg, [tagged]))
    scores = S._scores(model, cfg, [untagged])
    assert sorted(scores) == ["questions/mrr", "questions/queries", "questions/recall@1"]
    assert scores["questions/queries"] == 2.0


def test_of_two_histories_the_main_model_trains_on_both_and_each_fold_model_on_the_other(ctx):
    """A user's own two files (two RealMem personas: one episode each): the main model learns from both, not from
    the one a fold model also learns from alone (it kept the other for validation: a copy of that fold model)."""
    from pipelines.data.folds import Folds
    from pipelines.training.folds import fold_plan

    write_episodes(ctx.root / "data/canonical/locomo/test.jsonl", [_conversation(e) for e in CONVERSATIONS[:2]])
    ctx.config["emma"]["sources"] = ["locomo"]
    plan = fold_plan(ctx, "emma", Folds(k=2, sources=("locomo",)))
    assert sorted(e.id for e in plan["train"]) == CONVERSATIONS[:2] and plan["valid"] == []
    for fold in plan["folds"]:
        assert [e.id for e in fold["train"]] == [e.id for e in plan["train"] if e not in fold["held_out"]]
        assert len(fold["train"]) == 1 and fold["valid"] == []
