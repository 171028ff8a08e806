"""An LLM built from its :class:`~pipelines.llm.config.LLMConfig`: the backend it names (``local``: transformers
in-process; ``openai``: an OpenAI-compatible server), behind the response cache; and the folder a pretrained model
reference loads from, for the stages that train from one.

The backends' own modules import torch / the openai client at their first use, not here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from pipelines.config import ROOT
from pipelines.llm.base import LLM
from pipelines.llm.cache import CachedLLM, ResponseCache
from pipelines.llm.config import DEFAULT_CACHE_DIR, LLMConfig, models_dir


def _local(config: LLMConfig, cache_dir: Path) -> LLM:
    from pipelines.llm.local import LocalLLM  # torch and transformers: loaded with the first local model

    return LocalLLM(config, models_dir(cache_dir))


def _openai(config: LLMConfig, cache_dir: Path) -> LLM:
    from pipelines.llm.openai_backend import OpenAILLM  # the openai client: loaded with the first server model

    return OpenAILLM(config)


BACKENDS: dict[str, Callable[[LLMConfig, Path], LLM]] = {"local": _local, "openai": _openai}


def build_llm(config: LLMConfig | Mapping[str, Any], cache_dir: str | os.PathLike | None = None) -> LLM:
    """The model ``config`` names, behind the response cache under ``<cache_dir>/responses`` when
    ``config.cache`` (a :class:`~pipelines.llm.cache.CachedLLM`: its ``stats()`` count hits, misses, tokens, cost).

    ``cache_dir`` (default ``.cache/llm``): the response cache and the converted models. Nothing is loaded
    here: a local model loads at its first call, so a run answered wholly from the cache never loads it.
    """
    cfg = config if isinstance(config, LLMConfig) else LLMConfig.from_dict(config)
    root = Path(cache_dir) if cache_dir is not None else Path(DEFAULT_CACHE_DIR)
    backend = BACKENDS[cfg.backend](cfg, root)
    if not cfg.cache:
        return backend
    return CachedLLM(backend, ResponseCache(root / "responses"), price_prompt_per_1m=cfg.price_prompt_per_1m,
                     price_completion_per_1m=cfg.price_completion_per_1m)


def pretrained_folder(model: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder ``from_pretrained`` loads for a pretrained model reference, for training from it (the small
    profile's bases): the shipped default (``smollm2-135m-instruct``: its GGUF converted once, under a lock, into
    :func:`models_dir`), a .gguf file, a save_pretrained folder, or a name already in the local Hugging Face cache.
    Nothing is downloaded. ``cache_dir``: as :func:`build_llm`'s (default: ``<project root>/.cache/llm``)."""
    from pipelines.llm.local import resolve_model  # transformers

    return resolve_model(model, models_dir(cache_dir if cache_dir is not None else ROOT / DEFAULT_CACHE_DIR))
