"""Deterministic epoch order, the sharding of validation over ranks, and length buckets."""

from __future__ import annotations

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.training.data import (BucketPadding, EpochLengthGroupedSampler, EpochPermutationSampler,
                                    bucket_length, dataset_length, training_collate, training_sampler,
                                    validation_batches)


def test_epoch_order_is_a_function_of_seed_and_epoch():
    s = EpochPermutationSampler(10, seed=2022)
    first = list(s)
    assert sorted(first) == list(range(10))
    assert list(s) == first  # iterating again: same order
    s.set_epoch(1)
    second = list(s)
    assert second != first and sorted(second) == list(range(10))
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(2023)).tolist()
    assert second == expected
    torch.manual_seed(0)  # the global RNG plays no part
    assert list(EpochPermutationSampler(10, seed=2022)) == first


def _padded_share(order: list[int], lengths: list[int], batch_size: int) -> float:
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1 - sum(lengths) / padded


def test_length_grouped_order_is_a_function_of_seed_and_epoch_and_pads_little():
    from transformers.trainer_pt_utils import get_length_grouped_indices

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, 1024, (600,), generator=g).tolist()   # EMMA-like spread of lengths
    s = EpochLengthGroupedSampler(lengths, batch_size=8, seed=2022)
    first = list(s)
    assert sorted(first) == list(range(600)) and list(s) == first and len(s) == 600
    s.set_epoch(1)
    second = list(s)
    assert sorted(second) == list(range(600)) and second != first
    assert second == get_length_grouped_indices(lengths, 8, generator=torch.Generator().manual_seed(2023))
    random_order = list(EpochPermutationSampler(600, seed=2022))
    # random batches of 8 are about 45 % padding; grouped ones ~6 % (mega-batches of 18 batches here)
    assert _padded_share(random_order, lengths, 8) > 0.3
    assert _padded_share(first, lengths, 8) < 0.1


def test_training_sampler_needs_the_task_lengths():
    class NoLengths:
        pass

    class WrongCount:
        def train_lengths(self):
            return [3, 4]

    assert type(training_sampler(NoLengths(), 5, 2, 0, group_by_length=False)) is EpochPermutationSampler
    with pytest.raises(ConfigError, match="no train_lengths"):
        training_sampler(NoLengths(), 5, 2, 0, group_by_length=True)
    with pytest.raises(ConfigError, match="gave 2 lengths for 5"):
        training_sampler(WrongCount(), 5, 2, 0, group_by_length=True)


@pytest.mark.parametrize("n, bs, world, expected", [
    # rank 0 gets examples 0,2,4; rank 1 gets 1,3 and repeats a batch with weight 0 to keep forwards in step
    (5, 2, 2, [[([0, 2], True), ([4], True)], [([1, 3], True), ([1, 3], False)]]),
    (4, 2, 2, [[([0, 2], True)], [([1, 3], True)]]),
    (1, 4, 2, [[([0], True)], [([0], False)]]),
    (3, 8, 1, [[([0, 1, 2], True)]]),
])
def test_validation_batches(n, bs, world, expected):
    assert [validation_batches(n, bs, r, world) for r in range(world)] == expected


def test_every_example_counted_once_across_ranks():
    n, world = 23, 3
    counted = [i for r in range(world) for idx, counts in validation_batches(n, 4, r, world) if counts for i in idx]
    assert sorted(counted) == list(range(n))
    assert len({len(validation_batches(n, 4, r, world)) for r in range(world)}) == 1


def test_datasets_need_a_length():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield 1

    with pytest.raises(ConfigError, match="has no len"):
        dataset_length(Stream(), "training")
    assert dataset_length([1, 2], "validation") == 2


@pytest.mark.parametrize("length, buckets, expected", [
    (5, (8, 16), 8), (8, (8, 16), 8), (9, (8, 16), 16), (17, (8, 16), 32), (33, (8, 16), 48), (1, (1,), 1)])
def test_bucket_length(length, buckets, expected):
    assert bucket_length(length, buckets) == expected


def test_length_buckets_pad_the_sequence_tensors_and_keep_the_loss(tmp_path, one_thread):
    """TrainConfig.length_buckets: every sequence tensor the task names is right-padded to the bucket with its own
    value; the loss and the target count of the batch do not change."""
    import pickle

    from pipelines.training.config import TrainConfig
    from tests.training.tiny_task import VarLenLMTask

    task = VarLenLMTask(dropout=0.0)
    items = sorted(task.train_dataset(), key=len)[:4]                          # the shortest: T < 8
    plain = task.collate(items)
    collate = training_collate(task, TrainConfig(output_dir=str(tmp_path), length_buckets=[8, 12]))
    assert isinstance(collate, BucketPadding) and pickle.loads(pickle.dumps(collate)).buckets == (8, 12)
    padded = collate(items)
    t = plain["input_ids"].shape[1]
    assert t < 8 and {k: tuple(v.shape) for k, v in padded.items()} == {k: (4, 8) for k in plain}
    assert padded["input_ids"][:, t:].eq(0).all() and padded["attention_mask"][:, t:].eq(0).all()
    assert padded["labels"][:, t:].eq(-100).all()
    for key in plain:
        assert torch.equal(padded[key][:, :t], plain[key])
    model = task.build_model().eval()
    loss, n = task.compute_loss(model, plain)
    loss_padded, n_padded = task.compute_loss(model, padded)
    assert int(n) == int(n_padded)
    torch.testing.assert_close(loss_padded, loss, rtol=1e-5, atol=1e-6)


def test_length_buckets_need_a_task_naming_its_sequences(tmp_path):
    from pipelines.training.config import TrainConfig
    from tests.training.tiny_task import TinyLMTask

    with pytest.raises(ConfigError, match="length_buckets is set but TinyLMTask has no sequence_pad_values"):
        training_collate(TinyLMTask(), TrainConfig(output_dir=str(tmp_path), length_buckets=[16]))
