"""The frozen teacher's sentence features, computed once per distinct text for stage B of MDR.

Seed 001, equations 4-6 and the target of equation 13: the student stage reads

    Q_TE = Encoder_teacher(Q),  P_TE = Encoder_teacher(P),  H_TE(i) = Encoder_teacher(H(i)),  R_TE = Encoder_teacher(R)

with the teacher frozen and in eval mode (no dropout), so each feature is a fixed function of the
token ids of its text. Computed inside the training step, the teacher reads every history round
of every example in every epoch: at paper size 32 rounds of 128 tokens per example, most of the
stage's FLOPs, although round i of a dialogue recurs in the history of each later example of
that dialogue. :class:`TeacherFeatureTable` computes each distinct sequence once before training
(in length-sorted chunks, under the same autocast as the engine: bf16 on CUDA, fp32 on CPU) and
:func:`attach_rows` records each item's rows once and :func:`attach_features` gives a collated
batch its features, (B, H) for Q, P, R and (N_h, H) for the
flattened history rounds; ``MDRStudent.forward`` then skips its teacher passes. The features are
the ones the step would compute (the GPT-2 encoder is causal and the pooling masked, so padding
does not change them; tests/mdr/test_teacher_table.py checks losses and gradients against the
online path).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn

from pipelines.mdr.features import sentence_features
from pipelines.mdr.text import pad
from pipelines.training.launch import process_device


class TeacherFeatureTable:
    """Encoder_teacher(x) (H,) for every distinct id sequence x given, as rows of one (U, H) tensor."""

    def __init__(self, encoder: nn.Module, sequences: Iterable[Sequence[int]], pad_id: int, *,
                 batch_size: int = 64, progress: bool = True):
        self.pad_id = pad_id
        self.index: dict[tuple[int, ...], int] = {}
        for seq in sequences:
            self.index.setdefault(tuple(seq), len(self.index))
        keys = sorted(self.index, key=len)                                       # little padding per chunk
        hidden = encoder.get_input_embeddings().embedding_dim
        self.features = torch.zeros((len(keys), hidden), dtype=torch.float32)  # (U, H)
        device = process_device()
        home = next(encoder.parameters()).device
        was_training = encoder.training
        encoder.to(device).eval()
        bar = None
        if progress and keys:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(keys), desc="teacher features", unit="text", dynamic_ncols=True)
        try:
            with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
                for start in range(0, len(keys), batch_size):
                    chunk = keys[start:start + batch_size]
                    ids, mask = pad(chunk, pad_id)                               # (n, L)
                    feats = sentence_features(encoder, ids.to(device), mask.to(device))  # (n, H)
                    rows = torch.tensor([self.index[k] for k in chunk])
                    self.features[rows] = feats.float().cpu()
                    if bar is not None:
                        bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
            encoder.to(home).train(was_training)

    def __len__(self) -> int:
        return len(self.index)

    def rows(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Row of each sequence (N,) in ``features``; KeyError for one the table was not built with."""
        return torch.tensor([self.index[tuple(s)] for s in sequences], dtype=torch.long)


def item_sequences(item: dict, pad_id: int) -> list[Sequence[int]]:
    """What the teacher reads of one student item, in this order: Q, P (a lone pad id when absent,
    as collate pads it), every history round, and R when present."""
    seqs = [item["q"], item["p"] or [pad_id], *item["h"]]
    return seqs + [item["r"]] if "r" in item else seqs


def attach_rows(item: dict, table: TeacherFeatureTable) -> dict:
    """Store in ``item`` (key ``te_rows``) the table rows of its :func:`item_sequences`, looked up
    once here rather than at every batch of every epoch."""
    item["te_rows"] = table.rows(item_sequences(item, table.pad_id))          # (2 + R + [1],)
    return item


def attach_features(batch: dict[str, torch.Tensor], items: Sequence[dict], table: TeacherFeatureTable
                    ) -> dict[str, torch.Tensor]:
    """Add q_te, p_te (B, H), h_te (N_h, H) in h_ids' row order and r_te (B, H) when R is batched,
    from the items' ``te_rows`` (:func:`attach_rows`)."""
    rows = [it["te_rows"] for it in items]
    batch["q_te"] = table.features[torch.stack([r[0] for r in rows])]         # (B, H)
    batch["p_te"] = table.features[torch.stack([r[1] for r in rows])]         # (B, H)
    h_rows = torch.cat([r[2:2 + len(it["h"])] for r, it in zip(rows, items)])  # (N_h,)
    batch["h_te"] = table.features[h_rows]                                    # (N_h, H)
    if "r_ids" in batch:
        batch["r_te"] = table.features[torch.stack([r[-1] for r in rows])]    # (B, H)
    return batch
