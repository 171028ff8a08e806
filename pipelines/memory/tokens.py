"""The shared token counter: how many tokens a context costs a generator.

Every memory strategy measures and cuts its context with the same counter, so that the
benchmark's ``context_tokens`` column compares like with like.

Default tokens (no model needed): ``re.findall(r"\\w+|[^\\w\\s]", text)``, i.e. every run of
word characters is one token and every other non-space character (punctuation) is one token:
``"Hi, Ana!"`` -> ``["Hi", ",", "Ana", "!"]`` = 4 tokens. Whitespace separates tokens and is
never a token, so the count of lines joined by ``"\\n"`` is the sum of the lines' counts.

Optionally a Hugging Face tokenizer (a local directory or an already loaded tokenizer object)
counts ``len(tokenizer.encode(text, add_special_tokens=False))``: the generator's own tokens.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from pipelines.errors import ConfigError

REGEX_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass
class TokenCounter:
    """Counts tokens with a regex (default) or a Hugging Face tokenizer."""

    tokenizer: Any = None  # None: regex tokens; else a tokenizer object with ``encode`` (HF)

    @classmethod
    def from_config(cls, tokenizer: str | os.PathLike | None = None) -> "TokenCounter":
        """``None`` -> regex tokens; a local path -> that directory's HF tokenizer (offline)."""
        if tokenizer is None:
            return cls()
        path = os.fspath(tokenizer)
        if not os.path.isdir(path):
            raise ConfigError(f"tokenizer {path!r} is not a local directory; no model hub is reached, "
                              f"so give the path of a saved Hugging Face tokenizer (or null for regex tokens).")
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(path, local_files_only=True))

    @property
    def name(self) -> str:
        if self.tokenizer is None:
            return "regex"
        return str(getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__))

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` (regex strings, or the tokenizer's token strings)."""
        if self.tokenizer is None:
            return REGEX_TOKEN.findall(text)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return list(self.tokenizer.convert_ids_to_tokens(ids))

    def count(self, text: str) -> int:
        """Number of tokens of ``text``; 0 for the empty string."""
        if not text:
            return 0
        if self.tokenizer is None:
            return len(REGEX_TOKEN.findall(text))
        return len(self.tokenizer.encode(text, add_special_tokens=False))


DEFAULT_COUNTER = TokenCounter()
