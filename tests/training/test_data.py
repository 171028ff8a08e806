"""Deterministic epoch order and the sharding of validation over ranks."""

from __future__ import annotations

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.training.data import (EpochLengthGroupedSampler, EpochPermutationSampler, dataset_length,
                                    training_sampler, validation_batches)


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
