"""Stage B's precomputed teacher features give the student exactly what the online teacher passes give."""

import dataclasses

import pytest
import torch

from pipelines.mdr.features import sentence_features
from pipelines.mdr.tasks import MDRStudentTask, student_item
from pipelines.mdr.teacher_table import TeacherFeatureTable, item_sequences


def test_one_row_per_distinct_text_equal_to_the_teacher_on_that_text_alone(config, codec, examples, teacher):
    items = [student_item(e, codec, config) for e in examples]
    sequences = [s for it in items for s in item_sequences(it, codec.pad_id)]
    table = TeacherFeatureTable(teacher.encoder, sequences + sequences[:3], codec.pad_id, batch_size=3,
                                progress=False)
    assert len(table) == len({tuple(s) for s in sequences})
    for seq in sequences:
        ids = torch.tensor([seq])
        alone = sentence_features(teacher.encoder, ids, torch.ones_like(ids))[0]
        torch.testing.assert_close(table.features[table.rows([seq])][0], alone, rtol=1e-5, atol=1e-6)
    assert not teacher.encoder.training and all(not p.requires_grad for p in teacher.encoder.parameters())
    with pytest.raises(KeyError):
        table.rows([[1, 2, 3, 4, 5, 6, 7]])


def test_add_encodes_only_new_texts(config, codec, examples, teacher):
    items = [student_item(e, codec, config) for e in examples]
    sequences = [s for it in items for s in item_sequences(it, codec.pad_id)]
    table = TeacherFeatureTable(teacher.encoder, sequences[:5], codec.pad_id, progress=False)
    before = table.features.clone()
    assert table.add(teacher.encoder, sequences[:5]) == 0 and torch.equal(table.features, before)
    added = table.add(teacher.encoder, sequences)
    assert added == len({tuple(s) for s in sequences}) - len(before) and len(table) == len(table.features)
    assert torch.equal(table.features[:len(before)], before)
    for seq in sequences:
        ids = torch.tensor([seq])
        alone = sentence_features(teacher.encoder, ids, torch.ones_like(ids))[0]
        torch.testing.assert_close(table.features[table.rows([seq])][0], alone, rtol=1e-5, atol=1e-6)


def without_dropout(model):
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def test_student_loss_and_gradients_match_the_online_teacher(config, codec, examples, gpt2, teacher):
    """The table path (selection, H_P and teacher features computed before training) and the online
    path (all of it in the step) give the same H_P, loss and gradients. Train mode with the same
    P^(0) draws; dropout is off because the online path pads H_P to a static width (2 Lh, it cannot
    know the batch's longest H_P without a host sync) and dropout masks depend on the shape."""
    online_cfg = dataclasses.replace(config, precompute_teacher_features=False)
    tabled = MDRStudentTask(config, examples, examples[:2], codec, teacher, gpt2, progress=False)
    online = MDRStudentTask(online_cfg, examples, examples[:2], codec, teacher, gpt2, progress=False)
    t_batch = tabled.collate(list(tabled.train_dataset()))
    o_batch = online.collate(list(online.train_dataset()))
    assert {"q_te", "p_te", "hp_te", "r_te", "hp_ids"} <= set(t_batch) and "h_ids" not in t_batch
    assert "hp_ids" not in o_batch and "q_te" not in o_batch and "h_ids" in o_batch
    assert t_batch["hp_te"].shape == (4, teacher.hidden)
    assert len(tabled.table) > 0 and online.table is None and tabled.valid_dataset() is not None

    torch.manual_seed(0)
    model = without_dropout(tabled.build_model())
    # the same H_P token ids, selected once from the table or in the step
    q_te = sentence_features(teacher.encoder, o_batch["q_ids"], o_batch["q_mask"])
    hp_ids, hp_mask, present = model.partial_history(q_te, o_batch["h_ids"], o_batch["h_mask"], o_batch["h_index"])
    assert present.tolist() == t_batch["hp_present"].tolist() == [False, True, False, True]
    for row in (1, 3):
        tabled_hp = t_batch["hp_ids"][row][t_batch["hp_mask"][row].bool()]
        assert hp_ids[row][hp_mask[row].bool()].tolist() == tabled_hp.tolist() == tabled.train_dataset()[row]["hp"]

    model.train()
    losses, grads = [], []
    for task, batch in ((tabled, t_batch), (online, o_batch)):
        model.zero_grad()
        torch.manual_seed(1)                                   # the same P^(0) draws
        loss, n = task.compute_loss(model, batch)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad])
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert losses[0].item() > 0
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert sum(g.abs().sum().item() for g in grads[0]) > 0
    assert all(p.grad is None for p in teacher.parameters())


def test_items_outside_the_table_use_the_online_teacher(config, codec, examples, gpt2, teacher):
    """save_final caches R^(K) of test examples the table never saw: their batches carry no features
    and no H_P, and give the R^(K) a table built with them gives."""
    task = MDRStudentTask(config, examples[:2], None, codec, teacher, gpt2, progress=False)
    task.train_dataset()
    unseen = [student_item(e, codec, config, with_response=False) for e in examples[2:]]
    batch = task.collate(unseen)
    assert "q_te" not in batch and "hp_ids" not in batch and batch["h_ids"].shape[0] == 2
    model = task.build_model().eval()
    r_online = model(**batch)["r_pred"]
    seen = MDRStudentTask(config, examples[2:], None, codec, teacher, gpt2, progress=False)
    t_batch = seen.collate(list(seen.train_dataset()))
    assert "hp_te" in t_batch
    torch.testing.assert_close(r_online, model(**t_batch)["r_pred"], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(r_online[0], r_online[1])
