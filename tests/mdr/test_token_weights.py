"""Adjusted token weights and L_token (seed 001, eq. 14) against hand-computed values."""

import math

import pytest
import torch
import torch.nn.functional as F

from pipelines.mdr.text import IGNORE
from pipelines.mdr.token_weights import check_aligned, compute_token_loss, scatter_to_targets, token_weights

C = 1 / math.sqrt(2)  # cos((1, 1), (1, 0))


def _feats():
    # row 0: tokens (1,0), (0,1), (1,1), pad;  row 1: tokens (0,1), (1,1), pad (1,0)
    tokens = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [5.0, 5.0]],
                           [[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]])
    r_te = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    return tokens, r_te, mask


def test_weights_match_hand_computed_cosines():
    tokens, r_te, mask = _feats()
    w = token_weights(tokens, r_te, mask, sigma=0.5)
    # row 0: W = (1, 0, 1/sqrt2), mu = 1 -> exp(-(W-1)^2 / 0.5)
    # row 1: W = (0, 1/sqrt2); the pad's cos 1 is not the max: mu = 1/sqrt2
    expected = torch.tensor([[1.0, math.exp(-2.0), math.exp(-(1 - C) ** 2 / 0.5), 0.0],
                             [math.exp(-(C ** 2) / 0.5), 1.0, 0.0, 0.0]])
    assert torch.allclose(w, expected, atol=1e-6)
    assert w[0, 2].item() == pytest.approx(0.8423388801, abs=1e-6)
    assert w[1, 0].item() == pytest.approx(math.exp(-1.0), abs=1e-6)


def test_sigma_controls_the_spread():
    tokens, r_te, mask = _feats()
    w_small = token_weights(tokens, r_te, mask, sigma=0.1)
    w_big = token_weights(tokens, r_te, mask, sigma=1e6)
    assert w_small[0, 1].item() == pytest.approx(math.exp(-1 / 0.02), abs=1e-12)
    assert torch.equal(w_big, mask.float())  # every valid weight is exactly 1


def test_bad_sigma_is_refused():
    tokens, r_te, mask = _feats()
    with pytest.raises(ValueError, match="sigma"):
        token_weights(tokens, r_te, mask, sigma=0.0)


def test_token_loss_hand_value():
    # p = (0.25, 0.5, 0.25) at every position; targets 1 (w=1), 0 (w=0.5), ignored (w=7)
    logits = torch.log(torch.tensor([1.0, 2.0, 1.0])).expand(1, 3, 3).clone()
    targets = torch.tensor([[1, 0, IGNORE]])
    weights = torch.tensor([[1.0, 0.5, 7.0]])
    loss, n = compute_token_loss(logits, targets, weights)
    # -(1 * ln 0.5 + 0.5 * ln 0.25) / 2 = (ln 2 + ln 2) / 2 = ln 2
    assert n == 2
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)


def test_token_loss_normalises_by_all_target_tokens_of_the_batch():
    logits = torch.zeros(2, 2, 3)  # uniform: -log p = ln 3 everywhere
    targets = torch.tensor([[0, IGNORE], [2, 1]])
    weights = torch.tensor([[1.0, 0.0], [0.5, 0.25]])
    loss, n = compute_token_loss(logits, targets, weights)
    assert n == 3
    assert loss.item() == pytest.approx((1.0 + 0.5 + 0.25) * math.log(3) / 3, abs=1e-6)


def test_unit_weights_and_huge_sigma_give_plain_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 5)
    targets = torch.tensor([[1, 4, IGNORE, IGNORE], [0, 3, 2, IGNORE]])
    tokens = torch.randn(2, 4, 6)
    r_te = torch.randn(2, 6)
    mask = (targets != IGNORE).long()
    w = token_weights(tokens, r_te, mask, sigma=1e6)
    loss, n = compute_token_loss(logits, targets, w)
    plain = F.cross_entropy(logits.reshape(-1, 5), targets.reshape(-1), ignore_index=IGNORE)
    assert n == 5
    assert loss.item() == pytest.approx(plain.item(), abs=1e-6)
    assert compute_token_loss(logits, targets)[0].item() == pytest.approx(plain.item(), abs=1e-6)


def test_no_target_gives_zero_loss_and_zero_count():
    loss, n = compute_token_loss(torch.zeros(1, 2, 3, requires_grad=True), torch.full((1, 2), IGNORE))
    assert (loss.item(), n) == (0.0, 0)


def test_scatter_places_weights_on_target_positions():
    weights = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.4, 0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    targets = torch.tensor([[IGNORE, IGNORE, 7, 8, IGNORE], [IGNORE, 5, 6, 7, IGNORE]])
    out = scatter_to_targets(weights, mask, targets)
    assert torch.equal(out, torch.tensor([[0.0, 0.0, 0.1, 0.2, 0.0], [0.0, 0.3, 0.4, 0.5, 0.0]]))
    check_aligned(mask, targets)
    with pytest.raises(ValueError, match="differ"):
        check_aligned(torch.tensor([[1, 0, 0], [1, 1, 1]]), targets)


def test_scatter_reads_valid_weights_in_order_whatever_the_mask_layout():
    """Left padding and holes: the k-th valid weight still goes to the k-th target (boolean-indexing reference)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        mask = torch.rand(4, 7, generator=g) < 0.6                     # (B, Tr) arbitrary layout
        weights = torch.rand(4, 7, generator=g).masked_fill(~mask, 0.0)
        targets = torch.full((4, 11), IGNORE)
        for b in range(4):
            pos = torch.randperm(11, generator=g)[: int(mask[b].sum())].sort().values
            targets[b, pos] = 3
        expected = torch.zeros(4, 11)
        expected[targets != IGNORE] = weights[mask]
        assert torch.equal(scatter_to_targets(weights, mask.long(), targets), expected)
