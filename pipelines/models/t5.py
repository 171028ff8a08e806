"""T5-architecture encoder-decoders without a model hub (EMMA's dialogue module, G-Long's summariser).

EMMA (seed 000) fine-tunes FLAN-T5-Large (780M) with QLoRA on generation, memory
summarisation and memory linking; G-Long (seed 003) reads the last decoder layer's
cross-attention of a T5-small dialogue summariser. T5 (Raffel et al., 2020) maps source
tokens x to target tokens y with

    e = Enc(x)                                               # (B, S, d_model), relative position bias
    p(y_t | y_<t, x) = softmax(Dec(y_<t, e) W_out)            # (B, T, vocab)

Specs: ``tiny`` (2+2 layers, 64 wide) for the tiny profile; ``t5-small`` and
``flan-t5-large`` reproduce the published architectures (T5 v1.0 ReLU with tied output
embedding; T5 v1.1 gated-GELU without output scaling) for random initialisation. Any other
string is a name or local directory loaded with ``from_pretrained`` (quantisation
arguments such as ``quantization_config`` pass through). Attention runs through SDPA.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from pipelines.errors import ConfigError
from pipelines.models._hf import attn_implementation as _attn_implementation
from pipelines.models._hf import check_positive, load_pretrained

FEED_FORWARD = ("relu", "gated-gelu")


@dataclass(frozen=True)
class T5Spec:
    """The size of a randomly initialised T5 (field names as in transformers' T5Config)."""

    d_model: int = 64                  # hidden size
    d_ff: int = 128                    # feed-forward inner size
    d_kv: int = 16                     # size of each attention head's keys/values
    num_layers: int = 2                # encoder blocks
    num_decoder_layers: int = 2        # decoder blocks
    num_heads: int = 4                 # attention heads
    feed_forward_proj: str = "relu"    # "relu" (T5 v1.0) or "gated-gelu" (T5 v1.1 / FLAN-T5)
    # v1.0: True; v1.1/FLAN: False, meaning no d_model^-0.5 output scaling (transformers 5 ties the head either way)
    tie_word_embeddings: bool = True
    dropout_rate: float = 0.1          # dropout everywhere (T5: 0.1)
    relative_attention_num_buckets: int = 32   # relative position buckets
    relative_attention_max_distance: int = 128  # distance beyond which positions share a bucket

    def __post_init__(self) -> None:
        check_positive("T5Spec", d_model=self.d_model, d_ff=self.d_ff, d_kv=self.d_kv, num_layers=self.num_layers,
                       num_decoder_layers=self.num_decoder_layers, num_heads=self.num_heads,
                       relative_attention_num_buckets=self.relative_attention_num_buckets)
        if self.feed_forward_proj not in FEED_FORWARD:
            raise ConfigError(f"T5Spec.feed_forward_proj is {self.feed_forward_proj!r}: use one of "
                              f"{', '.join(FEED_FORWARD)}.")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ConfigError(f"T5Spec.dropout_rate is {self.dropout_rate}: it must lie in [0, 1).")
        if self.relative_attention_max_distance < self.relative_attention_num_buckets:
            raise ConfigError("T5Spec.relative_attention_max_distance must be at least relative_attention_num_buckets.")

    def to_config(self, vocab_size: int, *, pad_token_id: int = 0, eos_token_id: int = 1,
                  decoder_start_token_id: int | None = None, attn_implementation: str = "sdpa"):
        from transformers import T5Config

        check_positive("build_t5", vocab_size=vocab_size)
        start = pad_token_id if decoder_start_token_id is None else decoder_start_token_id
        for name, tid in (("pad_token_id", pad_token_id), ("eos_token_id", eos_token_id),
                          ("decoder_start_token_id", start)):
            if not 0 <= tid < vocab_size:
                raise ConfigError(f"{name} {tid} lies outside the vocabulary of {vocab_size} tokens.")
        fields = asdict(self)
        return T5Config(vocab_size=vocab_size, pad_token_id=pad_token_id, eos_token_id=eos_token_id,
                        decoder_start_token_id=start, attn_implementation=attn_implementation, **fields)


T5_SPECS: dict[str, T5Spec] = {
    "tiny": T5Spec(),
    # Raffel et al. (2020), Table 14 "Small": 60.5M parameters with the 32128-token vocabulary
    "t5-small": T5Spec(d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_decoder_layers=6, num_heads=8),
    # FLAN-T5-Large (Chung et al., 2022) = T5 v1.1 Large, gated-GELU (783M with its untied head; 750M as
    # transformers 5 builds it, tying the head to the embedding)
    "flan-t5-large": T5Spec(d_model=1024, d_ff=2816, d_kv=64, num_layers=24, num_decoder_layers=24, num_heads=16,
                            feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def resolve_t5_spec(spec: T5Spec | dict | str) -> T5Spec | None:
    """The spec ``spec`` names (a T5Spec, a dict of its fields or a spec name), or None for a model ref."""
    if isinstance(spec, T5Spec):
        return spec
    if isinstance(spec, dict):
        unknown = set(spec) - set(asdict(T5Spec()))
        if unknown:
            raise ConfigError(f"unknown T5Spec field(s) {', '.join(sorted(unknown))}.")
        return T5Spec(**spec)
    if isinstance(spec, str) and spec in T5_SPECS:
        return T5_SPECS[spec]
    return None


def build_t5(spec_or_name_or_path: T5Spec | dict | str | Path, vocab_size: int | None = None, *,
             pad_token_id: int = 0, eos_token_id: int = 1, decoder_start_token_id: int | None = None,
             attn_implementation: str | None = None, **from_pretrained_kwargs):
    """A ``T5ForConditionalGeneration``: random init from a spec / name, or ``from_pretrained``.

    The decoder starts from ``decoder_start_token_id`` (default: the pad token, as in T5).
    For a pretrained model ``vocab_size`` resizes the embeddings when it differs.
    ``attn_implementation``: None = SDPA; "eager" when attention weights are read
    (``output_attentions``, e.g. G-Long's cross-attention importance scores).
    """
    from transformers import T5ForConditionalGeneration

    cls = T5ForConditionalGeneration
    spec = resolve_t5_spec(spec_or_name_or_path) if not isinstance(spec_or_name_or_path, Path) else None
    attn = attn_implementation or _attn_implementation(cls)
    if spec is None:
        return load_pretrained(cls, spec_or_name_or_path, model_type="t5", vocab_size=vocab_size,
                               attn_implementation=attn, **from_pretrained_kwargs)
    if vocab_size is None:
        raise ConfigError("build_t5 needs vocab_size to initialise a model from a spec (use len(tokenizer)).")
    config = spec.to_config(vocab_size, pad_token_id=pad_token_id, eos_token_id=eos_token_id,
                            decoder_start_token_id=decoder_start_token_id, attn_implementation=attn)
    return cls._from_config(config)  # under ZeRO-3 (the engine's build_partitioned): built partitioned
