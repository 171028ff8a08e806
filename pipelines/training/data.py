"""Deterministic data order and exact sharded validation.

Training order: epoch e visits the training set in the permutation drawn from
``torch.Generator().manual_seed(seed + e)``: a pure function of (seed, epoch), so every
rank agrees on it, a resumed run sees the same batches as an uninterrupted one (the
engine skips the micro-batches already consumed), and nothing depends on the global RNG.
accelerate shards the batches of that order across ranks. With ``TrainConfig.group_by_length``
the order is Hugging Face's length-grouped one (``get_length_grouped_indices``: the epoch's
permutation cut into mega-batches of up to 50 micro-batches, each sorted by length), drawn
from the same per-epoch generator: micro-batches of similar lengths pad little, and the
order stays a pure function of (seed, epoch, lengths).

Collation of a training micro-batch (:func:`training_collate`): the task's ``collate``; with
``TrainConfig.length_buckets`` its sequence tensors padded up to the next bucket (static shapes for a compiled
step: a graph per bucket, not per length; CUDA graphs record one per shape); with ``TrainConfig.pack`` the
task's packed rows (packing.py). Validation always uses the task's own ``collate``.

Validation: rank r of W evaluates examples r, r+W, r+2W, ... (no duplicates); ranks with
one batch fewer repeat a batch with weight 0 so that every rank runs the same number of
forward passes (ZeRO-3 gathers parameters collectively in each forward).
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Iterator, Mapping, Sequence, Sized

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Sampler

from pipelines.errors import ConfigError


class EpochPermutationSampler(Sampler[int]):
    """Indices 0..n-1 in the permutation seeded by ``seed + epoch`` (``set_epoch`` picks the epoch)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())


class EpochLengthGroupedSampler(EpochPermutationSampler):
    """Length-grouped order of epoch ``seed + epoch``: consecutive runs of ``batch_size`` indices
    have similar ``lengths`` (one per training example, e.g. source + target tokens)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int):
        super().__init__(len(lengths), seed)
        self.lengths, self.batch_size = [int(n) for n in lengths], batch_size

    def __iter__(self) -> Iterator[int]:
        from transformers.trainer_pt_utils import get_length_grouped_indices

        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=g))


def training_sampler(task, n: int, batch_size: int, seed: int, group_by_length: bool) -> EpochPermutationSampler:
    """The sampler of the training set: random per epoch, or length-grouped from ``task.train_lengths()``."""
    if not group_by_length:
        return EpochPermutationSampler(n, seed)
    if not hasattr(task, "train_lengths"):
        raise ConfigError(f"TrainConfig.group_by_length is set but {type(task).__name__} has no train_lengths(): "
                          "the task must give the length of each training example.")
    lengths = list(task.train_lengths())
    if len(lengths) != n:
        raise ConfigError(f"{type(task).__name__}.train_lengths() gave {len(lengths)} lengths for {n} training "
                          "examples.")
    return EpochLengthGroupedSampler(lengths, batch_size, seed)


def bucket_length(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= ``length``; beyond the largest bucket, the next multiple of it."""
    fit = next((b for b in buckets if b >= length), None)
    return fit if fit is not None else math.ceil(length / buckets[-1]) * buckets[-1]


class BucketPadding:
    """A collate function: ``collate``'s batch with the last dimension of each tensor named in ``pad_values``
    (the task's sequence tensors: ids, masks, labels) padded with its value up to :func:`bucket_length`.

    Right padding is what the tasks' own collates do (ids with the pad id, masks with 0, labels with IGNORE),
    so the loss and the target count do not change, only the shapes (test_data.py, tests/mdr/test_tasks.py).
    A class rather than a closure, so that DataLoader workers can pickle it.
    """

    def __init__(self, collate: Callable, pad_values: Mapping[str, int], buckets: Sequence[int]):
        self.collate, self.pad_values, self.buckets = collate, dict(pad_values), tuple(buckets)

    def __call__(self, items: list) -> dict[str, torch.Tensor]:
        batch = self.collate(items)
        for key, value in self.pad_values.items():
            if key in batch:
                t = batch[key]                                                   # (..., T)
                extra = bucket_length(t.shape[-1], self.buckets) - t.shape[-1]
                if extra:
                    batch[key] = F.pad(t, (0, extra), value=value)               # (..., bucket)
        return batch


def training_collate(task, config) -> Callable:
    """The collate function of the training loader under ``config`` (a TrainConfig): the task's own, bucket
    padded (``length_buckets``: ``task.sequence_pad_values()``) or packed (``pack``: ``task.pack_collate``)."""
    if config.pack:
        if not hasattr(task, "pack_collate"):
            raise ConfigError(f"TrainConfig.pack is set but {type(task).__name__} has no pack_collate(): only a "
                              "task whose examples are independent causal-LM sequences can be packed.")
        return functools.partial(task.pack_collate, row_tokens=config.pack_length)
    if config.length_buckets is not None:
        if not hasattr(task, "sequence_pad_values"):
            raise ConfigError(f"TrainConfig.length_buckets is set but {type(task).__name__} has no "
                              "sequence_pad_values(): the task must name its sequence tensors and their pad values.")
        return BucketPadding(task.collate, task.sequence_pad_values(), config.length_buckets)
    return task.collate


def dataset_length(dataset: Dataset, what: str) -> int:
    """len(dataset), or a ConfigError saying why the engine needs it."""
    if not isinstance(dataset, Sized):
        raise ConfigError(f"the {what} dataset {type(dataset).__name__} has no len(): the engine needs a "
                          "map-style dataset for a deterministic, resumable order.")
    n = len(dataset)
    if what == "training" and n == 0:
        raise ConfigError("the training dataset is empty: nothing to train on.")
    return n


def validation_batches(n: int, batch_size: int, rank: int, world: int) -> list[tuple[list[int], bool]]:
    """This rank's validation batches as (indices, counts); every rank gets the same number of batches.

    A batch with ``counts=False`` only keeps the forward passes of all ranks in step; its
    loss is not added. With fewer examples than ranks, an idle rank re-reads example 0.
    """
    mine = list(range(rank, n, world))
    per_rank = math.ceil(math.ceil(n / world) / batch_size) if n else 0
    batches = [(mine[i:i + batch_size], True) for i in range(0, len(mine), batch_size)]
    filler = batches[0][0] if batches else [0]
    while len(batches) < per_rank:
        batches.append((filler, False))
    return batches


@torch.no_grad()
def evaluate(model, dataset: Dataset, collate: Callable, compute_loss: Callable, *, batch_size: int,
             accelerator) -> float | None:
    """Token-weighted mean validation loss over all ranks: sum_b loss_b * n_b / sum_b n_b."""
    from accelerate.utils import send_to_device

    n = len(dataset)
    if n == 0:
        return None
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # (sum loss*tokens, sum tokens)
    for indices, counts in validation_batches(n, batch_size, accelerator.process_index, accelerator.num_processes):
        batch = send_to_device(collate([dataset[i] for i in indices]), accelerator.device)
        loss, tokens = compute_loss(model, batch)  # the prepared model autocasts itself under bf16/fp16
        if counts:  # sums stay on the device: no synchronisation per batch
            total[0] += loss.detach().double() * tokens
            total[1] += tokens
    total = accelerator.reduce(total, reduction="sum")
    model.train(was_training)
    return float(total[0] / total[1]) if total[1] > 0 else None
