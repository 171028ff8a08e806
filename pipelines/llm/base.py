"""The one interface every language-model backend implements (the reader and the judges of the benchmark).

A call takes a batch of chat conversations (OpenAI chat format: ``[{"role": "system" | "user" | "assistant",
"content": str}, ...]``) and one :class:`GenerationSettings`, and returns one :class:`Completion` per
conversation, in order: the text, the prompt and completion token counts, and whether it came from the
response cache. Backends: ``local`` (transformers in-process, batched) and ``openai`` (any OpenAI-compatible
chat-completions server); :class:`pipelines.llm.cache.CachedLLM` puts the content-addressed response cache
in front of either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from pipelines.errors import ConfigError, MnemosError

Message = dict[str, str]          # {"role": "system" | "user" | "assistant", "content": str}
Messages = list[Message]          # one conversation
ROLES = ("system", "user", "assistant")
TEMPLATE_TOKENS_PER_MESSAGE = 8   # chat-template markup around a message (role tags, separators): an allowance
PROMPT_FORMATS = ("auto", "chat", "plain", "raw")   # how a local model reads messages (LLMConfig.prompt_format)
# The plain layout of a system + user prompt for a tokenizer without a chat template (G-Long's extractor on the tiny
# profile's models is trained on it, pipelines/glong/extractor.py); :func:`plain_prompt` lays out any conversation so.
PLAIN_TEMPLATE = "### System:\n{system}\n### User:\n{user}\n### Assistant:\n"


def plain_prompt(messages: Messages) -> str:
    r"""``messages`` in the plain layout: each as ``### Role:\n{content}\n``, then ``### Assistant:\n`` (a system
    and a user message give exactly :data:`PLAIN_TEMPLATE`)."""
    return "".join(f"### {m['role'].capitalize()}:\n{m['content']}\n" for m in messages) + "### Assistant:\n"


def raw_prompt(messages: Messages) -> str:
    """The contents of ``messages`` alone, one per line, no markup: the prompt of a model fine-tuned on bare source
    text (a decoder-only EMMA dialogue module reads ``summarize [ABOUT_X]: ...`` as it is)."""
    return "\n".join(m["content"] for m in messages)


class LLMError(MnemosError, RuntimeError):
    """A backend could not answer (server unreachable after its retries, model failed to load, ...);
    the message names the backend, the model and, for a server, its URL."""

    exit_code = 7
    hint = ("start the server or fix its address and model (params.yaml llm.*, or --set llm.reader.base_url=... / "
            "llm.reader.model=...); `benchmark --no-answers` scores the retrieval without a language model.")


class ContextWindowExceeded(LLMError):
    """A server refused a prompt that does not fit its model's window beside the new tokens asked (HTTP 400,
    OpenAI's code ``context_length_exceeded``, vLLM's "maximum context length"): the prompt's fault, not the
    server's, so a memory product's writer counts it as refused (as a local model's window check does)."""


@dataclass(frozen=True)
class GenerationSettings:
    """What one call asks of the model (part of the cache key)."""

    max_new_tokens: int = 128
    temperature: float = 0.0        # 0: greedy (the default of every reader and judge)
    top_p: float = 1.0
    stop: tuple[str, ...] = ()      # strings that end a completion (not included in its text)
    seed: int = 2022                # for sampling (temperature > 0)

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}.")
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ConfigError(f"temperature must be a number >= 0, got {self.temperature!r}.")
        if not 0 < float(self.top_p) <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}.")
        object.__setattr__(self, "stop", tuple(self.stop))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "stop": list(self.stop)}


@dataclass(frozen=True)
class Completion:
    """One answer of the model."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False            # served from the response cache (cost nothing)
    latency_s: float = 0.0          # wall time of the call that produced it (its share of a batch)
    finish_reason: str | None = None  # "stop" | "length" | None (unknown)
    extra: dict[str, Any] = field(default_factory=dict)


def check_messages(batch: Sequence[Messages]) -> None:
    """ConfigError naming the conversation and message that is not a list of {role, content} strings."""
    for i, messages in enumerate(batch):
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ConfigError(f"conversation {i} of the batch must be a non-empty list of messages, got {messages!r}.")
        for j, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise ConfigError(f"conversation {i}, message {j}: must be {{'role': one of {ROLES}, "
                                  f"'content': str}}, got {m!r}.")


class LLM(ABC):
    """A chat model: :meth:`generate` over a batch of conversations."""

    backend: str = ""

    @property
    @abstractmethod
    def model(self) -> str:
        """The model as configured (a name, a local folder, a GGUF file, or the server's model id)."""

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What makes two backends give the same answer to the same call (backend, model, revision or file
        hash, dtype...): the model part of the cache key. Never holds a secret (no API key)."""

    @abstractmethod
    def generate(self, batch: Sequence[Messages], settings: GenerationSettings,
                 progress: Callable[[int], None] | None = None) -> list[Completion]:
        """One completion per conversation of ``batch``, in order; ``progress(n)`` after n more are done."""

    @property
    def context_window(self) -> int | None:
        """Tokens the model reads at most (prompt + new tokens); None when unknown."""
        return None

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` for this model (the full-history reader fits its window with it); a backend
        without a tokenizer estimates (4 characters a token)."""
        return max(1, len(text) // 4)

    def count_prompt_tokens(self, messages: Messages) -> int:
        """Tokens of the prompt ``messages`` make as the model reads it (chat template, default system prompt and
        all): what must fit the window beside the answer. A backend without the template estimates it from the
        messages' contents (``TEMPLATE_TOKENS_PER_MESSAGE`` of markup a message)."""
        return sum(self.count_tokens(m["content"]) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages)

    @property
    def label(self) -> str:
        """``backend:model``, as the report and MLflow name it."""
        return f"{self.backend}:{self.model}"

    def close(self) -> None:
        """Release what the backend holds (threads, the model); default: nothing."""
