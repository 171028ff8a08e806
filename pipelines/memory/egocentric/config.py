"""Settings of the egocentric memory strategy (EMMA, seed 000, sections 3.3 and 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipelines.errors import ConfigError
from pipelines.memory.base import StrategyConfig

SOURCES = ("gold", "model")


@dataclass(frozen=True)
class EgocentricConfig(StrategyConfig):
    """Where memories and links come from, who keeps a memory, and how memories are written."""

    # "gold": the dataset's Session.memories (MiSC, synthetic); "model": the dialogue module's
    # "summarize [ABOUT_X]: ..." task run at the end of each session (needs an injected model).
    memory_source: Literal["gold", "model"] = "gold"
    # "gold": the dataset's Session.links; "model": the dialogue module's "memory sentence 1: ..." task
    # (needs an injected model; a model-written memory can only be linked by the model).
    link_source: Literal["gold", "model"] = "gold"
    # "main": only the episode's main speaker keeps a memory (MiSC); "all": every speaker of a session
    # keeps its own, isolated memory (EMMA instances talking to each other, Appendix J).
    agents: Literal["main", "all"] = "main"
    # the retriever: "minilm" = the untrained all-MiniLM-L6-v2 initialisation (a baseline), else the
    # directory of a trained EMMA retriever (pipelines.emma.retriever.DualEncoder.save)
    retriever: str = "minilm"
    device: str = "cpu"                    # torch device of the retriever
    memory_provenance: bool = True         # memory sentences as "text (about X, from first session)"
    turn_tags: Literal["names", "roles"] = "names"  # speaker tags of the generation format
    max_new_tokens: int = 64               # generation length of the summariser / linker (max target 64)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("memory_source", "link_source"):
            if getattr(self, name) not in SOURCES:
                raise ConfigError(f"egocentric.{name} must be 'gold' or 'model', got {getattr(self, name)!r}.")
        if self.memory_source == "model" and self.link_source == "gold":
            raise ConfigError("egocentric.link_source is 'gold' but memory_source is 'model': the dataset's links "
                              "join the dataset's memory ids, which model-written memories do not have; "
                              "set link_source: model.")
        if self.agents not in ("main", "all"):
            raise ConfigError(f"egocentric.agents must be 'main' or 'all', got {self.agents!r}.")
        if self.turn_tags not in ("names", "roles"):
            raise ConfigError(f"egocentric.turn_tags must be 'names' or 'roles', got {self.turn_tags!r}.")
        if not self.retriever or not str(self.retriever).strip():
            raise ConfigError("egocentric.retriever must be 'minilm' or the directory of a trained EMMA retriever.")
        if self.max_new_tokens < 1:
            raise ConfigError(f"egocentric.max_new_tokens must be at least 1, got {self.max_new_tokens}.")

    @property
    def needs_model(self) -> bool:
        return self.memory_source == "model" or self.link_source == "model"
