"""Token layouts of MDR and the tokenizer wrapper."""

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from pipelines.errors import ConfigError
from pipelines.mdr.text import IGNORE, Codec, load_codec, pad
from tests.mdr.conftest import EOS


def test_layouts(codec):
    q, r = codec.encode("do you have pets?"), codec.encode("yes, two dogs.")
    e = codec.eos_id
    assert codec.encoder_ids("yes, two dogs.", 100) == r + [e]
    assert codec.encoder_ids("yes, two dogs.", 2) == r[:2] + [e]
    assert codec.round_ids("do you have pets?", "yes, two dogs.", 100) == q + [e] + r + [e]
    ids, labels = codec.decoder_ids("do you have pets?", "yes, two dogs.", 100, 100)
    assert ids == q + [e] + r + [e]
    assert labels == [IGNORE] * (len(q) + 1) + r + [e]
    assert codec.decode(ids) == "do you have pets?yes, two dogs."


def test_hf_and_raw_tokenizers_agree(raw_tokenizer, codec, tmp_path):
    hf = Codec(PreTrainedTokenizerFast(tokenizer_object=raw_tokenizer, eos_token=EOS), EOS)
    text = "i live in oslo."
    assert hf.encode(text) == codec.encode(text)
    assert (hf.eos_id, hf.vocab_size) == (codec.eos_id, codec.vocab_size)
    codec.save(tmp_path / "raw")
    hf.save(tmp_path / "hf")
    assert load_codec(tmp_path / "raw").encode(text) == codec.encode(text)
    assert load_codec(tmp_path / "hf").encode(text) == codec.encode(text)
    assert load_codec(tmp_path / "raw" / "tokenizer.json").eos_id == codec.eos_id


def test_missing_special_token_is_a_config_error(raw_tokenizer, tmp_path):
    with pytest.raises(ConfigError, match="<sep>"):
        Codec(raw_tokenizer, EOS, sep_token="<sep>")
    with pytest.raises(ConfigError, match="mdr.eos_token"):
        Codec(PreTrainedTokenizerFast(tokenizer_object=raw_tokenizer, unk_token=EOS), "</s>")
    with pytest.raises(ConfigError, match="no tokenizer"):
        load_codec(tmp_path)


def test_pad():
    ids, mask = pad([[5, 6, 7], [8]], 0)
    assert torch.equal(ids, torch.tensor([[5, 6, 7], [8, 0, 0]]))
    assert torch.equal(mask, torch.tensor([[1, 1, 1], [1, 0, 0]]))
    empty, empty_mask = pad([], 0)
    assert empty.shape == empty_mask.shape == (0, 1)
