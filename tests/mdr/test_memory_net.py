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


def test_one_hop_against_hand_computed_numbers():
    """H = 2, fixed weights: x^(1) = x^(0) + Attn(Attn(x^(0), Q_E), P_E), each softmax written out."""
    up = Update(2)
    with torch.no_grad():
        up.attend_query.key.weight.copy_(torch.eye(2))
        up.attend_query.value.weight.copy_(torch.eye(2))
        up.attend_persona.key.weight.copy_(2 * torch.eye(2))
        up.attend_persona.value.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))   # swaps the coordinates
    x = torch.tensor([[1.0, 0.0]])
    q_slots = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    p_slots = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [50.0, -50.0]]])                 # the third slot is masked
    # u = Attn(x, Q_E): scores x.q_s / sqrt2 = (1/sqrt2, 0); u = a q_1 + (1 - a) q_2
    a = math.exp(1 / math.sqrt(2)) / (math.exp(1 / math.sqrt(2)) + math.exp(0.0))
    u = (a, 1 - a)
    # dx = Attn(u, P_E): keys 2 p_s, scores (2 u_1, 2 u_2) / sqrt2; values swap(p_s) = (0, 1), (1, 0)
    s1, s2 = 2 * u[0] / math.sqrt(2), 2 * u[1] / math.sqrt(2)
    b = math.exp(s1) / (math.exp(s1) + math.exp(s2))
    expected = torch.tensor([[1.0 + (1 - b), b]])
    assert (a, b) == (pytest.approx(0.669762, abs=1e-6), pytest.approx(0.617785, abs=1e-6))
    out = up.hop(x, q_slots, torch.ones(1, 2), p_slots, torch.tensor([[1, 1, 0]]))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    assert out.tolist() == [[pytest.approx(1.382215, abs=1e-6), pytest.approx(0.617785, abs=1e-6)]]


def _mc_mean(net, q, qm, p, pm, draws):
    """Monte Carlo E[R^(K)] over the rows of ``draws`` (N, H), one P^(0) per row for every example."""
    n, b = draws.shape[0], q.shape[0]
    rep = lambda t: t.repeat(n, *([1] * (t.dim() - 1)))                             # (N B, ...) draw-major
    p0 = draws.unsqueeze(1).expand(n, b, -1).reshape(n * b, -1)                       # (N B, H)
    return net(rep(q), rep(qm), rep(p), rep(pm), p_init=p0)[1].reshape(n, b, -1).mean(0)  # (B, H)


def test_eval_r_is_the_expectation_over_p0_not_r_at_the_mean():
    """R^(K) is not linear in P^(0): the default eval mode ("expected", the mean over fixed draws)
    is closer to E_{P0}[R^(K)] than R^(K)(P0 = 0) is, on an untrained net at a moderate size."""
    torch.manual_seed(0)
    net = MemoryNet(64, hops=3).eval()
    assert net.p0_eval_mode == "expected" and net.p0_eval.shape == (32, 64)
    q, qm, p, pm = _slots(b=4, h=64, sp=4, seed=1)
    z = torch.randn(2048, 64, generator=torch.Generator().manual_seed(99))
    with torch.no_grad():
        reference = _mc_mean(net, q, qm, p, pm, torch.cat([z, -z]))                 # 4096 draws
        expected = net(q, qm, p, pm)[1]
        at_mean = net(q, qm, p, pm, p_init=torch.zeros(4, 64))[1]
    err_expected = (expected - reference).pow(2).mean().item()
    err_mean = (at_mean - reference).pow(2).mean().item()
    assert err_expected < 0.3 * err_mean, (err_expected, err_mean)
    # the same estimate as the mean of R^(K) over the net's own draws, one forward each
    own = _mc_mean(net, q, qm, p, pm, net.p0_eval)
    torch.testing.assert_close(expected, own, rtol=1e-5, atol=1e-5)


def test_expected_eval_draws_are_seeded_antithetic_pairs():
    net = MemoryNet(8, hops=2, init_std=0.5, eval_samples=6, eval_seed=7).eval()
    z = torch.randn(3, 8, generator=torch.Generator().manual_seed(7)) * 0.5
    assert torch.equal(net.p0_eval, torch.cat([z, -z]))
    assert torch.allclose(net.p0_eval.mean(0), torch.zeros(8), atol=1e-7)           # odd terms cancel
    assert net.initial_states(5, torch.zeros(1)).shape == (6, 5, 8)


def test_expected_eval_is_deterministic_and_batch_independent():
    torch.manual_seed(0)
    net = MemoryNet(8, hops=2).eval()
    q, qm, p, pm = _slots(b=5)
    full = net(q, qm, p, pm)[1]
    assert torch.equal(net(q, qm, p, pm)[1], full)                                   # no fresh randomness
    for i in range(5):                                                               # alone, or among others
        torch.testing.assert_close(net(q[i:i + 1], qm[i:i + 1], p[i:i + 1], pm[i:i + 1])[1], full[i:i + 1],
                                   rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(net(q[[3, 0]], qm[[3, 0]], p[[3, 0]], pm[[3, 0]])[1], full[[3, 0]],
                               rtol=1e-6, atol=1e-6)
    again = MemoryNet(8, hops=2)
    again.load_state_dict(net.state_dict())
    assert torch.equal(again.eval()(q, qm, p, pm)[1], full)
    other = MemoryNet(8, hops=2, eval_seed=5)
    other.load_state_dict(net.state_dict())
    assert not torch.equal(other.eval()(q, qm, p, pm)[1], full)


def test_mean_eval_mode_is_p0_zero():
    net = MemoryNet(8, hops=2, p0_eval="mean").eval()
    assert torch.equal(net.initial_states(3, torch.zeros(1)), torch.zeros(1, 3, 8))
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
    assert torch.equal(net.initial_states(2, q), expected_p0.expand(1, 2, -1))
    assert torch.equal(full, net(q, qm, p, pm, p_init=expected_p0.expand(3, -1))[1])
    again = MemoryNet(8, hops=2, p0_eval="seeded", eval_seed=7).eval()
    again.load_state_dict(net.state_dict())
    assert torch.equal(again(q, qm, p, pm)[1], full)


def test_training_draws_a_fresh_normal_p0_per_example():
    net = MemoryNet(16, hops=1, init_std=2.0).train()
    torch.manual_seed(1)
    a = net.initial_states(2000, torch.zeros(1))
    assert a.shape == (1, 2000, 16)
    assert not torch.equal(a[0, 0], a[0, 1])
    assert a.std().item() == pytest.approx(2.0, rel=0.02)
    assert abs(a.mean().item()) < 0.05
    q, qm, p, pm = _slots(h=16)
    torch.manual_seed(3)
    p0 = net.initial_states(3, q)[0]
    torch.manual_seed(3)
    assert torch.equal(net(q, qm, p, pm)[1], net(q, qm, p, pm, p_init=p0)[1])    # one draw, not averaged


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
    for bad in (0, 3, True):
        with pytest.raises(ValueError, match="eval_samples"):
            MemoryNet(8, eval_samples=bad)
