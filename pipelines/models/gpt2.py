"""GPT-2-architecture models without a model hub (MDR, seed 001: teacher, student, decoder).

MDR's "Implementation Details": every component (teacher encoder-decoder, student
encoder, generation decoder) is GPT-2 with 12 layers and 768-dimensional hidden states
(the 124M "gpt2"). GPT-2 (Radford et al., 2019) is a pre-LayerNorm decoder-only
Transformer: for tokens x_1..x_T,

    h_0 = W_e[x] + W_p[1..T]                                  # (B, T, n_embd)
    h_l = h_{l-1} + Attn(LN(h_{l-1})) ; h_l = h_l + MLP(LN(h_l))   l = 1..n_layer
    p(x_{t+1} | x_<=t) = softmax(LN(h_L) W_e^T)                 # (B, T, vocab), tied embeddings

Profiles: ``tiny`` (2 layers, 2 heads, 64 wide, 256 positions) is randomly initialised on
the CPU in milliseconds; ``paper`` is the 124M architecture (12/12/768/1024), randomly
initialised when no weights exist here. Any other string is a model name or a local
directory loaded with ``from_pretrained`` (offline: local directories and the cache).
Attention runs through torch SDPA.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from pipelines.errors import ConfigError
from pipelines.models._hf import attn_implementation as _attn_implementation
from pipelines.models._hf import check_positive, load_pretrained


@dataclass(frozen=True)
class GPT2Spec:
    """The size of a randomly initialised GPT-2 (field names as in transformers' GPT2Config)."""

    n_layer: int = 2                 # Transformer blocks
    n_head: int = 2                  # attention heads per block; must divide n_embd
    n_embd: int = 64                 # hidden size (MDR: 768, shared by teacher, student and decoder)
    n_positions: int = 256           # longest sequence the position table covers (GPT-2: 1024)
    dropout: float = 0.1             # embedding, attention and residual dropout (GPT-2: 0.1)
    layer_norm_epsilon: float = 1e-5  # LayerNorm epsilon (GPT-2: 1e-5)
    initializer_range: float = 0.02  # std of the normal initialisation (GPT-2: 0.02)

    def __post_init__(self) -> None:
        check_positive("GPT2Spec", n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd,
                       n_positions=self.n_positions)
        if self.n_embd % self.n_head:
            raise ConfigError(f"GPT2Spec.n_embd ({self.n_embd}) is not divisible by n_head ({self.n_head}): "
                              "each head needs n_embd / n_head dimensions.")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"GPT2Spec.dropout is {self.dropout}: it must lie in [0, 1).")

    def to_config(self, vocab_size: int, *, bos_token_id: int | None = None, eos_token_id: int | None = None,
                  pad_token_id: int | None = None, attn_implementation: str = "sdpa"):
        from transformers import GPT2Config

        check_positive("build_gpt2", vocab_size=vocab_size)
        for name, tid in (("bos_token_id", bos_token_id), ("eos_token_id", eos_token_id),
                          ("pad_token_id", pad_token_id)):
            if tid is not None and not 0 <= tid < vocab_size:
                raise ConfigError(f"{name} {tid} lies outside the vocabulary of {vocab_size} tokens.")
        return GPT2Config(vocab_size=vocab_size, n_positions=self.n_positions, n_embd=self.n_embd,
                          n_layer=self.n_layer, n_head=self.n_head, resid_pdrop=self.dropout,
                          embd_pdrop=self.dropout, attn_pdrop=self.dropout,
                          layer_norm_epsilon=self.layer_norm_epsilon, initializer_range=self.initializer_range,
                          bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                          attn_implementation=attn_implementation)


GPT2_SPECS: dict[str, GPT2Spec] = {
    "tiny": GPT2Spec(n_layer=2, n_head=2, n_embd=64, n_positions=256),
    "paper": GPT2Spec(n_layer=12, n_head=12, n_embd=768, n_positions=1024),  # GPT-2 124M (MDR)
}


def resolve_gpt2_spec(spec: GPT2Spec | dict | str) -> GPT2Spec | None:
    """The spec ``spec`` names (a GPT2Spec, a dict of its fields or a profile name), or None for a model ref."""
    if isinstance(spec, GPT2Spec):
        return spec
    if isinstance(spec, dict):
        unknown = set(spec) - set(asdict(GPT2Spec()))
        if unknown:
            raise ConfigError(f"unknown GPT2Spec field(s) {', '.join(sorted(unknown))}.")
        return GPT2Spec(**spec)
    if isinstance(spec, str) and spec in GPT2_SPECS:
        return GPT2_SPECS[spec]
    return None


def build_gpt2(spec_or_name_or_path: GPT2Spec | dict | str | Path, vocab_size: int | None = None, *,
               lm_head: bool = True, bos_token_id: int | None = None, eos_token_id: int | None = None,
               pad_token_id: int | None = None, attn_implementation: str | None = None,
               **from_pretrained_kwargs):
    """A GPT-2: random init from a spec / profile name, or ``from_pretrained`` for a name or directory.

    Returns ``GPT2LMHeadModel`` (``lm_head=True``, a decoder) or ``GPT2Model`` (hidden
    states only, an encoder). For a spec, ``vocab_size`` is required; for a pretrained
    model it resizes the embeddings when it differs (new rows are randomly initialised).
    ``attn_implementation``: None = SDPA; "eager" when attention weights are read.
    """
    from transformers import GPT2LMHeadModel, GPT2Model

    cls = GPT2LMHeadModel if lm_head else GPT2Model
    spec = resolve_gpt2_spec(spec_or_name_or_path) if not isinstance(spec_or_name_or_path, Path) else None
    attn = attn_implementation or _attn_implementation(cls)
    if spec is None:
        return load_pretrained(cls, spec_or_name_or_path, model_type="gpt2", vocab_size=vocab_size,
                               attn_implementation=attn, **from_pretrained_kwargs)
    if vocab_size is None:
        raise ConfigError("build_gpt2 needs vocab_size to initialise a model from a spec (use len(tokenizer)).")
    config = spec.to_config(vocab_size, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                            pad_token_id=pad_token_id, attn_implementation=attn)
    return cls._from_config(config)  # under ZeRO-3 (the engine's build_partitioned): built partitioned
