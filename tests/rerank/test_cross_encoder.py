"""The cross-encoder re-ranker: LCE groups with BM25 hard negatives, the loss, save / load, the re-ranking figures."""

from __future__ import annotations

import math

import pytest
import torch

from pipelines.emma.retriever import RetrievalExample, question_examples
from pipelines.errors import ConfigError
from pipelines.rerank import cross_encoder as X
from tests.emma.conftest import mia_episode
from tests.rerank._tiny_reranker import save_tiny_cross_encoder
from pipelines.data.schema import Query

TURNS = ("Mia: Hi Leo, I adopted a puppy last week.", "Leo: Congratulations! I am moving to Lisbon in May.",
         "Mia: Lisbon sounds lovely, I will miss you.", "Ana: How is the new puppy doing?",
         "Mia: Biscuit is great, and my brother is moving to Lisbon soon.")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_tiny_cross_encoder(tmp_path_factory.mktemp("ce"))


def _example(positives=(TURNS[1],)):
    return RetrievalExample("Where is Leo moving?", tuple(positives), TURNS, "E1", "q1")


@pytest.mark.parametrize("bad", [{"group_size": 1}, {"pairs": ["memory_tags"]}, {"max_length": 0}, {"lr": 0},
                                 {"max_train_examples": 0}, {"negative_depth": True}, {"patience": -1},
                                 {"max_valid_examples": 0}, {"max_eval_examples": True}, {"max_eval_examples": "all"}])
def test_bad_settings_are_named(bad):
    with pytest.raises(ConfigError, match="rerank.model"):
        X.CrossEncoderConfig(**bad)


def test_groups_take_bm25s_best_non_evidence_turns_as_hard_negatives():
    cfg = X.CrossEncoderConfig(negative_depth=2)
    [group] = X.groups([_example()], cfg)
    assert group.question == "Where is Leo moving?" and group.positive == TURNS[1]
    # BM25 ranks the other turns sharing "leo" or "moving" first (the shorter "Hi Leo" above the longer "moving to
    # Lisbon"); the evidence is never a negative
    assert group.negatives == (TURNS[0], TURNS[4])
    two = X.groups([_example((TURNS[1], TURNS[4]))], cfg)
    assert [g.positive for g in two] == [TURNS[1], TURNS[4]] and all(TURNS[4] not in g.negatives for g in two)
    assert X.groups([RetrievalExample("q", TURNS[:1], TURNS[:1], "E1", "q")], cfg) == []   # no negative: no group


def test_question_examples_are_the_training_pairs():
    episode = mia_episode()
    episode.queries = [Query(id="q1", session_id="E1:S3", question="What did Mia adopt?",
                             evidence_turns=["E1:S1:T1"])]
    [ex] = question_examples([episode])
    assert ex.positives == ("Mia: Hi Leo, I adopted a puppy last week.",)
    assert [g.positive for g in X.groups([ex], X.CrossEncoderConfig())] == list(ex.positives)


def test_collate_flattens_groups_and_the_loss_is_the_positives_cross_entropy(saved):
    model = X.CrossEncoder.load(saved)
    task = X.RerankerTask.__new__(X.RerankerTask)           # collate and loss need only the config and tokenizer
    task.config, task.tokenizer = X.CrossEncoderConfig(group_size=3, max_length=64), model.tokenizer
    items = [("Where is Leo moving?", (TURNS[1], TURNS[4], TURNS[2])), ("What did Mia adopt?", (TURNS[0], TURNS[3]))]
    batch = task.collate(items)
    assert batch["input_ids"].shape[0] == 5                                   # every pair once
    assert batch["group_rows"].tolist() == [[0, 1, 2], [3, 4, -1]]            # -1 pads the smaller group
    loss, tokens = task.compute_loss(model, batch)
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "group_rows"})
    want = (-torch.log_softmax(logits[:3], 0)[0] - torch.log_softmax(logits[3:], 0)[0]) / 2
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    assert int(tokens) == int(batch["attention_mask"].sum())


def test_sampled_groups_are_deterministic_and_hold_the_positive_first(saved):
    task = X.RerankerTask.__new__(X.RerankerTask)
    task.config = X.CrossEncoderConfig(group_size=3, seed=7)
    group = X.Group("Where is Leo moving?", TURNS[1], (TURNS[4], TURNS[2], TURNS[0], TURNS[3]))
    [(q, texts)] = task._sampled([group], "rerank-train")
    assert q == group.question and texts[0] == TURNS[1] and len(texts) == 3 and set(texts[1:]) <= set(group.negatives)
    assert task._sampled([group], "rerank-train") == [(q, texts)]


def test_save_load_round_trip_scores_the_same(saved, tmp_path):
    model = X.CrossEncoder.load(saved)
    scores = model.score("Where is Leo moving?", list(TURNS))
    assert scores.shape == (5,) and all(math.isfinite(float(s)) for s in scores)
    again = X.CrossEncoder.load(model.save(tmp_path / "again")).score("Where is Leo moving?", list(TURNS))
    assert scores.tolist() == pytest.approx(again.tolist(), abs=1e-6)
    assert model.score("q", []).shape == (0,)
    with pytest.raises(ConfigError, match="not a saved re-ranker"):
        X.CrossEncoder.load(tmp_path)


def test_from_pretrained_gives_the_encoder_a_one_logit_head_and_refuses_a_missing_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="cannot load re-ranker checkpoint"):
        X.CrossEncoder.from_pretrained(X.CrossEncoderConfig(model=str(tmp_path / "nothing")))
    with pytest.raises(ConfigError, match="position embeddings"):
        X.CrossEncoder.from_pretrained(X.CrossEncoderConfig(model=str(save_tiny_cross_encoder(tmp_path) / "model"),
                                                            max_length=4096))


class _Oracle:
    """Scores a text 1 when it is in ``good``: a re-ranker that always finds the evidence."""

    def __init__(self, good):
        self.good = set(good)

    def score(self, question, texts):
        import numpy as np

        return np.asarray([1.0 if t in self.good else 0.0 for t in texts])


def test_evaluate_reports_the_rerankers_and_bm25s_figures():
    ex = RetrievalExample("Where is Leo moving?", (TURNS[4],), TURNS, "E1", "q1")   # BM25 ranks it 3rd
    out = X.evaluate_reranker(_Oracle({TURNS[4]}), [ex], depth=3)
    assert out == pytest.approx({"recall@1": 1.0, "mrr": 1.0, "bm25_recall@1": 0.0, "bm25_mrr": 1 / 3,
                                 "in_depth": 1.0, "queries": 1.0})
    out = X.evaluate_reranker(_Oracle({TURNS[4]}), [ex], depth=2)                   # not in BM25's top 2: 0 in both
    assert out["recall@1"] == out["bm25_mrr"] == out["in_depth"] == 0.0 and out["queries"] == 1.0


def test_the_classifier_head_of_a_trained_cross_encoder_checkpoint_is_kept(tmp_path):
    """head: classifier reads a checkpoint's own sequence-classification head (no head.safetensors); head: mean saves
    its linear head beside the encoder; an unknown head is named."""
    mean = X.CrossEncoder.load(save_tiny_cross_encoder(tmp_path / "mean"))
    assert (tmp_path / "mean" / "saved" / X.HEAD_FILE).exists() and mean.config.head == "mean"
    saved = save_tiny_cross_encoder(tmp_path / "cls", head="classifier")
    assert not (saved / X.HEAD_FILE).exists()
    model = X.CrossEncoder.load(saved)
    assert model.config.head == "classifier" and not hasattr(model, "head")
    scores = model.score("Where is Leo moving?", list(TURNS))
    again = X.CrossEncoder.from_pretrained(X.CrossEncoderConfig(model=str(saved / "model"), head="classifier",
                                                                max_length=96))
    assert scores.tolist() == pytest.approx(again.score("Where is Leo moving?", list(TURNS)).tolist(), abs=1e-6)
    with pytest.raises(ConfigError, match="rerank.model.head"):
        X.CrossEncoderConfig(head="cls")


def test_the_reranker_learns_from_pairs_mined_without_labels():
    """thread_pairs: a user's sessions with no question and no evidence still give training groups (the later trip
    sessions' first turns against the trip session they continue)."""
    from pipelines.memory.conformance import thread_episode

    episode = thread_episode()
    assert episode.queries == []
    task = X.RerankerTask(X.CrossEncoderConfig(pairs=("thread_pairs",)), [episode])
    assert task.counts["thread_pairs"] == 2 and task.counts["groups"] == 2
    question, pairs = task.train_dataset()[0]
    assert question == episode.sessions[2].turns[0].text and pairs[0] == "User: " + episode.sessions[0].turns[0].text


def test_a_cap_on_groups_ranks_only_the_questions_it_draws_and_draws_what_it_drew_from_all(monkeypatch):
    """rerank.model.max_train_examples: the groups drawn are those a draw from every group gives (the same seed, so
    the same model), but BM25 ranks only the drawn questions' candidates (most of the cost on long histories)."""
    import random

    from pipelines.data.synthetic import SyntheticConfig, generate

    train = [e for e in generate(SyntheticConfig(episodes=6, sessions=3, turns=6, partners=2, queries_per_session=2))
             if e.split == "train"]
    cfg = X.CrossEncoderConfig(max_train_examples=5)
    examples = [ex for kind in cfg.pairs for ex in X.examples_of(kind, train)]
    every = X.groups(examples, cfg)
    assert len(examples) > 5 and len(every) > 5
    assert [(examples[i].context, p) for i, p in X.group_slots(examples)] == [(g.question, g.positive) for g in every]
    ranked = []
    real = X.first_stage_order
    monkeypatch.setattr(X, "first_stage_order", lambda question, candidates: ranked.append(question)
                        or real(question, candidates))
    task = X.RerankerTask(cfg, train)
    assert task.train_groups == random.Random(f"rerank-subset:{cfg.seed}").sample(every, 5)
    assert 1 <= len(ranked) <= 5 and len(set(ranked)) == len(ranked)       # each drawn question ranked once
