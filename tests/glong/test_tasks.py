"""Tests of pipelines/glong/tasks.py: a few engine steps on the tiny profile reduce the loss."""

from __future__ import annotations

import json

import pytest
import torch

from pipelines.data.synthetic import SyntheticConfig, generate
from pipelines.errors import DataError
from pipelines.glong.config import ExtractorTrainConfig, SummariserTrainConfig
from pipelines.glong.extractor import evaluate_extractor, extraction_examples
from pipelines.glong.importance import load_importance_scorer
from pipelines.glong.tasks import (IGNORE, GLongExtractorTask, GLongImportanceTask, SummaryPair,
                                   load_extractor, pad_batch, read_samsum, session_summary_pairs)
from pipelines.training.engine import TrainConfig, train


@pytest.fixture(scope="module")
def episodes():
    return generate(SyntheticConfig(episodes=6, sessions=2, turns=6, partners=2,
                                    queries_per_session=1))


def _run(task, out, steps, lr):
    cfg = TrainConfig(output_dir=str(out), max_steps=steps, batch_size=4, lr=lr, eval_every=1000,
                      save_every=1000, early_stopping_patience=None, schedule="constant",
                      restore_best=False)
    return train(task, cfg, tracker=None, progress=False)


def _first_last(summary):
    losses = [v for _, v in summary.train_losses]
    return sum(losses[:2]) / 2, sum(losses[-2:]) / 2


def test_pad_batch():
    b = pad_batch([{"input_ids": [5, 6, 7], "labels": [IGNORE, 6, 7]},
                   {"input_ids": [8], "labels": [8]}], pad_id=0)
    assert b["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert b["labels"].tolist() == [[IGNORE, 6, 7], [8, IGNORE, IGNORE]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_extractor_encoding_masks_the_prompt(episodes, tmp_path):
    ex = extraction_examples(episodes)[:8]
    task = GLongExtractorTask(ex, None, ExtractorTrainConfig(lora_r=4, max_length=256),
                              tmp_path / "base")
    item = task.encode(ex[0])
    tok = task.tokenizer
    n_answer = sum(1 for x in item["labels"] if x != IGNORE)
    answer = tok.decode(item["input_ids"][-n_answer:])
    assert answer == ex[0].target + tok.eos_token
    assert item["labels"][-n_answer:] == item["input_ids"][-n_answer:]
    with pytest.raises(DataError, match="no training example"):
        GLongExtractorTask([], None, ExtractorTrainConfig(), tmp_path / "b2")


def test_extractor_qlora_steps_reduce_loss(episodes, tmp_path):
    train_ex = extraction_examples([e for e in episodes if e.split == "train"])
    test_ex = extraction_examples([e for e in episodes if e.split == "test"])[:3]
    cfg = ExtractorTrainConfig(lora_r=8, lora_alpha=16, lora_dropout=0.0, tokenizer_vocab=600,
                               max_length=256, max_new_tokens=24, lora_lm_head=True)
    task = GLongExtractorTask(train_ex, None, cfg, tmp_path / "base")
    summary = _run(task, tmp_path / "run", steps=10, lr=5e-3)
    first, last = _first_last(summary)
    assert last < first - 1.0, summary.train_losses
    final = tmp_path / "run" / "final"
    meta = json.loads((final / "extractor.json").read_text())
    assert meta == {"arch": "causal", "base": "base", "quantize_4bit": True, "max_new_tokens": 24}
    extractor = load_extractor(final, batch_size=8)
    import bitsandbytes as bnb

    model = extractor.model
    four_bit = [n for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(four_bit) == 8                            # every linear projection of 2 blocks
    assert {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters()
            if "lora_A" in n} == \
        {"c_attn", "c_proj", "c_fc", "lm_head"}
    metrics = evaluate_extractor(extractor, test_ex)
    assert metrics["parse_valid"] + metrics["parse_repaired"] + metrics["parse_dropped"] == 3
    assert 0.0 <= metrics["triplet_f1"] <= 1.0
    assert metrics["triplet_gold"] == sum(len(e.triplets) for e in test_ex)


def test_validation_between_steps_keeps_every_4bit_layer_trainable(episodes, tmp_path):
    """bitsandbytes repacks a 4-bit layer for CPU inference in its first no-grad eval forward; the engine
    opts trained models out, so training after a validation pass still reaches the lowest adapters (it
    used to fail on the biased projections' in-place add, or drop their input gradients)."""
    train_ex = extraction_examples([e for e in episodes if e.split == "train"])
    valid_ex = extraction_examples([e for e in episodes if e.split == "valid"])[:4] or train_ex[:4]
    cfg = ExtractorTrainConfig(lora_r=4, lora_alpha=8, lora_dropout=0.0, tokenizer_vocab=600, max_length=256)
    task = GLongExtractorTask(train_ex[:16], valid_ex, cfg, tmp_path / "base")
    tc = TrainConfig(output_dir=str(tmp_path / "run"), max_steps=4, batch_size=4, lr=5e-3, eval_every=1,
                     save_every=1000, early_stopping_patience=None, restore_best=False)
    summary = train(task, tc, tracker=None, progress=False)
    assert summary.final_step == 4 and len(summary.valid_losses) == 4
    model = load_extractor(tmp_path / "run" / "final", batch_size=4).model
    first_block = {n: p for n, p in model.named_parameters() if ".h.0." in n and "lora_B" in n}
    assert first_block and all(float(p.abs().sum()) > 0 for p in first_block.values())


def test_an_interrupted_qlora_extractor_run_resumes_and_matches_an_uninterrupted_one(episodes, tmp_path):
    """The engine checkpoints a 4-bit model's adapters only (a full 4-bit state dict does not load back)."""
    train_ex = extraction_examples([e for e in episodes if e.split == "train"])[:16]
    cfg = ExtractorTrainConfig(lora_r=4, lora_alpha=8, lora_dropout=0.0, tokenizer_vocab=600, max_length=256)

    def run(out, steps):
        tc = TrainConfig(output_dir=str(out), max_steps=steps, batch_size=4, lr=5e-3, save_every=1,
                         early_stopping_patience=None, schedule="constant")
        return train(GLongExtractorTask(train_ex, None, cfg, tmp_path / "base"), tc, tracker=None, progress=False)

    whole = run(tmp_path / "whole", 4)
    run(tmp_path / "cut", 2)
    ckpt = tmp_path / "cut" / "checkpoints" / "step-2" / "model.safetensors"
    assert ckpt.stat().st_size < 1_000_000                       # adapters only
    resumed = run(tmp_path / "cut", 4)
    assert resumed.resumed_from_step == 2 and resumed.final_step == 4
    for (s1, a), (s2, b) in zip(whole.train_losses, resumed.train_losses):
        assert s1 == s2 and a == pytest.approx(b, rel=1e-5)


def test_extractor_seq2seq_lora_steps_reduce_loss(episodes, tmp_path):
    train_ex = extraction_examples([e for e in episodes if e.split == "train"])
    cfg = ExtractorTrainConfig(arch="seq2seq", quantize_4bit=False, lora_r=8, lora_alpha=16,
                               lora_dropout=0.0, tokenizer_vocab=600, max_new_tokens=48,
                               lora_lm_head=True)
    summary = _run(GLongExtractorTask(train_ex, None, cfg, tmp_path / "base"), tmp_path / "run",
                   steps=8, lr=5e-3)
    first, last = _first_last(summary)
    assert last < first - 0.5, summary.train_losses


def test_summary_pairs_and_samsum(episodes, tmp_path):
    pairs = session_summary_pairs(episodes)
    assert len(pairs) == sum(len(e.sessions) for e in episodes)
    s = episodes[0].sessions[0]
    assert pairs[0] == SummaryPair(f"{episodes[0].id}/{s.id}",
                                   "\n".join(f"{t.speaker}: {t.text}" for t in s.turns), s.summary)
    path = tmp_path / "samsum.json"
    path.write_text(json.dumps([{"id": "13818513", "summary": "Amanda baked cookies.",
                                 "dialogue": "Amanda: I baked  cookies.\r\nJerry: Sure!"}]))
    assert read_samsum(path) == [SummaryPair("13818513", "Amanda: I baked  cookies.\nJerry: Sure!",
                                             "Amanda baked cookies.")]
    path.write_text(json.dumps([{"id": "1", "dialogue": "A: b"}]))
    with pytest.raises(DataError) as err:
        read_samsum(path)
    assert (err.value.record, err.value.field) == (0, "summary")


def test_importance_summariser_steps_reduce_loss_and_score(episodes, tmp_path):
    pairs = session_summary_pairs(episodes)
    task = GLongImportanceTask(pairs, None, SummariserTrainConfig(tokenizer_vocab=600))
    summary = _run(task, tmp_path / "run", steps=10, lr=5e-3)
    first, last = _first_last(summary)
    assert last < first - 0.5, summary.train_losses
    scorer = load_importance_scorer(str(tmp_path / "run" / "final"))
    triplets = [t for _, turn in episodes[0].turns() for t in turn.triplets][:5]
    scores = scorer(triplets)
    assert len(scores) == 5 and max(scores) == 1.0 and min(scores) > 0
    raw = scorer.raw(triplets)
    torch.testing.assert_close(torch.tensor(scores), raw / raw.max())
