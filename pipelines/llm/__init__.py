"""Language models for answer-level evaluation and for the memory writers (pipelines/memory/writers.py): one
interface (:mod:`pipelines.llm.base`), two backends (``local``: transformers in-process, with a LoRA adapter when
given, :mod:`pipelines.llm.local`; ``openai``: any OpenAI-compatible server, :mod:`pipelines.llm.openai_backend`), a
content-addressed response cache (:mod:`pipelines.llm.cache`), built from an :class:`LLMConfig` by
:func:`build_llm` (:mod:`pipelines.llm.config`).

Importing this package loads neither torch nor the openai client: each backend imports what it needs when used.
"""

from pipelines.llm.base import (LLM, Completion, ContextWindowExceeded, GenerationSettings, LLMError, Messages,
                                check_messages)
from pipelines.llm.cache import CachedLLM, ResponseCache
from pipelines.llm.build import build_llm
from pipelines.llm.config import DEFAULT_MODEL, LLMConfig

__all__ = ["LLM", "CachedLLM", "Completion", "ContextWindowExceeded", "DEFAULT_MODEL", "GenerationSettings",
           "LLMConfig", "LLMError", "Messages", "ResponseCache", "build_llm", "check_messages"]
