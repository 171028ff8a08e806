"""EMMA's egocentric memory strategy (registered as ``egocentric``): see :mod:`.strategy`."""

from pipelines.memory.egocentric.config import EgocentricConfig
from pipelines.memory.egocentric.store import AgentMemory, StoredMemory
from pipelines.memory.egocentric.strategy import Egocentric, Seq2Seq

__all__ = ["AgentMemory", "Egocentric", "EgocentricConfig", "Seq2Seq", "StoredMemory"]
