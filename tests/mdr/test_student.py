"""Stage B: history selection, H_P, the slots of eqs. 10-12, L_sentence, frozen teacher, feature cache."""

import dataclasses

import pytest
import torch

from pipelines.errors import DataError
from pipelines.mdr.features import sentence_features
from pipelines.mdr.student import (MDRStudent, compute_sentence_loss, concat_rounds, load_response_features,
                                   partial_history_ids, response_features, save_response_features, select_history)
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


def test_partial_history_is_the_selected_round_then_the_last_cut_from_the_front():
    rounds = [[1, 2, 9], [3, 4, 5, 9], [6, 9]]
    assert partial_history_ids(rounds, 0, 100) == [1, 2, 9, 6, 9]          # H(index), Q(T-1) R(T-1)
    assert partial_history_ids(rounds, 1, 100) == [3, 4, 5, 9, 6, 9]
    assert partial_history_ids(rounds, 2, 100) == [6, 9]                   # the last round once
    assert partial_history_ids(rounds, 1, 4) == [5, 9, 6, 9]               # the most recent end is kept
    assert partial_history_ids(rounds, 2, 1) == [9]
    assert partial_history_ids([], 0, 100) == []


@pytest.mark.parametrize("max_tokens", [1, 3, 5, 7, 100])
def test_device_concatenation_equals_the_list_one(max_tokens):
    g = torch.Generator().manual_seed(0)
    rounds = [torch.randint(1, 50, (int(n),), generator=g).tolist() for n in (3, 5, 1, 4, 2)]
    h_ids = torch.zeros(5, 5, dtype=torch.long)
    h_mask = torch.zeros(5, 5, dtype=torch.long)
    for i, r in enumerate(rounds):
        h_ids[i, :len(r)], h_mask[i, :len(r)] = torch.tensor(r), 1
    # rows of h_ids: example 0 has rounds 0-2, example 1 rounds 3-4, example 2 none
    cases = [(0, 2, True), (1, 2, True), (2, 2, True), (3, 4, True), (4, 4, True), (0, 0, False)]
    first, last, has = (torch.tensor(c) for c in zip(*cases))
    ids, mask = concat_rounds(h_ids, h_mask, first, last, has, max_tokens)
    assert ids.shape == mask.shape == (6, min(max_tokens, 10))
    for row, (f, l, h) in enumerate(cases):
        own = rounds[:3] if l == 2 else rounds[3:]
        expected = partial_history_ids(own, f - (0 if l == 2 else 3), max_tokens) if h else []
        n = len(expected)
        if h:
            assert ids[row, :n].tolist() == expected and mask[row].tolist() == [1] * n + [0] * (mask.shape[1] - n)
        else:                                                              # no history: one filler position
            assert mask[row].tolist() == [1] + [0] * (mask.shape[1] - 1)


def test_collate_flattens_history_rounds_or_pads_h_p(config, codec, examples):
    items = [student_item(e, codec, config) for e in examples]
    batch = collate_student(items, codec.pad_id)
    # examples have 0, 1, 0, 2 history rounds -> rows 0 (ex 1), 1 and 2 (ex 3)
    assert batch["h_index"].tolist() == [[-1, -1], [0, -1], [-1, -1], [1, 2]]
    assert batch["h_ids"].shape[0] == 3 and "hp_ids" not in batch
    assert batch["p_present"].tolist() == [True, True, False, True]
    assert batch["h_ids"][2][batch["h_mask"][2].bool()].tolist() == codec.round_ids(
        "nice city!", "thank you, it is cold.", config.max_history_tokens)
    with_hp = [{**it, "hp": hp} for it, hp in zip(items, ([], [7, 8], [], [1, 2, 3]))]
    batch = collate_student(with_hp, codec.pad_id)
    assert "h_ids" not in batch and batch["hp_present"].tolist() == [False, True, False, True]
    assert batch["hp_ids"].tolist() == [[codec.pad_id] * 3, [7, 8, codec.pad_id], [codec.pad_id] * 3, [1, 2, 3]]
    assert batch["hp_mask"].tolist() == [[1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 1]]


def _encode(encoder, seqs):
    """Sentence features of each id list encoded alone, (N, H); an empty list gives a zero row."""
    rows = []
    for seq in seqs:
        ids = torch.tensor([seq or [0]])
        rows.append(sentence_features(encoder, ids, torch.ones_like(ids))[0] if seq else torch.zeros(64))
    return torch.stack(rows)


def expected_slots(model, codec, config, examples):
    """Eqs. 7 and 10-12 by hand from the encoders: Q_E = [Q_TE, Q_SE], P_E = [P_TE, P_SE, H_PTE, H_PSE]
    with H_P the text of the most similar round then the last one, each encoded alone; and the masks."""
    teacher, student = model.teacher, model.student
    q = [codec.encoder_ids(e.query, config.max_query_tokens) for e in examples]
    p = [codec.encoder_ids(" ".join(e.persona), config.max_persona_tokens) if e.persona else [] for e in examples]
    hp, chosen = [], []
    for e, q_ids in zip(examples, q):
        rounds = [codec.round_ids(a, b, config.max_history_tokens) for a, b in e.history]
        cos = [torch.nn.functional.cosine_similarity(_encode(teacher, [r]), _encode(teacher, [q_ids])).item()
               for r in rounds]
        index = max(range(len(rounds)), key=lambda i: cos[i]) if rounds else None
        chosen.append(index)
        text = [] if index is None else rounds[index] + rounds[-1] if index != len(rounds) - 1 else rounds[-1]
        hp.append(text[-config.max_hp_tokens:])
    with torch.no_grad():
        q_slots = torch.stack([_encode(teacher, q), _encode(student, q)], dim=1)                       # (B, 2, H)
        p_slots = torch.stack([_encode(teacher, p), _encode(student, p), _encode(teacher, hp), _encode(student, hp)],
                              dim=1)                                                                  # (B, 4, H)
    persona, history = [bool(x) for x in p], [bool(x) for x in hp]
    p_mask = torch.tensor([[a, a, b, b] for a, b in zip(persona, history)])
    return q_slots, torch.ones(len(examples), 2, dtype=torch.bool), p_slots, p_mask, hp, chosen


class Spy:
    """Records the arguments the Memory Net is called with."""

    def __init__(self, memory):
        self.memory, self.calls = memory, []
        self.forward = memory.forward
        memory.forward = self

    def __call__(self, *args, **kwargs):
        self.calls.append(args)
        return self.forward(*args, **kwargs)


@pytest.mark.parametrize("precompute", [True, False])
def test_the_memory_net_reads_exactly_eqs_10_to_12(precompute, config, codec, examples, gpt2, teacher):
    cfg = dataclasses.replace(config, precompute_teacher_features=precompute)
    task = MDRStudentTask(cfg, examples, None, codec, teacher, gpt2, progress=False)
    model = task.build_model().eval()
    q_slots, q_mask, p_slots, p_mask, hp, chosen = expected_slots(model, codec, config, examples)
    assert chosen == [None, 0, None, 0]                       # example 3: H_P = round 0 then round 1 (T-1)
    assert hp[3] == codec.round_ids(*examples[3].history[0], 24) + codec.round_ids(*examples[3].history[1], 24)
    assert hp[1] == codec.round_ids(*examples[1].history[0], 24)     # one round: selected = last, held once
    if precompute:
        assert [it["hp"] for it in task.train_dataset()] == hp
    spy = Spy(model.memory)
    batch = task.collate(list(task.train_dataset()))
    out = model(**batch)
    (got_q, got_qm, got_p, got_pm), = spy.calls
    assert torch.equal(got_qm, q_mask) and torch.equal(got_pm, p_mask)
    assert p_mask.tolist() == [[True, True, False, False], [True, True, True, True],
                               [False, False, False, False], [True, True, True, True]]
    torch.testing.assert_close(got_q, q_slots, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_p, p_slots * p_mask.unsqueeze(-1), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        _, r_hand = spy.forward(q_slots, q_mask, p_slots, p_mask)
    torch.testing.assert_close(out["r_pred"], r_hand, rtol=1e-4, atol=1e-5)
    assert torch.allclose(out["r_te"], sentence_features(teacher.encoder, batch["r_ids"], batch["r_mask"]), atol=1e-5)
    # R is only the target: the prediction does not read it
    no_r = {k: v for k, v in batch.items() if k not in ("r_ids", "r_mask", "r_te")}
    assert torch.equal(model(**no_r)["r_pred"], out["r_pred"])
    assert "r_te" not in model(**no_r)


def test_a_batch_without_any_history(config, codec, examples, gpt2, teacher):
    """No round in the batch: the H_P slots are masked out, and each example's R^(K) is what it is
    in a batch with history (no slot of another example leaks in)."""
    online = dataclasses.replace(config, precompute_teacher_features=False)
    task = MDRStudentTask(online, examples, None, codec, teacher, gpt2)
    model = task.build_model().eval()
    batch = task.collate([task.train_dataset()[0], task.train_dataset()[2]])
    assert batch["h_ids"].shape[0] == 0 and batch["h_index"].tolist() == [[-1], [-1]]
    spy = Spy(model.memory)
    out = model(**batch)
    assert spy.calls[0][3].tolist() == [[True, True, False, False], [False, False, False, False]]
    q_slots, q_mask, p_slots, p_mask, _, _ = expected_slots(model, codec, config, [examples[0], examples[2]])
    with torch.no_grad():
        _, r_hand = spy.forward(q_slots, q_mask, p_slots, p_mask)
    torch.testing.assert_close(out["r_pred"], r_hand, rtol=1e-4, atol=1e-5)
    full = model(**task.collate(list(task.train_dataset())))["r_pred"]
    torch.testing.assert_close(out["r_pred"], full[[0, 2]], rtol=1e-4, atol=1e-5)


def unfrozen(teacher):
    """Let every teacher parameter require a gradient again (the tasks freeze it when they are
    built): only the stage's own no_grad / detach can then keep gradients off the teacher."""
    for p in teacher.parameters():
        p.requires_grad_(True)
    return teacher


@pytest.mark.parametrize("precompute", [True, False])
def test_no_gradient_reaches_the_teacher_and_the_loss_falls(precompute, config, codec, examples, gpt2, teacher):
    cfg = dataclasses.replace(config, precompute_teacher_features=precompute)
    task = MDRStudentTask(cfg, examples, None, codec, teacher, gpt2, progress=False)
    model = task.build_model().train()
    assert not teacher.encoder.training  # stays in eval mode inside a training student
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    unfrozen(teacher)                    # before the table of teacher features is built, too
    batch = task.collate(list(task.train_dataset()))
    assert all(p.requires_grad for p in teacher.parameters()) and (task.table is not None) == precompute
    before = [p.detach().clone() for p in teacher.parameters()]
    model.eval()
    first = task.compute_loss(model, batch)[0].item()
    model.train()
    for _ in range(30):
        loss, n = task.compute_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert all(p.grad is None for p in teacher.parameters())
    assert n == 4
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
    assert loaded.max_hp_tokens == config.max_hp_tokens and loaded.memory.settings() == model.memory.settings()
    assert torch.allclose(response_features(loaded, items, [e.id for e in examples], collate=task.collate)["e1/t4"],
                          cached["e1/t4"], atol=1e-5)
    # the cache holds the expectation over P^(0): the mean of R^(K) over the M fixed draws, one at a time
    memory = model.eval().memory
    assert memory.p0_eval_mode == "expected" and memory.p0_eval.shape[0] == config.p0_eval_samples
    spy = Spy(memory)
    model(**task.collate(items))
    slots = spy.calls[0]
    with torch.no_grad():
        per_draw = torch.stack([spy.forward(*slots, p_init=d.expand(4, -1))[1] for d in memory.p0_eval])
    for row, e in enumerate(examples):
        torch.testing.assert_close(cached[e.id], per_draw.mean(0)[row], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(cached[e.id], per_draw[0, row], atol=0.1)         # not one draw


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
