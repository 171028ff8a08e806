"""Settings of the egocentric memory strategies (EMMA, seed 000, sections 3.3 and 4).

``egocentric`` is EMMA's system: memories written by the dialogue module's summariser and linked by its
linker (``memory_source: model``, ``link_source: model``, the dialogue module read from ``dialogue``), or by a
language model given the same inputs through pipelines/llm (``llm``, the model named by ``dialogue_llm``: a local
model with its fine-tuned adapter, or a served one; :class:`pipelines.memory.writers.LLMDialogue`).
``egocentric_gold`` is an oracle (an upper bound for the same retrieval): the dataset's own memories and
links (MiSC's, or the synthetic generator's), retrieved the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipelines.errors import ConfigError
from pipelines.llm.config import DEFAULT_CACHE_DIR as LLM_CACHE_DIR
from pipelines.memory.base import StrategyConfig

SOURCES = ("gold", "model", "llm")


@dataclass(frozen=True)
class EgocentricConfig(StrategyConfig):
    """Where memories and links come from, who keeps a memory, and how memories are written."""

    # "model" (EMMA): the dialogue module's "summarize [ABOUT_X]: ..." task run at the end of each session;
    # "llm": the same input answered by the language model of dialogue_llm; "gold": the dataset's Session.memories
    # (MiSC, synthetic), an oracle.
    memory_source: Literal["gold", "model", "llm"] = "model"
    # "model" (EMMA): the dialogue module's "memory sentence 1: ..." task; "llm": the same by dialogue_llm; "gold":
    # the dataset's Session.links (a written memory can only be linked by the module or model that wrote it).
    link_source: Literal["gold", "model", "llm"] = "model"
    # the directory of a trained EMMA dialogue module (pipelines.emma.dialogue.EMMADialogue.load), needed when
    # memory_source or link_source is "model" and no dialogue= callable is injected
    dialogue: str | None = None
    # "main": only the episode's keeper keeps a memory (its main speaker, or the owner of all the dataset's
    # memories: RealMem's Assistant; strategy.memory_keeper); "all": every speaker of a session keeps its own,
    # isolated memory (EMMA instances talking to each other, Appendix J).
    agents: Literal["main", "all"] = "main"
    # the retriever: "minilm" = the untrained all-MiniLM-L6-v2 initialisation (a baseline), else the
    # directory of a trained EMMA retriever (pipelines.emma.retriever.DualEncoder.save)
    retriever: str = "minilm"
    device: str = "cpu"                    # torch device of the retriever
    memory_provenance: bool = True         # memory sentences as "text (about X, from first session)"
    turn_tags: Literal["names", "roles"] = "names"  # speaker tags of the generation format
    max_new_tokens: int = 64               # generation length of the summariser (max target length 64)
    link_max_new_tokens: int = 8           # generation length of the linker ("positive" / "negative")
    dialogue_batch_size: int = 32          # dialogue-module inputs decoded per generate call
    # the language model of memory_source / link_source "llm", settings as llm.reader's ({backend, model, ...}): the
    # fine-tuned module's base with its adapter ({backend: local, model: <base>, adapter: <folder>}), or a served one
    dialogue_llm: dict[str, Any] | None = None
    # true: a system message tells an instruction model prompted zero-shot the task and the answer form
    # (pipelines.memory.writers.DIALOGUE_INSTRUCTIONS); false: the input alone, for a model fine-tuned on EMMA's formats
    dialogue_llm_instructed: bool = True
    llm_cache_dir: str | None = LLM_CACHE_DIR  # the LLM layer's response cache (and converted models) of dialogue_llm

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("memory_source", "link_source"):
            if getattr(self, name) not in SOURCES:
                raise ConfigError(f"egocentric.{name} must be one of {list(SOURCES)}, got {getattr(self, name)!r}.")
        if self.memory_source != "gold" and self.link_source == "gold":
            raise ConfigError(f"egocentric.link_source is 'gold' but memory_source is {self.memory_source!r}: the "
                              "dataset's links join the dataset's memory ids, which written memories do not have; "
                              f"set link_source: {self.memory_source}.")
        if {self.memory_source, self.link_source} >= {"model", "llm"}:
            raise ConfigError("egocentric.memory_source and link_source mix 'model' and 'llm': one dialogue module "
                              "writes and links the memories; choose one of them for both.")
        from pipelines.memory.writers import check_writer_llm

        check_writer_llm("dialogue", self.dialogue_llm, "egocentric.dialogue_llm", self.needs_llm,
                         why_wanted="egocentric memory_source/link_source is 'llm'",
                         why_unused="neither memory_source nor link_source is 'llm': the language model writes "
                                    "memories only with memory_source: llm or link_source: llm",
                         example="{backend: openai, base_url: http://127.0.0.1:8000/v1, model: <served id>} or "
                                 "{backend: local, model: smollm2-135m-instruct}")
        if not isinstance(self.dialogue_llm_instructed, bool):
            raise ConfigError(f"egocentric.dialogue_llm_instructed must be true or false, got "
                              f"{self.dialogue_llm_instructed!r}.")
        if self.agents not in ("main", "all"):
            raise ConfigError(f"egocentric.agents must be 'main' or 'all', got {self.agents!r}.")
        if self.turn_tags not in ("names", "roles"):
            raise ConfigError(f"egocentric.turn_tags must be 'names' or 'roles', got {self.turn_tags!r}.")
        if not self.retriever or not str(self.retriever).strip():
            raise ConfigError("egocentric.retriever must be 'minilm' or the directory of a trained EMMA retriever.")
        if self.dialogue is not None and not str(self.dialogue).strip():
            raise ConfigError("egocentric.dialogue must be the directory of a trained EMMA dialogue module, or null.")
        for name in ("max_new_tokens", "link_max_new_tokens", "dialogue_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"egocentric.{name} must be a positive integer, got {value!r}.")

    @property
    def needs_model(self) -> bool:
        """The trained dialogue module writes or links memories."""
        return self.memory_source == "model" or self.link_source == "model"

    @property
    def needs_llm(self) -> bool:
        """The language model of ``dialogue_llm`` writes or links memories."""
        return self.memory_source == "llm" or self.link_source == "llm"


@dataclass(frozen=True)
class EgocentricGoldConfig(EgocentricConfig):
    """``egocentric_gold``: the dataset's memories and links (an oracle), EMMA's retrieval."""

    memory_source: Literal["gold", "model", "llm"] = "gold"
    link_source: Literal["gold", "model", "llm"] = "gold"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.memory_source != "gold":
            raise ConfigError("egocentric_gold keeps the dataset's own memories (memory_source: gold); for "
                              "memories written by the dialogue module use the 'egocentric' strategy.")
