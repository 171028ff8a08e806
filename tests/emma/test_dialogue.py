"""EMMA dialogue module: paper settings, the ZeRO-3 refusal, 4-bit NF4 + LoRA on the CPU, a few steps learn."""

from __future__ import annotations

import json

import pytest
import torch

from pipelines.emma import dialogue as D
from pipelines.emma.formats import Example, build_examples
from pipelines.errors import ConfigError


def test_paper_defaults():
    cfg = D.EMMADialogueConfig()
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (32, 32, 0.1)
    assert (cfg.load_in_4bit, cfg.bnb_4bit_quant_type, cfg.bnb_4bit_use_double_quant) == (True, "nf4", True)
    assert (cfg.max_source_length, cfg.max_target_length, cfg.lr, cfg.batch_size, cfg.max_epochs) == (
        1024, 64, 1e-3, 52, 3)
    tc = cfg.train_config("out")
    assert (tc.lr, tc.batch_size, tc.epochs, tc.early_stopping_patience) == (1e-3, 52, 3, 2)
    assert tc.group_by_length and not D.EMMADialogueConfig(group_by_length=False).train_config("o").group_by_length


def test_zero3_with_4bit_weights_is_refused(tmp_path):
    with pytest.raises(ConfigError) as err:
        D.EMMADialogueConfig(zero_stage=3)
    assert str(err.value) == D.ZERO3_WITH_4BIT
    assert "use DDP or ZeRO-2" in str(err.value) and "4-bit" in str(err.value)
    ds = tmp_path / "zero3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    with pytest.raises(ConfigError, match="ZeRO-3 cannot train this model"):
        D.EMMADialogueConfig(deepspeed=str(ds))
    assert D.EMMADialogueConfig(zero_stage=2).zero_stage == 2
    assert D.EMMADialogueConfig(zero_stage=3, load_in_4bit=False).zero_stage == 3   # full precision shards fine
    with pytest.raises(ConfigError, match="sets ZeRO stage 3"):
        D.EMMADialogueConfig(zero_stage=2, deepspeed=str(ds), load_in_4bit=False)


@pytest.mark.parametrize("kwargs, message", [
    ({"lora_r": 0}, "lora_r"), ({"lora_dropout": 1.0}, "lora_dropout"), ({"bnb_4bit_quant_type": "int4"}, "nf4"),
    ({"target_modules": ()}, "target_modules"), ({"tasks": ("chat",)}, "tasks"), ({"zero_stage": 4}, "zero_stage"),
])
def test_config_checks(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        D.EMMADialogueConfig(**kwargs)


def test_collate_pads_labels_and_ends_with_eos():
    class Tok:                       # whitespace "tokenizer": one id per word, eos 1, pad 0
        eos_token_id, pad_token_id = 1, 0

        def __call__(self, texts, add_special_tokens=True):
            return {"input_ids": [[len(w) + 1 for w in text.split()] for text in texts]}

    items = [Example("link", "a bb ccc dddd", "positive", "E", "S"), Example("link", "a", "no", "E", "S")]
    batch = D.collate_examples(Tok(), items, max_source=3, max_target=64)
    assert batch["input_ids"].tolist() == [[2, 3, 1], [2, 1, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[9, 1], [3, 1]]
    batch = D.collate_examples(Tok(), [items[1], items[0]], 8, 8)
    assert batch["labels"].tolist() == [[3, 1], [9, 1]] and batch["input_ids"].shape == (2, 5)


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory):
    from pipelines.data.synthetic import SyntheticConfig, generate

    episodes = generate(SyntheticConfig(episodes=2, sessions=3, turns=6, partners=2, queries_per_session=1))
    examples = build_examples(episodes)
    cfg = D.EMMADialogueConfig(tokenizer_vocab_size=600, max_source_length=256, device="cpu")
    return D.EMMADialogueTask(cfg, examples, examples[:6], work_dir=tmp_path_factory.mktemp("emma"))


def test_train_lengths_are_the_collated_source_and_target_tokens(tiny_task):
    """Length grouping reads the lengths that collate will produce (cut to the maximum lengths)."""
    lengths = tiny_task.train_lengths()
    assert len(lengths) == len(tiny_task.train_dataset())
    for i in range(0, len(lengths), 7):
        batch = tiny_task.collate([tiny_task.train_dataset()[i]])
        assert lengths[i] == int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())
    assert max(lengths) > 3 * min(lengths)   # the three tasks differ in length: grouping pays


def test_examples_are_tokenised_once_as_collate_would(tiny_task):
    """The task encodes its examples before training (batched); collate only pads, to the same tensors
    as tokenising the texts in the batch one by one."""
    c, tok = tiny_task.config, tiny_task.tokenizer
    data = tiny_task.train_dataset()
    assert data is tiny_task.train_dataset()                             # encoded once, then reused
    assert [ex.task for ex in data] == [ex.task for ex in tiny_task.train_examples]
    for i in range(0, len(data), 5):
        ex = tiny_task.train_examples[i]
        assert data[i].source_ids == D.encode(tok, ex.source, c.max_source_length)
        assert data[i].target_ids == D.encode(tok, ex.target, c.max_target_length)
        assert data[i].source_ids[-1] == data[i].target_ids[-1] == tok.eos_token_id
    picked = [0, 3, len(data) - 1]
    batch = tiny_task.collate([data[i] for i in picked])
    texts = D.collate_examples(tok, [tiny_task.train_examples[i] for i in picked], c.max_source_length,
                               c.max_target_length)
    assert batch.keys() == texts.keys()
    for key in batch:
        assert torch.equal(batch[key], texts[key]), key
    assert len(tiny_task.valid_dataset()) == len(tiny_task.valid_examples) == 6


def test_gradient_checkpointing_gives_the_same_loss_and_adapter_gradients(tiny_task):
    """Activations recomputed in backward (the paper profile's setting) change memory, not the numbers."""
    import dataclasses

    batch = tiny_task.collate(tiny_task.train_dataset()[:3])
    results = []
    for checkpointing in (False, True):
        cfg = dataclasses.replace(tiny_task.config, gradient_checkpointing=checkpointing)
        torch.manual_seed(0)
        model = D.build_dialogue_model(cfg, tiny_task.tokenizer, tiny_task.base_ref).train()
        assert model.base_model.model.is_activation_checkpointing is checkpointing
        torch.manual_seed(1)                                   # the same dropout masks
        loss, _ = D.seq2seq_loss(model, batch)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 0
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-6)


def test_tiny_model_is_4bit_nf4_with_lora(tiny_task):
    import bitsandbytes as bnb

    model = tiny_task.build_model()
    q = model.base_model.model.encoder.block[0].layer[0].SelfAttention.q
    assert isinstance(q.base_layer, bnb.nn.Linear4bit)
    state = q.base_layer.weight.quant_state
    assert state.quant_type == "nf4" and state.nested                  # NF4 with double quantisation
    assert q.r["default"] == 32 and q.scaling["default"] == 1.0        # alpha / r = 32 / 32
    assert q.lora_dropout["default"].p == 0.1
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    adapted = {n.split(".lora_A.")[0].rsplit(".", 1)[-1] for n in trainable if ".lora_A." in n}
    assert adapted == {"q", "k", "v", "o", "wi", "wo"}                 # every linear layer of the tiny T5 (ReLU)


def test_a_few_steps_reduce_the_loss(tiny_task):
    torch.manual_seed(0)
    model = tiny_task.build_model()
    by_task = {t: [ex for ex in tiny_task.train_dataset() if ex.task == t][:2]
               for t in ("generation", "summarize", "link")}
    batch = tiny_task.collate([ex for exs in by_task.values() for ex in exs])
    assert batch["input_ids"].shape[0] == 6

    def eval_loss():
        model.eval()
        with torch.no_grad():
            loss, n = tiny_task.compute_loss(model, batch)
        model.train()
        return loss.item(), n

    before, n_tokens = eval_loss()
    assert n_tokens == int((batch["labels"] != -100).sum())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=tiny_task.config.lr)
    for _ in range(6):
        loss, _ = tiny_task.compute_loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
    after, _ = eval_loss()
    assert after < before - 0.5, (before, after)
    # the validation passes did not repack the 4-bit weights into bitsandbytes' CPU inference layout
    # (whose kernel has no autograd and would silently cut the gradient below each frozen layer)
    q = model.base_model.model.encoder.block[0].layer[0].SelfAttention.q.base_layer
    assert not getattr(q.weight.quant_state, "packing_format_for_cpu", False)


def test_save_load_and_inference_helpers(tiny_task, tmp_path):
    torch.manual_seed(0)
    model = tiny_task.build_model()
    out = tiny_task.save_final(model, tmp_path / "final")
    assert {p.name for p in out.iterdir()} == {"adapter", "tokenizer", "base", "emma_dialogue.json"}
    loaded = D.EMMADialogue.load(out, max_new_tokens=5)
    fresh = D.EMMADialogue(model, tiny_task.tokenizer, loaded.config)
    sources = [ex.source for ex in tiny_task.valid_examples[:3]]
    assert loaded.generate_text(sources) == fresh.generate_text(sources)
    assert all(isinstance(t, str) for t in loaded.generate_text(sources))
    assert isinstance(loaded.summarize("Mia", "[Mia] nurse [NOW] first session [Mia] hi"), list)
    assert loaded.link("Mia has a dog.", "Mia's dog is called Rex.") in (True, False)


def test_checkpoints_hold_the_adapters_only_and_load_back(tiny_task, tmp_path):
    """accelerate saves model.state_dict() and loads it with safetensors.torch.load_model(strict=True)."""
    from safetensors.torch import load_model, save_model

    torch.manual_seed(0)
    model = tiny_task.build_model()
    keys = list(model.state_dict())
    assert keys and all(".lora_A." in k or ".lora_B." in k for k in keys)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.add_(0.01)                                   # a "trained" adapter
    save_model(model, str(tmp_path / "model.safetensors"))
    other = tiny_task.build_model()
    missing, unexpected = load_model(other, str(tmp_path / "model.safetensors"), strict=True)
    assert not missing and not unexpected
    for (n, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), n
    batch = tiny_task.collate(tiny_task.train_dataset()[:2])
    model.eval(), other.eval()
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, other(**batch).logits, atol=1e-5)


def test_engine_trains_the_task_with_validation_and_best_restore(tiny_task, tmp_path):
    """The training engine end to end on the CPU: 4-bit base, LoRA, validation each step, best weights restored."""
    from pipelines.training import train

    tc = tiny_task.config.train_config(tmp_path / "run", batch_size=4, max_steps=3, eval_every=1, save_every=1,
                                      warmup_steps=0)
    summary = train(tiny_task, tc, progress=False)
    assert summary.final_step == 3 and len(summary.valid_losses) == 3
    assert summary.best_valid_loss == min(v for _, v in summary.valid_losses)
    final = tmp_path / "run" / "final"
    assert (final / "adapter" / "adapter_config.json").exists() and (final / "base" / "config.json").exists()
    ckpt = max((tmp_path / "run" / "checkpoints").iterdir())
    assert (ckpt / "model.safetensors").stat().st_size < 2_000_000          # adapters only, not the base
    loaded = D.EMMADialogue.load(final, max_new_tokens=3)
    assert len(loaded.generate_text([tiny_task.valid_examples[0].source])) == 1
