"""Stage B: history selection, student forward, L_sentence, frozen teacher, feature cache."""

import pytest
import torch

from pipelines.errors import DataError
from pipelines.mdr.features import sentence_features
from pipelines.mdr.student import (MDRStudent, compute_sentence_loss, load_response_features,
                                   response_features, save_response_features, select_history)
from pipelines.mdr.tasks import FEATURES_FILE, MDRStudentTask, MDRTeacherTask, collate_student, student_item


def test_sentence_loss_hand_value():
    r_pred = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    r_te = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    loss, n = compute_sentence_loss(r_pred, r_te)
    assert (loss.item(), n) == (pytest.approx((0 + 1 + 4 + 9) / 4), 2)


def test_history_selection_picks_the_most_similar_round_and_the_last():
    q_te = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    h_te = torch.tensor([
        [[0.0, 1.0], [1.0, 0.1], [0.5, 0.5], [9.0, 0.0]],    # cos (0, .995, .707), pad -> index 1, last 2
        [[0.0, 3.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]],    # cos (1, 0) -> index 0, last 1
        [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],    # no history
    ])
    h_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    index, last, has = select_history(q_te, h_te, h_mask)
    assert index.tolist() == [1, 0, 0]
    assert last.tolist() == [2, 1, 0]
    assert has.tolist() == [True, True, False]


def test_collate_flattens_history_rounds(config, codec, examples):
    items = [student_item(e, codec, config) for e in examples]
    batch = collate_student(items, codec.pad_id)
    # examples have 0, 1, 0, 2 history rounds -> rows 0 (ex 1), 1 and 2 (ex 3)
    assert batch["h_index"].tolist() == [[-1, -1], [0, -1], [-1, -1], [1, 2]]
    assert batch["h_ids"].shape[0] == 3
    assert batch["p_present"].tolist() == [True, True, False, True]
    assert batch["h_ids"][2][batch["h_mask"][2].bool()].tolist() == codec.round_ids(
        "nice city!", "thank you, it is cold.", config.max_history_tokens)


def test_forward_uses_the_selected_rounds(config, codec, examples, gpt2, teacher):
    task = MDRStudentTask(config, examples, None, codec, teacher, gpt2)
    model = task.build_model().eval()
    batch = task.collate(list(task.train_dataset()))
    out = model(**batch)
    assert out["r_pred"].shape == out["p_k"].shape == out["r_te"].shape == (4, 64)
    # example 3 has rounds at rows 1, 2: H_P = (argmax cosine, last = row 2)
    q_te = sentence_features(teacher.encoder, batch["q_ids"], batch["q_mask"])
    h_te = sentence_features(teacher.encoder, batch["h_ids"], batch["h_mask"])
    cos = torch.nn.functional.cosine_similarity(h_te[1:3], q_te[3:4])
    assert out["selected"].tolist() == [[-1, -1], [0, 0], [-1, -1], [1 + int(cos.argmax()), 2]]
    assert torch.allclose(out["r_te"], sentence_features(teacher.encoder, batch["r_ids"], batch["r_mask"]))
    # R is only the target: the prediction does not read it
    no_r = {k: v for k, v in batch.items() if k not in ("r_ids", "r_mask", "r_te")}
    assert torch.equal(model(**no_r)["r_pred"], out["r_pred"])
    assert "r_te" not in model(**no_r)


def test_a_batch_without_any_history(config, codec, examples, gpt2, teacher):
    task = MDRStudentTask(config, examples, None, codec, teacher, gpt2)
    model = task.build_model().eval()
    batch = task.collate([task.train_dataset()[0], task.train_dataset()[2]])
    assert batch["h_ids"].shape[0] == 0 and batch["h_index"].tolist() == [[-1], [-1]]
    out = model(**batch)
    assert out["selected"].tolist() == [[-1, -1], [-1, -1]]
    assert torch.isfinite(out["r_pred"]).all() and out["r_pred"].shape == (2, 64)


def test_no_gradient_reaches_the_frozen_teacher_and_the_loss_falls(config, codec, examples, gpt2, teacher):
    task = MDRStudentTask(config, examples, None, codec, teacher, gpt2)
    model = task.build_model().train()
    assert not teacher.encoder.training  # stays in eval mode inside a training student
    batch = task.collate(list(task.train_dataset()))
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=3e-3)
    before = [p.detach().clone() for p in teacher.parameters()]
    model.eval()
    first = task.compute_loss(model, batch)[0].item()
    model.train()
    for _ in range(30):
        loss, n = task.compute_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert n == 4
    assert all(p.grad is None for p in teacher.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters()))
    assert model.student.wte.weight.grad is not None
    assert model.memory.p_update.attend_persona.value.weight.grad is not None
    model.eval()
    assert task.compute_loss(model, batch)[0].item() < 0.6 * first


def test_cache_round_trip(config, codec, examples, gpt2, teacher, tmp_path):
    task = MDRStudentTask(config, examples[:3], None, codec, teacher, gpt2, cache_examples=examples, cache_batch_size=3)
    model = task.build_model()
    task.save_final(model, tmp_path)
    cached = load_response_features(tmp_path / FEATURES_FILE)
    assert sorted(cached) == sorted(e.id for e in examples) and "e2/t6" in cached
    items = [student_item(e, codec, config, with_response=False) for e in examples]
    again = response_features(model, items, [e.id for e in examples], collate=task.collate, batch_size=1)
    for key, value in again.items():   # eval mode: the same R^(K) whatever the batching
        assert torch.allclose(cached[key], value, atol=1e-5)
    loaded = MDRStudent.load(tmp_path, teacher.encoder)
    assert torch.allclose(response_features(loaded, items, [e.id for e in examples], collate=task.collate)["e1/t4"],
                          cached["e1/t4"], atol=1e-5)


def test_save_and_load_with_tied_updates(codec, examples, gpt2, teacher, tmp_path):
    from pipelines.mdr.config import MDRConfig
    cfg = MDRConfig(hops=2, share_update_weights=True, p0="learned")
    model = MDRStudentTask(cfg, examples, None, codec, teacher, gpt2).build_model()
    model.save(tmp_path)
    loaded = MDRStudent.load(tmp_path, teacher.encoder)
    assert loaded.memory.r_update is loaded.memory.p_update
    assert torch.equal(loaded.memory.p0, model.memory.p0)
    for a, b in zip(loaded.memory.parameters(), model.memory.parameters()):
        assert torch.equal(a, b)


def test_cache_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_response_features(tmp_path / "none.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"not a cache")
    with pytest.raises(DataError, match="bad.safetensors"):
        load_response_features(tmp_path / "bad.safetensors")
    from safetensors.torch import save_file
    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(DataError, match="schema"):
        load_response_features(tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match="sizes"):
        save_response_features(tmp_path / "mixed.safetensors", {"a": torch.zeros(2), "b": torch.zeros(3)})
    assert save_response_features(tmp_path / "ok.safetensors", {"a/b:c": torch.ones(2)}) == 1
    assert torch.equal(load_response_features(tmp_path / "ok.safetensors")["a/b:c"], torch.ones(2))
