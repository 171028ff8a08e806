"""EMMA's dialogue module, its inputs: examples as token ids and padded batches (seed 000, 4.1, E.1).

The three tasks' text examples (:mod:`pipelines.emma.formats`: a source, a target) become token ids once, before
training (:func:`encode_examples`, :func:`encode_causal_examples`), and a batch only pads them:

- a T5 (seq2seq) reads the source in its encoder and writes the target in its decoder: source and target each end
  in EOS; :func:`pad_batch` gives input_ids / attention_mask (B, S) and labels (B, T), -100 on the padding;
- a decoder-only model (causal) reads one sequence: the prompt, then the target and EOS. The prompt is the source
  as pipelines/llm's local backend lays out a conversation of one user message holding it (``prompt_format:
  auto``: the tokenizer's chat template with its generation prompt, else the plain ``### User:`` layout;
  :func:`prompt_frame`), so that the trained adapter answers the same inputs when served through the LLM layer
  (``llm.adapter``); :func:`pad_causal` gives input_ids / attention_mask / labels (B, L), the labels -100 on the
  prompt and the padding (the loss is over the target tokens only).

An over-long text is cut where it loses least (:func:`encode_all`: the head and the latest turns of a generation
or summarisation source; Appendix E.1's 1024 input and 64 target tokens).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Sequence

import torch

from pipelines.emma.formats import Example, SourceLayout, source_layout

IGNORE = -100               # label of a position without loss (prompt, padding)


def encode(tokenizer, text: str, max_length: int) -> list[int]:
    """Token ids ending in EOS, at most ``max_length`` (the EOS kept: T5 reads and writes it); see
    :func:`encode_all` for what an over-long source keeps."""
    return encode_all(tokenizer, [text], max_length)[0]


def encode_all(tokenizer, texts: Sequence[str], max_length: int, *, eos: bool = True) -> list[list[int]]:
    """:func:`encode` of each text, the texts tokenised in one batched call. ``eos=False``: the text's own
    tokens only, at most ``max_length``, tokenised without added special tokens (a decoder's prompt part).

    A text over ``max_length`` tokens (Appendix E.1: 1024 input, 64 target) is cut where it loses least:

    - a generation source keeps its head (prefix, speakers, memory block, ``[NOW] <ordinal> session``) and
      its most recent tokens, so the latest turns and the closing ``[Main]`` slot the target fills survive;
      the oldest turns go, cut on a turn boundary when at least one whole turn fits (else inside the latest
      turn). emma_examples already drops the oldest turns to fit, but counting whitespace words: a subword
      tokenizer makes ~1.6 tokens of a word, so the cut is needed here too.
    - a summarisation source is cut the same way. The paper summarises "the entire session history"
      (section 4.1), so any cut departs from it; this one keeps what says whom to summarise ([ABOUT_X],
      the speakers), drops whole turns rather than a turn's end, and keeps the latest turns, which carry the
      newest state of what the session changed (the memories that link to and update older ones).
    - any other text (a link source, a target) keeps its first tokens.

    A head longer than half the budget (a huge memory block) keeps its first half-budget tokens and the
    tail the rest. Only over-long texts are looked at again (a second tokenizer call for their offsets).
    """
    if not texts:
        return []
    end, keep = tokenizer.eos_token_id, max_length - 1 if eos else max_length
    rows = []
    for ids in tokenizer(list(texts), add_special_tokens=eos)["input_ids"]:
        rows.append(ids[:-1] if eos and ids and ids[-1] == end else ids)
    long = [i for i, ids in enumerate(rows) if len(ids) > keep]
    layouts = {i: source_layout(texts[i]) for i in long}
    shaped = [i for i in long if layouts[i] is not None]
    for i, (head, turns) in zip(shaped, _token_layouts(tokenizer, [texts[i] for i in shaped],
                                                       [layouts[i] for i in shaped], [rows[i] for i in shaped],
                                                       special=eos)):
        rows[i] = _cut_middle(rows[i], head, turns, keep)
    for i in long:
        if layouts[i] is None:
            rows[i] = rows[i][:keep]
    return [ids + [end] for ids in rows] if eos else rows


def _token_layouts(tokenizer, texts: Sequence[str], layouts: Sequence[SourceLayout],
                   rows: Sequence[list[int]], special: bool = True) -> list[tuple[int, list[int]]]:
    """(head tokens, token index of each turn start) of each text, from its tokens' character offsets.

    A token belongs to the head when it starts before ``head_end``; a turn starts at the first token that
    starts at or after the space before its tag. A tokenizer without offsets (a slow one) gives the head
    length by tokenising the head alone (the common prefix with the whole) and no turn boundaries.
    """
    if not texts:
        return []
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(list(texts), add_special_tokens=special, return_offsets_mapping=True)
        out = []
        for offsets, layout, row in zip(enc["offset_mapping"], layouts, rows):
            starts = [start for start, _ in offsets[: len(row)]]       # the trailing EOS (if any) dropped
            out.append((bisect_left(starts, layout.head_end), [bisect_left(starts, c) for c in layout.turn_starts]))
        return out
    heads = tokenizer([t[: layout.head_end] for t, layout in zip(texts, layouts)], add_special_tokens=special)
    out = []
    for head, row in zip(heads["input_ids"], rows):
        n = 0
        while n < min(len(head), len(row)) and head[n] == row[n]:
            n += 1
        out.append((n, []))
    return out


def _cut_middle(ids: list[int], head: int, turns: Sequence[int], keep: int) -> list[int]:
    """``ids`` cut to ``keep`` tokens: the first ``head`` (at most ``keep // 2``), then the latest tokens,
    from the oldest turn start that leaves them within ``keep`` when the cut falls among the turns."""
    kept_head = min(head, keep // 2)
    start = len(ids) - (keep - kept_head)                   # the first tail token a plain middle cut keeps
    if start >= head:                                       # the cut falls after the head: snap to a turn
        start = next((t for t in turns if t >= start), start)
    return ids[:kept_head] + ids[start:]


@dataclass(frozen=True)
class EncodedExample:
    """One example as the model reads it: source and target token ids, the target ending in EOS (a T5's source
    too; a decoder's source is its whole prompt, :func:`prompt_frame` around the cut source)."""

    task: str
    source_ids: list[int]     # (S,) S <= max_source_length (a decoder: plus the prompt frame)
    target_ids: list[int]     # (T,) T <= max_target_length


def encode_examples(tokenizer, items: Sequence[Example], max_source: int, max_target: int) -> list[EncodedExample]:
    """Tokenise each example once (the training task does it before training, not in every batch)."""
    sources = encode_all(tokenizer, [ex.source for ex in items], max_source)
    targets = encode_all(tokenizer, [ex.target for ex in items], max_target)
    return [EncodedExample(ex.task, s, t) for ex, s, t in zip(items, sources, targets)]


def pad_batch(items: Sequence[EncodedExample], pad: int) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask (B, S) right-padded, labels (B, T) padded with -100 (ignored by the loss)."""
    s_len = max(len(ex.source_ids) for ex in items)
    t_len = max(len(ex.target_ids) for ex in items)
    input_ids = torch.full((len(items), s_len), pad, dtype=torch.long)
    labels = torch.full((len(items), t_len), -100, dtype=torch.long)
    for b, ex in enumerate(items):
        input_ids[b, : len(ex.source_ids)] = torch.tensor(ex.source_ids)
        labels[b, : len(ex.target_ids)] = torch.tensor(ex.target_ids)
    return {"input_ids": input_ids, "attention_mask": (input_ids != pad).long(), "labels": labels}


def collate_examples(tokenizer, items: Sequence[Example], max_source: int, max_target: int) -> dict[str, torch.Tensor]:
    """Tokenise and pad text examples (:func:`encode_examples` then :func:`pad_batch`)."""
    return pad_batch(encode_examples(tokenizer, items, max_source, max_target), tokenizer.pad_token_id)


# --- decoder-only (causal) ------------------------------------------------------------------------

SOURCE_SLOT = "\u0000"   # stands for the source while the prompt frame is laid out


def prompt_frame(tokenizer) -> tuple[list[int], list[int]]:
    """(token ids before, token ids after) the source in a decoder's prompt: the conversation
    ``[{"role": "user", "content": source}]`` as pipelines/llm's local backend lays it out under
    ``prompt_format: auto`` (the tokenizer's chat template with the generation prompt; without one, the plain
    layout :func:`pipelines.llm.base.plain_prompt`), tokenised without added special tokens, as the backend
    tokenises it. The source is tokenised on its own between them (the frame ends and starts at pre-token
    boundaries: a newline, a special token), so an over-long source can be cut as a T5's is."""
    from pipelines.llm.base import plain_prompt

    messages = [{"role": "user", "content": SOURCE_SLOT}]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = plain_prompt(messages)
    before, after = text.split(SOURCE_SLOT)
    ids = [tokenizer(part, add_special_tokens=False)["input_ids"] if part else [] for part in (before, after)]
    return ids[0], ids[1]


def encode_causal_examples(tokenizer, items: Sequence[Example], max_source: int, max_target: int,
                           frame: tuple[list[int], list[int]]) -> list[EncodedExample]:
    """A decoder's examples: the prompt (``frame`` around the source cut to ``max_source`` tokens as
    :func:`encode_all` cuts it) and the target (at most ``max_target`` tokens, the last one EOS)."""
    sources = encode_all(tokenizer, [ex.source for ex in items], max_source, eos=False)
    targets = encode_all(tokenizer, [ex.target for ex in items], max_target, eos=True)
    return [EncodedExample(ex.task, frame[0] + s + frame[1], t) for ex, s, t in zip(items, sources, targets)]


def pad_causal(items: Sequence[EncodedExample], pad: int) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask (B, L): prompt then target, right-padded; labels (B, L): the target tokens,
    -100 on the prompt and the padding. The mask comes from the lengths, not from the ids (a decoder's padding
    token is often its EOS, which the prompt and the target hold too)."""
    width = max(len(ex.source_ids) + len(ex.target_ids) for ex in items)
    input_ids = torch.full((len(items), width), pad, dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for b, ex in enumerate(items):
        n, m = len(ex.source_ids), len(ex.target_ids)
        input_ids[b, : n + m] = torch.tensor(ex.source_ids + ex.target_ids)
        labels[b, n: n + m] = torch.tensor(ex.target_ids)
        mask[b, : n + m] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
