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

The small profile's substitute (:class:`CausalImportanceScorer`). No pretrained T5 can be loaded
offline here; the one pretrained model at hand is SmolLM2-135M-Instruct, a decoder-only LM, so the
small profile fine-tunes it as the summariser (pipelines/glong/summariser.py) and reads its
attention instead. A decoder has no cross-attention: the prompt (the chat template around an
instruction and the triplets, one a line) and the summary are one sequence, and the summary reads
the prompt through the same causal self-attention. With P prompt tokens and summary y_1..y_m,
y_t is predicted at position P - 2 + t (y_1 at the last prompt position), so

    A^(h)[t, j] = self-attention of head h of the LAST layer, query P - 2 + t, key j < P

is the (m x P) matrix that stands in for the T5 cross-attention, and Eqs. (1)-(3) apply unchanged
over the triplets' token spans in the prompt (``max_input_tokens`` counts the triplet text, not
the chat frame). Unlike a cross-attention row, a row of A^(h) does not sum to 1 over the prompt:
the rest goes to the summary's own earlier tokens, which are no triplet's; the chat frame's
tokens (system prompt, instruction; the first one is an attention sink in such models) belong to
no span either, and Eq. (3) divides those shares away with the session maximum.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from pipelines.data.schema import Triplet
from pipelines.errors import ConfigError
from pipelines.glong.config import ImportanceConfig
from pipelines.glong.prompts import CAUSAL_SEPARATOR, TRIPLETS_INSTRUCTION, chat_frame, join_triplets

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
                       separator: str = ". ", suffix: str = "", add_special_tokens: bool = True,
                       max_length: int | None = None) -> SerialisedTriplets:
    """Concatenate triplets as "subject relation object" strings and map each to its tokens.

    A token belongs to triplet i when its character offsets overlap triplet i's characters.
    ``suffix`` follows the last triplet (a chat template's end of turn and generation prompt);
    ``add_special_tokens=False`` for a text that already holds its special tokens (a rendered chat
    template). With ``max_length`` the input is truncated; a triplet left with no token raises
    ValueError (callers split the session instead, see :class:`AttentionImportanceScorer`).
    """
    text, char_spans = join_triplets(triplets, separator, prefix)
    text += suffix
    try:
        enc = tokenizer(text, return_offsets_mapping=True, truncation=max_length is not None,
                        max_length=max_length, add_special_tokens=add_special_tokens)
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


# --- the model-driven scorers ------------------------------------------------------------------

def uniform_importance(triplets: Sequence[Triplet]) -> list[float]:
    """The ``importance: "uniform"`` choice: every triplet weighs 1.0 (no summariser)."""
    return [1.0] * len(triplets)


def _eos_ids(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()


def _summary_length(summary: Sequence[int], eos_ids: set[int]) -> int:
    """Summary tokens up to and including the first EOS (every generated token when there is none)."""
    return next((t + 1 for t, tok in enumerate(summary) if tok in eos_ids), len(summary))


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
        stop = _summary_length(generated[0, 1:].tolist(), _eos_ids(model))  # the start token dropped
        decoder_input = generated[:, :stop]                              # (1, T_sum)
        out = model(input_ids=input_ids, decoder_input_ids=decoder_input, output_attentions=True)
    return out.cross_attentions[-1][0]                                   # (H, T_sum, T_in)


def summary_prompt_attention(self_attn: torch.Tensor, n_prompt: int, n_summary: int) -> torch.Tensor:
    """The part of a decoder's causal self-attention that stands in for the cross-attention.

    self_attn: (H, T, T) last-layer attention of one pass over prompt + summary without its last
    token, T = n_prompt + n_summary - 1 (a leading batch dim of 1 is accepted). Returns
    (H, n_summary, n_prompt): row t is query position n_prompt - 1 + t, the position whose output
    is summary token y_(t+1); the columns are the prompt's positions.
    """
    if self_attn.dim() == 4 and self_attn.shape[0] == 1:
        self_attn = self_attn[0]
    length = n_prompt + n_summary - 1
    if n_prompt < 1 or n_summary < 1 or self_attn.dim() != 3 or self_attn.shape[1:] != (length, length):
        raise ValueError(f"expected (H, {length}, {length}) self-attention for {n_prompt} prompt and "
                         f"{n_summary} summary tokens, got shape {tuple(self_attn.shape)}")
    return self_attn[:, n_prompt - 1:, :n_prompt]                       # (H, T_sum, T_in)


def summary_self_attention(model, input_ids: torch.Tensor, max_summary_tokens: int) -> torch.Tensor:
    """Greedy summary after a decoder-only prompt, then the last layer's attention from it to the prompt.

    input_ids: (1, T_in), the prompt. Returns (H, T_sum, T_in) (:func:`summary_prompt_attention`) from a
    teacher-forced pass over the prompt and the generated summary, identical to the attention during
    greedy generation. T_sum counts tokens up to the first EOS.
    """
    if model.config._attn_implementation != "eager":
        model.set_attn_implementation("eager")  # SDPA kernels return no attention weights
    model.eval()
    n_prompt = input_ids.shape[1]
    eos = _eos_ids(model)
    pad = model.generation_config.pad_token_id
    pad = pad if pad is not None else min(eos, default=None)
    with torch.no_grad():
        generated = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                   max_new_tokens=max_summary_tokens, do_sample=False, num_beams=1,
                                   pad_token_id=pad)                        # (1, T_in + T_gen)
        n_summary = _summary_length(generated[0, n_prompt:].tolist(), eos)
        sequence = generated[:, :n_prompt + n_summary - 1]                  # (1, T_in + T_sum - 1)
        out = model(input_ids=sequence, output_attentions=True)             # attentions: per layer (1, H, T, T)
    return summary_prompt_attention(out.attentions[-1][0], n_prompt, n_summary)


class AttentionImportanceScorer:
    """The ``importance: "model"`` choice: Eqs. (1)-(3) with a T5 summariser.

    ``model`` is a T5ForConditionalGeneration (or any encoder-decoder returning
    ``cross_attentions``); ``tokenizer`` must be fast (character offsets).
    """

    def __init__(self, model, tokenizer, config: ImportanceConfig | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.config = config or ImportanceConfig()

    @property
    def window(self) -> int:
        """Tokens one summariser input may have: a longer session is split into chunks."""
        return self.config.max_input_tokens

    def attention(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(H, T_sum, T_in) attention of the summary over one input (1, T_in)."""
        return summary_cross_attention(self.model, input_ids, self.config.max_summary_tokens)

    def _serialise(self, triplets: Sequence[Triplet], truncate: bool) -> SerialisedTriplets:
        c = self.config
        return serialise_triplets(triplets, self.tokenizer, prefix=c.prefix, separator=c.separator,
                                  max_length=self.window if truncate else None)

    def _chunks(self, triplets: Sequence[Triplet]) -> list[SerialisedTriplets]:
        whole = self._serialise(triplets, truncate=False)
        if len(whole.input_ids) <= self.window:
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
            scores.append(raw_saliency(self.attention(ids).cpu(), chunk.spans))
        return torch.cat(scores)

    def __call__(self, triplets: Sequence[Triplet]) -> list[float]:
        if not triplets:
            return []
        return normalise_by_max(self.raw(triplets)).tolist()               # Eq. (3)


class CausalImportanceScorer(AttentionImportanceScorer):
    """The small profile's ``importance: "model"``: Eqs. (1)-(3) over a decoder-only summariser's
    self-attention from its summary to the triplets in its prompt (see the module docstring).

    ``config.prefix`` goes between the instruction and the first triplet (default: nothing), the
    triplets are one a line, and ``config.max_input_tokens`` counts the triplet text (the chat frame
    comes on top).
    """

    def __init__(self, model, tokenizer, config: ImportanceConfig | None = None,
                 instruction: str = TRIPLETS_INSTRUCTION):
        super().__init__(model, tokenizer, config or ImportanceConfig(prefix="", separator=CAUSAL_SEPARATOR))
        self.head, self.tail = chat_frame(tokenizer, instruction)
        self.frame_tokens = len(tokenizer(self.head + self.tail, add_special_tokens=False)["input_ids"])

    @property
    def window(self) -> int:
        return self.config.max_input_tokens + self.frame_tokens

    def attention(self, input_ids: torch.Tensor) -> torch.Tensor:
        return summary_self_attention(self.model, input_ids, self.config.max_summary_tokens)

    def _serialise(self, triplets: Sequence[Triplet], truncate: bool) -> SerialisedTriplets:
        c = self.config
        return serialise_triplets(triplets, self.tokenizer, prefix=self.head + c.prefix, separator=c.separator,
                                  suffix=self.tail, add_special_tokens=False,
                                  max_length=self.window if truncate else None)


def load_importance_scorer(model_dir: str, config: ImportanceConfig | None = None,
                           device: str = "cpu") -> AttentionImportanceScorer:
    """The scorer over a trained summariser in a local directory, picked by what the folder holds:
    the decoder-only summariser of the small profile (``summariser.json``: base reference and LoRA
    adapter, pipelines/glong/summariser.py), any decoder-only ``save_pretrained`` folder (both:
    :class:`CausalImportanceScorer`), or an encoder-decoder one (the paper's T5)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from pipelines.glong.summariser import SUMMARISER_META, load_causal_summariser

    folder = Path(model_dir)
    if not folder.is_dir():
        raise ConfigError(f"importance model {model_dir!r} is not a local directory; no model hub "
                          "is reached, so give the folder the glong_importance stage wrote.")
    if (folder / SUMMARISER_META).is_file():
        model, tokenizer, meta = load_causal_summariser(folder, device)
        config = config or ImportanceConfig(prefix="", separator=meta["separator"],
                                            max_input_tokens=meta["max_input_tokens"],
                                            max_summary_tokens=meta["max_summary_tokens"])
        return CausalImportanceScorer(model, tokenizer, config, instruction=meta["instruction"])
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if not AutoConfig.from_pretrained(folder, local_files_only=True).is_encoder_decoder:
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True,
                                                     attn_implementation="eager").to(device)
        return CausalImportanceScorer(model, tokenizer, config)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, local_files_only=True,
                                                  attn_implementation="eager").to(device)
    return AttentionImportanceScorer(model, tokenizer, config)
