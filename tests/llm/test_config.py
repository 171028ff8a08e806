"""LLMConfig: defaults, validation naming the key, no secret ever configured, build_llm."""

from __future__ import annotations

import pytest

from pipelines.errors import ConfigError
from pipelines.llm import CachedLLM, GenerationSettings, LLMConfig, build_llm
from pipelines.llm.local import LocalLLM
from pipelines.llm.openai_backend import OpenAILLM


def test_defaults_are_the_shipped_model_greedy_and_cached():
    cfg = LLMConfig()
    assert (cfg.backend, cfg.model, cfg.dtype, cfg.batch_size, cfg.cache) == (
        "local", "smollm2-135m-instruct", "auto", 8, True)
    assert cfg.settings() == GenerationSettings(max_new_tokens=64, temperature=0.0)
    assert cfg.settings(max_new_tokens=8, stop=("\n",)).stop == ("\n",)


@pytest.mark.parametrize("change, key", [
    ({"backend": "vllm"}, "llm.backend"), ({"batch_size": 0}, "llm.batch_size"),
    ({"batch_size": True}, "llm.batch_size"), ({"dtype": "int4"}, "llm.dtype"), ({"device": "tpu"}, "llm.device"),
    ({"temperature": -1}, "llm.temperature"), ({"timeout_s": 0}, "llm.timeout_s"),
    ({"max_retries": -1}, "llm.max_retries"), ({"price_prompt_per_1m": -0.1}, "llm.price_prompt_per_1m"),
    ({"gguf_file": "model.bin"}, "llm.gguf_file"), ({"concurrency": 0}, "llm.concurrency"),
    ({"backend": "openai", "model": "m"}, "llm.base_url"),
    ({"backend": "openai", "base_url": "http://127.0.0.1:8000/v1"}, "llm.model"),
    ({"api_key_env": "sk-abc-123"}, "llm.api_key_env"),
])
def test_a_bad_value_is_a_config_error_naming_its_key(change, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        LLMConfig(**change)


def test_from_dict_names_the_place_in_params_and_refuses_unknown_and_secret_keys():
    assert LLMConfig.from_dict({"batch_size": 4}).batch_size == 4
    with pytest.raises(ConfigError, match=r"llm\.judge\.batch_size"):
        LLMConfig.from_dict({"batch_size": 0}, where="llm.judge")
    with pytest.raises(ConfigError, match=r"llm\.reader\.modle is not a setting.*known: .*model"):
        LLMConfig.from_dict({"modle": "x"}, where="llm.reader")
    with pytest.raises(ConfigError, match=r"llm\.judge\.api_key: the API key is never configured") as err:
        LLMConfig.from_dict({"api_key": "sk-secret-value"}, where="llm.judge")
    assert "sk-secret-value" not in str(err.value)


def test_build_llm_puts_the_cache_in_front_unless_off(tmp_path, tiny_llama):
    cached = build_llm({"model": str(tiny_llama)}, tmp_path)
    assert isinstance(cached, CachedLLM) and isinstance(cached.llm, LocalLLM)
    assert cached.cache.folder == tmp_path / "responses" and cached.label == f"local:{tiny_llama}"
    bare = build_llm(LLMConfig(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", cache=False), tmp_path)
    assert isinstance(bare, OpenAILLM)


def test_converted_models_go_under_the_cache_dir_or_the_shared_folder(tmp_path, monkeypatch):
    from pipelines.llm.config import models_dir

    monkeypatch.delenv("MNEMOS_LLM_MODELS", raising=False)
    assert models_dir(tmp_path) == tmp_path / "models"
    monkeypatch.setenv("MNEMOS_LLM_MODELS", str(tmp_path / "shared"))
    assert models_dir(tmp_path) == tmp_path / "shared"
