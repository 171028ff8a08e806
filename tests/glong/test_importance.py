"""Tests of pipelines/glong/importance.py (G-Long Eqs. 1-3)."""

from __future__ import annotations

import pytest
import torch

from pipelines.data.schema import Triplet
from pipelines.glong.config import ImportanceConfig
from pipelines.glong.importance import (AttentionImportanceScorer, importance_from_cross_attention,
                                        normalise_by_max, raw_saliency, serialise_triplets,
                                        summary_cross_attention, uniform_importance)

# A hand-built last-layer cross-attention: H = 2 heads, T_sum = 2 summary tokens, T_in = 5 inputs.
# Values are multiples of 1/8 so that every sum below is exact in float32; each row sums to 1.
E = 1 / 8
ATTN = torch.tensor([
    [[1 * E, 2 * E, 3 * E, 2 * E, 0 * E],      # head 0, summary token 1
     [4 * E, 1 * E, 1 * E, 1 * E, 1 * E]],     # head 0, summary token 2
    [[3 * E, 2 * E, 1 * E, 0 * E, 2 * E],      # head 1, summary token 1
     [0 * E, 1 * E, 5 * E, 1 * E, 1 * E]],     # head 1, summary token 2
])
# Eq. (1) mean over heads:   [[2, 2, 2, 1, 1], [2, 1, 3, 1, 1]] / 8
# sum over summary tokens:   [4, 3, 5, 2, 2] / 8
SPANS = [(0, 2), (2, 3), (3, 5)]
# Eq. (2): span sums 7/8, 5/8, 4/8; Eq. (3): divided by 7/8.
RAW = [7 * E, 5 * E, 4 * E]
NORMALISED = [1.0, 5 / 7, 4 / 7]


def test_attention_fixture_is_a_distribution():
    assert torch.equal(ATTN.sum(-1), torch.ones(2, 2))


def test_raw_saliency_hand_built():
    assert raw_saliency(ATTN, SPANS).tolist() == RAW


def test_importance_hand_built():
    got = importance_from_cross_attention(ATTN, SPANS)
    torch.testing.assert_close(got, torch.tensor(NORMALISED), rtol=0, atol=1e-7)
    assert got.max().item() == 1.0 and got.min().item() > 0


def test_batch_dim_of_one_is_accepted():
    assert raw_saliency(ATTN[None], SPANS).tolist() == RAW


def test_overlapping_and_single_token_spans():
    # a span may be one token; spans are independent sums (they may share positions)
    assert raw_saliency(ATTN, [(4, 5), (0, 5)]).tolist() == [2 * E, 16 * E]


@pytest.mark.parametrize("spans", [[(0, 0)], [(3, 2)], [(-1, 2)], [(0, 6)]])
def test_bad_spans_raise(spans):
    with pytest.raises(ValueError, match="span 0"):
        raw_saliency(ATTN, spans)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"\(H, T_sum, T_in\)"):
        raw_saliency(ATTN[0], SPANS)
    with pytest.raises(ValueError, match="batch of 2"):
        raw_saliency(torch.stack([ATTN, ATTN]), SPANS)


def test_normalise_edge_cases():
    assert normalise_by_max(torch.zeros(0)).numel() == 0
    with pytest.raises(ValueError, match="zero attention"):
        normalise_by_max(torch.zeros(3))
    assert importance_from_cross_attention(ATTN, []).numel() == 0


TRIPLETS = [Triplet(subject="Juno", relation="collects", object="stamps"),
            Triplet(subject="Wren", relation="works_at", object="a brewery")]


def test_serialise_triplets_spans(bert_tokenizer):
    s = serialise_triplets(TRIPLETS, bert_tokenizer)
    assert s.text == "summarize: Juno collects stamps. Wren works at a brewery"
    assert s.char_spans == [(11, 31), (33, 56)]
    tokens = bert_tokenizer.convert_ids_to_tokens(s.input_ids)
    assert tokens == ["[CLS]", "sum", "##mar", "##ize", ":", "juno", "collects", "stamps", ".",
                      "wren", "works", "at", "a", "brewery", "[SEP]"]
    assert s.spans == [(5, 8), (9, 14)]


def test_serialise_truncation_without_tokens_raises(bert_tokenizer):
    with pytest.raises(ValueError, match="triplet 1"):
        serialise_triplets(TRIPLETS, bert_tokenizer, max_length=8)


def test_uniform_importance():
    assert uniform_importance(TRIPLETS) == [1.0, 1.0]
    assert uniform_importance([]) == []


def test_summary_attention_matches_generation(tiny_t5, bert_tokenizer):
    """The teacher-forced pass reproduces the attention seen during greedy generation."""
    ids = torch.tensor([serialise_triplets(TRIPLETS, bert_tokenizer).input_ids])
    attn = summary_cross_attention(tiny_t5, ids, max_summary_tokens=4)
    gen = tiny_t5.generate(input_ids=ids, max_new_tokens=4, do_sample=False, num_beams=1,
                           output_attentions=True, return_dict_in_generate=True)
    steps = torch.cat([step[-1] for step in gen.cross_attentions], dim=2)[0]   # (H, T, T_in)
    assert attn.shape == (4, steps.shape[1], 15)
    torch.testing.assert_close(attn, steps[:, :attn.shape[1]], rtol=0, atol=1e-6)


def test_scorer_end_to_end(tiny_t5, bert_tokenizer):
    scorer = AttentionImportanceScorer(tiny_t5, bert_tokenizer, ImportanceConfig(max_summary_tokens=3))
    scores = scorer(TRIPLETS)
    ids = torch.tensor([serialise_triplets(TRIPLETS, bert_tokenizer).input_ids])
    attn = summary_cross_attention(tiny_t5, ids, max_summary_tokens=3)
    expected = importance_from_cross_attention(attn, [(5, 8), (9, 14)]).tolist()
    assert scores == pytest.approx(expected, abs=1e-6)
    assert max(scores) == 1.0 and all(0 < s <= 1 for s in scores)
    assert scorer([]) == []


def test_scorer_splits_long_sessions(tiny_t5, bert_tokenizer):
    many = TRIPLETS * 3                                   # 6 triplets, 32 tokens in one input
    scorer = AttentionImportanceScorer(tiny_t5, bert_tokenizer,
                                       ImportanceConfig(max_input_tokens=16, max_summary_tokens=2))
    chunks = scorer._chunks(many)
    assert [len(c.spans) for c in chunks] == [1, 2, 1, 2]
    assert all(len(c.input_ids) <= 16 for c in chunks)
    scores = scorer(many)
    assert len(scores) == 6 and max(scores) == 1.0 and min(scores) > 0
