"""A small LLM for the answer tests: canned texts, a word tokenizer, and a record of every call."""

from __future__ import annotations

from typing import Callable, Sequence

from pipelines.llm.base import LLM, Completion, GenerationSettings, Messages, check_messages


class FakeLLM(LLM):
    """Answers every conversation with ``answer(messages)`` (default: "fake answer"); a conversation whose
    prompt asks for a JSON label (mem0's judge) gets ``{"label": "CORRECT"}``. Tokens are whitespace words."""

    backend = "fake"

    def __init__(self, window: int | None = 4096, answer: Callable[[Messages], str] | None = None):
        self.window = window
        self.answer = answer or (lambda messages: "fake answer")
        self.calls: list[tuple[list[Messages], GenerationSettings]] = []

    @property
    def model(self) -> str:
        return "fake-model"

    def identity(self) -> dict:
        return {"backend": self.backend, "model": self.model}

    @property
    def context_window(self) -> int | None:
        return self.window

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, batch: Sequence[Messages], settings: GenerationSettings,
                 progress: Callable[[int], None] | None = None) -> list[Completion]:
        check_messages(batch)
        self.calls.append((list(batch), settings))
        out = []
        for messages in batch:
            prompt = "\n".join(m["content"] for m in messages)
            text = '{"label": "CORRECT"}' if '"label"' in prompt else self.answer(messages)
            out.append(Completion(text, self.count_tokens(prompt), self.count_tokens(text), latency_s=0.01))
        if progress:
            progress(len(batch))
        return out
