"""EMMA dialogue module: paper settings, the ZeRO-3 refusal, 4-bit NF4 + LoRA on the CPU, a few steps learn."""

from __future__ import annotations

import json

import pytest
import torch

from pipelines.emma.dialogue import EMMADialogue
from pipelines.emma.dialogue_config import EMMADialogueConfig
from pipelines.emma.dialogue_encoding import collate_examples, encode, encode_all
from pipelines.emma.dialogue_model import build_dialogue_model
from pipelines.emma.dialogue_training import EMMADialogueTask, seq2seq_loss
from pipelines.emma.formats import Example, build_examples, link_source, parse_link, parse_summary, summarize_source
from pipelines.errors import ConfigError
from pipelines.training.config import ZERO3_WITH_QUANTIZED


def test_paper_defaults():
    cfg = EMMADialogueConfig()
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (32, 32, 0.1)
    assert (cfg.load_in_4bit, cfg.bnb_4bit_quant_type, cfg.bnb_4bit_use_double_quant) == (True, "nf4", True)
    assert (cfg.max_source_length, cfg.max_target_length, cfg.lr, cfg.batch_size, cfg.max_epochs) == (
        1024, 64, 1e-3, 52, 3)
    tc = cfg.train_config("out")
    assert (tc.lr, tc.batch_size, tc.epochs, tc.early_stopping_patience) == (1e-3, 52, 3, 2)
    assert tc.group_by_length and not EMMADialogueConfig(group_by_length=False).train_config("o").group_by_length


def test_zero3_with_4bit_weights_is_refused(tmp_path):
    with pytest.raises(ConfigError) as err:
        EMMADialogueConfig(zero_stage=3)
    assert str(err.value) == ZERO3_WITH_QUANTIZED
    assert "use DDP or ZeRO-2" in str(err.value) and "4-bit" in str(err.value)
    ds = tmp_path / "zero3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    with pytest.raises(ConfigError, match="ZeRO-3 cannot train this model"):
        EMMADialogueConfig(deepspeed=str(ds))
    assert EMMADialogueConfig(zero_stage=2).zero_stage == 2
    assert EMMADialogueConfig(zero_stage=3, load_in_4bit=False).zero_stage == 3   # full precision shards fine
    with pytest.raises(ConfigError, match="sets ZeRO stage 3"):
        EMMADialogueConfig(zero_stage=2, deepspeed=str(ds), load_in_4bit=False)


@pytest.mark.parametrize("kwargs, message", [
    ({"lora_r": 0}, "lora_r"), ({"lora_dropout": 1.0}, "lora_dropout"), ({"bnb_4bit_quant_type": "int4"}, "nf4"),
    ({"target_modules": ()}, "target_modules"), ({"tasks": ("chat",)}, "tasks"), ({"zero_stage": 4}, "zero_stage"),
])
def test_config_checks(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        EMMADialogueConfig(**kwargs)


def test_collate_pads_labels_and_ends_with_eos():
    class Tok:                       # whitespace "tokenizer": one id per word, eos 1, pad 0
        eos_token_id, pad_token_id = 1, 0

        def __call__(self, texts, add_special_tokens=True):
            return {"input_ids": [[len(w) + 1 for w in text.split()] for text in texts]}

    items = [Example("link", "a bb ccc dddd", "positive", "E", "S"), Example("link", "a", "no", "E", "S")]
    batch = collate_examples(Tok(), items, max_source=3, max_target=64)
    assert batch["input_ids"].tolist() == [[2, 3, 1], [2, 1, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[9, 1], [3, 1]]
    batch = collate_examples(Tok(), [items[1], items[0]], 8, 8)
    assert batch["labels"].tolist() == [[3, 1], [9, 1]] and batch["input_ids"].shape == (2, 5)


# --- cutting over-long inputs: what survives, token by token -------------------------------------------

def word_tokenizer(texts, eos_appended: bool = False):
    """A fast tokenizer with one token per whitespace-separated word (offsets included), eos "</s>";
    ``eos_appended``: it appends EOS itself, as T5's does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for word in " ".join(texts).split():
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if eos_appended:
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")


def kept_words(tokenizer, text, max_length):
    ids = encode(tokenizer, text, max_length)
    assert len(ids) <= max_length and ids[-1] == tokenizer.eos_token_id
    return " ".join(tokenizer.convert_ids_to_tokens(ids[:-1]))


GEN_HEAD = "generation: [Mia] nurse [Leo] brother [MEMORY] m1 [NOW] second session"           # 10 words
GEN = GEN_HEAD + " [Leo] a1 a2 a3 [Mia] b1 b2 [Leo] c1 c2 c3 [Mia] d1 d2 d3 d4 [Leo] e1 e2 [Mia]"   # 30 words


@pytest.mark.parametrize("eos_appended", [False, True])
def test_an_over_long_generation_source_keeps_its_head_and_latest_turns(eos_appended):
    """The old cut (ids[:max_length - 1] + EOS) lost the latest turns and the closing [Mia] slot; now the head
    (prefix, speakers, memories, [NOW] marker) and the most recent turns survive, cut on a turn boundary."""
    tok = word_tokenizer([GEN, " ".join(f"c{i}" for i in range(13))], eos_appended)
    assert kept_words(tok, GEN, 31) == GEN                                   # fits: untouched
    # 29 tokens of room: the head (10) and the latest 19, whose first ("a1") is inside a turn: from the next turn
    assert kept_words(tok, GEN, 30) == GEN_HEAD + " [Mia] b1 b2 [Leo] c1 c2 c3 [Mia] d1 d2 d3 d4 [Leo] e1 e2 [Mia]"
    assert kept_words(tok, GEN, 27) == GEN_HEAD + " [Mia] b1 b2 [Leo] c1 c2 c3 [Mia] d1 d2 d3 d4 [Leo] e1 e2 [Mia]"
    assert kept_words(tok, GEN, 26) == GEN_HEAD + " [Leo] c1 c2 c3 [Mia] d1 d2 d3 d4 [Leo] e1 e2 [Mia]"
    assert kept_words(tok, GEN, 21) == GEN_HEAD + " [Mia] d1 d2 d3 d4 [Leo] e1 e2 [Mia]"
    # the latest turn alone does not fit: its oldest words go, the closing [Mia] slot stays
    long_turn = GEN_HEAD + " [Leo] " + " ".join(f"c{i}" for i in range(1, 13)) + " [Mia]"     # 24 words
    assert kept_words(tok, long_turn, 21) == GEN_HEAD + " c4 c5 c6 c7 c8 c9 c10 c11 c12 [Mia]"
    # a head over half the room (a huge memory block) keeps its first half; the tail the rest
    assert kept_words(tok, GEN, 11) == "generation: [Mia] nurse [Leo] brother [Leo] e1 e2 [Mia]"


def test_role_tags_and_a_speaker_tag_inside_an_utterance():
    head = "generation: [Mia] [Leo] [NOW] third session"                                        # 6 words
    text = head + " [USER] u1 u2 [BOT] b1 [Leo] says b2 [USER] u3 [BOT]"                         # 17 words
    tok = word_tokenizer([text])
    assert kept_words(tok, text, 16) == head + " [BOT] b1 [Leo] says b2 [USER] u3 [BOT]"
    # " [Leo] " inside the bot's utterance reads as a turn start: the cut may fall there (documented)
    assert kept_words(tok, text, 14) == head + " [Leo] says b2 [USER] u3 [BOT]"


def test_an_over_long_summarize_source_keeps_whom_to_summarise_and_the_latest_turns():
    head = "summarize [ABOUT_Leo]: [Mia] nurse [Leo] brother [NOW] first session"               # 9 words
    text = head + " [Mia] a1 a2 [Leo] b1 b2 b3 [Mia] c1 [Leo] d1 d2"                              # 21 words
    tok = word_tokenizer([text])
    assert kept_words(tok, text, 22) == text
    assert kept_words(tok, text, 21) == head + " [Leo] b1 b2 b3 [Mia] c1 [Leo] d1 d2"
    assert kept_words(tok, text, 19) == head + " [Leo] b1 b2 b3 [Mia] c1 [Leo] d1 d2"


def test_other_texts_keep_their_first_tokens():
    text = "memory sentence 1: Mia has a dog. memory sentence 2: Mia's dog is called Rex."
    target = "Mia adopted a puppy. [SEP] Leo moved."
    tok = word_tokenizer([text, target])
    assert kept_words(tok, text, 6) == "memory sentence 1: Mia has"
    assert kept_words(tok, target, 4) == "Mia adopted a"


def test_a_tokenizer_without_offsets_gets_a_plain_middle_cut():
    """A slow tokenizer (no offsets): the head is found by tokenising it alone; the tail is the latest tokens."""
    fast = word_tokenizer([GEN])

    class Slow:                                  # whitespace ids, no offsets
        is_fast, eos_token_id = False, fast.eos_token_id

        def __call__(self, texts, add_special_tokens=True):
            return fast(list(texts), add_special_tokens=add_special_tokens)

    ids = encode(Slow(), GEN, 21)
    assert " ".join(fast.convert_ids_to_tokens(ids[:-1])) == GEN_HEAD + " c3 [Mia] d1 d2 d3 d4 [Leo] e1 e2 [Mia]"


def test_encode_all_cuts_only_what_is_too_long_in_a_batch():
    short = "generation: [Mia] nurse [NOW] first session [Mia]"
    tok = word_tokenizer([GEN, short, "x"])
    out = encode_all(tok, [short, GEN, "x"], 21)
    assert out[0] == encode(tok, short, 21) and len(out[0]) == 8
    assert out[1] == encode(tok, GEN, 21) and len(out[1]) == 20
    assert encode_all(tok, [], 20) == []


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory):
    from pipelines.data.synthetic import SyntheticConfig, generate

    episodes = generate(SyntheticConfig(episodes=2, sessions=3, turns=6, partners=2, queries_per_session=1))
    examples = build_examples(episodes)
    cfg = EMMADialogueConfig(tokenizer_vocab_size=600, max_source_length=256, device="cpu")
    return EMMADialogueTask(cfg, examples, examples[:6], work_dir=tmp_path_factory.mktemp("emma"))


def test_the_cut_falls_on_the_text_boundaries_with_the_tiny_bpe_tokenizer(tiny_task):
    """With the project's byte-level BPE (subwords, [NOW] etc. kept whole), the kept tokens decode to the
    head text followed by the text from a turn boundary to the end: nothing else is lost or changed."""
    from pipelines.emma.formats import GenerationInput, source_layout, summarize_source

    tok = tiny_task.tokenizer
    history = [("Leo" if i % 2 == 0 else "Mia", f"turn {i}: I walked the puppy to the river again today.")
               for i in range(40)]
    inp = GenerationInput("Mia", "nurse", "Leo", "her brother", 2, [("Mia adopted a puppy.", ["Leo has a cat."])],
                          history)
    for text in (inp.render(), summarize_source("Leo", inp.final_sequence())):
        full = encode(tok, text, 10_000)
        ids = encode(tok, text, 128)
        assert len(full) > 300 and len(ids) <= 128 and ids[-1] == tok.eos_token_id
        layout = source_layout(text)
        head, kept = text[: layout.head_end], tok.decode(ids[:-1])
        assert kept.startswith(head) and kept[len(head):] in {text[c:] for c in layout.turn_starts}
        assert kept.endswith("again today. [Mia]" if text.startswith("generation:") else "again today.")
        n_head = len(tok(head)["input_ids"])
        n_tail = len(ids) - 1 - n_head
        assert ids[:-1] == full[:n_head] + full[-1 - n_tail:-1]   # the whole text's first and last tokens


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
        assert data[i].source_ids == encode(tok, ex.source, c.max_source_length)
        assert data[i].target_ids == encode(tok, ex.target, c.max_target_length)
        assert data[i].source_ids[-1] == data[i].target_ids[-1] == tok.eos_token_id
    picked = [0, 3, len(data) - 1]
    batch = tiny_task.collate([data[i] for i in picked])
    texts = collate_examples(tok, [tiny_task.train_examples[i] for i in picked], c.max_source_length,
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
        model = build_dialogue_model(cfg, tiny_task.tokenizer, tiny_task.base_ref).train()
        assert model.base_model.model.is_activation_checkpointing is checkpointing
        torch.manual_seed(1)                                   # the same dropout masks
        loss, _ = seq2seq_loss(model, batch)
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
    loaded = EMMADialogue.load(out, max_new_tokens=5)
    fresh = EMMADialogue(model, tiny_task.tokenizer, loaded.config)
    sources = [ex.source for ex in tiny_task.valid_examples[:3]]
    outputs = loaded.generate_text(sources)
    assert outputs == fresh.generate_text(sources) and len(outputs) == 3 and all(isinstance(t, str) for t in outputs)
    # the helpers are generate_text on the paper's formats, parsed (greedy decoding: the same text twice)
    final = "[Mia] nurse [Leo] her brother [NOW] first session [Mia] I adopted a puppy."
    summary_out = loaded.generate_text([summarize_source("Mia", final)])[0]
    assert loaded.summarize("Mia", final) == parse_summary(summary_out)
    link_out = loaded.generate_text([link_source("Mia has a dog.", "Mia's dog is called Rex.")])[0]
    assert loaded.link("Mia has a dog.", "Mia's dog is called Rex.") is parse_link(link_out)


class ScriptedDialogue(EMMADialogue):
    """EMMADialogue whose generate_text answers from a script and records the sources it was given."""

    def __init__(self, answers):
        self.answers, self.sources = list(answers), []

    def generate_text(self, sources, max_new_tokens=None):
        self.sources += list(sources)
        return [self.answers.pop(0) for _ in sources]


@pytest.mark.parametrize("output, memories", [
    ("Mia adopted a puppy. [SEP] Mia lives in Porto.", ["Mia adopted a puppy.", "Mia lives in Porto."]),
    ("Mia adopted a puppy.", ["Mia adopted a puppy."]),
    ("[NONE]", []),
    (" [SEP] Mia adopted a puppy. [SEP] ", ["Mia adopted a puppy."]),
])
def test_summarize_asks_in_the_paper_format_and_parses_the_answer(output, memories):
    module = ScriptedDialogue([output])
    final = "[Mia] nurse [Leo] her brother [NOW] first session [Mia] I adopted a puppy."
    assert module.summarize("Mia", final) == memories
    assert module.sources == ["summarize [ABOUT_Mia]: " + final]


@pytest.mark.parametrize("output, linked", [("positive", True), (" Positive", True), ("negative", False),
                                            ("", False)])
def test_link_asks_in_the_paper_format_and_parses_the_answer(output, linked):
    module = ScriptedDialogue([output])
    assert module.link("Mia has a dog.", "Mia's dog is called Rex.") is linked
    assert module.sources == ["memory sentence 1: Mia has a dog. memory sentence 2: Mia's dog is called Rex."]


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
    loaded = EMMADialogue.load(final, max_new_tokens=3)
    assert len(loaded.generate_text([tiny_task.valid_examples[0].source])) == 1


def test_the_engine_refuses_zero3_for_the_4bit_module_whatever_asked_for_it(tiny_task, tmp_path):
    """The config validates without DeepSpeed; ZeRO-3 then arrives through the training knobs (params
    ``emma.dialogue_train.deepspeed: deploy/deepspeed/zero3.json``, applied after validation): the engine
    refuses with the same sentence before writing anything (tests/training/test_zero3_refusal.py covers
    the launcher's environment)."""
    from pipelines.training import train
    from pipelines.training.launch import DEPLOY_DIR

    assert tiny_task.config.load_in_4bit and tiny_task.config.deepspeed is None
    tc = tiny_task.config.train_config(tmp_path / "run", deepspeed=str(DEPLOY_DIR / "deepspeed" / "zero3.json"),
                                      max_steps=1)
    with pytest.raises(ConfigError) as err:
        train(tiny_task, tc, progress=False)
    assert str(err.value) == ZERO3_WITH_QUANTIZED
    assert not (tmp_path / "run").exists()
