"""Settings of the ``graph`` memory strategy (G-Long, seed 003; see pipelines/glong/config.py for
where each default comes from)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pipelines.errors import ConfigError
from pipelines.glong.config import PARK_DECAY_PER_HOUR, RetrievalConfig
from pipelines.llm.config import DEFAULT_CACHE_DIR as LLM_CACHE_DIR
from pipelines.memory.base import StrategyConfig
from pipelines.models.embeddings import DEFAULT_CACHE_DIR


@dataclass(frozen=True)
class GraphConfig(StrategyConfig):
    """G-Long graph memory: extraction, importance, embeddings and retrieval knobs."""

    context_k: int = 3             # triplets in the MEMORY block: the paper keeps 3 (of 5)
    # Turn.triplets; the trained extractor (extractor_model); or a language model through pipelines/llm with the
    # paper's prompt (extractor_llm: e.g. the fine-tuned base + adapter, or Qwen3-8B served by vLLM)
    extraction: Literal["ground_truth", "model", "llm"] = "ground_truth"
    extractor_model: str | None = None  # local dir of the trained QLoRA extractor ("model" only)
    extractor_llm: dict[str, Any] | None = None  # "llm" only: LLM settings as llm.reader's ({backend, model, ...})
    llm_cache_dir: str | None = LLM_CACHE_DIR  # the LLM layer's response cache (and converted models) of extractor_llm
    importance: Literal["uniform", "model"] = "uniform"  # 1.0 for every triplet, or Eqs. (1)-(3)
    importance_model: str | None = None  # local dir of the trained T5 summariser ("model" only)
    embedder: Literal["minilm", "hashing"] = "minilm"  # all-MiniLM-L6-v2, or word hashing (tests)
    model_path: str | None = None  # local sentence-transformers dir; None: the shipped MiniLM
    hashing_dim: int = 256         # vector size of the hashing embedder
    cache_dir: str | None = DEFAULT_CACHE_DIR  # on-disk embedding cache (MiniLM); None: none
    entity_index: Literal["auto", "flat", "hnsw"] = "auto"  # exact up to exact_up_to entities, then HNSW
    exact_up_to: int = 10_000      # "auto": entities searched exactly before the index turns HNSW
    device: str = "cpu"            # torch device of the encoder and the summariser
    k_anchor: int = 5              # anchor entities per query (section 3.4, step 1)
    hops: int = 1                  # subgraph expansion depth h (paper: 1)
    coarse_n: int = 5              # coarse pool size N (paper: 5); deeper rankings use tiers of N
    a: float = 1.0                 # Eq. (4) weight of the similarity
    b: float = 1.0                 # Eq. (4) weight of the importance
    c: float = 1.0                 # Eq. (4) weight of the recency
    lam: float = -math.log(PARK_DECAY_PER_HOUR)  # recency decay per hour since last access
    dedupe: bool = True            # repeated mentions of one fact count once in a ranking
    update_access: bool = True     # a retrieval sets the kept triplets' last-accessed time
    missing_time_hours: float = 24.0  # a session without timestamp sits at index * this (hours)
    context_header: str = "MEMORY:"   # first line of the context block

    def __post_init__(self) -> None:
        super().__post_init__()
        choices = {"extraction": ("ground_truth", "model", "llm"), "importance": ("uniform", "model"),
                   "embedder": ("minilm", "hashing"), "entity_index": ("auto", "flat", "hnsw")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"graph.{name} must be one of {list(allowed)}, got "
                                  f"{getattr(self, name)!r}.")
        from pipelines.memory.writers import check_writer_llm

        check_writer_llm("extractor", self.extractor_llm, "graph.extractor_llm", self.extraction == "llm",
                         why_wanted="graph.extraction is 'llm'",
                         why_unused=f"graph.extraction is {self.extraction!r}: the language model extracts only with "
                                    "extraction: llm",
                         example="{backend: openai, base_url: http://127.0.0.1:8000/v1, model: Qwen/Qwen3-8B} or "
                                 "{backend: local, model: <base folder>, adapter: <folder>}")
        if not isinstance(self.exact_up_to, int) or isinstance(self.exact_up_to, bool) \
                or self.exact_up_to < 2:
            raise ConfigError(f"graph.exact_up_to must be an integer >= 2, got {self.exact_up_to!r}.")
        if not isinstance(self.hashing_dim, int) or self.hashing_dim < 2:
            raise ConfigError(f"graph.hashing_dim must be an integer >= 2, got {self.hashing_dim!r}.")
        if not (isinstance(self.missing_time_hours, (int, float)) and self.missing_time_hours > 0):
            raise ConfigError("graph.missing_time_hours must be > 0 (sessions without a timestamp "
                              f"are spaced by it), got {self.missing_time_hours!r}.")
        if self.context_k > self.coarse_n:
            raise ConfigError(f"graph.context_k ({self.context_k}) cannot exceed coarse_n "
                              f"({self.coarse_n}): the MEMORY block keeps k of the N coarse "
                              "candidates.")
        if not self.context_header.strip():
            raise ConfigError("graph.context_header must be non-empty (it opens the MEMORY block).")
        self.retrieval  # noqa: B018  (builds a RetrievalConfig: checks k_anchor, hops, a, b, c, lam)

    @property
    def retrieval(self) -> RetrievalConfig:
        """The section 3.4 settings: the MEMORY block keeps the ``context_k`` best of the pool."""
        return RetrievalConfig(k_anchor=self.k_anchor, hops=self.hops, coarse_n=self.coarse_n,
                               final_k=self.context_k, a=self.a, b=self.b, c=self.c, lam=self.lam,
                               update_access=self.update_access, dedupe=self.dedupe)
