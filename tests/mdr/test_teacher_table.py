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


def test_student_loss_and_gradients_match_the_online_teacher(config, codec, examples, gpt2, teacher):
    online_cfg = dataclasses.replace(config, precompute_teacher_features=False)
    tabled = MDRStudentTask(config, examples, examples[:2], codec, teacher, gpt2, progress=False)
    online = MDRStudentTask(online_cfg, examples, examples[:2], codec, teacher, gpt2, progress=False)
    t_batch = tabled.collate(list(tabled.train_dataset()))
    o_batch = online.collate(list(online.train_dataset()))
    assert {"q_te", "p_te", "h_te", "r_te"} <= set(t_batch) and "h_te" not in o_batch
    assert t_batch["h_te"].shape == (t_batch["h_ids"].shape[0], teacher.hidden)
    assert len(tabled.table) > 0 and online.table is None and tabled.valid_dataset() is not None

    torch.manual_seed(0)
    model = tabled.build_model().train()
    losses, grads = [], []
    for task, batch in ((tabled, t_batch), (online, o_batch)):
        model.zero_grad()
        torch.manual_seed(1)                                   # the same dropout masks and P^(0) draws
        loss, n = task.compute_loss(model, batch)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad])
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert all(p.grad is None for p in teacher.parameters())


def test_items_outside_the_table_use_the_online_teacher(config, codec, examples, gpt2, teacher):
    """save_final caches R^(K) of test examples the table never saw: their batches carry no features."""
    task = MDRStudentTask(config, examples[:2], None, codec, teacher, gpt2, progress=False)
    task.train_dataset()
    unseen = [student_item(e, codec, config, with_response=False) for e in examples[2:]]
    batch = task.collate(unseen)
    assert "q_te" not in batch and "h_te" not in batch
    out = task.build_model().eval()(**batch)
    assert out["r_pred"].shape == (2, teacher.hidden)
