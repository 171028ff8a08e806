"""Stage A: teacher encoder-decoder and L_teacher (seed 001, eqs. 1-3)."""

import math

import pytest
import torch

from pipelines.mdr.features import masked_mean, sentence_features
from pipelines.mdr.tasks import MDRTeacherTask
from pipelines.mdr.teacher import MDRTeacher, compute_teacher_loss
from pipelines.mdr.text import IGNORE


def test_teacher_loss_on_a_three_token_vocabulary():
    # position 0: logits (0, ln 2, ln 3) -> p = (1/6, 2/6, 3/6), target 2
    # position 1: logits (0, 0, 0)       -> p = 1/3, target 0
    # position 2: ignored (the query part)
    logits = torch.tensor([[[0.0, math.log(2), math.log(3)], [0.0, 0.0, 0.0], [9.0, 0.0, 0.0]]])
    targets = torch.tensor([[2, 0, IGNORE]])
    loss, n = compute_teacher_loss(logits, targets)
    assert n == 2
    assert loss.item() == pytest.approx((math.log(2) + math.log(3)) / 2, abs=1e-6)


def test_masked_mean_pools_only_valid_tokens():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 6.0], [0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert torch.equal(masked_mean(hidden, mask), torch.tensor([[2.0, 3.0], [5.0, 6.0]]))
    assert torch.equal(masked_mean(hidden, torch.zeros(2, 3)), torch.zeros(2, 2))


def test_forward_targets_only_the_response(config, codec, examples, gpt2):
    task = MDRTeacherTask(config, examples, None, codec, gpt2)
    model = task.build_model().eval()
    batch = task.collate([task.train_dataset()[i] for i in range(2)])
    out = model(**batch)
    b, l = batch["dec_ids"].shape
    assert out.logits.shape == (b, config.prefix_tokens + l - 1, codec.vocab_size)
    assert out.targets.shape == (b, config.prefix_tokens + l - 1)
    # the targets are exactly R + eos of each example (the encoder's input)
    for row in range(b):
        kept = out.targets[row][out.targets[row] != IGNORE].tolist()
        assert kept == batch["r_ids"][row][batch["r_mask"][row].bool()].tolist()
    # the prefix is the projected R_TE (eq. 2): another R changes the prediction of the first Q token
    swapped = {**batch, "r_ids": batch["r_ids"].flip(0), "r_mask": batch["r_mask"].flip(0)}
    assert not torch.allclose(model(**swapped).logits[:, 0], out.logits[:, 0])
    assert torch.allclose(model(**swapped).logits[:, 0], model.decoder.lm(
        inputs_embeds=model.decoder.prefix(model.encode(swapped["r_ids"], swapped["r_mask"]))).logits[:, 0], atol=1e-5)
    r_te = model.encode(batch["r_ids"], batch["r_mask"])
    assert torch.allclose(r_te, sentence_features(model.encoder, batch["r_ids"], batch["r_mask"]))
    assert r_te.shape == (b, 64)


def test_training_lowers_the_teacher_loss(config, codec, examples, gpt2):
    task = MDRTeacherTask(config, examples, examples[:1], codec, gpt2)
    model = task.build_model().train()
    batch = task.collate(list(task.train_dataset()))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss, n = task.compute_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert n == int(batch["r_mask"].sum())
    assert losses[-1] < 0.6 * losses[0]
    assert len(task.valid_dataset()) == 1


def test_freeze_save_and_load(config, codec, examples, gpt2, tmp_path):
    task = MDRTeacherTask(config, examples, None, codec, gpt2)
    model = task.build_model()
    task.save_final(model, tmp_path)
    loaded = MDRTeacher.load(tmp_path)
    assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    batch = task.collate(list(task.train_dataset()))
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, loaded(**batch).logits, atol=1e-5)
    assert (tmp_path / "tokenizer" / "tokenizer.json").exists()
    assert '"stage": "mdr_teacher"' in (tmp_path / "mdr_config.json").read_text()
