"""Stage B of MDR: student encoder, history selection, Memory Net, sentence-level alignment.

Seed 001, section 3.2 "Student Encoder" and section 3.3 "Sentence-Level Alignment":

    Q_TE, P_TE, H_TE = Encoder_teacher(Q), Encoder_teacher(P), Encoder_teacher(H)     (4)-(6)
    index = argmax_i cos(Q_TE(T), H_TE(i));  H_P = Concat(H(index), Q(T-1), R(T-1))      (7)
    Q_SE, P_SE, H_PSE = Encoder_student(Q), Encoder_student(P), Encoder_student(H_P)    (8)-(10)
    Q_E = Concat(Q_TE, Q_SE)                                                             (11)
    P_E = Concat(P_TE, P_SE, H_PTE, H_PSE)                                               (12)
    (P^(K), R^(K)) = MemoryNet(Q_E, P_E)              (P-Update, R-Update; memory_net.py)
    L_sentence = MSE(R^(K), R_TE)                                                        (13)

Each feature is one vector (mean of the last layer, features.py); "Concat" in equations 11-12
stacks them as the slot sets the Memory Net attends over: Q_E has 2 slots, P_E has 4.

H_P is one text (equation 7's Concat of token sequences). A history round i is the ids
``Q(i) sep R(i) eos`` and H_TE(i) its teacher feature; H_P is the ids of round ``index`` followed
by those of round T-1 (the last one), ``Q(index) sep R(index) eos Q(T-1) sep R(T-1) eos``, so
H_PSE = Encoder_student(H_P) and H_PTE = Encoder_teacher(H_P) ("the features in H_TE
correspond to H_P") are each one slot. Two choices where the paper is silent:

- When the selected round is the last round (always so with one round of history), H_P holds it
  once: H_P is "partial historical content", a part of H, and a part of H has no round twice; a
  repeated round would only shift the pooled feature of a one-round H_P. H_P is then exactly
  that round and H_PTE is its H_TE(index), as equation 12's wording reads.
- H_P is cut to its last ``max_hp_tokens`` tokens (``max_hp_tokens`` of MDRConfig; each round is
  already cut to ``max_history_tokens`` + eos): the beginning of the older, selected round is
  dropped first, and the most recent round, which the paper adds because it is nearest to the
  query, is kept whole whenever it fits (max_hp_tokens >= max_history_tokens + 1), with the
  closing eos in every case.

Without history (the first round) the H_P slots, and without persona the P slots, are masked
out (and zeroed). The teacher is frozen, so the selection and H_P of an example are fixed: with
``precompute_teacher_features`` they are computed once before training, with the teacher
features of Q, P, H_P and R (teacher_table.py), and the step receives ``hp_ids``; otherwise
(and for examples outside the table) :meth:`MDRStudent.partial_history` selects on the device
from the rounds, with static shapes. Either way the teacher runs under ``torch.no_grad`` and its
parameters never get a gradient. After training, :func:`cache_response_features` stores R^(K)
per example (eval mode: the expectation over P^(0), memory_net.py) so inference (stage C, the
benchmark) does not rerun the student (section 4.2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from pipelines.errors import DataError
from pipelines.mdr.features import freeze, sentence_features
from pipelines.mdr.memory_net import MemoryNet

FEATURES_SCHEMA = "mnemos.mdr_response_features"


def compute_sentence_loss(r_pred: torch.Tensor, r_te: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Equation 13: MSE(R^(K), R_TE), the mean over the B x H entries -> (loss, B).

    r_pred (B, H) from the Memory Net, r_te (B, H) from the frozen teacher (a constant target).
    """
    return F.mse_loss(r_pred.float(), r_te.detach().float()), int(r_pred.shape[0])


def select_history(q_te: torch.Tensor, h_te: torch.Tensor, h_mask: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Equation 7's two rounds: (index, last, has_history), each (B,).

    q_te (B, H) teacher query features, h_te (B, R, H) teacher features of the history rounds
    (oldest first, padded), h_mask (B, R). ``index = argmax_i cos(Q_TE, H_TE(i))`` over the valid
    rounds; ``last`` is the last valid round (T-1); rows without history give 0, 0, False.
    """
    valid = h_mask.bool()
    cos = F.cosine_similarity(h_te.float(), q_te.float().unsqueeze(1), dim=-1, eps=1e-8)  # (B, R)
    index = cos.masked_fill(~valid, float("-inf")).argmax(dim=1)                 # (B,)
    count = valid.sum(dim=1)                                                     # (B,)
    has = count > 0
    last = (count - 1).clamp_min(0)
    return torch.where(has, index, torch.zeros_like(index)), last, has


def partial_history_ids(rounds: Sequence[Sequence[int]], index: int, max_tokens: int) -> list[int]:
    """Equation 7's H_P of one example as ids: round ``index`` then the last round (once when they
    are the same round), cut to the last ``max_tokens`` ids; [] without history."""
    if not rounds:
        return []
    last = len(rounds) - 1
    ids = [*rounds[index], *rounds[last]] if index != last else list(rounds[last])
    return ids[-max_tokens:]


def concat_rounds(h_ids: torch.Tensor, h_mask: torch.Tensor, first: torch.Tensor, last: torch.Tensor,
                  has: torch.Tensor, max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`partial_history_ids` of a batch on the device, with static shapes (no host sync).

    h_ids / h_mask (N_h, Lh) right-padded rounds; first, last (B,) rows of h_ids (round ``index``
    and round T-1), has (B,) whether the example has history. Returns hp_ids / hp_mask (B, W),
    W = min(max_tokens, 2 Lh), right-padded; a row without history is one masked-in filler id 0
    (as collate's lone pad: its slot is masked out, and the encoder never sees an empty row).
    """
    lh = h_ids.shape[1]
    width = min(max_tokens, 2 * lh)
    lengths = h_mask.sum(dim=1)                                                  # (N_h,)
    len_a = torch.where(has & (first != last), lengths[first], 0).unsqueeze(1)   # (B, 1) round index
    len_b = torch.where(has, lengths[last], 0).unsqueeze(1)                      # (B, 1) round T-1
    total = len_a + len_b                                                        # (B, 1)
    pos = torch.arange(width, device=h_ids.device).unsqueeze(0) + (total - width).clamp_min(0)  # (B, W)
    from_a = h_ids[first].gather(1, pos.clamp_max(lh - 1))                       # (B, W)
    from_b = h_ids[last].gather(1, (pos - len_a).clamp(0, lh - 1))               # (B, W)
    mask = pos < total                                                           # (B, W)
    ids = torch.where(pos < len_a, from_a, from_b).masked_fill(~mask, 0)
    mask[:, 0] |= ~has                                                           # the lone filler
    return ids, mask.long()


class MDRStudent(nn.Module):
    """Student encoder + Memory Net, with the frozen teacher encoder for the teacher features."""

    def __init__(self, student_encoder: nn.Module, teacher_encoder: nn.Module, memory: MemoryNet,
                 max_hp_tokens: int = 256):
        super().__init__()
        hs = student_encoder.get_input_embeddings().embedding_dim
        ht = teacher_encoder.get_input_embeddings().embedding_dim
        if hs != ht or memory.hidden != ht:
            raise ValueError(f"student ({hs}), teacher ({ht}) and Memory Net ({memory.hidden}) hidden sizes "
                             f"must be equal: Q_E and P_E stack their features as slots.")
        self.student = student_encoder
        self.teacher = freeze(teacher_encoder)
        self.memory = memory
        self.hidden = ht
        self.max_hp_tokens = max_hp_tokens

    def train(self, mode: bool = True) -> "MDRStudent":
        super().train(mode)
        self.teacher.eval()  # frozen: never dropout
        return self

    @torch.no_grad()
    def partial_history(self, q_te: torch.Tensor, h_ids: torch.Tensor, h_mask: torch.Tensor,
                        h_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Equations 6-7 on the device: H_TE of every round, the selection, and H_P.

        q_te (B, H); h_ids / h_mask (N_h, Lh) every history round of the batch, h_index (B, R) the
        row of round r of example b in h_ids (-1: none). Returns hp_ids / hp_mask (B, W) and
        hp_present (B,) (:func:`concat_rounds`).
        """
        b = q_te.shape[0]
        if h_ids.shape[0] == 0:                                                  # no history in the batch
            ids = torch.zeros((b, 1), dtype=torch.long, device=q_te.device)
            return ids, torch.ones_like(ids), torch.zeros(b, dtype=torch.bool, device=q_te.device)
        rounds = h_index >= 0                                                    # (B, R)
        h_rows = sentence_features(self.teacher, h_ids, h_mask)                  # (N_h, H), eq. 6
        h_te = h_rows[h_index.clamp_min(0)] * rounds.unsqueeze(-1)               # (B, R, H)
        index, last, has = select_history(q_te, h_te, rounds)                   # eq. 7
        rows = torch.arange(b, device=q_te.device)
        first_row = h_index[rows, index].clamp_min(0)                            # (B,)
        last_row = h_index[rows, last].clamp_min(0)                              # (B,)
        hp_ids, hp_mask = concat_rounds(h_ids, h_mask, first_row, last_row, has, self.max_hp_tokens)
        return hp_ids, hp_mask, has

    def forward(self, q_ids: torch.Tensor, q_mask: torch.Tensor, p_ids: torch.Tensor, p_mask: torch.Tensor,
                p_present: torch.Tensor, h_ids: torch.Tensor | None = None, h_mask: torch.Tensor | None = None,
                h_index: torch.Tensor | None = None, hp_ids: torch.Tensor | None = None,
                hp_mask: torch.Tensor | None = None, hp_present: torch.Tensor | None = None,
                r_ids: torch.Tensor | None = None, r_mask: torch.Tensor | None = None,
                q_te: torch.Tensor | None = None, p_te: torch.Tensor | None = None,
                hp_te: torch.Tensor | None = None, r_te: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Batch from :func:`pipelines.mdr.tasks.collate_student`:

        q_* (B, Lq); p_* (B, Lp) and p_present (B,); H_P either precomputed, hp_* (B, Lhp) and
        hp_present (B,), or selected here from the rounds h_ids / h_mask (N_h, Lh) and h_index
        (B, R) (:meth:`partial_history`); r_* (B, Tr) optional (only the loss needs R). q_te, p_te,
        hp_te, r_te (B, H): the frozen teacher's features when precomputed (teacher_table.py), else
        computed here. Returns r_pred (B, H), p_k (B, H), and r_te (B, H) when R is given.
        """
        b = q_ids.shape[0]
        with torch.no_grad():                                                    # frozen teacher, eqs. 4-7
            if q_te is None:
                q_te = sentence_features(self.teacher, q_ids, q_mask)           # (B, H), eq. 4
            if p_te is None:
                p_te = sentence_features(self.teacher, p_ids, p_mask)           # (B, H), eq. 5
            if hp_ids is None:
                hp_ids, hp_mask, hp_present = self.partial_history(q_te, h_ids, h_mask, h_index)  # (B, W)
            if hp_te is None:
                hp_te = sentence_features(self.teacher, hp_ids, hp_mask)        # (B, H), H_PTE
            if r_te is None and r_ids is not None:
                r_te = sentence_features(self.teacher, r_ids, r_mask)           # (B, H), eq. 1

        q_se = sentence_features(self.student, q_ids, q_mask)                   # (B, H), eq. 8
        p_se = sentence_features(self.student, p_ids, p_mask)                   # (B, H), eq. 9
        hp_se = sentence_features(self.student, hp_ids, hp_mask)                # (B, H), eq. 10
        dtype = q_se.dtype
        q_slots = torch.stack([q_te.to(dtype), q_se], dim=1)                    # (B, 2, H), eq. 11
        q_slot_mask = torch.ones((b, 2), dtype=torch.bool, device=q_ids.device)
        p_slots = torch.stack([p_te.to(dtype), p_se, hp_te.to(dtype), hp_se], dim=1)  # (B, 4, H), eq. 12
        persona, history = p_present.bool().unsqueeze(1), hp_present.bool().unsqueeze(1)
        p_slot_mask = torch.cat([persona, persona, history, history], dim=1)    # (B, 4)
        p_slots = p_slots * p_slot_mask.unsqueeze(-1).to(dtype)                 # absent slots zeroed
        p_k, r_k = self.memory(q_slots, q_slot_mask, p_slots, p_slot_mask)     # P-Update, R-Update
        out = {"r_pred": r_k, "p_k": p_k}
        if r_te is not None:
            out["r_te"] = r_te
        return out

    def save(self, out_dir: str | Path) -> None:
        """``encoder/`` (save_pretrained), ``memory_net.safetensors``, ``mdr_student.json``.

        The frozen teacher is not saved: load it from the teacher stage's folder.
        """
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.student.save_pretrained(str(out_dir / "encoder"))
        save_model(self.memory, str(out_dir / "memory_net.safetensors"))  # handles tied P/R-Update weights
        meta = {"memory_net": self.memory.settings(), "max_hp_tokens": self.max_hp_tokens}
        (out_dir / "mdr_student.json").write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, path: str | Path, teacher_encoder: nn.Module) -> "MDRStudent":
        """Rebuild a student written by :meth:`save` around the (frozen) teacher encoder."""
        from transformers import AutoModel
        path = Path(path)
        meta = json.loads((path / "mdr_student.json").read_text())
        memory = MemoryNet(**meta["memory_net"])
        load_model(memory, str(path / "memory_net.safetensors"))
        encoder = AutoModel.from_pretrained(str(path / "encoder"), local_files_only=True)
        return cls(encoder, teacher_encoder, memory, meta.get("max_hp_tokens", 256))


# --- the cache of distilled response features (section 4.2) -----------------------------------

def save_response_features(path: str | Path, features: Mapping[str, torch.Tensor]) -> int:
    """Write ``{example id: R^(K) (H,)}`` to a safetensors file. Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().float().cpu().contiguous() for k, v in features.items()}
    hidden = {int(v.shape[-1]) for v in tensors.values()}
    if len(hidden) > 1:
        raise ValueError(f"response features of different sizes {sorted(hidden)} cannot share a cache.")
    save_file(tensors, str(path), metadata={"schema": FEATURES_SCHEMA, "count": str(len(tensors))})
    return len(tensors)


def load_response_features(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a cache written by :func:`save_response_features`; DataError names the file on a bad one."""
    from safetensors import safe_open
    path = Path(path)
    if not path.exists():
        raise DataError("response-feature cache does not exist (run mdr_student first)", file=str(path))
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a data error
        raise DataError(f"not a safetensors file ({exc})", file=str(path)) from None
    if meta.get("schema") != FEATURES_SCHEMA:
        raise DataError(f"metadata schema is {meta.get('schema')!r}, expected {FEATURES_SCHEMA!r}",
                        file=str(path), field="schema")
    return load_file(str(path))


@torch.no_grad()
def response_features(student: MDRStudent, items: Sequence[dict], ids: Sequence[str], *, collate,
                      batch_size: int = 32) -> dict[str, torch.Tensor]:
    """R^(K) (H,) per example id, computed in eval mode on the student's device: with a sampled
    P^(0) the expectation over its fixed draws (``p0_eval``, memory_net.py), the same for every
    example whatever the batching. ``items`` are student items (tasks.student_item) and
    ``collate`` their collate."""
    if len(items) != len(ids):
        raise ValueError(f"{len(items)} items but {len(ids)} ids.")
    was_training = student.training
    student.eval()
    device = next(student.parameters()).device
    out: dict[str, torch.Tensor] = {}
    try:
        for start in range(0, len(items), batch_size):
            batch = collate([{k: v for k, v in it.items() if k != "r"} for it in items[start:start + batch_size]])
            batch = {k: v.to(device) for k, v in batch.items()}
            r_pred = student(**batch)["r_pred"].float().cpu()                  # (b, H)
            for i, example_id in enumerate(ids[start:start + batch_size]):
                out[example_id] = r_pred[i].clone()
    finally:
        student.train(was_training)
    return out


def cache_response_features(student: MDRStudent, items: Sequence[dict], ids: Sequence[str], path: str | Path,
                            *, collate, batch_size: int = 32) -> int:
    """Compute R^(K) for every example (without reading R) and write the cache. Returns the count."""
    return save_response_features(path, response_features(student, items, ids, collate=collate,
                                                          batch_size=batch_size))
