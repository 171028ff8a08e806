"""Deterministic epoch order and the sharding of validation over ranks."""

from __future__ import annotations

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.training.data import EpochPermutationSampler, dataset_length, validation_batches


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
