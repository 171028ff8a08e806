"""Sequence packing (pipelines/training/packing.py): a packed batch is the padded batch's examples, the same loss
and gradients, and no token of a packed row sees another example."""

from __future__ import annotations

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.training.data import training_collate
from pipelines.training.engine import TrainConfig, train
from pipelines.training.packing import (IGNORE, causal_lm_loss, first_fit_decreasing, pack_causal_lm,
                                        pad_causal_lm)
from tests.training.tiny_task import TinyLMTask, VarLenLMTask

VOCAB = 31


def _model(seq_len: int = 12):
    torch.manual_seed(0)
    return TinyLMTask(seq_len=seq_len, dropout=0.0, vocab=VOCAB).build_model()


def _seqs(lengths, seed=0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=g) for n in lengths]


@pytest.mark.parametrize("lengths, capacity, rows", [
    ([5, 3, 4, 2], 8, [[0, 1], [2, 3]]),          # longest first: 5+3 | 4+2
    ([2, 2, 2, 2], 8, [[0, 1, 2, 3]]),
    ([8, 1, 7], 8, [[0], [2, 1]]),
    ([3], 3, [[0]]),
])
def test_first_fit_decreasing(lengths, capacity, rows):
    assert first_fit_decreasing(lengths, capacity) == rows


def test_an_example_longer_than_a_row_is_refused():
    with pytest.raises(ConfigError, match="pack_length"):
        first_fit_decreasing([4, 9], 8)


def test_packed_layout():
    seqs = [torch.tensor([11, 12, 13]), torch.tensor([21, 22]), torch.tensor([31, 32, 33, 34])]
    batch = pack_causal_lm(seqs, row_tokens=6, pad_id=0)
    assert batch["input_ids"].tolist() == [[31, 32, 33, 34, 21, 22], [11, 12, 13, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 0]]
    i = IGNORE
    assert batch["labels"].tolist() == [[i, 32, 33, 34, i, 22], [i, 12, 13, i, i, i]]


def test_a_packed_batch_has_the_loss_and_gradients_of_the_padded_one(one_thread):
    """Equation 1 of packing.py: the same target tokens, the same token-weighted mean, the same gradients."""
    model = _model()
    seqs = _seqs([12, 3, 7, 5, 9, 2, 4])
    padded, packed = pad_causal_lm(seqs, pad_id=0), pack_causal_lm(seqs, row_tokens=12, pad_id=0)
    assert packed["input_ids"].shape == (4, 12) and padded["input_ids"].shape == (7, 12)   # 42 tokens in 4 rows

    def loss_and_grads(batch):
        model.zero_grad()
        loss, n = causal_lm_loss(model, batch)
        loss.backward()
        return loss.detach(), n, {k: p.grad.clone() for k, p in model.named_parameters()}

    loss_a, n_a, grads_a = loss_and_grads(padded)
    loss_b, n_b, grads_b = loss_and_grads(packed)
    assert int(n_a) == int(n_b) == sum(s.numel() - 1 for s in seqs)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-6, msg=name)
    # the same, example by example: the token-weighted mean of each example's own loss
    per_example = [causal_lm_loss(model, pad_causal_lm([s], 0)) for s in seqs]
    mean = sum(loss * n for loss, n in per_example) / sum(n for _, n in per_example)
    torch.testing.assert_close(loss_b, mean.detach(), rtol=1e-5, atol=1e-6)


def test_no_token_attends_across_examples_in_a_packed_row(one_thread):
    """Changing example A's tokens changes A's logits but not B's, packed in the same row after A."""
    model = _model().eval()
    a, b = _seqs([6, 5], seed=1)
    other_a = (a + 7) % VOCAB

    def logits(first, row):
        batch = row([first, b])
        with torch.no_grad():
            out = model(input_ids=batch["input_ids"], position_ids=batch.get("position_ids"),
                        use_cache=False).logits                                 # (1, 12, V)
        return out[0, :6], out[0, 6:11]                                         # A's positions, B's positions

    packed = lambda items: pack_causal_lm(items, row_tokens=12, pad_id=0)      # noqa: E731  (A is longer: first)
    a_logits, b_logits = logits(a, packed)
    a_changed, b_unchanged = logits(other_a, packed)
    assert not torch.allclose(a_logits, a_changed)
    torch.testing.assert_close(b_unchanged, b_logits, rtol=0, atol=1e-6)
    # B's logits equal B's alone
    with torch.no_grad():
        alone = model(input_ids=b.unsqueeze(0), use_cache=False).logits[0]
    torch.testing.assert_close(b_logits, alone, rtol=1e-5, atol=1e-5)
    # without the restarting position ids (one plain causal row) B would see A: the test can fail
    plain = lambda items: {"input_ids": torch.cat([*items, torch.zeros(1, dtype=torch.long)]).unsqueeze(0)}  # noqa
    _, b_plain = logits(a, plain)
    _, b_plain_changed = logits(other_a, plain)
    assert not torch.allclose(b_plain, b_plain_changed)
    # nor with a KV cache (a causal LM's default): why causal_lm_loss passes use_cache=False
    with torch.no_grad():
        batch = pack_causal_lm([a, b], row_tokens=12, pad_id=0)
        cached = model(**{k: v for k, v in batch.items() if k != "labels"}).logits[0, 6:11]
    assert not torch.allclose(cached, b_logits)


def test_a_packed_run_trains_like_the_padded_one(tmp_path, one_thread):
    """The engine with TrainConfig.pack: the same micro-batches (same examples, fewer rows), the same loss curve
    and final weights as the padded run (no dropout)."""
    kw = dict(lr=3e-3, warmup_steps=2, max_steps=6, batch_size=8, save_every=100, early_stopping_patience=None,
              log_every=1)
    padded_task, packed_task = VarLenLMTask(n_valid=8, dropout=0.0), VarLenLMTask(n_valid=8, dropout=0.0)
    padded = train(padded_task, TrainConfig(output_dir=str(tmp_path / "padded"), **kw), progress=False)
    packed = train(packed_task, TrainConfig(output_dir=str(tmp_path / "packed"), pack=True, pack_length=12, **kw),
                   progress=False)
    assert [s for s, _ in packed.train_losses] == list(range(1, 7))
    for (_, a), (_, b) in zip(padded.train_losses, packed.train_losses):
        assert b == pytest.approx(a, rel=1e-4)
    assert packed.valid_losses[-1][1] == pytest.approx(padded.valid_losses[-1][1], rel=1e-4)
    for (name, p), q in zip(padded_task.model.named_parameters(), packed_task.model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=name)
    assert packed.tokens_per_s * packed.train_seconds == pytest.approx(padded.tokens_per_s * padded.train_seconds)
    rows = training_collate(packed_task, TrainConfig(output_dir=str(tmp_path), pack=True, pack_length=12))
    assert rows(packed_task.train_dataset()[:8])["input_ids"].shape[0] < 8    # fewer rows than examples


def test_pack_needs_a_task_that_packs(tmp_path):
    with pytest.raises(ConfigError, match="TrainConfig.pack is set but TinyLMTask has no pack_collate"):
        training_collate(TinyLMTask(), TrainConfig(output_dir=str(tmp_path), pack=True, pack_length=12))
