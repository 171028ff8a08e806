"""Attention-aware importance scoring (G-Long, seed 003, section 3.2, Eqs. 1-3).

All triplets extracted from one session are concatenated into one input sequence
X = (x_1, ..., x_n) of a T5 dialogue summariser (paper: T5-small fine-tuned on SAMSum), which
generates a summary Y = (y_1, ..., y_m) greedily. With A^(h) in R^{m x n} the cross-attention of
head h of the LAST decoder layer:

    (1)  A_bar[t, j] = 1/H * sum_h A^(h)[t, j]                      (average over the H heads)
    (2)  s_i         = sum_{t=1..m} sum_{j in span(i)} A_bar[t, j]  (raw saliency of triplet i)
    (3)  I_i         = s_i / max_k s_k                              (session-normalised, in (0, 1])

``span(i)`` is the set of input positions of triplet i's tokens, found through the tokenizer's
character offsets. Summary tokens are the generated tokens up to and including the first EOS
(padding after EOS is not part of the summary).

Project choice, where the paper is silent: a session whose serialised triplets do not fit into
``max_input_tokens`` is split into consecutive chunks that fit (halving until they do); each chunk
is summarised on its own, Eq. (2) is computed per chunk, and Eq. (3) divides by the maximum over
the whole session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from pipelines.data.schema import Triplet
from pipelines.errors import ConfigError
from pipelines.glong.config import ImportanceConfig

# An importance scorer maps one session's triplets to one score per triplet, in (0, 1].
ImportanceScorer = Callable[[Sequence[Triplet]], list[float]]


# --- Eqs. (1)-(3): pure tensor arithmetic ------------------------------------------------------

def _check_spans(spans: Sequence[tuple[int, int]], n_input: int) -> None:
    for i, (start, end) in enumerate(spans):
        if not (0 <= start < end <= n_input):
            raise ValueError(f"span {i} = ({start}, {end}) is not a non-empty range of input "
                             f"positions [0, {n_input}).")


def raw_saliency(cross_attn: torch.Tensor, spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Eqs. (1)-(2): per-triplet raw saliency s_i.

    cross_attn: (H, T_sum, T_in) last-decoder-layer cross-attention (a leading batch dim of 1 is
    accepted); spans: one half-open range [start, end) of input positions per triplet.
    Returns a float tensor of shape (n_triplets,).
    """
    if cross_attn.dim() == 4:
        if cross_attn.shape[0] != 1:
            raise ValueError(f"expected one sequence, got a batch of {cross_attn.shape[0]}")
        cross_attn = cross_attn[0]
    if cross_attn.dim() != 3:
        raise ValueError(f"cross_attn must be (H, T_sum, T_in), got shape {tuple(cross_attn.shape)}")
    _check_spans(spans, cross_attn.shape[-1])
    mean_heads = cross_attn.float().mean(dim=0)      # (T_sum, T_in)          Eq. (1)
    per_input = mean_heads.sum(dim=0)                # (T_in,)  sum over summary tokens t
    return torch.stack([per_input[s:e].sum() for s, e in spans]) if spans else \
        per_input.new_zeros(0)                       # (n_triplets,)          Eq. (2)


def normalise_by_max(raw: torch.Tensor) -> torch.Tensor:
    """Eq. (3): divide by the session maximum so that the largest score is exactly 1."""
    if raw.numel() == 0:
        return raw
    top = raw.max()
    if not torch.isfinite(top) or top <= 0:
        raise ValueError(f"cannot normalise saliencies whose maximum is {top.item()}: every "
                         "triplet received zero attention")
    return raw / top


def importance_from_cross_attention(cross_attn: torch.Tensor,
                                    spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Eqs. (1)-(3): importance I_i in (0, 1] of each triplet span. Shapes as in raw_saliency."""
    return normalise_by_max(raw_saliency(cross_attn, spans))


# --- serialising a session's triplets into one input with token spans --------------------------

@dataclass(frozen=True)
class SerialisedTriplets:
    """One summariser input: the text, its token ids and each triplet's token span."""

    text: str                          # prefix + "s r o" + separator + "s r o" ...
    input_ids: list[int]               # (T_in,) token ids, special tokens included
    spans: list[tuple[int, int]]       # per triplet, [start, end) positions in input_ids
    char_spans: list[tuple[int, int]]  # per triplet, [start, end) characters in text


def serialise_triplets(triplets: Sequence[Triplet], tokenizer, *, prefix: str = "summarize: ",
                       separator: str = ". ", max_length: int | None = None
                       ) -> SerialisedTriplets:
    """Concatenate triplets as "subject relation object" strings and map each to its tokens.

    A token belongs to triplet i when its character offsets overlap triplet i's characters.
    With ``max_length`` the input is truncated; a triplet left with no token raises ValueError
    (callers split the session instead, see :class:`AttentionImportanceScorer`).
    """
    parts, char_spans, pos = [prefix], [], len(prefix)
    for i, triplet in enumerate(triplets):
        if i:
            parts.append(separator)
            pos += len(separator)
        piece = triplet.serialise()
        parts.append(piece)
        char_spans.append((pos, pos + len(piece)))
        pos += len(piece)
    text = "".join(parts)
    try:
        enc = tokenizer(text, return_offsets_mapping=True, truncation=max_length is not None,
                        max_length=max_length)
    except NotImplementedError as exc:  # slow (Python) tokenizers have no offsets
        raise ConfigError("the importance summariser needs a fast tokenizer (character offsets); "
                          f"{type(tokenizer).__name__} has none") from exc
    offsets = enc["offset_mapping"]
    spans = []
    for i, (c0, c1) in enumerate(char_spans):
        hit = [j for j, (a, b) in enumerate(offsets) if b > a and a < c1 and b > c0]
        if not hit:
            raise ValueError(f"triplet {i} ({triplets[i].serialise()!r}) has no token in the "
                             f"input of {len(offsets)} tokens (truncated?)")
        spans.append((hit[0], hit[-1] + 1))
    return SerialisedTriplets(text=text, input_ids=list(enc["input_ids"]), spans=spans,
                              char_spans=char_spans)


# --- the model-driven scorer -------------------------------------------------------------------

def uniform_importance(triplets: Sequence[Triplet]) -> list[float]:
    """The ``importance: "uniform"`` choice: every triplet weighs 1.0 (no summariser)."""
    return [1.0] * len(triplets)


def summary_cross_attention(model, input_ids: torch.Tensor, max_summary_tokens: int
                            ) -> torch.Tensor:
    """Greedy summary of one input, then its last-decoder-layer cross-attention.

    input_ids: (1, T_in). Returns (H, T_sum, T_in): the attention each summary step paid to the
    input while producing summary token y_t (a teacher-forced pass over the generated summary,
    identical to the attention during greedy generation). T_sum counts tokens up to the first EOS.
    """
    if model.config._attn_implementation != "eager":
        model.set_attn_implementation("eager")  # SDPA kernels return no attention weights
    model.eval()
    with torch.no_grad():
        generated = model.generate(input_ids=input_ids, max_new_tokens=max_summary_tokens,
                                   do_sample=False, num_beams=1)        # (1, 1 + T_gen)
        summary = generated[0, 1:]                                       # drop the start token
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
        stop = next((t + 1 for t, tok in enumerate(summary.tolist()) if tok in eos_ids),
                    summary.numel())
        decoder_input = generated[:, :stop]                              # (1, T_sum)
        out = model(input_ids=input_ids, decoder_input_ids=decoder_input, output_attentions=True)
    return out.cross_attentions[-1][0]                                   # (H, T_sum, T_in)


class AttentionImportanceScorer:
    """The ``importance: "model"`` choice: Eqs. (1)-(3) with a T5 summariser.

    ``model`` is a T5ForConditionalGeneration (or any encoder-decoder returning
    ``cross_attentions``); ``tokenizer`` must be fast (character offsets).
    """

    def __init__(self, model, tokenizer, config: ImportanceConfig | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.config = config or ImportanceConfig()

    def _serialise(self, triplets: Sequence[Triplet], truncate: bool) -> SerialisedTriplets:
        c = self.config
        return serialise_triplets(triplets, self.tokenizer, prefix=c.prefix, separator=c.separator,
                                  max_length=c.max_input_tokens if truncate else None)

    def _chunks(self, triplets: Sequence[Triplet]) -> list[SerialisedTriplets]:
        whole = self._serialise(triplets, truncate=False)
        if len(whole.input_ids) <= self.config.max_input_tokens:
            return [whole]
        if len(triplets) == 1:  # one triplet longer than the window: keep what fits
            return [self._serialise(triplets, truncate=True)]
        half = len(triplets) // 2
        return self._chunks(triplets[:half]) + self._chunks(triplets[half:])

    def raw(self, triplets: Sequence[Triplet]) -> torch.Tensor:
        """Eq. (2) for every triplet of the session, chunk by chunk: (n_triplets,)."""
        scores = []
        device = next(self.model.parameters()).device
        for chunk in self._chunks(triplets):
            ids = torch.tensor([chunk.input_ids], device=device)          # (1, T_in)
            attn = summary_cross_attention(self.model, ids, self.config.max_summary_tokens)
            scores.append(raw_saliency(attn.cpu(), chunk.spans))
        return torch.cat(scores)

    def __call__(self, triplets: Sequence[Triplet]) -> list[float]:
        if not triplets:
            return []
        return normalise_by_max(self.raw(triplets)).tolist()               # Eq. (3)


def load_importance_scorer(model_dir: str, config: ImportanceConfig | None = None,
                           device: str = "cpu") -> AttentionImportanceScorer:
    """The scorer over a summariser saved with ``save_pretrained`` in a local directory."""
    from pathlib import Path

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    if not Path(model_dir).is_dir():
        raise ConfigError(f"importance model {model_dir!r} is not a local directory; no model hub "
                          "is reached, so give the folder the glong_importance stage wrote.")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, local_files_only=True,
                                                  attn_implementation="eager").to(device)
    return AttentionImportanceScorer(model, tokenizer, config)
