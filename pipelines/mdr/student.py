"""Stage B of MDR: student encoder, history selection, Memory Net, sentence-level alignment.

Seed 001, section 3.2 "Student Encoder" and section 3.3 "Sentence-Level Alignment":

    Q_TE, P_TE, H_TE = Encoder_teacher(Q), Encoder_teacher(P), Encoder_teacher(H)     (4)-(6)
    index = argmax_i cos(Q_TE(T), H_TE(i));  H_P = Concat(H(index), Q(T-1), R(T-1))      (7)
    Q_SE, P_SE, H_PSE = Encoder_student(Q), Encoder_student(P), Encoder_student(H_P)    (8)-(10)
    Q_E = Concat(Q_TE, Q_SE)                                                             (11)
    P_E = Concat(P_TE, P_SE, H_PTE, H_PSE)                                               (12)
    (P^(K), R^(K)) = MemoryNet(Q_E, P_E)              (P-Update, R-Update; memory_net.py)
    L_sentence = MSE(R^(K), R_TE)                                                        (13)

Each feature is one vector (mean of the last layer, features.py); "Concat" stacks them as the
slot set the Memory Net attends over. A history round i is the text ``Q(i) sep R(i)`` and H_TE(i)
its teacher feature. H_P is two rounds, the most similar one and the last one (T-1), each a slot
(in H_PTE and in H_PSE); when both are the same round it appears twice, as in equation 7. Without
history (the first round) and without persona those slots are masked out. The teacher is frozen:
its features are computed under ``torch.no_grad`` (or once before training, teacher_table.py)
and its parameters never get a gradient. After
training, :func:`cache_response_features` stores R^(K) per example so inference (stage C, the
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


class MDRStudent(nn.Module):
    """Student encoder + Memory Net, with the frozen teacher encoder for the teacher features."""

    def __init__(self, student_encoder: nn.Module, teacher_encoder: nn.Module, memory: MemoryNet):
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

    def train(self, mode: bool = True) -> "MDRStudent":
        super().train(mode)
        self.teacher.eval()  # frozen: never dropout
        return self

    def forward(self, q_ids: torch.Tensor, q_mask: torch.Tensor, p_ids: torch.Tensor, p_mask: torch.Tensor,
                p_present: torch.Tensor, h_ids: torch.Tensor, h_mask: torch.Tensor, h_index: torch.Tensor,
                r_ids: torch.Tensor | None = None, r_mask: torch.Tensor | None = None,
                q_te: torch.Tensor | None = None, p_te: torch.Tensor | None = None,
                h_te: torch.Tensor | None = None, r_te: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Batch from :func:`pipelines.mdr.tasks.collate_student`:

        q_* (B, Lq); p_* (B, Lp) and p_present (B,); h_ids / h_mask (N_h, Lh) every history round of
        the batch, h_index (B, R) the row of round r of example b in h_ids (-1: none); r_* (B, Tr)
        optional (only the loss needs R). q_te, p_te (B, H), h_te (N_h, H), r_te (B, H): the frozen
        teacher's features when precomputed (teacher_table.py), else computed here. Returns r_pred
        (B, H), p_k (B, H), selected (B, 2) rows of h_ids used as H_P (-1 where none), and r_te
        (B, H) when R is given.
        """
        b, h = q_ids.shape[0], self.hidden
        with torch.no_grad():                                                    # frozen teacher, eqs. 4-6
            if q_te is None:
                q_te = sentence_features(self.teacher, q_ids, q_mask)           # (B, H)
            if p_te is None:
                p_te = sentence_features(self.teacher, p_ids, p_mask)           # (B, H)
            if h_te is not None:
                h_rows = h_te                                                    # (N_h, H)
            else:
                h_rows = (sentence_features(self.teacher, h_ids, h_mask) if h_ids.shape[0] > 0
                          else q_te.new_zeros((0, h)))                           # (N_h, H)
            if r_te is None and r_ids is not None:
                r_te = sentence_features(self.teacher, r_ids, r_mask)           # (B, H)
        round_mask = h_index >= 0                                                # (B, R)
        h_te = h_rows[h_index.clamp_min(0)] if h_rows.shape[0] else q_te.new_zeros((*h_index.shape, h))
        h_te = h_te * round_mask.unsqueeze(-1)                                   # (B, R, H)
        index, last, has = select_history(q_te, h_te, round_mask)               # eq. 7
        rows = torch.arange(b, device=q_ids.device)
        selected = torch.stack([h_index[rows, index], h_index[rows, last]], dim=1)  # (B, 2)
        selected = torch.where(has.unsqueeze(1), selected, torch.full_like(selected, -1))

        q_se = sentence_features(self.student, q_ids, q_mask)                   # (B, H), eq. 8
        p_se = sentence_features(self.student, p_ids, p_mask)                   # (B, H), eq. 9
        chosen = selected >= 0                                                   # (B, 2)
        if h_ids.shape[0] > 0:  # static shapes: both slots of every row encoded, unchosen ones zeroed
            picked = selected.clamp_min(0).reshape(-1)                           # (2B,)
            keep = chosen.unsqueeze(-1)                                          # (B, 2, 1)
            h_pte = h_rows[picked].reshape(b, 2, h) * keep                       # (B, 2, H)
            enc = sentence_features(self.student, h_ids[picked], h_mask[picked])  # (2B, H), eq. 10
            h_pse = enc.reshape(b, 2, h) * keep                                  # (B, 2, H)
        else:                                                                    # no history in the batch
            h_pte, h_pse = q_te.new_zeros((b, 2, h)), q_se.new_zeros((b, 2, h))

        q_slots = torch.stack([q_te.to(q_se.dtype), q_se], dim=1)               # (B, 2, H), eq. 11
        q_slot_mask = torch.ones((b, 2), dtype=torch.bool, device=q_ids.device)
        p_slots = torch.cat([p_te.to(p_se.dtype).unsqueeze(1), p_se.unsqueeze(1),
                             h_pte.to(p_se.dtype), h_pse.to(p_se.dtype)], dim=1)  # (B, 6, H), eq. 12
        present = p_present.bool().unsqueeze(1)
        p_slot_mask = torch.cat([present, present, chosen, chosen], dim=1)      # (B, 6)
        p_k, r_k = self.memory(q_slots, q_slot_mask, p_slots, p_slot_mask)     # P-Update, R-Update
        out = {"r_pred": r_k, "p_k": p_k, "selected": selected}
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
        (out_dir / "mdr_student.json").write_text(json.dumps({"memory_net": self.memory.settings()}, indent=2))

    @classmethod
    def load(cls, path: str | Path, teacher_encoder: nn.Module) -> "MDRStudent":
        """Rebuild a student written by :meth:`save` around the (frozen) teacher encoder."""
        from transformers import AutoModel
        path = Path(path)
        meta = json.loads((path / "mdr_student.json").read_text())
        memory = MemoryNet(**meta["memory_net"])
        load_model(memory, str(path / "memory_net.safetensors"))
        encoder = AutoModel.from_pretrained(str(path / "encoder"), local_files_only=True)
        return cls(encoder, teacher_encoder, memory)


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
    """R^(K) (H,) per example id, computed in eval mode (deterministic P^(0)) on the student's
    device. ``items`` are student items (tasks.student_item) and ``collate`` their collate."""
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
