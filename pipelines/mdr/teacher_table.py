"""The frozen teacher's sentence features and history selection, computed once for stage B of MDR.

Seed 001, equations 4-7 and the target of equation 13: the student stage reads

    Q_TE = Encoder_teacher(Q),  P_TE = Encoder_teacher(P),  H_TE(i) = Encoder_teacher(H(i)),  R_TE = Encoder_teacher(R)
    index = argmax_i cos(Q_TE, H_TE(i)),  H_P = Concat(H(index), Q(T-1), R(T-1)),  H_PTE = Encoder_teacher(H_P)

with the teacher frozen and in eval mode (no dropout), so each feature is a fixed function of the
token ids of its text, and so is each example's selection and H_P. Computed inside the training
step, the teacher reads every history round of every example in every epoch: at paper size 32
rounds of 128 tokens per example, most of the stage's FLOPs, although round i of a dialogue
recurs in the history of each later example of that dialogue. Before training instead:

1. :class:`TeacherFeatureTable` encodes each distinct sequence once (Q, P, every round, R;
   :func:`item_sequences`), in length-sorted chunks under the same autocast as the engine (bf16
   on CUDA, fp32 on CPU);
2. :func:`attach_partial_history` selects each item's round from those features
   (``student.select_history``) and stores its H_P ids (``student.partial_history_ids``);
3. :meth:`TeacherFeatureTable.add` encodes each distinct H_P, and :func:`attach_rows` records
   each item's rows of Q, P, H_P and R (:func:`feature_sequences`) once.

:func:`attach_features` then gives a collated batch q_te, p_te, hp_te and r_te (B, H), and the
step runs the student encoder and the Memory Net only. The features are the ones the step would
compute (the GPT-2 encoder is causal and the pooling masked, so padding does not change them;
tests/mdr/test_teacher_table.py checks losses and gradients against the online path).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn

from pipelines.mdr.features import sentence_features
from pipelines.mdr.student import partial_history_ids, select_history
from pipelines.mdr.text import pad
from pipelines.training.launch import process_device


class TeacherFeatureTable:
    """Encoder_teacher(x) (H,) for every distinct id sequence x given, as rows of one (U, H) tensor."""

    def __init__(self, encoder: nn.Module, sequences: Iterable[Sequence[int]], pad_id: int, *,
                 batch_size: int = 64, progress: bool = True):
        self.pad_id, self.batch_size, self.progress = pad_id, batch_size, progress
        self.index: dict[tuple[int, ...], int] = {}
        hidden = encoder.get_input_embeddings().embedding_dim
        self.features = torch.zeros((0, hidden), dtype=torch.float32)          # (U, H)
        self.add(encoder, sequences)

    def add(self, encoder: nn.Module, sequences: Iterable[Sequence[int]], desc: str = "teacher features") -> int:
        """Encode the distinct sequences not yet in the table and append their rows; returns how many."""
        new: dict[tuple[int, ...], int] = {}
        for seq in sequences:
            key = tuple(seq)
            if key not in self.index and key not in new:
                new[key] = len(self.index) + len(new)
        keys = sorted(new, key=len)                                              # little padding per chunk
        block = torch.zeros((len(keys), self.features.shape[1]), dtype=torch.float32)  # (n, H)
        device = process_device()
        home = next(encoder.parameters()).device
        was_training = encoder.training
        encoder.to(device).eval()
        bar = None
        if self.progress and keys:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(keys), desc=desc, unit="text", dynamic_ncols=True)
        try:
            with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
                for start in range(0, len(keys), self.batch_size):
                    chunk = keys[start:start + self.batch_size]
                    ids, mask = pad(chunk, self.pad_id)                          # (n, L)
                    feats = sentence_features(encoder, ids.to(device), mask.to(device))  # (n, H)
                    rows = torch.tensor([new[k] - len(self.index) for k in chunk])
                    block[rows] = feats.float().cpu()
                    if bar is not None:
                        bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
            encoder.to(home).train(was_training)
        self.features = torch.cat([self.features, block])
        self.index.update(new)
        return len(keys)

    def __len__(self) -> int:
        return len(self.index)

    def rows(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Row of each sequence (N,) in ``features``; KeyError for one the table was not built with."""
        return torch.tensor([self.index[tuple(s)] for s in sequences], dtype=torch.long)


def item_sequences(item: dict, pad_id: int) -> list[Sequence[int]]:
    """What the teacher reads of one student item for equations 4-7 and 13, in this order: Q, P (a
    lone pad id when absent, as collate pads it), every history round, and R when present."""
    seqs = [item["q"], item["p"] or [pad_id], *item["h"]]
    return seqs + [item["r"]] if "r" in item else seqs


def feature_sequences(item: dict, pad_id: int) -> list[Sequence[int]]:
    """The texts whose teacher features the step reads, in this order: Q, P, H_P (each a lone pad
    id when absent, as collate pads them) and R when present; needs ``item["hp"]``."""
    seqs = [item["q"], item["p"] or [pad_id], item["hp"] or [pad_id]]
    return seqs + [item["r"]] if "r" in item else seqs


def attach_partial_history(items: Sequence[dict], table: TeacherFeatureTable, max_tokens: int, *,
                           chunk: int = 256) -> None:
    """Equation 7 once per item from the table's Q_TE and H_TE: store in ``item["hp"]`` the ids of
    H_P ([] without history), as ``MDRStudent.partial_history`` would build them in the step."""
    for start in range(0, len(items), chunk):
        part = [it for it in items[start:start + chunk] if it["h"]]
        if not part:
            continue
        q_te = table.features[table.rows([it["q"] for it in part])]             # (n, H)
        h_rows = torch.full((len(part), max(len(it["h"]) for it in part)), -1, dtype=torch.long)  # (n, R)
        for i, it in enumerate(part):
            h_rows[i, :len(it["h"])] = table.rows(it["h"])
        rounds = h_rows >= 0
        h_te = table.features[h_rows.clamp_min(0)] * rounds.unsqueeze(-1)       # (n, R, H)
        index, _, _ = select_history(q_te, h_te, rounds)                         # (n,)
        for it, i in zip(part, index.tolist()):
            it["hp"] = partial_history_ids(it["h"], i, max_tokens)
    for it in items:
        it.setdefault("hp", [])


def attach_rows(item: dict, table: TeacherFeatureTable) -> dict:
    """Store in ``item`` (key ``te_rows``) the table rows of its :func:`feature_sequences`, looked
    up once here rather than at every batch of every epoch."""
    item["te_rows"] = table.rows(feature_sequences(item, table.pad_id))       # (3 + [1],)
    return item


def attach_features(batch: dict[str, torch.Tensor], items: Sequence[dict], table: TeacherFeatureTable
                    ) -> dict[str, torch.Tensor]:
    """Add q_te, p_te, hp_te (B, H) and r_te (B, H) when R is batched, from the items' ``te_rows``
    (:func:`attach_rows`)."""
    rows = torch.stack([it["te_rows"][:3] for it in items])                   # (B, 3): Q, P, H_P
    batch["q_te"] = table.features[rows[:, 0]]                                # (B, H)
    batch["p_te"] = table.features[rows[:, 1]]                                # (B, H)
    batch["hp_te"] = table.features[rows[:, 2]]                               # (B, H)
    if "r_ids" in batch:
        batch["r_te"] = table.features[torch.stack([it["te_rows"][3] for it in items])]  # (B, H)
    return batch
