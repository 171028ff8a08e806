"""Typed configs of G-Long (seed 003, "G-Long: Graph-Enhanced Memory Management for Efficient
Long-Term Dialogue Agents", section 3 and Appendix B).

The published defaults that survive in the seed text are used as they are: 1-hop subgraph
expansion (h = 1, section 4.7), a coarse pool of 5 triplets re-ranked down to 3 (Appendix I:
"the initial candidate pool (size 5) ... Top-3"), all-MiniLM-L6-v2 entity embeddings.
The seed text lost the numbers of the number of anchor nodes, of the weights a, b, c and of the
decay factor lambda; the project's defaults for those follow the recency weighting the paper cites
(Park et al. 2023, "Generative Agents"): equal weights a = b = c = 1 and a decay of 0.995 per hour
of age, i.e. lambda = -ln(0.995) ~= 0.0050 per hour. They are configurable (params.yaml ``glong``).

Every config validates itself on creation and raises :class:`ConfigError` (a ``ValueError``)
with a sentence saying what is wrong.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from pipelines.config_schema import dataset_names, positive_int
from pipelines.errors import ConfigError

PARK_DECAY_PER_HOUR = 0.995  # Park et al. (2023): recency = 0.995 ** hours since last access


def _nonneg_float(section: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise ConfigError(f"{section}.{name} must be a finite number >= 0, got {value!r}.")


def _from_dict(cls, data: dict | None, section: str):
    data = dict(data or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{section} has unknown key(s) {unknown}; known keys: {sorted(known)}.")
    return cls(**data)


@dataclass(frozen=True)
class RetrievalConfig:
    """Associative retrieval (section 3.4): anchors -> h-hop candidates -> coarse -> fine."""

    k_anchor: int = 5          # anchor entities: top-k entity nodes by cosine to the utterance
    hops: int = 1              # subgraph expansion depth h (paper: 1; h = 2 drifts through hubs)
    coarse_n: int = 5          # coarse stage keeps the top-N candidates by triplet-text cosine
    final_k: int = 3           # fine stage keeps the top-k by the hybrid score (paper: 3 of 5)
    a: float = 1.0             # weight of the semantic similarity in Eq. (4)
    b: float = 1.0             # weight of the importance score in Eq. (4)
    c: float = 1.0             # weight of the recency term exp(-lambda * age) in Eq. (4)
    lam: float = -math.log(PARK_DECAY_PER_HOUR)  # decay rate lambda, per hour since last access
    update_access: bool = True  # set the kept triplets' last-accessed time to the query time
    dedupe: bool = True        # keep one triplet per serialised text (repeated mentions)

    def __post_init__(self) -> None:
        for name in ("k_anchor", "hops", "coarse_n", "final_k"):
            positive_int(f"glong.retrieval.{name}", getattr(self, name))
        for name in ("a", "b", "c", "lam"):
            _nonneg_float("glong.retrieval", name, getattr(self, name))
        if self.final_k > self.coarse_n:
            raise ConfigError(f"glong.retrieval.final_k ({self.final_k}) cannot exceed coarse_n "
                              f"({self.coarse_n}): the fine re-ranking keeps k of the N coarse "
                              "candidates.")
        if self.a == 0 and self.b == 0 and self.c == 0:
            raise ConfigError("glong.retrieval: a, b and c are all 0, so every triplet would score "
                              "the same; give at least one of them a positive weight.")

    @classmethod
    def from_dict(cls, data: dict | None) -> "RetrievalConfig":
        return _from_dict(cls, data, "glong.retrieval")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ImportanceConfig:
    """Attention-aware importance scoring (section 3.2, Eqs. 1-3) with a T5 summariser (or the small profile's
    decoder-only one, whose saved folder sets these: pipelines/glong/summariser.py)."""

    prefix: str = "summarize: "     # task prefix put before the concatenated triplets (T5 style)
    separator: str = ". "           # text between two serialised triplets in the input
    max_input_tokens: int = 512     # longer sessions are split into chunks that fit (T5-small: 512)
    max_summary_tokens: int = 64    # greedy decoding stops at EOS or after this many tokens

    def __post_init__(self) -> None:
        positive_int("glong.importance.max_input_tokens", self.max_input_tokens)
        positive_int("glong.importance.max_summary_tokens", self.max_summary_tokens)
        if not isinstance(self.separator, str) or not self.separator:
            raise ConfigError("glong.importance.separator must be a non-empty string, or two "
                              "triplets would run into one another.")
        if not isinstance(self.prefix, str):
            raise ConfigError(f"glong.importance.prefix must be a string, got {self.prefix!r}.")

    @classmethod
    def from_dict(cls, data: dict | None) -> "ImportanceConfig":
        return _from_dict(cls, data, "glong.importance")


@dataclass(frozen=True)
class ExtractorTrainConfig:
    """The triplet extractor (section 3.2, Appendix B): base LM, QLoRA adapter, sequence limits.

    Paper: Qwen3-8B, 4-bit QLoRA with LoRA on all linear projections, 10 epochs, batch 16. The
    seed text lost its LoRA rank, alpha and learning rate; the defaults here are the QLoRA
    paper's (Dettmers et al. 2023: r = 64, alpha = 16, dropout 0.1 for models up to 13B).
    """

    arch: str = "causal"           # "causal" (decoder-only, as Qwen3) or "seq2seq" (T5-style)
    model: str = "tiny"            # a built-in spec name (random init) or a local model directory
    tokenizer_vocab: int = 2000    # byte-level BPE size trained on the examples (spec models only)
    quantize_4bit: bool = True     # QLoRA: NF4 base with double quantisation; False: plain LoRA
    lora_r: int = 64               # LoRA rank
    lora_alpha: int = 16           # LoRA scaling numerator (scale = alpha / r)
    lora_dropout: float = 0.1      # dropout on the LoRA input
    max_length: int = 256          # prompt + answer tokens (causal) / prompt tokens (seq2seq)
    max_new_tokens: int = 96       # answer tokens (seq2seq target limit; greedy decoding limit)
    include_empty: bool = True     # train on fact-free utterances with the answer "[]"
    gradient_checkpointing: bool = False  # recompute activations in backward (large models)
    lora_lm_head: bool = False     # also adapt the output head (tiny profile: a random base has no
                                   # language to adapt, so the head must learn the vocabulary too)

    def __post_init__(self) -> None:
        if self.arch not in ("causal", "seq2seq"):
            raise ConfigError(f"glong.extractor.arch must be 'causal' or 'seq2seq', got {self.arch!r}.")
        for name in ("tokenizer_vocab", "lora_r", "lora_alpha", "max_length", "max_new_tokens"):
            positive_int(f"glong.extractor.{name}", getattr(self, name))
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"glong.extractor.lora_dropout must lie in [0, 1), got {self.lora_dropout!r}.")
        if self.arch == "causal" and self.max_new_tokens >= self.max_length:
            raise ConfigError(f"glong.extractor.max_new_tokens ({self.max_new_tokens}) must be below "
                              f"max_length ({self.max_length}): a causal model reads the prompt and "
                              "writes the answer in one window.")

    @classmethod
    def from_dict(cls, data: dict | None) -> "ExtractorTrainConfig":
        return _from_dict(cls, data, "glong.extractor")


@dataclass(frozen=True)
class SummariserTrainConfig:
    """The importance module's summariser: the paper's T5 (T5-small fine-tuned on SAMSum; ``seq2seq``),
    or the small profile's decoder-only substitute (``causal``: a pretrained instruction model adapted
    with LoRA on its top layers, pipelines/glong/summariser.py; see pipelines/glong/importance.py)."""

    arch: str = "seq2seq"          # "seq2seq": T5 cross-attention (paper); "causal": a decoder's self-attention
    model: str = "tiny"            # seq2seq: T5 spec name ("tiny", "t5-small") or a local model directory;
                                   # causal: a pretrained model (pipelines.llm.config.pretrained_folder)
    tokenizer_vocab: int = 2000    # byte-level BPE size trained on the pairs (spec models only)
    prefix: str = "summarize: "    # task prefix of the source (also used when scoring triplets; seq2seq)
    max_source_tokens: int = 512   # dialogue tokens kept (T5-small: 512); causal: also the scorer's window
    max_target_tokens: int = 64    # summary tokens kept; causal: also the scorer's summary length
    sources: tuple[str, ...] | None = None  # datasets whose session summaries train it (None: synthetic); a
                                   # source with no train split (LoCoMo) is split by episode (holdout_episodes)
    inputs: tuple[str, ...] = ("dialogue",)  # a session's source text: its "dialogue", and/or its "triplets"
                                   # (sessions with triplets), serialised as the scorer serialises them
    holdout_episodes: int = 1      # of a source with no train split, the last episodes kept for validation
    max_train_pairs: int | None = None  # at most this many training pairs, evenly spaced (None: all)
    max_valid_pairs: int | None = None  # at most this many validation pairs, evenly spaced (None: all)
    lora_r: int = 16               # causal: LoRA rank
    lora_alpha: int = 32           # causal: LoRA scaling numerator (scale = alpha / r)
    lora_dropout: float = 0.05     # causal: dropout on the LoRA input
    lora_layers: int = 0           # causal: LoRA on the linear projections of the top N blocks (0: all blocks)

    def __post_init__(self) -> None:
        if self.arch not in ("seq2seq", "causal"):
            raise ConfigError(f"glong.summariser.arch must be 'seq2seq' or 'causal', got {self.arch!r}.")
        for name in ("tokenizer_vocab", "max_source_tokens", "max_target_tokens", "lora_r", "lora_alpha"):
            positive_int(f"glong.summariser.{name}", getattr(self, name))
        for name in ("max_train_pairs", "max_valid_pairs"):
            if getattr(self, name) is not None:
                positive_int(f"glong.summariser.{name}", getattr(self, name))
        if isinstance(self.holdout_episodes, bool) or not isinstance(self.holdout_episodes, int) \
                or self.holdout_episodes < 0:
            raise ConfigError("glong.summariser.holdout_episodes must be an integer >= 0, "
                              f"got {self.holdout_episodes!r}.")
        if isinstance(self.lora_layers, bool) or not isinstance(self.lora_layers, int) or self.lora_layers < 0:
            raise ConfigError(f"glong.summariser.lora_layers must be an integer >= 0 (0: every block), "
                              f"got {self.lora_layers!r}.")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"glong.summariser.lora_dropout must lie in [0, 1), got {self.lora_dropout!r}.")
        inputs = (self.inputs,) if isinstance(self.inputs, str) else tuple(self.inputs)
        if not inputs or not set(inputs) <= {"dialogue", "triplets"}:
            raise ConfigError(f"glong.summariser.inputs must list 'dialogue' and/or 'triplets', got {self.inputs!r}.")
        object.__setattr__(self, "inputs", inputs)
        if self.sources is not None:
            from pipelines.data.stage import training_sources

            object.__setattr__(self, "sources", training_sources({"sources": self.sources}, "glong.summariser"))

    @classmethod
    def from_dict(cls, data: dict | None) -> "SummariserTrainConfig":
        return _from_dict(cls, data, "glong.summariser")


@dataclass(frozen=True)
class GLongStageSettings:
    """params.yaml ``glong`` keys the G-Long stages read beside their sections (pipelines/glong/stage.py)."""

    # the extractor's datasets (pipelines.data.stage.training_sources): synthetic keeps its split by episode;
    # any other (personaext) is split by utterance (pipelines.glong.extractor.utterance_split)
    sources: list[str] | str | None = None
    valid_share: float = 0.05  # of a dataset split by utterance: the share held back for validation
    test_share: float = 0.10   # ... and the share held back for scoring (never trained on)
    max_train_examples: int | None = None  # at most this many training utterances, a seeded sample (null: all)
    max_valid_examples: int | None = None  # at most this many validation utterances (null: all)
    eval_examples: int = 64    # held-back utterances the trained extractor is scored on, per dataset (half with
                               # facts where there are fact-free ones), fine-tuned and zero-shot

    def __post_init__(self) -> None:
        dataset_names("glong.sources", self.sources)
        positive_int("glong.eval_examples", self.eval_examples)
        for key in ("max_train_examples", "max_valid_examples"):
            if getattr(self, key) is not None:
                positive_int(f"glong.{key}", getattr(self, key))
        for key in ("valid_share", "test_share"):
            if not 0.0 < getattr(self, key) < 1.0:
                raise ConfigError(f"glong.{key} must lie strictly between 0 and 1 (a share of the utterances), "
                                  f"got {getattr(self, key)!r}.")
        if self.valid_share + self.test_share >= 1.0:
            raise ConfigError(f"glong.valid_share + glong.test_share is {self.valid_share + self.test_share:g}: "
                              "nothing would be left to train on; keep their sum below 1.")
