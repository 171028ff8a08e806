"""Memory Net P-Update / R-Update (seed 001, section 3.2, Figure 3)."""

import math

import pytest
import torch

from pipelines.mdr.memory_net import MemoryNet, Update, slot_attention


def test_slot_attention_hand_value():
    q = torch.tensor([[1.0, 0.0]])
    keys = torch.tensor([[[2.0, 0.0], [0.0, 0.0]]])
    values = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    out = slot_attention(q, keys, values, torch.tensor([[1, 1]]))
    # scores (2/sqrt2, 0) -> softmax (e^sqrt2, 1) / (e^sqrt2 + 1)
    a = math.exp(math.sqrt(2)) / (math.exp(math.sqrt(2)) + 1)
    assert torch.allclose(out, torch.tensor([[a, 1 - a]]), atol=1e-6)
    assert a == pytest.approx(0.80442971, abs=1e-6)


def test_slot_attention_masks_slots_and_empty_sets_give_zero():
    q = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    keys = torch.tensor([[[2.0, 0.0], [0.0, 0.0]]] * 2)
    values = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]] * 2)
    out = slot_attention(q, keys, values, torch.tensor([[0, 1], [0, 0]]))
    assert torch.equal(out, torch.tensor([[0.0, 1.0], [0.0, 0.0]]))


def _slots(b=3, h=8, sq=2, sp=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, sq, h, generator=g), torch.ones(b, sq, dtype=torch.bool),
            torch.randn(b, sp, h, generator=g), torch.ones(b, sp, dtype=torch.bool))


def test_hops_follow_the_update_rule():
    torch.manual_seed(0)
    net = MemoryNet(8, hops=3)
    q, qm, p, pm = _slots()
    p0 = torch.randn(3, 8)
    p_k, r_k = net(q, qm, p, pm, p_init=p0)
    assert p_k.shape == r_k.shape == (3, 8)
    # P^(k+1) = P^(k) + Attn(Attn(P^(k), Q_E), P_E), three times; then R^(0) = P^(K)
    x = p0
    for _ in range(3):
        u = net.p_update.attend_query(x, q, qm)
        x = x + net.p_update.attend_persona(u, p, pm)
    assert torch.allclose(p_k, x, atol=1e-6)
    y = x
    for _ in range(3):
        y = net.r_update.hop(y, q, qm, p, pm)
    assert torch.allclose(r_k, y, atol=1e-6)
    assert not torch.allclose(p_k, p0)  # the hops updated P
    assert net.r_update is not net.p_update


def test_more_hops_change_the_result():
    torch.manual_seed(0)
    one = MemoryNet(8, hops=1)
    two = MemoryNet(8, hops=2)
    two.load_state_dict(one.state_dict())
    q, qm, p, pm = _slots()
    p0 = torch.randn(3, 8)
    assert not torch.allclose(one(q, qm, p, pm, p_init=p0)[1], two(q, qm, p, pm, p_init=p0)[1])


def test_shared_weights_tie_the_two_updates():
    net = MemoryNet(8, hops=2, share_weights=True)
    assert net.r_update is net.p_update
    assert len(list(net.parameters())) == len(list(Update(8).parameters()))


def test_eval_p0_is_the_mean_by_default():
    net = MemoryNet(8, hops=2).eval()
    assert torch.equal(net.initial_state(3, torch.zeros(1)), torch.zeros(3, 8))
    q, qm, p, pm = _slots()
    assert torch.equal(net(q, qm, p, pm)[1], net(q, qm, p, pm, p_init=torch.zeros(3, 8))[1])


def test_seeded_eval_draw_is_reproducible_and_batch_independent():
    torch.manual_seed(0)
    net = MemoryNet(8, hops=2, p0_eval="seeded", eval_seed=7).eval()
    q, qm, p, pm = _slots()
    full = net(q, qm, p, pm)[1]
    single = net(q[1:2], qm[1:2], p[1:2], pm[1:2])[1]
    assert torch.allclose(full[1:2], single, atol=1e-6)
    expected_p0 = torch.randn(8, generator=torch.Generator().manual_seed(7))
    assert torch.equal(net.initial_state(2, q), expected_p0.expand(2, -1))
    again = MemoryNet(8, hops=2, p0_eval="seeded", eval_seed=7).eval()
    again.load_state_dict(net.state_dict())
    assert torch.equal(again(q, qm, p, pm)[1], full)


def test_training_draws_a_fresh_normal_p0_per_example():
    net = MemoryNet(16, hops=1, init_std=2.0).train()
    torch.manual_seed(1)
    a = net.initial_state(2000, torch.zeros(1))
    assert a.shape == (2000, 16)
    assert not torch.equal(a[0], a[1])
    assert a.std().item() == pytest.approx(2.0, rel=0.02)
    assert abs(a.mean().item()) < 0.05


def test_learned_p0_is_a_parameter_that_gets_gradients():
    net = MemoryNet(8, hops=2, p0="learned")
    q, qm, p, pm = _slots()
    _, r_k = net(q, qm, p, pm)
    r_k.sum().backward()
    assert net.p0.grad is not None and net.p0.grad.abs().sum() > 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="hops"):
        MemoryNet(8, hops=0)
    with pytest.raises(ValueError, match="p0"):
        MemoryNet(8, p0="zeros")
    with pytest.raises(ValueError, match="p0_eval"):
        MemoryNet(8, p0_eval="median")
