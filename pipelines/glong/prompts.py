"""The prompts of G-Long's summariser, shared by its training (pipelines/glong/summariser.py, tasks.py) and the
importance scorer that reads its attention (pipelines/glong/importance.py): the instructions, the source text of a
session's triplets, and the decoder-only summariser's chat layout around a source.
"""

from __future__ import annotations

from typing import Sequence

from pipelines.data.schema import Triplet
from pipelines.errors import ConfigError
from pipelines.llm.base import plain_prompt

# The decoder-only summariser's instructions (the user message opens with one, then a blank line, then the source)
# and its triplet separator: one triplet a line. Training (pipelines/glong/summariser.py) and scoring share them.
TRIPLETS_INSTRUCTION = ("Summarise the conversation these facts were taken from. "
                        "One fact a line: subject relation object.")
DIALOGUE_INSTRUCTION = "Summarise this conversation."
CAUSAL_SEPARATOR = "\n"


def join_triplets(triplets: Sequence[Triplet], separator: str, prefix: str = ""
                  ) -> tuple[str, list[tuple[int, int]]]:
    """``prefix`` then the triplets as "subject relation object" joined by ``separator``, with each
    triplet's [start, end) characters: the summariser's source text, in training and in scoring."""
    parts, char_spans, pos = [prefix], [], len(prefix)
    for i, triplet in enumerate(triplets):
        if i:
            parts.append(separator)
            pos += len(separator)
        piece = triplet.serialise()
        parts.append(piece)
        char_spans.append((pos, pos + len(piece)))
        pos += len(piece)
    return "".join(parts), char_spans


def chat_frame(tokenizer, instruction: str) -> tuple[str, str]:
    """(head, tail) such that head + source + tail is the decoder-only summariser's prompt for ``source``:
    the tokenizer's chat template over one user message (the instruction, a blank line, the source) with
    the generation prompt, or the LLM layer's plain layout for a tokenizer without a template."""
    marker = "<mnemos-source/>"
    messages = [{"role": "user", "content": f"{instruction}\n\n{marker}"}]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = plain_prompt(messages)
    head, found, tail = text.partition(marker)
    if not found or marker in tail:
        raise ConfigError(f"the chat template of {type(tokenizer).__name__} does not render the user message "
                          "once and verbatim, so the summariser's prompt cannot be laid out around its source")
    return head, tail


def summary_prompt(tokenizer, instruction: str, source: str) -> str:
    """The decoder-only summariser's prompt text for one source (dialogue lines or triplet lines)."""
    head, tail = chat_frame(tokenizer, instruction)
    return head + source + tail
