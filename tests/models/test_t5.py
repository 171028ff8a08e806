"""T5 factory: tiny / published specs, forward shapes, from_pretrained on a saved directory."""

from __future__ import annotations

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.models.t5 import T5_SPECS, T5Spec, build_t5


def test_tiny_forward_shapes_and_loss():
    torch.manual_seed(0)
    model = build_t5("tiny", vocab_size=200, attn_implementation="eager").eval()  # eager: attention weights
    src = torch.randint(2, 200, (2, 9))                                   # (B, S)
    tgt = torch.randint(2, 200, (2, 5))                                   # (B, T)
    out = model(input_ids=src, labels=tgt, output_attentions=True)
    assert out.logits.shape == (2, 5, 200)                                # (B, T, vocab)
    assert out.encoder_last_hidden_state.shape == (2, 9, 64)              # (B, S, d_model)
    assert out.cross_attentions[-1].shape == (2, 4, 5, 9)                 # (B, heads, T, S): G-Long reads this
    assert torch.isfinite(out.loss)
    assert model.config.decoder_start_token_id == 0 and model.config.eos_token_id == 1
    assert build_t5("tiny", vocab_size=200).config._attn_implementation == "sdpa"  # the default


def test_published_t5_small_size():
    with torch.device("meta"):
        model = build_t5("t5-small", vocab_size=32128)
    assert sum(p.numel() for p in model.parameters()) == 60_506_624  # Raffel et al. (2020) T5-Small
    assert T5_SPECS["flan-t5-large"].feed_forward_proj == "gated-gelu"


def test_from_pretrained_on_a_saved_directory_gives_identical_outputs(tmp_path):
    torch.manual_seed(3)
    spec = T5Spec(d_model=32, d_ff=64, d_kv=8, num_layers=1, num_decoder_layers=1, num_heads=4,
                  feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    model = build_t5(spec, vocab_size=90).eval()
    model.save_pretrained(tmp_path / "t5-local")
    loaded = build_t5(str(tmp_path / "t5-local")).eval()
    src, tgt = torch.randint(2, 90, (2, 6)), torch.randint(2, 90, (2, 4))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=src, labels=tgt).logits, model(input_ids=src, labels=tgt).logits)
    assert loaded.config.feed_forward_proj == "gated-gelu"


def test_another_architecture_is_refused(tmp_path):
    from pipelines.models.gpt2 import build_gpt2

    build_gpt2({"n_layer": 1, "n_head": 1, "n_embd": 8, "n_positions": 8}, 20).save_pretrained(tmp_path / "g")
    with pytest.raises(ConfigError, match="is a 'gpt2' model"):
        build_t5(tmp_path / "g")


@pytest.mark.parametrize("fields, message", [
    ({"feed_forward_proj": "swiglu"}, "use one of relu, gated-gelu"),
    ({"num_heads": 0}, "num_heads is 0"),
    ({"relative_attention_max_distance": 8}, "at least relative_attention_num_buckets"),
])
def test_bad_specs(fields, message):
    with pytest.raises(ConfigError, match=message):
        T5Spec(**fields)


def test_token_ids_must_fit_the_vocabulary():
    with pytest.raises(ConfigError, match="decoder_start_token_id 50 lies outside"):
        build_t5("tiny", vocab_size=50, decoder_start_token_id=50)
    with pytest.raises(ConfigError, match="needs vocab_size"):
        build_t5("tiny")
