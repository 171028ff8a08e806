"""GPT-2 factory: tiny and 124M specs, SDPA, and from_pretrained on a directory the test saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.models.gpt2 import GPT2_SPECS, GPT2Spec, build_gpt2


def test_tiny_forward_shapes():
    torch.manual_seed(0)
    model = build_gpt2("tiny", vocab_size=300, pad_token_id=1).eval()
    ids = torch.randint(0, 300, (2, 7))                                   # (B, T)
    out = model(input_ids=ids, labels=ids, output_hidden_states=True)
    assert out.logits.shape == (2, 7, 300)                                # (B, T, vocab)
    assert len(out.hidden_states) == 3 and out.hidden_states[-1].shape == (2, 7, 64)  # embeddings + 2 blocks
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    assert model.config._attn_implementation == "sdpa"
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # tied embeddings
    assert (model.config.n_layer, model.config.n_head, model.config.n_embd, model.config.n_positions) == (2, 2, 64, 256)


def test_encoder_without_lm_head():
    enc = build_gpt2(GPT2Spec(n_layer=1, n_head=2, n_embd=16, n_positions=32), vocab_size=50, lm_head=False)
    assert type(enc).__name__ == "GPT2Model"
    assert enc(input_ids=torch.zeros(3, 5, dtype=torch.long)).last_hidden_state.shape == (3, 5, 16)


def test_paper_spec_is_gpt2_124m():
    assert GPT2_SPECS["paper"] == GPT2Spec(n_layer=12, n_head=12, n_embd=768, n_positions=1024)
    with torch.device("meta"):  # shapes only, no memory
        model = build_gpt2("paper", vocab_size=50257)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808  # GPT-2 small


def test_from_pretrained_on_a_saved_directory_gives_identical_outputs(tmp_path):
    torch.manual_seed(1)
    model = build_gpt2({"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 64}, vocab_size=120).eval()
    model.save_pretrained(tmp_path / "gpt2-local")
    assert (tmp_path / "gpt2-local" / "model.safetensors").is_file()
    loaded = build_gpt2(str(tmp_path / "gpt2-local")).eval()
    ids = torch.randint(0, 120, (2, 9))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert loaded.config._attn_implementation == "sdpa"
    as_path = build_gpt2(Path(tmp_path / "gpt2-local"), lm_head=False)
    assert type(as_path).__name__ == "GPT2Model"


def test_from_pretrained_resizes_the_vocabulary(tmp_path):
    build_gpt2(GPT2Spec(n_layer=1, n_head=1, n_embd=8, n_positions=16), vocab_size=40).save_pretrained(tmp_path / "m")
    bigger = build_gpt2(tmp_path / "m", vocab_size=45)
    assert bigger.get_input_embeddings().num_embeddings == 45 and bigger.lm_head.out_features == 45


def test_unknown_name_offline_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    with pytest.raises(ConfigError, match="no download is attempted"):
        build_gpt2("someone/not-cached-gpt2")


def test_a_directory_of_another_architecture_is_refused(tmp_path):
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 10}))
    with pytest.raises(ConfigError, match="is a 'bert' model"):
        build_gpt2(tmp_path / "bert")


@pytest.mark.parametrize("spec, vocab, kwargs, message", [
    (GPT2Spec(), None, {}, "needs vocab_size"),
    ("tiny", 100, {"eos_token_id": 100}, "outside the vocabulary"),
    ({"n_layers": 2}, 100, {}, "unknown GPT2Spec field"),
])
def test_bad_builds(spec, vocab, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build_gpt2(spec, vocab, **kwargs)


@pytest.mark.parametrize("fields, message", [
    ({"n_embd": 65, "n_head": 2}, "not divisible by n_head"),
    ({"n_layer": 0}, "n_layer is 0"),
    ({"dropout": 1.0}, r"must lie in \[0, 1\)"),
])
def test_bad_specs(fields, message):
    with pytest.raises(ConfigError, match=message):
        GPT2Spec(**fields)
