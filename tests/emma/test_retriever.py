"""EMMA retriever: the triplet loss on cosine distance by hand, triplets from tags, a few steps that learn."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from pipelines.data.synthetic import SyntheticConfig, generate
from pipelines.emma import retriever as R
from pipelines.errors import ConfigError


def test_triplet_loss_by_hand():
    s = 1 / math.sqrt(2)
    anchor = torch.tensor([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    positive = torch.tensor([[0.0, 1.0], [3.0, 0.0], [0.0, 1.0]])
    negative = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 1.0]])
    # rows: d(a,p) - d(a,n) + 0.2 = 1 - 0 + 0.2 | 0 - 2 + 0.2 -> 0 | 1 - (1 - 1/sqrt 2) + 0.2
    expected = (1.2 + 0.0 + (1 - (1 - s) + 0.2)) / 3
    assert R.compute_loss(anchor, positive, negative).item() == pytest.approx(expected, abs=1e-6)
    assert R.compute_loss(anchor, positive, negative, margin=0.5).item() == pytest.approx(
        (1.5 + 0.0 + (s + 0.5)) / 3, abs=1e-6)
    # scale-invariant (cosine), unlike the Euclidean default of sentence-transformers' TripletLoss
    assert R.compute_loss(10 * anchor, positive, 7 * negative).item() == pytest.approx(expected, abs=1e-6)


def test_triplet_loss_gradient_pulls_positive_closer():
    anchor = torch.tensor([[1.0, 0.0]], requires_grad=True)
    positive = torch.tensor([[0.0, 1.0]])
    negative = torch.tensor([[1.0, 1.0]])
    R.compute_loss(anchor, positive, negative).backward()
    assert anchor.grad[0, 1].item() < 0   # a step against the gradient rotates the anchor towards +y


def test_cosine_distance_rows():
    d = R.cosine_distance(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([[-1.0, 0.0], [0.0, 5.0]]))
    assert d.tolist() == pytest.approx([2.0, 0.0])


def test_retrieval_examples_from_tags(episode):
    examples = R.retrieval_examples([episode], fallback_to_episode=False)
    assert [e.turn_id for e in examples] == ["E1:S2:T2", "E1:S2:T4", "E1:S3:T2"]
    s2t2, _, s3t2 = examples
    assert s2t2.context == "[Mia] nurse [Ana] coworker [NOW] second session [Ana] How is the new puppy doing? [Mia]"
    assert s2t2.positives == ("Mia adopted a puppy. (about Mia, from first session)",)
    assert s2t2.negatives == ("Leo is moving to Lisbon in May. (about Leo, from first session)",)
    # session 3 chooses among the four memories of sessions 1 and 2
    assert s3t2.positives == ("Leo is moving to Lisbon in May. (about Leo, from first session)",)
    assert len(s3t2.candidates) == 4 and len(s3t2.negatives) == 3


def test_triplet_items_cap_negatives(episode):
    examples = R.retrieval_examples([episode])
    items = R.triplet_items(examples, max_negatives=2, seed=1)
    assert [len(i.negatives) for i in items] == [1, 1, 2]
    assert R.triplet_items(examples, 2, 1) == items


@pytest.mark.parametrize("kwargs, message", [
    ({"margin": 5.0}, "cosine distance lies in"),
    ({"margin": 0.0}, "margin"),
    ({"pooling": "max"}, "pooling"),
    ({"memory_max_length": 0}, "memory_max_length"),
    ({"context_truncation": "middle"}, "context_truncation"),
    ({"negative_mining": "hard"}, "negative_mining"),
    ({"max_train_triplets": 0}, "max_train_triplets must be a positive integer or null"),
    ({"max_valid_triplets": True}, "max_valid_triplets"),
])
def test_config_checks(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        R.RetrieverConfig(**kwargs)


def test_paper_defaults():
    cfg = R.RetrieverConfig()
    assert (cfg.context_max_length, cfg.memory_max_length, cfg.margin, cfg.lr, cfg.batch_size, cfg.max_epochs) == (
        512, 32, 0.2, 1e-4, 90, 20)


@pytest.mark.parametrize("profile, model, pooling", [
    ("paper", "bert-base-uncased", "cls"),     # the authors' BERT-base with its [CLS] vector
    ("tiny", None, "mean"),                    # the shipped all-MiniLM-L6-v2, trained with mean pooling
])
def test_profiles_resolve_to_their_encoder_and_pooling(profile, model, pooling):
    from pipelines.config import resolve
    from pipelines.config_schema import build_config

    cfg = build_config(R.RetrieverConfig, resolve({"profile": profile})["emma"].get("retriever"))
    assert (cfg.model, cfg.pooling) == (model, pooling)


@pytest.fixture(scope="module")
def minilm():
    return R.DualEncoder.from_pretrained(R.RetrieverConfig())


def test_max_length_beyond_positions_is_rejected(minilm):
    with pytest.raises(ConfigError, match="exceeds the encoder's 512 position embeddings"):
        R.DualEncoder(minilm.context_encoder, minilm.memory_encoder, minilm.tokenizer,
                      R.RetrieverConfig(context_max_length=1024))


def test_encoders_truncate_at_their_max_length(minilm):
    long = " ".join(["word"] * 600)
    assert minilm.count_tokens([long], 32) == 32
    minilm.tokenizer.truncation_side = "right"
    ids = minilm.tokenizer([long + " lisbon"], truncation=True, max_length=512)["input_ids"][0]
    assert len(ids) == 512
    minilm.encode_context([long + " lisbon"])       # left truncation keeps the latest words
    kept = minilm.tokenizer([long + " lisbon"], truncation=True, max_length=512)["input_ids"][0]
    assert minilm.tokenizer.decode(kept[-2:-1]) == "lisbon"


def test_save_and_load_round_trip(tmp_path, minilm):
    minilm.save(tmp_path / "ret")
    again = R.DualEncoder.load(tmp_path / "ret")
    s1 = minilm.scores("[Mia] nurse [NOW] first session [Mia]", ["Mia adopted a puppy.", "Leo moved."])
    s2 = again.scores("[Mia] nurse [NOW] first session [Mia]", ["Mia adopted a puppy.", "Leo moved."])
    assert torch.allclose(s1, s2, atol=1e-5)
    assert again.config.memory_max_length == 32


def test_scoring_encodes_each_memory_once_longest_first_with_the_figures_of_unbatched_encoding(
        minilm, synthetic_episodes):
    tagged = R.retrieval_examples(synthetic_episodes, fallback_to_episode=False)
    questions = R.examples_of("questions", synthetic_episodes)
    assert tagged and questions
    alone = [R.evaluate_retriever(minilm, ex, batch_size=1) for ex in (tagged, questions)]   # no padding at all
    batches: list[list[str]] = []
    encode = minilm.encode_memory

    def counted(texts):
        batches.append(list(texts))
        return encode(texts)

    minilm.encode_memory = counted          # an instance attribute, dropped below
    try:
        vectors: dict = {}
        shared = [R.evaluate_retriever(minilm, ex, batch_size=8, memory_vectors=vectors) for ex in (tagged, questions)]
    finally:
        del minilm.encode_memory
    for a, b in zip(alone, shared):
        assert a == pytest.approx(b, abs=1e-9)
    encoded = [t for batch in batches for t in batch]
    candidates = {c for ex in (*tagged, *questions) for c in ex.candidates}
    assert sorted(encoded) == sorted(candidates) == sorted(vectors)          # each candidate once, over both calls
    assert all(len(b) <= 8 for b in batches)
    first_call = encoded[:len({c for ex in tagged for c in ex.candidates})]
    assert [len(t) for t in first_call] == sorted(map(len, first_call), reverse=True)      # longest first
    text, was_training = encoded[-1], minilm.training
    minilm.eval()                           # no dropout, as the scoring
    with torch.no_grad():
        assert torch.allclose(vectors[text], F.normalize(encode([text]), dim=-1)[0], atol=1e-5)
    minilm.train(was_training)


@pytest.fixture(scope="module")
def synthetic_episodes():
    # The mixed-session shape EMMA's memory tags come from (MiSC): no project thread over every session of these
    # short episodes and no distractor sessions, whose look-alike turns are there for the retrieval benchmark.
    return generate(SyntheticConfig(episodes=4, sessions=4, turns=8, partners=3, recall_rate=0.6, threads=0,
                                    decoy_rate=0.0))


@pytest.fixture(scope="module")
def synthetic_task(synthetic_episodes):
    return R.RetrieverTask(R.RetrieverConfig(lr=2e-4, batch_size=8), synthetic_episodes, synthetic_episodes)


def test_caps_keep_a_seeded_sample_of_the_triplets_in_their_order(synthetic_task, synthetic_episodes):
    everything = synthetic_task.train_dataset()
    assert synthetic_task.counts["triplets"] == len(everything) > 5
    cfg = R.RetrieverConfig(lr=2e-4, batch_size=8, max_train_triplets=5, max_valid_triplets=3)
    capped, again = (R.RetrieverTask(cfg, synthetic_episodes, synthetic_episodes) for _ in range(2))
    assert len(capped.train_dataset()) == 5 and len(capped.valid_dataset()) == 3
    assert capped.train_dataset() == again.train_dataset()                       # the same sample every run
    position = [everything.index(item) for item in capped.train_dataset()]
    assert position == sorted(position)                                        # kept in their order
    assert capped.counts == {**synthetic_task.counts, "triplets": 5}           # the examples, the triplets kept
    assert capped.train_examples == synthetic_task.train_examples              # examples as before: their triplets cut


def test_task_follows_the_engine_protocol(synthetic_task):
    from pipelines.training.config import TrainTask

    assert isinstance(synthetic_task, TrainTask)
    tc = R.RetrieverConfig().train_config("out")
    assert (tc.lr, tc.batch_size, tc.epochs, tc.early_stopping_patience) == (1e-4, 90, 20, 2)


def test_mine_negatives_by_hand():
    """Anchors along x; candidates at angles whose cosine distances are known exactly."""
    import math as m

    def unit(deg):
        return [m.cos(m.radians(deg)), m.sin(m.radians(deg))]

    pool = torch.tensor([unit(10), unit(50), unit(80), unit(120)])           # d to x: .015, .357, .826, 1.5
    anchor = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    positive = torch.tensor([unit(30), unit(30), unit(150)])                 # d(a, p): .134, .134, 1.866
    index = torch.tensor([[0, 1, 2, 3], [0, 2, -1, -1], [1, 3, -1, -1]])
    encode = lambda rows: pool[rows]                                         # noqa: E731
    assert R.mine_negatives(anchor, positive, index, "hardest", encode).tolist() == [0, 0, 1]
    # semi-hard: the closest negative farther than the positive; none farther (row 3): the farthest
    assert R.mine_negatives(anchor, positive, index, "semi-hard", encode).tolist() == [1, 2, 3]
    assert R.mine_negatives(anchor, positive, index[:, :1], "semi-hard", encode).tolist() == [0, 0, 1]


def test_collate_and_mining_in_the_forward_pass(synthetic_task, minilm):
    items = synthetic_task.train_dataset()[:3]
    batch = synthetic_task.collate(items)
    pool = sorted({n for i in items for n in i.negatives})
    assert batch["pool_ids"].shape[0] == len(pool)
    assert batch["negative_index"].shape == (3, max(len(i.negatives) for i in items))
    assert batch["memory_ids"].shape[1] <= 32
    minilm.eval()
    with torch.no_grad():
        for mining in ("hardest", "semi-hard"):
            anchor, positive, negative = minilm(**batch, mining=mining)
            for b, item in enumerate(items):
                c = minilm.encode_context([item.context])
                p = minilm.encode_memory([item.positive])
                d_an = R.cosine_distance(c, minilm.encode_memory(list(item.negatives)))
                d_ap = R.cosine_distance(c, p)
                if mining == "hardest":
                    want = int(d_an.argmin())
                else:
                    farther = [i for i in range(len(d_an)) if d_an[i] > d_ap[0]]
                    want = min(farther, key=lambda i: d_an[i]) if farther else int(d_an.argmax())
                expected = minilm.encode_memory([item.negatives[want]])[0]
                assert torch.allclose(negative[b], expected, atol=1e-4)
                assert torch.allclose(positive[b], p[0], atol=1e-4) and torch.allclose(anchor[b], c[0], atol=1e-4)
    loss, n_tokens = synthetic_task.compute_loss(minilm, batch)
    assert n_tokens == int(batch["context_mask"].sum()) and loss.item() >= 0


def _random_mining_task(synthetic_task, seed=2024):
    task = R.RetrieverTask.__new__(R.RetrieverTask)
    task.__dict__.update(synthetic_task.__dict__)
    task.config = R.RetrieverConfig(negative_mining="random", seed=seed)
    task._rng = random.Random(f"emma-retriever-random-negative:{seed}")
    return task


def test_random_negative_is_drawn_in_collate(synthetic_task, minilm):
    """With "random" mining: one negative per anchor, drawn (seeded) in collate from the anchor's own
    negatives; the pool holds exactly the drawn texts and the forward pass uses them without mining."""
    items = synthetic_task.train_dataset()[:6]
    assert all(len(i.negatives) >= 2 for i in items)
    task = _random_mining_task(synthetic_task)
    batch = task.collate(items)
    rng = random.Random("emma-retriever-random-negative:2024")                 # the draw, replayed
    drawn = [rng.choice(item.negatives) for item in items]
    pool = sorted(set(drawn))
    assert batch["negative_index"].shape == (6, 1)
    assert [pool[i] for i in batch["negative_index"][:, 0].tolist()] == drawn
    want = R.tokenize(synthetic_task.tokenizer, pool, task.config, "memory")
    assert torch.equal(batch["pool_ids"], want["input_ids"]) and torch.equal(batch["pool_mask"], want["attention_mask"])
    minilm.eval()
    with torch.no_grad():
        _, _, negative = minilm(**batch, mining="random")
        assert torch.allclose(negative, minilm.encode_memory(drawn), atol=1e-4)
    # later batches draw again (not always the first negative), the same way for the same seed
    draws = {tuple(task.collate(items[:1])["pool_ids"][0].tolist()) for _ in range(8)}
    assert len(draws) > 1
    again = _random_mining_task(synthetic_task)
    assert torch.equal(again.collate(items)["negative_index"], batch["negative_index"])


def test_a_few_steps_raise_recall_at_1(synthetic_task, minilm):
    """Two epochs of batches of 8 on a 4-episode synthetic fixture (27 tagged turns) lift recall@1 and MRR on
    the very episodes it trains on: the model can fit. Generalisation: the held-out test below."""
    import copy

    torch.manual_seed(0)
    task = synthetic_task
    model = copy.deepcopy(minilm)
    before = task.evaluate(model)
    data = task.train_dataset()
    assert before["queries"] == len(data) == 27
    batches = [data[i:i + 8] for i in range(0, len(data), 8)]
    opt = torch.optim.AdamW(model.parameters(), lr=task.config.lr)
    model.train()
    for step in range(2 * len(batches)):
        loss, n_tokens = task.compute_loss(model, task.collate(batches[step % len(batches)]))
        assert n_tokens > 0 and loss.item() >= 0
        loss.backward()
        opt.step()
        opt.zero_grad()
    after = task.evaluate(model)
    assert after["recall@1"] > before["recall@1"] + 0.2 and after["mrr"] > before["mrr"] + 0.1


def test_training_beats_the_untrained_encoder_on_held_out_test_episodes(tmp_path):
    """The engine trains the retriever on the train episodes (24 steps of 8 triplets); on the test episodes,
    which it never saw, its Recall@1 and MRR beat those of the untrained MiniLM (E.2's setting but for the
    short run: lr 2e-4 instead of 1e-4, 4 mined negatives, contexts cut to their latest 128 tokens)."""
    from pipelines.training.engine import train

    # No threads, no distractor sessions: the fixture above says why (with them the 24 steps measured 0.283 ->
    # 0.302 recall@1 on these test episodes, 0.288 -> 0.365 with seed 7: the look-alike turns make it noisier).
    episodes = generate(SyntheticConfig(episodes=30, sessions=4, turns=6, partners=3, recall_rate=0.8,
                                        train_fraction=0.6, valid_fraction=0.0, test_fraction=0.4, threads=0,
                                        decoy_rate=0.0))
    train_eps = [e for e in episodes if e.split == "train"]
    test_eps = [e for e in episodes if e.split == "test"]
    assert len(train_eps) == 18 and len(test_eps) == 12
    assert not {e.id for e in train_eps} & {e.id for e in test_eps}
    cfg = R.RetrieverConfig(lr=2e-4, batch_size=8, max_negatives=4, context_max_length=128)
    test_queries = R.retrieval_examples(test_eps, fallback_to_episode=False)
    before = R.evaluate_retriever(R.DualEncoder.from_pretrained(cfg), test_queries)
    task = R.RetrieverTask(cfg, train_eps, ())
    summary = train(task, cfg.train_config(tmp_path / "run", max_steps=24, schedule="constant", save_every=100,
                                           eval_every=100, keep_checkpoints=1), progress=False)
    assert summary.final_step == 24
    after = R.evaluate_retriever(R.DualEncoder.load(tmp_path / "run" / "final"), test_queries)
    assert before["queries"] == after["queries"] == 72
    assert after["recall@1"] > before["recall@1"] + 0.05, (before, after)     # measured: 0.181 -> 0.292
    assert after["mrr"] > before["mrr"] + 0.03, (before, after)               # measured: 0.437 -> 0.509
