"""Stage C: token-weighted decoder (seed 001, eq. 14), frozen teacher, generation."""

import math

import pytest
import torch

from pipelines.errors import ConfigError, DataError
from pipelines.mdr.config import MDRConfig
from pipelines.mdr.decoder import features_for, generate_responses
from pipelines.mdr.features import masked_mean, token_features
from pipelines.mdr.prefix_lm import PrefixLM
from pipelines.mdr.tasks import MDRDecoderTask, MDRTeacherTask
from pipelines.mdr.teacher import compute_teacher_loss
from pipelines.mdr.text import IGNORE
from pipelines.mdr.token_weights import token_weights


@pytest.fixture
def teacher(config, codec, examples, gpt2):
    return MDRTeacherTask(config, examples, None, codec, gpt2).build_model().freeze()


@pytest.fixture
def features(examples):
    g = torch.Generator().manual_seed(3)
    return {e.id: torch.randn(64, generator=g) for e in examples}


def _task(config, codec, examples, teacher, features, **kw):
    return MDRDecoderTask(config, examples, None, codec, teacher, features, **kw)


def test_weights_sit_on_the_response_targets(config, codec, examples, teacher, features):
    task = _task(config, codec, examples, teacher, features)
    model = task.build_model().eval()
    batch = task.collate(list(task.train_dataset()))
    out = model(**batch)
    tokens = token_features(teacher.encoder, batch["r_ids"], batch["r_mask"])
    expected = token_weights(tokens, masked_mean(tokens, batch["r_mask"]), batch["r_mask"], config.sigma)
    for row in range(4):
        on = out["targets"][row] != IGNORE
        assert torch.allclose(out["weights"][row][on], expected[row][batch["r_mask"][row].bool()])
        assert torch.all(out["weights"][row][~on] == 0)
        assert out["weights"][row][on].max().item() == pytest.approx(1.0)  # the token at mu
    assert torch.equal(batch["features"], torch.stack([features[e.id] for e in examples]))


def test_huge_sigma_is_plain_cross_entropy(codec, examples, teacher, features):
    cfg = MDRConfig(sigma=1e6, max_query_tokens=16, max_response_tokens=16)
    task = _task(cfg, codec, examples, teacher, features)
    model = task.build_model().eval()
    batch = task.collate(list(task.train_dataset()))
    out = model(**batch)
    loss, n = task.compute_loss(model, batch)
    plain, m = compute_teacher_loss(out["logits"], out["targets"])
    assert n == m == int(batch["r_mask"].sum())
    assert loss.item() == pytest.approx(plain.item(), abs=1e-6)


def test_token_loss_of_the_stage_against_eq_14_by_hand(codec, examples, teacher, features):
    """L_token = -(1/N) sum_i w_i log p(R_i), w_i = exp(-(W_i - max_j W_j)^2 / (2 sigma^2)),
    W_i = cos(h_i, R_TE), R_TE the mean of the teacher's token states h_i of R (+ eos): written out
    per response and per token from the teacher's states and the decoder's logits."""
    sigma = 0.05
    task = _task(MDRConfig(sigma=sigma, max_query_tokens=16, max_response_tokens=16), codec, examples, teacher,
                 features)
    model = task.build_model().eval()
    batch = task.collate(list(task.train_dataset()))
    loss, n = task.compute_loss(model, batch)
    with torch.no_grad():
        logits = model.decoder(batch["features"], batch["dec_ids"], batch["dec_mask"], batch["labels"]).logits
        total, count, weights = 0.0, 0, []
        for row, example in enumerate(examples):
            r = codec.encoder_ids(example.response, 16)                          # R tokens + eos
            h = teacher.encoder(input_ids=torch.tensor([r])).last_hidden_state[0]     # (Tr, H), alone
            r_te = h.mean(0)
            cos = [float(h[i] @ r_te / (h[i].norm() * r_te.norm())) for i in range(len(r))]
            w = [math.exp(-(c - max(cos)) ** 2 / (2 * sigma ** 2)) for c in cos]
            weights += w
            start = len(codec.encode(example.query)[:16]) + 1                   # R starts after Q sep
            for i, token in enumerate(r):                                      # the prefix token comes first
                log_p = torch.log_softmax(logits[row, task.config.prefix_tokens + start + i - 1], dim=-1)
                total -= w[i] * float(log_p[token])
                count += 1
    assert int(n) == count == int(batch["r_mask"].sum())
    assert loss.item() == pytest.approx(total / count, rel=1e-4)
    assert min(weights) < 0.5 and max(weights) == 1.0                           # the weights do matter here


def test_decoder_starts_from_a_copy_of_the_teacher_decoder(config, codec, examples, teacher, features, gpt2):
    model = _task(config, codec, examples, teacher, features).build_model()
    assert model.decoder is not teacher.decoder
    for (name, a), b in zip(model.decoder.named_parameters(), teacher.decoder.parameters()):
        assert torch.equal(a, b) and a.requires_grad and not b.requires_grad, name
    fresh = _task(MDRConfig(decoder_init="fresh"), codec, examples, teacher, features, gpt2=gpt2).build_model()
    assert not torch.equal(fresh.decoder.lm.lm_head.weight, teacher.decoder.lm.lm_head.weight)
    with pytest.raises(ConfigError, match="fresh"):
        _task(MDRConfig(decoder_init="fresh"), codec, examples, teacher, features)


def test_no_gradient_reaches_the_teacher_and_the_loss_falls(config, codec, examples, teacher, features):
    """The teacher is unfrozen after the task and model are built (they freeze it): only the stage's
    own no_grad around the teacher's token weights keeps gradients off it."""
    task = _task(config, codec, examples, teacher, features)
    model = task.build_model().train()
    assert not model.teacher.training
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for p in teacher.parameters():
        p.requires_grad_(True)
    batch = task.collate(list(task.train_dataset()))
    losses = []
    for _ in range(15):
        loss, _ = task.compute_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        assert all(p.grad is None for p in teacher.parameters())
    assert model.decoder.prefix_proj.weight.grad is not None
    assert losses[-1] < 0.6 * losses[0]


def test_missing_cached_feature_names_the_example(config, codec, examples, teacher, features):
    partial = {k: v for k, v in features.items() if k != "e2/t6"}
    with pytest.raises(DataError, match="e2/t6") as err:
        _task(config, codec, examples, teacher, partial, features_source="cache.safetensors").train_dataset()
    assert err.value.file == "cache.safetensors" and err.value.field == "R^(K)"
    with pytest.raises(DataError, match="e2/t6"):
        features_for(["e1/t2", "e2/t6"], partial)
    assert features_for(["e1/t2"], features).shape == (1, 64)


def test_generation_greedy_and_seeded_sampling(config, codec, examples, teacher, features, tmp_path):
    decoder = teacher.decoder
    queries = [e.query for e in examples]
    feats = features_for([e.id for e in examples], features)
    greedy = generate_responses(decoder, codec, queries, feats, max_new_tokens=5, batch_size=3)
    assert len(greedy) == 4 and all(isinstance(t, str) for t in greedy)
    # batched left-padded generation equals one-by-one generation
    single = [generate_responses(decoder, codec, [q], feats[i:i + 1], max_new_tokens=5)[0] for i, q in enumerate(queries)]
    assert greedy == single
    # greedy decoding equals the argmax of the model's own forward pass
    q_ids = codec.encode(queries[0])[:config.max_query_tokens] + [codec.sep_id]
    ids = decoder.generate(feats[:1], [q_ids], eos_id=-1, max_new_tokens=3)[0]
    seq = list(q_ids)
    emb = decoder.lm.get_input_embeddings()
    for step in range(3):
        embeds = torch.cat([decoder.prefix(feats[:1]), emb(torch.tensor([seq]))], dim=1)
        nxt = int(decoder.lm(inputs_embeds=embeds).logits[0, -1].argmax())
        assert nxt == ids[step]
        seq.append(nxt)
    a = generate_responses(decoder, codec, queries, feats, max_new_tokens=6, do_sample=True, seed=5, top_k=20)
    b = generate_responses(decoder, codec, queries, feats, max_new_tokens=6, do_sample=True, seed=5, top_k=20)
    assert a == b
    decoder.save(tmp_path / "decoder")
    assert generate_responses(PrefixLM.load(tmp_path / "decoder"), codec, queries, feats, max_new_tokens=5) == greedy
