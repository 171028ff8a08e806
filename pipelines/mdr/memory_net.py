"""The Memory Net of MDR: P-Update and R-Update with K hops (seed 001, section 3.2, Figure 3).

The paper (after equation 12): "For HOP^(0), P^(0) is initialized according to a normal
distribution. Taking P^(0) as a query for Q_E, then we can use the obtained results as a new query
for P_E and get a personality variant, dP. Iteratively, the updated personality feature is
P^(k+1) = P^(k) + dP, for k in [0, K-1]. In a similar way, we design the R-Update module and
finally obtain the response embedding R^(K)." Figure 3: "R-Update and P-Update adopt shared
network structure"; attention is matmul - softmax - matmul, as in the memory networks of Mem2Seq
(Madotto et al., 2018) that the paper cites. One hop of either update, for a state x^(k) (B, H):

    u     = Attn(x^(k), Q_E)         Q_E = [Q_TE ; Q_SE]                       slots (B, 2, H)
    dx    = Attn(u, P_E)             P_E = [P_TE ; P_SE ; H_PTE ; H_PSE]       slots (B, S, H)
    x^(k+1) = x^(k) + dx

    Attn(q, M) = sum_s softmax_s(q . (W_k M_s) / sqrt(H)) * (W_v M_s)     (masked slots excluded)

Choices where the paper is silent (documented defaults, see MDRConfig):

- W_k, W_v: one key and one value map per attention, shared by the K hops (the "layer-wise"
  tying of end-to-end memory networks); the 1/sqrt(H) scale keeps softmax unsaturated at H = 768.
- P-Update and R-Update have the same structure and their own weights (``share_weights=True``
  ties them).
- P^(0): ``p0="sampled"`` draws N(0, init_std^2 I) per example at every training forward (the
  issue's reading of "initialized according to a normal distribution"). A sampled P^(0) is carried
  additively into R^(K) (the hops add attention outputs to it and cannot cancel it), so in
  training the sentence-level MSE keeps a floor of about init_std^2. In eval mode P^(0) is fixed,
  so R^(K) and the features cached from it do not depend on the batch: ``p0_eval="mean"`` (default)
  uses the mean of the distribution, 0, which gives the expected R^(K) the training objective fits
  (no floor); ``"seeded"`` uses one draw from a generator seeded with ``eval_seed`` for every example
  (a constant offset of norm about init_std * sqrt(H)). ``p0="learned"`` reads the sentence as
  parameter initialisation: P^(0) is one trainable vector initialised from N(0, init_std^2 I).
- R^(0) = P^(K): the R-Update starts from the up-to-date personality, which is how the
  P-Update's result reaches the response embedding; it then attends over Q_E and P_E like the
  P-Update and returns R^(K).
- A slot set with no valid slot (no persona, no history) contributes dx = 0.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from pipelines.mdr.config import P0_EVAL_MODES, P0_MODES


def slot_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q . k_s / sqrt(H)) weighted sum of v_s over the valid slots.

    query (B, H), keys / values (B, S, H), mask (B, S) -> (B, H); a row with no valid slot gives 0.
    """
    h = query.shape[-1]
    scores = torch.einsum("bh,bsh->bs", query, keys) / math.sqrt(h)             # (B, S)
    valid = mask.bool()
    scores = scores.masked_fill(~valid, float("-inf"))
    any_valid = valid.any(dim=1, keepdim=True)                                   # (B, 1)
    probs = torch.softmax(scores.masked_fill(~any_valid, 0.0), dim=1)            # (B, S)
    probs = probs * any_valid                                                    # empty rows -> 0
    return torch.einsum("bs,bsh->bh", probs, values)                             # (B, H)


class MemoryAttention(nn.Module):
    """``Attn(q, M)`` with a key map W_k and a value map W_v over the slots."""

    def __init__(self, hidden: int):
        super().__init__()
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.value = nn.Linear(hidden, hidden, bias=False)

    def forward(self, query: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """query (B, H), slots (B, S, H), mask (B, S) -> (B, H)."""
        return slot_attention(query, self.key(slots), self.value(slots), mask)


class Update(nn.Module):
    """One update module (P-Update or R-Update): K hops of x <- x + Attn(Attn(x, Q_E), P_E)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.attend_query = MemoryAttention(hidden)     # over Q_E
        self.attend_persona = MemoryAttention(hidden)   # over P_E

    def hop(self, x: torch.Tensor, q_slots: torch.Tensor, q_mask: torch.Tensor,
            p_slots: torch.Tensor, p_mask: torch.Tensor) -> torch.Tensor:
        """x^(k) (B, H) -> x^(k+1) = x^(k) + dx."""
        u = self.attend_query(x, q_slots, q_mask)       # (B, H): x^(k) as query for Q_E
        dx = self.attend_persona(u, p_slots, p_mask)    # (B, H): the result as query for P_E
        return x + dx

    def forward(self, x0: torch.Tensor, q_slots: torch.Tensor, q_mask: torch.Tensor,
                p_slots: torch.Tensor, p_mask: torch.Tensor, hops: int) -> torch.Tensor:
        x = x0
        for _ in range(hops):
            x = self.hop(x, q_slots, q_mask, p_slots, p_mask)
        return x


class MemoryNet(nn.Module):
    """P-Update then R-Update; ``forward`` returns (P^(K), R^(K)), each (B, H)."""

    def __init__(self, hidden: int, hops: int = 3, *, p0: str = "sampled", init_std: float = 1.0,
                 share_weights: bool = False, p0_eval: str = "mean", eval_seed: int = 2022):
        super().__init__()
        if hops < 1:
            raise ValueError(f"hops must be at least 1, got {hops}.")
        if p0 not in P0_MODES:
            raise ValueError(f"p0 must be one of {P0_MODES}, got {p0!r}.")
        if p0_eval not in P0_EVAL_MODES:
            raise ValueError(f"p0_eval must be one of {P0_EVAL_MODES}, got {p0_eval!r}.")
        self.hidden, self.hops, self.p0_mode, self.init_std = hidden, hops, p0, float(init_std)
        self.share_weights, self.p0_eval_mode, self.eval_seed = share_weights, p0_eval, eval_seed
        self.p_update = Update(hidden)
        self.r_update = self.p_update if share_weights else Update(hidden)
        g = torch.Generator().manual_seed(eval_seed)
        if p0 == "learned":
            self.p0 = nn.Parameter(torch.randn(hidden, generator=g) * self.init_std)
        else:
            # the eval-mode P^(0) (not saved: a function of p0_eval, eval_seed and hidden)
            fixed = torch.randn(hidden, generator=g) * self.init_std if p0_eval == "seeded" else torch.zeros(hidden)
            self.register_buffer("p0_eval", fixed, persistent=False)

    def initial_state(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """P^(0) for a batch: (B, H) on the device / dtype of ``like``."""
        if self.p0_mode == "learned":
            return self.p0.to(like.dtype).expand(batch, -1)
        if self.training:
            return torch.randn(batch, self.hidden, device=like.device, dtype=like.dtype) * self.init_std
        return self.p0_eval.to(device=like.device, dtype=like.dtype).expand(batch, -1)

    def forward(self, q_slots: torch.Tensor, q_mask: torch.Tensor, p_slots: torch.Tensor,
                p_mask: torch.Tensor, p_init: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """q_slots (B, Sq, H), q_mask (B, Sq), p_slots (B, Sp, H), p_mask (B, Sp); ``p_init``
        overrides P^(0) (B, H). Returns (P^(K), R^(K))."""
        p0 = self.initial_state(q_slots.shape[0], q_slots) if p_init is None else p_init
        p_k = self.p_update(p0, q_slots, q_mask, p_slots, p_mask, self.hops)       # (B, H)
        r_k = self.r_update(p_k, q_slots, q_mask, p_slots, p_mask, self.hops)      # (B, H), R^(0) = P^(K)
        return p_k, r_k

    def settings(self) -> dict:
        """The constructor arguments (saved beside the weights)."""
        return {"hidden": self.hidden, "hops": self.hops, "p0": self.p0_mode, "init_std": self.init_std,
                "share_weights": self.share_weights, "p0_eval": self.p0_eval_mode, "eval_seed": self.eval_seed}
