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
                       ) -> tuple[torch.Tensor, int]:
    """Equation 14: ``-(1/N) sum_i w_i log p(target_i)`` -> (scalar loss, N).

    logits (B, T, V) and targets (B, T) are aligned (position t predicts targets[:, t]); targets
    equal to IGNORE (-100) are not counted; weights (B, T) (None: all 1, the teacher's loss).
    """
    valid = targets != IGNORE                                                    # (B, T)
    n = int(valid.sum())
    if n == 0:
        return logits.sum() * 0.0, 0
    log_p = torch.log_softmax(logits.float(), dim=-1)                            # (B, T, V)
    picked = log_p.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)    # (B, T)
    w = torch.ones_like(picked) if weights is None else weights.to(picked.dtype)
    loss = -(w * picked).masked_fill(~valid, 0.0).sum() / n
    return loss, n


def scatter_to_targets(weights: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Place per-response weights (B, Tr) (valid where ``mask``) on the target positions of the
    decoder's aligned targets (B, T): the k-th valid weight of a row goes to its k-th target."""
    valid_t = targets != IGNORE                                                  # (B, T)
    per_row_w, per_row_t = mask.bool().sum(1), valid_t.sum(1)
    if not torch.equal(per_row_w, per_row_t):
        raise ValueError(f"response tokens per row {per_row_w.tolist()} differ from decoder targets per row "
                         f"{per_row_t.tolist()}: the teacher and the decoder must read the same R tokens.")
    out = torch.zeros(targets.shape, dtype=weights.dtype, device=weights.device)
    out[valid_t] = weights[mask.bool()]
    return out
