"""The three MDR TrainTasks end to end on 4 examples, and the MDR config checks."""

import dataclasses

import pytest
import torch
from torch.utils.data import DataLoader

from pipelines.errors import ConfigError, DataError
from pipelines.mdr.config import MDRConfig
from pipelines.mdr.decoder import features_for, generate_responses
from pipelines.mdr.prefix_lm import PrefixLM
from pipelines.mdr.student import MDRStudent, load_response_features
from pipelines.mdr.tasks import (FEATURES_FILE, MDRDecoderTask, MDRStudentTask, MDRTeacherTask, collate_decoder,
                                 collate_teacher, student_item, teacher_item)
from pipelines.mdr.teacher import MDRTeacher
from pipelines.mdr.text import IGNORE
from pipelines.training.config import TrainTask


def _train(task, steps, lr, teacher=None):
    """Train ``task``'s model; with ``teacher``, that teacher is unfrozen once the task has built the
    model (building freezes it), so only the stage's own no_grad keeps gradients off it: checked
    after every backward."""
    model = task.build_model().train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    for p in teacher.parameters() if teacher is not None else ():
        p.requires_grad_(True)
    loader = DataLoader(task.train_dataset(), batch_size=4, collate_fn=task.collate)
    losses = []
    for _ in range(steps):
        for batch in loader:
            loss, n = task.compute_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            assert teacher is None or all(p.grad is None for p in teacher.parameters())
    return model, losses


def test_three_stages_end_to_end(config, codec, examples, gpt2, tmp_path):
    teacher_task = MDRTeacherTask(config, examples, examples[:2], codec, gpt2)
    assert isinstance(teacher_task, TrainTask)
    teacher, losses = _train(teacher_task, 8, 1e-2)
    assert losses[-1] < losses[0]
    teacher_task.save_final(teacher, tmp_path / "teacher")

    frozen = MDRTeacher.load(tmp_path / "teacher")
    student_task = MDRStudentTask(config, examples, None, codec, frozen, gpt2, cache_examples=examples)
    assert isinstance(student_task, TrainTask) and student_task.valid_dataset() is None
    student, losses = _train(student_task, 8, 3e-3, teacher=frozen)
    assert losses[-1] < losses[0]
    student_task.save_final(student, tmp_path / "student")
    cache = load_response_features(tmp_path / "student" / FEATURES_FILE)
    assert set(cache) == {e.id for e in examples}
    assert MDRStudent.load(tmp_path / "student", frozen.encoder).memory.hops == config.hops

    decoder_task = MDRDecoderTask(config, examples, examples[2:], codec, frozen, cache,
                                  features_source=str(tmp_path / "student" / FEATURES_FILE))
    assert isinstance(decoder_task, TrainTask) and len(decoder_task.valid_dataset()) == 2
    decoder, losses = _train(decoder_task, 8, 1e-2, teacher=frozen)
    assert losses[-1] < losses[0]
    decoder_task.save_final(decoder, tmp_path / "decoder")

    loaded = PrefixLM.load(tmp_path / "decoder" / "decoder")
    feats = features_for([e.id for e in examples], cache)
    texts = generate_responses(loaded, codec, [e.query for e in examples], feats, max_new_tokens=8)
    assert texts == generate_responses(decoder.decoder, codec, [e.query for e in examples], feats, max_new_tokens=8)
    assert (tmp_path / "decoder" / "tokenizer" / "tokenizer.json").exists()


def test_each_stage_step_is_one_graph_without_host_syncs(config, codec, examples, gpt2, tmp_path):
    """torch.compile captures each stage's whole compute_loss (forward + loss) as one graph: no graph
    break, so no data-dependent branch or read-back (``.item()``, boolean indexing) stalls the GPU
    in a training step, and the compiled step (TrainConfig.compile) fuses the whole of it."""
    import torch._dynamo as dynamo

    def graphs(task, model):
        batch = task.collate([task.train_dataset()[i] for i in range(4)])
        explained = dynamo.explain(task.compute_loss)(model.train(), batch)
        return explained.graph_count, [str(r.reason)[:120] for r in explained.break_reasons]

    dynamo.reset()
    teacher_task = MDRTeacherTask(config, examples, None, codec, gpt2)
    teacher = teacher_task.build_model()
    assert graphs(teacher_task, teacher) == (1, [])
    teacher_task.save_final(teacher, tmp_path / "teacher")
    frozen = MDRTeacher.load(tmp_path / "teacher")
    student_task = MDRStudentTask(config, examples, None, codec, frozen, gpt2)
    assert graphs(student_task, student_task.build_model()) == (1, [])
    online = dataclasses.replace(config, precompute_teacher_features=False)     # eq. 7 selection in the step
    student_task = MDRStudentTask(online, examples, None, codec, frozen, gpt2)
    assert graphs(student_task, student_task.build_model()) == (1, [])
    decoder_task = MDRDecoderTask(config, examples, None, codec, frozen,
                                  {e.id: torch.randn(frozen.hidden) for e in examples})
    assert graphs(decoder_task, decoder_task.build_model()) == (1, [])


def test_length_buckets_change_no_stage_loss(config, codec, examples, gpt2, tmp_path):
    """Each stage names its sequence tensors (sequence_pad_values): padded further to a bucket
    (TrainConfig.length_buckets), its batches give the same loss and target count (eval mode: no dropout,
    the Memory Net's expected P^(0)); the online H_P selection of stage B included."""
    from pipelines.training.config import TrainConfig
    from pipelines.training.data import training_collate

    def same_loss(task, model):
        items = [task.train_dataset()[i] for i in range(4)]
        bucketed = training_collate(task, TrainConfig(output_dir=str(tmp_path), length_buckets=[64]))(items)
        plain = task.collate(items)
        assert all(bucketed[k].shape[-1] == 64 for k in task.sequence_pad_values() if k in bucketed)
        assert any(plain[k].shape[-1] < 64 for k in task.sequence_pad_values() if k in plain)
        with torch.no_grad():
            (loss, n), (loss_b, n_b) = task.compute_loss(model.eval(), plain), task.compute_loss(model, bucketed)
        assert int(n) == int(n_b)
        torch.testing.assert_close(loss_b, loss, rtol=1e-5, atol=1e-6)

    teacher_task = MDRTeacherTask(config, examples, None, codec, gpt2)
    teacher = teacher_task.build_model()
    same_loss(teacher_task, teacher)
    teacher_task.save_final(teacher, tmp_path / "teacher")
    frozen = MDRTeacher.load(tmp_path / "teacher")
    for cfg in (config, dataclasses.replace(config, precompute_teacher_features=False)):
        student_task = MDRStudentTask(cfg, examples, None, codec, frozen, gpt2)
        same_loss(student_task, student_task.build_model())
    decoder_task = MDRDecoderTask(config, examples, None, codec, frozen,
                                  {e.id: torch.randn(frozen.hidden) for e in examples})
    same_loss(decoder_task, decoder_task.build_model())


def test_with_the_project_tokenizer_and_gpt2_builder(config, examples, tmp_path):
    from pipelines.models.tokenizers import train_bpe_tokenizer
    from pipelines.mdr.tasks import gpt2_factory
    from pipelines.mdr.text import Codec, load_codec
    texts = [t for e in examples for t in (e.query, e.response, *e.persona)]
    codec = Codec(train_bpe_tokenizer(texts, 300, tmp_path / "tok"))
    assert load_codec(tmp_path / "tok").encode("i live in oslo.") == codec.encode("i live in oslo.")
    task = MDRTeacherTask(config, examples, None, codec, gpt2_factory("tiny", codec))
    model = task.build_model()
    assert model.decoder.lm.config.eos_token_id == codec.eos_id and model.hidden == 64
    loss, n = task.compute_loss(model, task.collate(list(task.train_dataset())))
    assert n == sum(len(codec.encode(e.response)) + 1 for e in examples) and loss.item() > 0
    short = MDRTeacherTask(config, examples, None, codec, gpt2_factory({"n_positions": 32}, codec))
    with pytest.raises(ConfigError, match="positions"):
        short.build_model()
    # H_P holds two rounds of up to max_history_tokens + 1 tokens, cut to max_hp_tokens
    long_rounds = dataclasses.replace(config, max_history_tokens=40)             # rounds 41, H_P 82
    teacher = MDRTeacherTask(config, examples, None, codec, gpt2_factory({"n_positions": 64}, codec)).build_model()
    with pytest.raises(ConfigError, match="H_P"):
        MDRStudentTask(long_rounds, examples, None, codec, teacher, gpt2_factory({"n_positions": 64}, codec)
                       ).build_model()
    cut = dataclasses.replace(long_rounds, max_hp_tokens=64)
    MDRStudentTask(cut, examples, None, codec, teacher, gpt2_factory({"n_positions": 64}, codec)).build_model()


def test_items(config, codec, examples):
    item = teacher_item(examples[1], codec, config)
    assert item["r"] == codec.encoder_ids("yes, two dogs.", config.max_response_tokens)
    assert [t for t in item["labels"] if t != IGNORE] == item["r"]
    batch = collate_teacher([item, teacher_item(examples[2], codec, config)], codec.pad_id)
    assert batch["labels"][1, batch["dec_mask"][1] == 0].eq(IGNORE).all()
    one_round = MDRConfig(max_history_rounds=1)
    assert len(student_item(examples[3], codec, one_round)["h"]) == 1
    assert student_item(examples[3], codec, one_round)["h"][0] == codec.round_ids(
        "nice city!", "thank you, it is cold.", one_round.max_history_tokens)
    assert student_item(examples[3], codec, MDRConfig(max_history_rounds=0))["h"] == []
    assert "r" not in student_item(examples[0], codec, config, with_response=False)


def test_decoder_batches_are_checked_for_aligned_response_tokens(config, codec, examples):
    """The decoder's token weights are placed by rank (scatter_to_targets): collate refuses a batch
    whose response tokens and decoder targets disagree, before anything reaches the device."""
    items = [{**teacher_item(e, codec, config), "feature": torch.zeros(4)} for e in examples[1:3]]
    batch = collate_decoder(items, codec.pad_id)
    assert batch["features"].shape == (2, 4)
    broken = [{**items[0], "r": items[0]["r"][:-1]}, items[1]]
    with pytest.raises(ValueError, match="differ from decoder targets"):
        collate_decoder(broken, codec.pad_id)


def test_no_training_example_is_a_data_error(config, codec, gpt2):
    with pytest.raises(DataError, match="no training example"):
        MDRTeacherTask(config, [], None, codec, gpt2)


@pytest.mark.parametrize("values, message", [
    ({"hops": 0}, "hops"),
    ({"sigma": 0.0}, "sigma"),
    ({"sigma": float("inf")}, "sigma"),
    ({"p0": "zeros"}, "p0"),
    ({"p0_eval": "median"}, "p0_eval"),
    ({"p0_eval_samples": 3}, "p0_eval_samples"),
    ({"p0_eval_samples": 0}, "p0_eval_samples"),
    ({"max_hp_tokens": 0}, "max_hp_tokens"),
    ({"p0": "learned", "init_std": 0.0}, "same point"),
    ({"decoder_init": "bert"}, "decoder_init"),
    ({"max_history_rounds": -1}, "max_history_rounds"),
    ({"max_response_tokens": 0}, "max_response_tokens"),
    ({"sep_token": ""}, "sep_token"),
    ({"model": " "}, "model"),
])
def test_config_checks(values, message):
    with pytest.raises(ConfigError, match=message):
        MDRConfig(**values)


def test_config_round_trip_and_unknown_keys():
    cfg = MDRConfig(hops=4, sigma=1.0)
    assert MDRConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.separator == "<|endoftext|>" and MDRConfig(sep_token="<sep>").separator == "<sep>"
    with pytest.raises(ConfigError, match="unknown mdr setting"):
        MDRConfig.from_dict({"hop": 3})
