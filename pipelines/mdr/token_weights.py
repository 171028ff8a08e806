"""Adjusted token weights and the token-level loss of MDR (seed 001, section 3.3, equation 14).

Token-Level Alignment: every token of R is encoded by the (frozen) teacher encoder; its feature
is compared with the sentence feature R_TE,

    W_i = cos(h_i, R_TE)                                                                 (B, T)

and W is "adjusted" by a normal curve centred on its maximum with a free std sigma (paper: 0.5),

    w_i = exp(-(W_i - mu)^2 / (2 sigma^2)),   mu = max_j W_j  (over the valid tokens of the response)

so the token most similar to the whole response gets weight 1 and the others less; a large sigma
flattens every weight to 1 (plain cross-entropy). The loss (equation 14) is

    L_token = -(1/N) * sum_i w_i * log p(R_i | R_<i, Q, R^(K)).

Normalisation: N is the number of target tokens. For a batch this module divides the sum over all
target tokens of the batch by their total count (the token mean of cross-entropy), which is the
paper's per-response formula for a batch of one response and what the training engine expects
when it averages micro-batches by their target-token counts. The weights are not renormalised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipelines.mdr.text import IGNORE


def token_weights(token_feats: torch.Tensor, r_te: torch.Tensor, mask: torch.Tensor, sigma: float) -> torch.Tensor:
    """w (B, T) from token features (B, T, H), the response feature R_TE (B, H), the valid-token
    mask (B, T) and sigma > 0; padded positions get weight 0."""
    if sigma <= 0:
        raise ValueError(f"sigma must be positive, got {sigma}.")
    valid = mask.bool()                                                          # (B, T)
    W = F.cosine_similarity(token_feats.float(), r_te.float().unsqueeze(1), dim=-1, eps=1e-8)  # (B, T)
    mu = W.masked_fill(~valid, float("-inf")).amax(dim=1, keepdim=True)          # (B, 1)
    mu = torch.where(torch.isfinite(mu), mu, torch.zeros_like(mu))               # rows with no token
    w = torch.exp(-((W - mu) ** 2) / (2.0 * sigma ** 2))                         # (B, T)
    return w.masked_fill(~valid, 0.0)


def compute_token_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation 14: ``-(1/N) sum_i w_i log p(target_i)`` -> (scalar loss, N as a 0-d tensor).

    logits (B, T, V) and targets (B, T) are aligned (position t predicts targets[:, t]); targets
    equal to IGNORE (-100) are not counted; weights (B, T) (None: all 1, the teacher's loss).
    N stays on the device (no host synchronisation in the training step); with N = 0 the loss
    is 0 with zero gradients.
    """
    valid = targets != IGNORE                                                    # (B, T)
    n = valid.sum()                                                              # ()
    log_p = torch.log_softmax(logits.float(), dim=-1)                            # (B, T, V)
    picked = log_p.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)    # (B, T)
    w = torch.ones_like(picked) if weights is None else weights.to(picked.dtype)
    loss = -(w * picked).masked_fill(~valid, 0.0).sum() / n.clamp_min(1)
    return loss, n


def check_aligned(mask: torch.Tensor, targets: torch.Tensor) -> None:
    """Raise ValueError unless every row has as many response tokens (``mask`` (B, Tr)) as decoder
    targets (``targets`` (B, T), IGNORE elsewhere): the precondition of :func:`scatter_to_targets`.
    Run on the CPU batch (collate), where it costs no device synchronisation."""
    per_row_w, per_row_t = mask.bool().sum(1), (targets != IGNORE).sum(1)
    if not torch.equal(per_row_w, per_row_t):
        raise ValueError(f"response tokens per row {per_row_w.tolist()} differ from decoder targets per row "
                         f"{per_row_t.tolist()}: the teacher and the decoder must read the same R tokens.")


def scatter_to_targets(weights: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Place per-response weights (B, Tr) (valid where ``mask``) on the target positions of the
    decoder's aligned targets (B, T): the k-th valid weight of a row goes to its k-th target.

    Static shapes only (no boolean indexing, so no host synchronisation): the valid weights are
    moved to the front of their row (stable sort on ~mask), then read at each target's rank.
    Rows must hold as many valid weights as targets (:func:`check_aligned`, done at collate).
    """
    valid_t = targets != IGNORE                                                  # (B, T)
    front = torch.argsort((~mask.bool()).to(torch.uint8), dim=1, stable=True)    # (B, Tr) valid first
    packed = weights.gather(1, front)                                            # (B, Tr)
    rank = (valid_t.long().cumsum(1) - 1).clamp(0, weights.shape[1] - 1)        # (B, T) k of each target
    return packed.gather(1, rank).masked_fill(~valid_t, 0.0)                     # (B, T)
