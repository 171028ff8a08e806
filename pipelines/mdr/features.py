"""Sentence and token features of an encoder (MDR, seed 001, equations 1 and 4-10).

The paper writes ``X_TE = Encoder_teacher(X)`` and ``X_SE = Encoder_student(X)`` without saying
how a GPT-2 encoder's states become one vector. METHODS.md fixes the project default: the mean
over the non-pad tokens of the last layer,

    feature(X) = (1 / |X|) * sum_{t : mask_t = 1} h_t^{(L)}                          (B, H)

and the token features used for the adjusted token weights (section 3.3) are the last-layer
states themselves, ``h_t^{(L)}`` (B, T, H): each token of R encoded by the teacher in context.
"""

from __future__ import annotations

import torch
from torch import nn


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` (B, T, H) over the positions where ``mask`` (B, T) is 1 -> (B, H).

    A row without any valid position gives zeros (no division by zero).
    """
    m = mask.to(hidden.dtype).unsqueeze(-1)           # (B, T, 1)
    total = (hidden * m).sum(dim=1)                   # (B, H)
    count = m.sum(dim=1).clamp_min(1.0)               # (B, 1)
    return total / count


def token_features(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Last-layer states of a GPT-2 encoder (``GPT2Model``): (B, T) ids -> (B, T, H)."""
    out = encoder(input_ids=input_ids, attention_mask=attention_mask)
    return out.last_hidden_state                       # (B, T, H)


def sentence_features(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Pooled sentence feature: mean of the last layer over non-pad tokens, (B, T) -> (B, H)."""
    return masked_mean(token_features(encoder, input_ids, attention_mask), attention_mask)


def freeze(module: nn.Module) -> nn.Module:
    """Freeze ``module`` in place (no gradient, stale gradients dropped, eval mode: no dropout)."""
    for p in module.parameters():
        p.requires_grad_(False)
        p.grad = None
    module.eval()
    return module
