"""The one typed config of the three MDR stages (seed 001; METHODS.md section 2).

Paper settings: GPT-2 for every component (12 layers, hidden 768), sigma = 0.5 for the adjusted
token weights (section 4.3), features cached after student training (section 4.2). The paper
gives no hop count K for the Memory Net: the default 3 is the hop count of end-to-end memory
networks and Mem2Seq (Madotto et al., 2018), which the paper builds its Memory Net on.

Two defaults of this project (the paper is silent):

- ``p0_eval_samples = 32``: eval-mode R^(K) is the mean over 32 fixed draws of P^(0) (16
  antithetic pairs; memory_net.py). The draws share the slots' keys and values, so they cost
  O(M B S H) per attention, nothing next to the encoders; the Monte Carlo error variance falls
  as 1/M and at 32 is a few percent of the bias of the P^(0) = 0 plug-in on an untrained net
  (3.6e-6 vs 5.6e-5 MSE per entry at H = 768) and about 1% of it on a strongly non-linear one
  (hop weights x4: 0.03 vs 2.4), so more draws would not change the cached features materially.
- ``max_hp_tokens = 256``: H_P (equation 7) is two rounds of at most ``max_history_tokens + 1``
  tokens each; 256 fits the position table of the tiny GPT-2 profile and cuts at most two tokens
  at paper lengths (128). The cut keeps the end of H_P (the most recent round, student.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from pipelines.config_schema import dataset_names, positive_int
from pipelines.errors import ConfigError

P0_MODES = ("sampled", "learned")
P0_EVAL_MODES = ("expected", "mean", "seeded")
DECODER_INITS = ("teacher", "fresh")


@dataclass(frozen=True)
class MDRConfig:
    """Settings shared by the teacher, student and decoder stages (params.yaml ``mdr``)."""

    model: str | dict = "tiny"          # GPT-2 of every component: a spec name for build_gpt2 ("tiny", "gpt2"),
                                        # a dict of GPT2Spec fields, or a pretrained name / local path
    hops: int = 3                       # K, hops of the P-Update and of the R-Update (paper: not given)
    sigma: float = 0.5                  # std of the adjusted token weights w_i (paper: 0.5); large -> plain CE
    prefix_tokens: int = 1              # prefix embeddings the projected R_TE / R^(K) becomes in the decoders
    p0: str = "sampled"                 # P^(0): "sampled" ~ N(0, init_std^2 I) per forward, or "learned" (init ~ N)
    init_std: float = 1.0               # std of P^(0) (paper: N(0, I))
    share_update_weights: bool = False  # P-Update and R-Update share parameters, not only structure
    p0_eval: str = "expected"           # sampled P^(0) in eval mode: "expected" (mean R^(K) over draws), "mean"
                                        # (P^(0) = 0) or "seeded" (one draw); memory_net.py
    p0_eval_samples: int = 32           # M draws of P^(0) (M/2 antithetic pairs) averaged when p0_eval = "expected"
    eval_seed: int = 2022               # seed of the eval-mode draws of P^(0)
    decoder_init: str = "teacher"       # stage C decoder starts from the teacher decoder, or "fresh" from `model`
    max_query_tokens: int = 64          # Q tokens kept (the first ones)
    max_response_tokens: int = 64       # R tokens kept before the end-of-text token
    max_persona_tokens: int = 128       # P tokens kept (the persona sentences joined by spaces)
    max_history_tokens: int = 128       # tokens kept of one history round "Q <sep> R"
    max_hp_tokens: int = 256            # tokens kept of H_P = H(index) + round T-1 (the last ones; eq. 7)
    max_history_rounds: int | None = 32  # most recent history rounds per example (None: all)
    precompute_teacher_features: bool = True  # stage B: teacher features of each distinct text once, before training
    memory_persona: bool = True         # empty persona -> the responder's own memories of earlier sessions
    eos_token: str = "<|endoftext|>"    # end-of-text token; also the padding id (padding is masked)
    sep_token: str | None = None        # separator between Q and R (None: eos_token, as in DialoGPT)

    def __post_init__(self) -> None:
        if not str(self.model).strip():
            raise ConfigError("mdr.model is empty: name a GPT-2 spec (e.g. 'tiny', 'gpt2') or a local path.")
        for name in ("hops", "prefix_tokens", "max_query_tokens", "max_response_tokens",
                     "max_persona_tokens", "max_history_tokens", "max_hp_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"mdr.{name} must be an integer of at least 1, got {value!r}.")
        if self.max_history_rounds is not None and (not isinstance(self.max_history_rounds, int)
                                                    or self.max_history_rounds < 0):
            raise ConfigError(f"mdr.max_history_rounds must be None or an integer >= 0, got "
                              f"{self.max_history_rounds!r}.")
        if not (isinstance(self.sigma, (int, float)) and self.sigma > 0 and math.isfinite(self.sigma)):
            raise ConfigError(f"mdr.sigma is {self.sigma!r}: the std of the token weights must be a positive "
                              f"finite number (0.5 in the paper; larger values approach plain cross-entropy).")
        if self.p0 not in P0_MODES:
            raise ConfigError(f"mdr.p0 is {self.p0!r}: choose one of {', '.join(P0_MODES)}.")
        if self.p0_eval not in P0_EVAL_MODES:
            raise ConfigError(f"mdr.p0_eval is {self.p0_eval!r}: choose one of {', '.join(P0_EVAL_MODES)}.")
        if isinstance(self.p0_eval_samples, bool) or not isinstance(self.p0_eval_samples, int) \
                or self.p0_eval_samples < 2 or self.p0_eval_samples % 2:
            raise ConfigError(f"mdr.p0_eval_samples is {self.p0_eval_samples!r}: it must be an even integer >= 2 "
                              f"(the draws of P^(0) come in antithetic pairs z, -z).")
        if not (self.init_std >= 0 and math.isfinite(self.init_std)):
            raise ConfigError(f"mdr.init_std is {self.init_std!r}: it must be a finite number >= 0.")
        if self.p0 == "learned" and self.init_std == 0:
            raise ConfigError("mdr.init_std is 0 with p0='learned': the learned P^(0) would start at zero and "
                              "every example would start from the same point; use a positive std.")
        if self.decoder_init not in DECODER_INITS:
            raise ConfigError(f"mdr.decoder_init is {self.decoder_init!r}: choose one of "
                              f"{', '.join(DECODER_INITS)}.")
        if not self.eos_token:
            raise ConfigError("mdr.eos_token is empty: name the tokenizer's end-of-text token.")
        if self.sep_token is not None and not self.sep_token:
            raise ConfigError("mdr.sep_token is empty: name a token, or None to use eos_token.")

    @property
    def separator(self) -> str:
        """The token between Q and R."""
        return self.sep_token or self.eos_token

    def to_dict(self) -> dict[str, Any]:
        """The resolved config (MLflow params)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "MDRConfig":
        """Build from a params.yaml section, refusing unknown keys with the list of known ones."""
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown mdr setting(s) {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(cls.__dataclass_fields__))}.")
        return cls(**values)


@dataclass(frozen=True)
class MDRStageSettings:
    """params.yaml ``mdr`` keys the MDR stages read beside MDRConfig's (pipelines/mdr/stage.py)."""

    sources: list[str] | str | None = None  # datasets to learn from (pipelines.data.stage.training_sources)
    tokenizer: str = "train"                # "train": a byte-level BPE trained on the examples; else a name / path
    vocab_size: int = 2000                  # vocabulary of that trained BPE

    def __post_init__(self) -> None:
        dataset_names("mdr.sources", self.sources)
        positive_int("mdr.vocab_size", self.vocab_size)


@dataclass(frozen=True)
class MDRGenerationSettings:
    """params.yaml ``mdr.generation``: MDR's responses in the benchmark (pipelines/evaluate/stage.py, CLI)."""

    max_new_tokens: int = 32   # greedy decoding stops after this many tokens

    def __post_init__(self) -> None:
        positive_int("mdr.generation.max_new_tokens", self.max_new_tokens)
