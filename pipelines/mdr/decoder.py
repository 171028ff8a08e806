"""Stage C of MDR: the token-level aligned decoder (seed 001, section 3.3, equation 14).

"R^(K) and Q are fed into the network and the generated response R_G is obtained. Instead of
directly calculating the cross-entropy loss between R_G and R, we further obtain a weight
distribution W ... encode each token of R using the teacher encoder ... cosine similarity with
R_TE". The decoder is a :class:`~pipelines.mdr.prefix_lm.PrefixLM` reading
``[W_p R^(K) ; Q ; sep ; R ; eos]``; the token weights w_i (token_weights.py) come from the
frozen teacher encoder under ``torch.no_grad``, so no gradient reaches the teacher:

    L_token = -(1/N) sum_i w_i log p(R_i | R_<i, Q, R^(K))                              (14)

"We perform token-level alignment to fine-tune the GPT-2 decoder": by default
(``decoder_init="teacher"``) the decoder starts as a copy of the teacher decoder, which already
turns a response feature (R_TE, which R^(K) was trained to match in stage B) and Q into R; with
``"fresh"`` it starts from the GPT-2 spec. R^(K) is read from the student's cache (section 4.2).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import nn

from pipelines.errors import DataError
from pipelines.mdr.features import freeze, masked_mean, token_features
from pipelines.mdr.prefix_lm import PrefixLM
from pipelines.mdr.text import Codec
from pipelines.mdr.token_weights import scatter_to_targets, token_weights


class MDRDecoder(nn.Module):
    """The stage-C decoder with the frozen teacher encoder that supplies its token weights."""

    def __init__(self, decoder: PrefixLM, teacher_encoder: nn.Module, sigma: float = 0.5):
        super().__init__()
        if sigma <= 0:
            raise ValueError(f"sigma must be positive, got {sigma}.")
        self.decoder = decoder
        self.teacher = freeze(teacher_encoder)
        self.sigma = float(sigma)

    def train(self, mode: bool = True) -> "MDRDecoder":
        super().train(mode)
        self.teacher.eval()  # frozen: never dropout
        return self

    @torch.no_grad()
    def weights(self, r_ids: torch.Tensor, r_mask: torch.Tensor) -> torch.Tensor:
        """w (B, Tr) of the tokens of R (+ eos), from the frozen teacher's token features."""
        tokens = token_features(self.teacher, r_ids, r_mask)                     # (B, Tr, H)
        r_te = masked_mean(tokens, r_mask)                                       # (B, H), eq. 1
        return token_weights(tokens, r_te, r_mask, self.sigma)                   # (B, Tr)

    def forward(self, features: torch.Tensor, dec_ids: torch.Tensor, dec_mask: torch.Tensor,
                labels: torch.Tensor, r_ids: torch.Tensor, r_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """features (B, H) = R^(K); dec_* / labels (B, L) ``Q sep R eos``; r_* (B, Tr) = R + eos for
        the teacher. Returns logits (B, T, V), targets (B, T) and weights (B, T), aligned."""
        out = self.decoder(features, dec_ids, dec_mask, labels)
        w = scatter_to_targets(self.weights(r_ids, r_mask), r_mask, out.targets)  # (B, T)
        return {"logits": out.logits, "targets": out.targets, "weights": w}


def generate_responses(decoder: PrefixLM, codec: Codec, queries: Sequence[str], features: torch.Tensor, *,
                       max_query_tokens: int = 64, max_new_tokens: int = 32, do_sample: bool = False,
                       temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                       seed: int | None = None, batch_size: int = 32) -> list[str]:
    """Responses to ``queries`` given R^(K) ``features`` (N, H) (cached or recomputed), greedy or
    sampled; ``seed`` makes sampling reproducible (S-Dist draws 5 samples with 5 seeds)."""
    if len(queries) != features.shape[0]:
        raise ValueError(f"{len(queries)} queries but {features.shape[0]} feature rows.")
    device = next(decoder.parameters()).device
    was_training = decoder.training
    decoder.eval()
    texts: list[str] = []
    try:
        for start in range(0, len(queries), batch_size):
            chunk = queries[start:start + batch_size]
            inputs = [codec.encode(q)[:max_query_tokens] + [codec.sep_id] for q in chunk]
            feats = features[start:start + batch_size].to(device=device, dtype=decoder.prefix_proj.weight.dtype)
            ids = decoder.generate(feats, inputs, eos_id=codec.eos_id, max_new_tokens=max_new_tokens,
                                   do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
                                   seed=None if seed is None else seed + start)
            texts.extend(codec.decode(row).strip() for row in ids)
    finally:
        decoder.train(was_training)
    return texts


def features_for(ids: Sequence[str], cache: Mapping[str, torch.Tensor], *, source: str = "response features"
                 ) -> torch.Tensor:
    """Stack the cached R^(K) of ``ids`` -> (N, H); DataError names the first id missing from the cache."""
    missing = [i for i in ids if i not in cache]
    if missing:
        raise DataError(f"{len(missing)} example(s) have no cached R^(K) (first: {missing[0]!r}); rerun "
                        f"mdr_student on the same examples", file=source, record=missing[0], field="R^(K)")
    return torch.stack([cache[i] for i in ids]) if ids else torch.zeros(0, 0)
