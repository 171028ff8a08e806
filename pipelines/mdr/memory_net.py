"""The Memory Net of MDR: P-Update and R-Update with K hops (seed 001, section 3.2, Figure 3).

The paper (after equation 12): "For HOP^(0), P^(0) is initialized according to a normal
distribution. Taking P^(0) as a query for Q_E, then we can use the obtained results as a new query
for P_E and get a personality variant, dP. Iteratively, the updated personality feature is
P^(k+1) = P^(k) + dP, for k in [0, K-1]. In a similar way, we design the R-Update module and
finally obtain the response embedding R^(K)." Figure 3: "R-Update and P-Update adopt shared
network structure"; attention is matmul - softmax - matmul, as in the memory networks of Mem2Seq
(Madotto et al., 2018) that the paper cites. One hop of either update, for a state x^(k) (B, H):

    u     = Attn(x^(k), Q_E)         Q_E = [Q_TE ; Q_SE]                       slots (B, 2, H)
    dx    = Attn(u, P_E)             P_E = [P_TE ; P_SE ; H_PTE ; H_PSE]       slots (B, 4, H)
    x^(k+1) = x^(k) + dx

    Attn(q, M) = sum_s softmax_s(q . (W_k M_s) / sqrt(H)) * (W_v M_s)     (masked slots excluded)

Choices where the paper is silent (documented defaults, see MDRConfig):

- W_k, W_v: one key and one value map per attention, shared by the K hops (the "layer-wise"
  tying of end-to-end memory networks); the 1/sqrt(H) scale keeps softmax unsaturated at H = 768.
- P-Update and R-Update have the same structure and their own weights (``share_weights=True``
  ties them).
- P^(0): ``p0="sampled"`` draws N(0, init_std^2 I) per example at every training forward (the
  issue's reading of "initialized according to a normal distribution"); ``p0="learned"`` reads
  the sentence as parameter initialisation: P^(0) is one trainable vector initialised from
  N(0, init_std^2 I).
- Evaluation with a sampled P^(0) (``p0_eval``). Training fits R^(K)(P^(0)) to R_TE for random
  P^(0), so the MSE-optimal prediction, and what R^(K) should be at inference, is the expectation
  E_{P^(0)}[R^(K)]. The hops are not linear in P^(0) (it enters the softmax), so this is not
  R^(K)(E[P^(0)]) = R^(K)(0). ``"expected"`` (default) estimates it by the mean of R^(K) (and of
  P^(K)) over M = ``eval_samples`` fixed draws of P^(0), taken as M/2 antithetic pairs (z, -z)
  with z ~ N(0, init_std^2 I) from a generator seeded with ``eval_seed``. The pairs are unbiased
  (the distribution is symmetric) and cancel every odd-order term of R^(K) in P^(0) exactly,
  among them P^(0) itself, which the hops carry additively into R^(K) and which is most of its
  spread over draws; only the curvature of the hops is left to the Monte Carlo error (M = 32 by
  default, MDRConfig.p0_eval_samples says why). The same M draws serve every example, so the
  cached features are deterministic and do not depend on the batch; the M states run as one
  (M, B, H) tensor against the slots' keys and values, which are computed once for all draws (a
  draw costs O(B S H), nothing next to the encoders). ``"mean"`` uses P^(0) = 0 (the plug-in
  R^(K)(E[P^(0)]), biased); ``"seeded"`` uses one draw from the ``eval_seed`` generator for every
  example (a constant offset of norm about init_std * sqrt(H)). In training mode a sampled P^(0)
  is carried additively into R^(K) (the hops add attention outputs to it and cannot cancel it),
  so the training MSE keeps a floor of about init_std^2 that the expectation removes.
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

    query (..., B, H) (leading dims: e.g. M draws of P^(0) for the same B examples), keys / values
    (B, S, H), mask (B, S) -> (..., B, H); a row with no valid slot gives 0.
    """
    h = query.shape[-1]
    scores = torch.einsum("...bh,bsh->...bs", query, keys) / math.sqrt(h)       # (..., B, S)
    valid = mask.bool()                                                          # (B, S)
    scores = scores.masked_fill(~valid, float("-inf"))
    any_valid = valid.any(dim=-1, keepdim=True)                                  # (B, 1)
    probs = torch.softmax(scores.masked_fill(~any_valid, 0.0), dim=-1)           # (..., B, S)
    probs = probs * any_valid                                                    # empty rows -> 0
    return torch.einsum("...bs,bsh->...bh", probs, values)                       # (..., B, H)


class MemoryAttention(nn.Module):
    """``Attn(q, M)`` with a key map W_k and a value map W_v over the slots."""

    def __init__(self, hidden: int):
        super().__init__()
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.value = nn.Linear(hidden, hidden, bias=False)

    def forward(self, query: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """query (..., B, H), slots (B, S, H), mask (B, S) -> (..., B, H)."""
        return slot_attention(query, self.key(slots), self.value(slots), mask)


class Update(nn.Module):
    """One update module (P-Update or R-Update): K hops of x <- x + Attn(Attn(x, Q_E), P_E)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.attend_query = MemoryAttention(hidden)     # over Q_E
        self.attend_persona = MemoryAttention(hidden)   # over P_E

    def hop(self, x: torch.Tensor, q_slots: torch.Tensor, q_mask: torch.Tensor,
            p_slots: torch.Tensor, p_mask: torch.Tensor) -> torch.Tensor:
        """x^(k) (..., B, H) -> x^(k+1) = x^(k) + dx."""
        u = self.attend_query(x, q_slots, q_mask)       # (..., B, H): x^(k) as query for Q_E
        dx = self.attend_persona(u, p_slots, p_mask)    # (..., B, H): the result as query for P_E
        return x + dx

    def forward(self, x0: torch.Tensor, q_slots: torch.Tensor, q_mask: torch.Tensor,
                p_slots: torch.Tensor, p_mask: torch.Tensor, hops: int) -> torch.Tensor:
        x = x0
        for _ in range(hops):
            x = self.hop(x, q_slots, q_mask, p_slots, p_mask)
        return x


def eval_draws(hidden: int, mode: str, init_std: float, samples: int, seed: int) -> torch.Tensor:
    """The fixed P^(0) draws of eval mode, (M, H): ``"expected"`` M/2 antithetic pairs (z, -z),
    ``"mean"`` the zero vector, ``"seeded"`` one draw; z ~ N(0, init_std^2 I) from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    if mode == "expected":
        z = torch.randn(samples // 2, hidden, generator=g) * init_std                    # (M/2, H)
        return torch.cat([z, -z])                                                         # (M, H)
    if mode == "seeded":
        return (torch.randn(hidden, generator=g) * init_std).unsqueeze(0)                # (1, H)
    return torch.zeros(1, hidden)                                                         # (1, H)


class MemoryNet(nn.Module):
    """P-Update then R-Update; ``forward`` returns (P^(K), R^(K)), each (B, H)."""

    def __init__(self, hidden: int, hops: int = 3, *, p0: str = "sampled", init_std: float = 1.0,
                 share_weights: bool = False, p0_eval: str = "expected", eval_samples: int = 32,
                 eval_seed: int = 2022):
        super().__init__()
        if hops < 1:
            raise ValueError(f"hops must be at least 1, got {hops}.")
        if p0 not in P0_MODES:
            raise ValueError(f"p0 must be one of {P0_MODES}, got {p0!r}.")
        if p0_eval not in P0_EVAL_MODES:
            raise ValueError(f"p0_eval must be one of {P0_EVAL_MODES}, got {p0_eval!r}.")
        if isinstance(eval_samples, bool) or not isinstance(eval_samples, int) or eval_samples < 2 \
                or eval_samples % 2:
            raise ValueError(f"eval_samples must be an even integer >= 2 (antithetic pairs), got {eval_samples!r}.")
        self.hidden, self.hops, self.p0_mode, self.init_std = hidden, hops, p0, float(init_std)
        self.share_weights, self.p0_eval_mode = share_weights, p0_eval
        self.eval_samples, self.eval_seed = eval_samples, eval_seed
        self.p_update = Update(hidden)
        self.r_update = self.p_update if share_weights else Update(hidden)
        if p0 == "learned":
            g = torch.Generator().manual_seed(eval_seed)
            self.p0 = nn.Parameter(torch.randn(hidden, generator=g) * self.init_std)
        else:
            # the eval-mode P^(0) draws (M, H) (not saved: a function of the settings)
            draws = eval_draws(hidden, p0_eval, self.init_std, eval_samples, eval_seed)
            self.register_buffer("p0_eval", draws, persistent=False)

    def initial_states(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """P^(0) for a batch: (M, B, H) on the device / dtype of ``like``, M draws per example whose
        results forward averages; M = 1 except for a sampled P^(0) in eval mode (``p0_eval``)."""
        if self.p0_mode == "learned":
            return self.p0.to(like.dtype).expand(1, batch, -1)
        if self.training:
            return torch.randn(1, batch, self.hidden, device=like.device, dtype=like.dtype) * self.init_std
        draws = self.p0_eval.to(device=like.device, dtype=like.dtype)                  # (M, H)
        return draws.unsqueeze(1).expand(-1, batch, -1)

    def forward(self, q_slots: torch.Tensor, q_mask: torch.Tensor, p_slots: torch.Tensor,
                p_mask: torch.Tensor, p_init: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """q_slots (B, Sq, H), q_mask (B, Sq), p_slots (B, Sp, H), p_mask (B, Sp); ``p_init``
        overrides P^(0) (B, H). Returns (P^(K), R^(K)), each (B, H): the mean over the M draws of
        :meth:`initial_states` (one draw in training)."""
        b = q_slots.shape[0]
        p0 = self.initial_states(b, q_slots) if p_init is None else p_init.unsqueeze(0)  # (M, B, H)
        p_k = self.p_update(p0, q_slots, q_mask, p_slots, p_mask, self.hops)       # (M, B, H)
        r_k = self.r_update(p_k, q_slots, q_mask, p_slots, p_mask, self.hops)      # (M, B, H), R^(0) = P^(K)
        return p_k.mean(dim=0), r_k.mean(dim=0)

    def settings(self) -> dict:
        """The constructor arguments (saved beside the weights)."""
        return {"hidden": self.hidden, "hops": self.hops, "p0": self.p0_mode, "init_std": self.init_std,
                "share_weights": self.share_weights, "p0_eval": self.p0_eval_mode,
                "eval_samples": self.eval_samples, "eval_seed": self.eval_seed}
