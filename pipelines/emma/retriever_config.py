"""The EMMA retriever's settings and file names (params.yaml ``emma.retriever``), apart from the model
(:mod:`pipelines.emma.retriever`) so that the stage registry reads them without importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipelines.config_schema import positive_int
from pipelines.errors import ConfigError
from pipelines.models.minilm import minilm_path
from pipelines.training.config import EngineSettings

CONFIG_FILE = "retriever.json"
EVAL_FILE = "retriever_eval.json"   # the emma_retriever stage's test scores, in the model folder (the report reads it)
PAIRS = ("memory_tags", "questions", "session_questions", "thread_pairs")  # the kinds of training examples (RetrieverConfig.pairs)


@dataclass(frozen=True)
class RetrieverConfig(EngineSettings):
    """EMMA retriever settings (params.yaml ``emma.retriever``); paper values from Appendix E.2."""

    model: str | None = None           # checkpoint name or local path for both encoders; None = shipped MiniLM
    context_max_length: int = 512      # max tokens of the dialogue context (E_c)
    memory_max_length: int = 32        # max tokens of a memory sentence (E_m)
    pooling: Literal["mean", "cls"] = "mean"  # sentence vector: masked mean of the last layer (MiniLM), or
                                              # [CLS] (the authors' BERT-base: the paper profile)
    context_truncation: Literal["left", "right"] = "left"  # which end of a long context is cut
    margin: float = 0.2                # triplet margin on the cosine distance (in (0, 2])
    lr: float = 1e-4                   # learning rate (AdamW)
    batch_size: int = 90               # triplets per micro-batch PER PROCESS (TrainConfig.batch_size): E.2's 90
                                       # on 8 GPUs read as per GPU (90 is no multiple of 8); a step takes
                                       # batch_size x grad_accum x processes triplets
    max_epochs: int = 20               # at most this many epochs, with early stopping (E.2; no criterion named)
    patience: int = 2                  # validation passes (every eval_every steps) without a lower validation
                                       # triplet loss before stopping (the engine's criterion); 0: never
    negative_mining: Literal["semi-hard", "hardest", "random"] = "semi-hard"  # which negative of an example is used
    max_negatives: int = 32            # negatives scored per example when mining (seeded subset)
    seed: int = 2024                   # example order, negative subsets
    pairs: tuple[str, ...] = ("memory_tags",)  # which examples train (and validate) it: "memory_tags" (MiSC's tagged
                                       # turns, the paper's data), "questions" (question -> its evidence turns,
                                       # candidates = the episode's earlier turns; set memory_max_length 64-128 for
                                       # turns), "session_questions" (question -> the main speaker's turns of its
                                       # evidence sessions: RealMem; see question_examples), "thread_pairs" (mined
                                       # without labels: a session's first turn -> the session its content continues;
                                       # thread_examples)
    max_train_triplets: int | None = None  # train on at most this many (context, positive) triplets, a seeded
                                       # sample over every kind (None: all): a user's files give thousands (each
                                       # evidence turn of a question is one), and a step of 16 with 512-token
                                       # contexts takes ~5 s on 2 CPU cores
    max_valid_triplets: int | None = None  # the same for the validation triplets (the early-stopping loss)

    def __post_init__(self) -> None:
        pairs = (self.pairs,) if isinstance(self.pairs, str) else tuple(self.pairs)   # YAML and JSON give lists
        object.__setattr__(self, "pairs", pairs)
        unknown = [p for p in pairs if p not in PAIRS]
        if not pairs or unknown or len(set(pairs)) != len(pairs):
            raise ConfigError(f"emma.retriever.pairs must list some of {list(PAIRS)}, each once, got {list(pairs)!r}.")
        for name in ("context_max_length", "memory_max_length", "batch_size", "max_epochs", "max_negatives"):
            positive_int(f"emma.retriever.{name}", getattr(self, name))
        for name in ("max_train_triplets", "max_valid_triplets"):
            positive_int(f"emma.retriever.{name}", getattr(self, name), nullable=True)
        if self.patience < 0:
            raise ConfigError(f"emma.retriever.patience must be >= 0, got {self.patience!r}.")
        if not 0 < self.margin <= 2:
            raise ConfigError(f"emma.retriever.margin must lie in (0, 2]: a cosine distance lies in [0, 2], "
                              f"so a larger margin can never be met; got {self.margin!r}.")
        if not self.lr > 0:
            raise ConfigError(f"emma.retriever.lr must be positive, got {self.lr!r}.")
        if self.pooling not in ("mean", "cls"):
            raise ConfigError(f"emma.retriever.pooling must be 'mean' or 'cls', got {self.pooling!r}.")
        if self.negative_mining not in ("semi-hard", "hardest", "random"):
            raise ConfigError(f"emma.retriever.negative_mining must be 'semi-hard', 'hardest' or 'random', "
                              f"got {self.negative_mining!r}.")
        if self.context_truncation not in ("left", "right"):
            raise ConfigError(f"emma.retriever.context_truncation must be 'left' or 'right', "
                              f"got {self.context_truncation!r}.")

    def resolved_model(self) -> str:
        return str(self.model or minilm_path())
