"""The re-ranker's settings and file names (params.yaml ``rerank.model``), apart from the model
(:mod:`pipelines.rerank.cross_encoder`) so that the stage registry reads them without importing torch."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.config_schema import positive_int
from pipelines.errors import ConfigError
from pipelines.training.config import EngineSettings

CONFIG_FILE = "reranker.json"
HEAD_FILE = "head.safetensors"      # the linear head of head: mean
HEADS = ("mean", "classifier")
PAIRS = ("questions", "session_questions", "thread_pairs")


@dataclass(frozen=True)
class CrossEncoderConfig(EngineSettings):
    """Re-ranker settings (params.yaml ``rerank.model``)."""

    model: str | None = None           # checkpoint name or local path; None = the shipped MiniLM (new head)
    head: str = "mean"                 # mean: a new linear head on the masked mean of the last layer (MiniLM was
                                       # trained for mean pooling); classifier: the checkpoint's own sequence-
                                       # classification head (a trained cross-encoder, e.g. an MS MARCO one)
    max_length: int = 128              # tokens of question + candidate (LoCoMo's turns: 20-60 tokens)
    lr: float = 1e-4                   # AdamW learning rate (linear warm-up and decay: rerank.train)
    batch_size: int = 8                # groups (questions) per micro-batch; a group holds group_size pairs
    group_size: int = 6                # LCE group: 1 positive + group_size - 1 hard negatives
    negative_depth: int = 30           # hard negatives drawn from BM25's top negative_depth non-evidence turns
    max_epochs: int = 3                # at most; early stopping on the validation LCE loss
    patience: int = 2                  # validation passes without a lower loss before stopping; 0: never
    max_train_examples: int | None = None  # keep at most this many (question, positive) groups (seeded)
    max_valid_examples: int | None = None  # at most this many validation groups, and questions scored (seeded)
    max_eval_examples: int | None = None   # at most this many held-out questions scored a model: each fold model on the
                                           # episodes it held out, the main one on the test split (seeded)
    pairs: tuple[str, ...] = ("questions",)  # questions (turn evidence), session_questions (RealMem), thread_pairs
                                             # (mined from unlabelled sessions: pipelines.emma.retriever.thread_examples)
    seed: int = 2024

    def __post_init__(self) -> None:
        pairs = (self.pairs,) if isinstance(self.pairs, str) else tuple(self.pairs)
        object.__setattr__(self, "pairs", pairs)
        if not pairs or any(p not in PAIRS for p in pairs) or len(set(pairs)) != len(pairs):
            raise ConfigError(f"rerank.model.pairs must list some of {list(PAIRS)}, each once, got {list(pairs)!r}.")
        for name in ("max_length", "batch_size", "negative_depth", "max_epochs"):
            positive_int(f"rerank.model.{name}", getattr(self, name))
        if not isinstance(self.group_size, int) or isinstance(self.group_size, bool) or self.group_size < 2:
            raise ConfigError(f"rerank.model.group_size must be an integer >= 2 (a positive and a negative), "
                              f"got {self.group_size!r}.")
        for name in ("max_train_examples", "max_valid_examples", "max_eval_examples"):
            positive_int(f"rerank.model.{name}", getattr(self, name), nullable=True)
        if not isinstance(self.patience, int) or self.patience < 0:
            raise ConfigError(f"rerank.model.patience must be an integer >= 0, got {self.patience!r}.")
        if not self.lr > 0:
            raise ConfigError(f"rerank.model.lr must be positive, got {self.lr!r}.")
        if self.head not in HEADS:
            raise ConfigError(f"rerank.model.head must be one of {list(HEADS)}, got {self.head!r}.")

    def resolved_model(self) -> str:
        from pipelines.models.minilm import minilm_path

        return str(self.model or minilm_path())
