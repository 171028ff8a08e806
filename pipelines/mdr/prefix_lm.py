"""A GPT-2 decoder that reads a sentence feature as a prefix embedding (MDR, seed 001).

Both decoders of MDR have this shape: the teacher decoder reconstructs R from (Q, R_TE)
(equation 2, ``R_hat = Decoder_teacher(Q, R_TE)``) and the stage-C decoder generates R from
(Q, R^(K)) (section 3.3, Token-Level Alignment). The paper does not say how a feature enters
GPT-2; here (METHODS.md section 2: "reads R_TE as a prefix embedding") a linear map turns the
feature (B, H) into ``prefix_tokens`` input embeddings (B, P, H_dec) placed before the tokens:

    inputs_embeds = [ W_p f ; emb(Q) ; emb(sep) ; emb(R) ; emb(eos) ]                  (B, P+L, H_dec)

and the model predicts every next token; only R and the closing eos are targets.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from safetensors.torch import load_file, save_file

from pipelines.mdr.text import IGNORE


@dataclass
class PrefixLMOutput:
    """Next-token logits and their targets, already aligned (position t predicts targets[:, t])."""

    logits: torch.Tensor           # (B, P+L-1, V)
    targets: torch.Tensor | None   # (B, P+L-1), IGNORE where no target; None without labels


class PrefixLM(nn.Module):
    """``lm`` (a ``GPT2LMHeadModel`` or any causal LM taking ``inputs_embeds``) + a prefix map."""

    def __init__(self, lm: nn.Module, feature_dim: int, prefix_tokens: int = 1):
        super().__init__()
        if prefix_tokens < 1:
            raise ValueError(f"prefix_tokens must be at least 1, got {prefix_tokens}.")
        self.lm = lm
        self.prefix_tokens = prefix_tokens
        self.embed_dim = lm.get_input_embeddings().embedding_dim
        self.prefix_proj = nn.Linear(feature_dim, prefix_tokens * self.embed_dim)

    def prefix(self, features: torch.Tensor) -> torch.Tensor:
        """(B, H) feature -> (B, P, H_dec) prefix embeddings."""
        b = features.shape[0]
        return self.prefix_proj(features).view(b, self.prefix_tokens, self.embed_dim)

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                labels: torch.Tensor | None = None) -> PrefixLMOutput:
        """features (B, H), input_ids / attention_mask / labels (B, L) right-padded."""
        prefix = self.prefix(features)                                           # (B, P, Hd)
        tokens = self.lm.get_input_embeddings()(input_ids)                       # (B, L, Hd)
        embeds = torch.cat([prefix.to(tokens.dtype), tokens], dim=1)             # (B, P+L, Hd)
        ones = attention_mask.new_ones(attention_mask.shape[0], self.prefix_tokens)
        mask = torch.cat([ones, attention_mask], dim=1)                          # (B, P+L)
        logits = self.lm(inputs_embeds=embeds, attention_mask=mask).logits       # (B, P+L, V)
        targets = None
        if labels is not None:
            ignore = labels.new_full((labels.shape[0], self.prefix_tokens), IGNORE)
            targets = torch.cat([ignore, labels], dim=1)[:, 1:]                  # (B, P+L-1)
        return PrefixLMOutput(logits=logits[:, :-1], targets=targets)

    def copy(self) -> "PrefixLM":
        """An independent deep copy (the stage-C decoder starts from the teacher decoder)."""
        return copy.deepcopy(self)

    def save(self, out_dir: str | Path) -> None:
        """``lm/`` (save_pretrained), ``prefix_proj.safetensors`` and ``prefix_lm.json``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.lm.save_pretrained(str(out_dir / "lm"))
        save_file({k: v.detach().cpu().contiguous() for k, v in self.prefix_proj.state_dict().items()},
                  str(out_dir / "prefix_proj.safetensors"))
        meta = {"feature_dim": self.prefix_proj.in_features, "prefix_tokens": self.prefix_tokens}
        (out_dir / "prefix_lm.json").write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "PrefixLM":
        """Rebuild a PrefixLM written by :meth:`save` (local files only)."""
        from transformers import AutoModelForCausalLM
        path = Path(path)
        meta = json.loads((path / "prefix_lm.json").read_text())
        lm = AutoModelForCausalLM.from_pretrained(str(path / "lm"), local_files_only=True)
        model = cls(lm, meta["feature_dim"], meta["prefix_tokens"])
        model.prefix_proj.load_state_dict(load_file(str(path / "prefix_proj.safetensors")))
        return model

    @torch.no_grad()
    def generate(self, features: torch.Tensor, queries: Sequence[Sequence[int]], *, eos_id: int,
                 max_new_tokens: int = 32, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None
                 ) -> list[list[int]]:
        """Continue ``[prefix(f) ; query ids]`` for each example; returns the new ids up to eos.

        ``queries`` are the decoder inputs before R (``tokens(Q) + [sep]``). The batch is left-padded
        so every example ends at the same position; sampling uses ``seed`` without touching the
        global random state.
        """
        device = features.device
        emb = self.lm.get_input_embeddings()
        rows = []
        for f, q in zip(self.prefix(features), queries):                        # f: (P, Hd)
            ids = torch.tensor(list(q), dtype=torch.long, device=device)
            rows.append(torch.cat([f.to(emb.weight.dtype), emb(ids)], dim=0))   # (P+Lq, Hd)
        length = max(r.shape[0] for r in rows)
        embeds = features.new_zeros((len(rows), length, self.embed_dim), dtype=emb.weight.dtype)
        mask = torch.zeros((len(rows), length), dtype=torch.long, device=device)
        for i, r in enumerate(rows):
            embeds[i, length - r.shape[0]:] = r
            mask[i, length - r.shape[0]:] = 1
        kwargs = dict(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=max_new_tokens,
                      do_sample=do_sample, eos_token_id=eos_id, pad_token_id=eos_id)
        if do_sample:
            kwargs.update(temperature=temperature, top_k=top_k if top_k is not None else 0,
                          top_p=top_p if top_p is not None else 1.0)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            if seed is not None:
                torch.manual_seed(seed)
            out = self.lm.generate(**kwargs)                                     # (B, <= max_new_tokens)
        result = []
        for row in out.tolist():
            result.append(row[:row.index(eos_id)] if eos_id in row else row)
        return result
