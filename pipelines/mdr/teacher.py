"""Stage A of MDR: the teacher encoder-decoder (seed 001, section 3.2 "Teacher Encoder").

    R_TE  = Encoder_teacher(R)                                                          (1)
    R_hat = Decoder_teacher(Q, R_TE)                                                    (2)
    L_teacher = -log p(R | Q, R_TE)                                                     (3)

(The paper prints equation 3 as ``-log p(R | Q, R)``; equation 2 and the text, "the response
features encoded by the encoder can be used by the decoder to restore the original response",
make the condition R_TE.) Encoder_teacher is a ``GPT2Model`` whose sentence feature is the mean of
its last layer over R's tokens (:mod:`pipelines.mdr.features`); Decoder_teacher is a
:class:`~pipelines.mdr.prefix_lm.PrefixLM` reading ``[W_p R_TE ; Q ; sep ; R ; eos]``. L_teacher is
the token cross-entropy on R (and its closing eos), averaged over target tokens. After this stage
the teacher is frozen (:meth:`MDRTeacher.freeze`): stages B and C read it without gradients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from pipelines.errors import ConfigError
from pipelines.mdr.features import freeze, sentence_features, token_features
from pipelines.mdr.prefix_lm import PrefixLM, PrefixLMOutput
from pipelines.mdr.token_weights import compute_token_loss


def compute_teacher_loss(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation 3: mean of -log p(R_i | R_<i, Q, R_TE) over the target tokens -> (loss, N).

    logits (B, T, V) aligned with targets (B, T) (IGNORE = -100 where no target).
    """
    return compute_token_loss(logits, targets, None)


def base_model(lm: nn.Module) -> nn.Module:
    """The transformer under a causal-LM head (``GPT2LMHeadModel.transformer``)."""
    return lm.base_model


class MDRTeacher(nn.Module):
    """Enc_teacher (GPT2Model) + Dec_teacher (PrefixLM over a GPT2LMHeadModel)."""

    def __init__(self, encoder: nn.Module, decoder: PrefixLM):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.hidden = encoder.get_input_embeddings().embedding_dim

    @classmethod
    def build(cls, gpt2: Callable[[], nn.Module], prefix_tokens: int = 1) -> "MDRTeacher":
        """Two fresh GPT-2 models from ``gpt2`` (a factory of GPT2LMHeadModel): encoder and decoder."""
        encoder = base_model(gpt2())
        hidden = encoder.get_input_embeddings().embedding_dim
        return cls(encoder, PrefixLM(gpt2(), hidden, prefix_tokens))

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Sentence features (B, T) -> (B, H): equation 1 for R, 4-6 for Q, P and H."""
        return sentence_features(self.encoder, input_ids, attention_mask)

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token features (B, T) -> (B, T, H) (the token-level alignment of section 3.3)."""
        return token_features(self.encoder, input_ids, attention_mask)

    def forward(self, r_ids: torch.Tensor, r_mask: torch.Tensor, dec_ids: torch.Tensor,
                dec_mask: torch.Tensor, labels: torch.Tensor) -> PrefixLMOutput:
        """r_ids / r_mask (B, Tr): R + eos for the encoder; dec_ids / dec_mask / labels (B, L):
        ``Q sep R eos`` for the decoder, labels on R and eos."""
        r_te = self.encode(r_ids, r_mask)                                   # (B, H), eq. 1
        return self.decoder(r_te, dec_ids, dec_mask, labels)                # eq. 2 (logits for eq. 3)

    def freeze(self) -> "MDRTeacher":
        """Freeze every parameter and switch to eval mode (stages B and C)."""
        freeze(self)
        return self

    def save(self, out_dir: str | Path) -> None:
        """``encoder/`` (save_pretrained), ``decoder/`` (PrefixLM.save), ``mdr_teacher.json``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(str(out_dir / "encoder"))
        self.decoder.save(out_dir / "decoder")
        (out_dir / "mdr_teacher.json").write_text(json.dumps({"hidden": self.hidden}, indent=2))

    @classmethod
    def load(cls, path: str | Path, *, frozen: bool = True) -> "MDRTeacher":
        """Rebuild a teacher written by :meth:`save` (frozen by default, as stages B and C use it)."""
        from transformers import AutoModel
        path = Path(path)
        if not (path / "mdr_teacher.json").exists():
            raise ConfigError(f"{path} holds no MDR teacher (mdr_teacher.json is missing): run mdr_teacher first.")
        encoder = AutoModel.from_pretrained(str(path / "encoder"), local_files_only=True)
        teacher = cls(encoder, PrefixLM.load(path / "decoder"))
        return teacher.freeze() if frozen else teacher
