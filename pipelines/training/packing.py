"""Sequence packing for causal language models: several short examples in one row, no cross-example attention.

Krell, Kosec, Perez and Fitzgibbon (2021), "Efficient Sequence Packing without Cross-contamination:
Accelerating Large Language Models without Impacting Performance" (arXiv:2107.02027): batches of short,
variable-length examples spend much of their compute on padding; packing several examples into one row of
``L`` tokens removes it, and three changes keep every example independent, so that training on a packed
batch is training on the same examples unpacked:

- position ids restart at 0 for each example (the position embedding sees each example from its own start);
- the attention mask is block diagonal (and causal inside each block): for tokens i, j of one row,

      M[i, j] = 1  iff  seg(i) = seg(j)  and  j <= i                                       (block-diagonal causal)

  so no token attends to another example's tokens;
- each example's loss uses its own tokens only: its first token is no target (the label shift would else have
  the previous example's last token predict it), nor is the padding at the end of a row.

Here the rows are filled by first-fit decreasing, one micro-batch at a time (Krell et al.'s SPFHP and NNLSHP
pack a whole dataset from its length histogram; per micro-batch keeps the engine's data order, its resume and
its token-weighted averaging unchanged: a micro-batch holds the same examples packed or not). The mask is not
materialised here: transformers reads the segments from the position ids (``masking_utils.find_packed_sequence_indices``: a new
example wherever the position id does not grow by one) when neither a 2-D attention mask nor a KV cache is
given, the convention of its ``DataCollatorWithFlattening``, and builds the block-diagonal causal mask for SDPA /
eager attention (or calls flash-attention's variable-length kernels). A causal LM builds a cache by default
(``use_cache``), even in training, and with one every packed row would be one causal sequence, examples
attending to earlier ones: the forward must pass ``use_cache=False`` (:func:`causal_lm_loss` does; the test
of leakage checks it). Run eagerly, transformers reads back whether any row is packed (one host sync a
forward); the compiled step (the engine's CUDA default) traces that check away. Over the same target tokens,
with N of them,

    L_packed = -(1/N) sum_k sum_{t=1}^{n_k - 1} log p(x_{k,t} | x_{k,<t}) = L_padded                       (1)

and so are its gradients (tests/training/test_packing.py). Which training stages may pack: a decoder-only
language model over independent examples whose loss is a token mean (the benchmark's ``lm`` shape); the MDR
stages also read per-example prefix embeddings and pooled encoder features (see pipelines/mdr/tasks.py).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from pipelines.errors import ConfigError

IGNORE = -100  # label of a position that is no target (PyTorch's cross-entropy ignore_index)


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` in rows of at most ``capacity`` tokens: longest first, each into the first row
    with room (a new row when none has); within a row, in the order they were placed."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
        n = lengths[i]
        if n > capacity:
            raise ConfigError(f"an example of {n} tokens does not fit a packed row of TrainConfig.pack_length = "
                              f"{capacity} tokens: raise pack_length to at least the longest example.")
        row = next((r for r, room in enumerate(free) if room >= n), None)
        if row is None:
            rows.append([])
            free.append(capacity)
            row = len(rows) - 1
        rows[row].append(i)
        free[row] -= n
    return rows


def pack_causal_lm(seqs: Sequence[torch.Tensor], row_tokens: int, pad_id: int) -> dict[str, torch.Tensor]:
    """Packed rows of the 1-D id sequences ``seqs``: input_ids, position_ids and labels, each (R, row_tokens).

    Position ids restart at 0 for each example; a row's padding tail of ``pad_id`` tokens has position id 0
    throughout (each pad token a segment of its own, and no position beyond the model's table whatever
    ``row_tokens``); labels are the example's ids, IGNORE at its first token and on padding.
    """
    lengths = [int(s.numel()) for s in seqs]
    rows = first_fit_decreasing(lengths, row_tokens)
    ids = torch.full((len(rows), row_tokens), pad_id, dtype=torch.long)          # (R, L)
    labels = torch.full((len(rows), row_tokens), IGNORE, dtype=torch.long)      # (R, L)
    positions = torch.zeros((len(rows), row_tokens), dtype=torch.long)          # (R, L)
    for r, members in enumerate(rows):
        start = 0
        for i in members:
            n = lengths[i]
            ids[r, start:start + n] = seqs[i]
            labels[r, start + 1:start + n] = seqs[i][1:]
            positions[r, start:start + n] = torch.arange(n)
            start += n
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def pad_causal_lm(seqs: Sequence[torch.Tensor], pad_id: int) -> dict[str, torch.Tensor]:
    """The unpacked batch of the same sequences: input_ids, attention_mask and labels (B, T), right-padded
    (labels IGNORE on padding; the model's own shift leaves each row's first token without a target)."""
    length = max(int(s.numel()) for s in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)            # (B, T)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)                  # (B, T)
    labels = torch.full((len(seqs), length), IGNORE, dtype=torch.long)        # (B, T)
    for b, s in enumerate(seqs):
        ids[b, :s.numel()], mask[b, :s.numel()], labels[b, :s.numel()] = s, 1, s
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def causal_lm_pad_values(pad_id: int) -> dict[str, int]:
    """What pads each sequence tensor of :func:`pad_causal_lm`'s batch (``TrainConfig.length_buckets``)."""
    return {"input_ids": pad_id, "attention_mask": 0, "labels": IGNORE}


def causal_lm_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean next-token cross-entropy of a Hugging Face causal LM over the batch's targets (equation 1), padded
    or packed -> (loss, N); N = the labels after the model's one-token shift that are not IGNORE, a 0-d tensor
    on the batch's device (no host synchronisation). No KV cache: without one the model reads a packed batch's
    segments from its position ids (module docstring), and training needs none."""
    labels = batch["labels"]                                                    # (B, T)
    return model(**batch, use_cache=False).loss, (labels[:, 1:] != IGNORE).sum()
