"""Tests of the small profile's importance scorer (pipelines/glong/importance.py): Eqs. (1)-(3) over a
decoder-only summariser's self-attention from its summary to the triplets in its prompt."""

from __future__ import annotations

import pytest
import torch

from pipelines.data.schema import Triplet
from pipelines.errors import ConfigError
from pipelines.glong.config import ImportanceConfig
from pipelines.glong.prompts import CAUSAL_SEPARATOR, TRIPLETS_INSTRUCTION, chat_frame, summary_prompt
from pipelines.glong.importance import (AttentionImportanceScorer, CausalImportanceScorer, importance_from_cross_attention, load_importance_scorer, raw_saliency, summary_prompt_attention, summary_self_attention)

TRIPLETS = [Triplet(subject="Alice", relation="moved to", object="Paris"),
            Triplet(subject="Bob", relation="likes", object="tea and cakes"),
            Triplet(subject="Alice", relation="has", object="a lazy dog")]


@pytest.fixture(scope="module")
def llama(tiny_llama):
    """(model, tokenizer) of the tiny random Llama, eager attention (its weights are what the scorer reads)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(tiny_llama)


# --- the arithmetic, on hand-built attention ----------------------------------------------------------------

def test_summary_rows_and_prompt_columns_are_cut_out_of_the_self_attention():
    # 4 prompt tokens, 3 summary tokens: one pass over prompt + y1 + y2, T = 6; y1 is read off position 3
    attn = torch.arange(2 * 6 * 6, dtype=torch.float32).reshape(2, 6, 6)
    got = summary_prompt_attention(attn, n_prompt=4, n_summary=3)
    assert got.shape == (2, 3, 4)
    assert torch.equal(got, attn[:, 3:6, 0:4])
    assert torch.equal(summary_prompt_attention(attn[None], 4, 3), got)
    assert torch.equal(summary_prompt_attention(attn, 6, 1), attn[:, 5:, :])   # a one-token summary: EOS at once
    with pytest.raises(ValueError, match=r"\(H, 7, 7\)"):
        summary_prompt_attention(attn, n_prompt=4, n_summary=4)


# A causal last-layer attention, H = 2 heads, over a prompt of 7 tokens and a summary of 3 (T = 9 positions):
#   0: chat frame (the attention sink)   1-2: triplet A   3: separator   4-5: triplet B   6: generation prompt
#   7: y1   8: y2   (y3 is predicted at 8 and never read back)
# The summary copies A and ignores B: its rows put 1/8 on B at most. Entries are multiples of 1/8, each row sums
# to 1 over the positions it may see, so every sum below is exact in float32.
E = 1 / 8
CAUSAL = torch.zeros(2, 9, 9)
CAUSAL[:, :6, 0] = 1.0                                # the prompt's own rows: all on the sink
CAUSAL[0, 6] = torch.tensor([3, 2, 2, 0, 0, 1, 0, 0, 0]) * E   # reads y1: mostly the sink and A
CAUSAL[1, 6] = torch.tensor([2, 3, 1, 1, 0, 0, 1, 0, 0]) * E
CAUSAL[0, 7] = torch.tensor([2, 1, 3, 0, 1, 0, 0, 1, 0]) * E   # reads y2
CAUSAL[1, 7] = torch.tensor([4, 2, 0, 0, 0, 0, 0, 2, 0]) * E
CAUSAL[0, 8] = torch.tensor([1, 2, 2, 0, 0, 0, 1, 1, 1]) * E   # reads y3 (EOS)
CAUSAL[1, 8] = torch.tensor([2, 1, 1, 1, 0, 1, 0, 1, 1]) * E
SPANS = [(1, 3), (4, 6)]
# Eq. (1) mean over heads, rows 6-8, columns 0-6: [[5,5,3,1,0,1,1], [6,3,3,0,1,0,0], [3,3,3,1,0,1,1]] / 16
# Eq. (2): A = (5+3 + 3+3 + 3+3) / 16 = 20/16, B = (0+1 + 1+0 + 0+1) / 16 = 3/16; Eq. (3): A = 1, B = 3/20


def test_hand_built_causal_attention_is_causal_and_rows_are_distributions():
    assert torch.equal(CAUSAL.sum(-1), torch.ones(2, 9))
    assert torch.equal(CAUSAL.triu(1), torch.zeros(2, 9, 9))


def test_a_triplet_the_summary_copies_outweighs_one_it_ignores():
    summary_rows = summary_prompt_attention(CAUSAL, n_prompt=7, n_summary=3)     # (2, 3, 7)
    assert raw_saliency(summary_rows, SPANS).tolist() == [20 / 16, 3 / 16]
    scores = importance_from_cross_attention(summary_rows, SPANS)
    assert scores.tolist() == [1.0, pytest.approx(3 / 20, abs=1e-7)]
    assert scores.max().item() == 1.0 and scores.min().item() > 0


# --- the prompt and its spans --------------------------------------------------------------------------------

def test_spans_map_to_the_triplets_positions_in_the_chat_prompt(llama):
    model, tok = llama
    chunk = CausalImportanceScorer(model, tok)._chunks(TRIPLETS)[0]
    lines = CAUSAL_SEPARATOR.join(t.serialise() for t in TRIPLETS)
    assert chunk.text == summary_prompt(tok, TRIPLETS_INSTRUCTION, lines)
    assert chunk.text == ("<|user|>" + TRIPLETS_INSTRUCTION + "\n\nAlice moved to Paris\nBob likes tea and cakes\n"
                          "Alice has a lazy dog<|end|><|assistant|>")
    assert chunk.input_ids == tok(chunk.text, add_special_tokens=False)["input_ids"]
    tokens = tok.convert_ids_to_tokens(chunk.input_ids)
    assert tokens[0] == "<|user|>" and tokens[-2:] == ["<|end|>", "<|assistant|>"]
    assert [tok.decode(chunk.input_ids[a:b]).strip() for a, b in chunk.spans] == [t.serialise() for t in TRIPLETS]
    assert chunk.spans[0][0] > 10 and chunk.spans[-1][1] == len(chunk.input_ids) - 2   # after the instruction
    assert all(a < b <= c for (a, b), (c, _) in zip(chunk.spans, chunk.spans[1:]))


def test_the_plain_layout_frames_a_tokenizer_without_chat_template(bert_tokenizer):
    assert not getattr(bert_tokenizer, "chat_template", None)
    assert chat_frame(bert_tokenizer, "Summarise.") == ("### User:\nSummarise.\n\n", "\n### Assistant:\n")


def test_spans_under_smollm2s_own_template_and_default_system_prompt(smollm2_models):
    """The real base's tokenizer: SmolLM2's template adds its system prompt; the spans still hold the triplets."""
    from transformers import AutoTokenizer

    from pipelines.glong.importance import serialise_triplets

    tok = AutoTokenizer.from_pretrained(smollm2_models / "smollm2-135m-instruct")
    head, tail = chat_frame(tok, TRIPLETS_INSTRUCTION)
    assert head.startswith("<|im_start|>system\n") and head.endswith(TRIPLETS_INSTRUCTION + "\n\n")
    assert tail == "<|im_end|>\n<|im_start|>assistant\n"
    s = serialise_triplets(TRIPLETS, tok, prefix=head, separator=CAUSAL_SEPARATOR, suffix=tail,
                           add_special_tokens=False)
    assert [tok.decode(s.input_ids[a:b]).strip() for a, b in s.spans] == [t.serialise() for t in TRIPLETS]
    assert tok.decode(s.input_ids[s.spans[-1][1]:]) == tail


# --- the model-driven path ------------------------------------------------------------------------------------

def test_teacher_forced_attention_is_the_attention_during_greedy_generation(llama):
    model, tok = llama
    ids = torch.tensor([CausalImportanceScorer(model, tok)._chunks(TRIPLETS)[0].input_ids])   # (1, P)
    n_prompt = ids.shape[1]
    attn = summary_self_attention(model, ids, max_summary_tokens=4)
    gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                         num_beams=1, output_attentions=True, return_dict_in_generate=True)
    steps = [gen.attentions[0][-1][0, :, -1:, :n_prompt]]                  # y1: the prompt's last row
    steps += [step[-1][0, :, :, :n_prompt] for step in gen.attentions[1:]]  # y2..: one row per step
    expected = torch.cat(steps, dim=1)                                      # (H, T_gen, P)
    assert attn.shape == (4, expected.shape[1], n_prompt) == (4, 4, n_prompt)   # no EOS in 4 random tokens
    torch.testing.assert_close(attn, expected, rtol=0, atol=1e-5)   # one pass vs a KV cache: float order differs


def test_causal_scorer_end_to_end(llama):
    model, tok = llama
    scorer = CausalImportanceScorer(model, tok, ImportanceConfig(prefix="", separator=CAUSAL_SEPARATOR,
                                                                 max_summary_tokens=3))
    scores = scorer(TRIPLETS)
    chunk = scorer._chunks(TRIPLETS)[0]
    attn = summary_self_attention(model, torch.tensor([chunk.input_ids]), max_summary_tokens=3)
    expected = importance_from_cross_attention(attn, chunk.spans).tolist()
    assert scores == pytest.approx(expected, abs=1e-6)
    assert max(scores) == 1.0 and all(0 < s <= 1 for s in scores) and len(set(scores)) == 3
    assert scorer([]) == []


def test_the_window_counts_the_triplets_not_the_chat_frame(llama):
    model, tok = llama
    many = TRIPLETS * 4                                                   # 12 triplets
    one = len(tok("Alice moved to Paris", add_special_tokens=False)["input_ids"])
    scorer = CausalImportanceScorer(model, tok, ImportanceConfig(prefix="", separator=CAUSAL_SEPARATOR,
                                                                 max_input_tokens=4 * one, max_summary_tokens=2))
    assert scorer.frame_tokens > 20 and scorer.window == 4 * one + scorer.frame_tokens
    chunks = scorer._chunks(many)
    assert len(chunks) > 2 and sum(len(c.spans) for c in chunks) == 12
    assert all(len(c.input_ids) <= scorer.window for c in chunks)
    assert all(c.text.endswith("<|end|><|assistant|>") for c in chunks)
    scores = scorer(many)
    assert len(scores) == 12 and max(scores) == 1.0 and min(scores) > 0


def test_load_importance_scorer_picks_the_scorer_by_the_saved_model(tiny_llama, tiny_t5, bert_tokenizer, tmp_path):
    causal = load_importance_scorer(str(tiny_llama))
    assert type(causal) is CausalImportanceScorer
    assert causal.model.config._attn_implementation == "eager"
    tiny_t5.save_pretrained(tmp_path / "t5")
    bert_tokenizer.save_pretrained(tmp_path / "t5")
    t5 = load_importance_scorer(str(tmp_path / "t5"))
    assert type(t5) is AttentionImportanceScorer and t5.config == ImportanceConfig()
    assert len(t5(TRIPLETS)) == 3
    with pytest.raises(ConfigError, match="not a local directory"):
        load_importance_scorer(str(tmp_path / "nothing"))
