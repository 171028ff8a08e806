"""EMMA's egocentric memory strategies (``egocentric``, and the ``egocentric_gold`` oracle): see :mod:`.strategy`."""

from pipelines.memory.egocentric.config import EgocentricConfig, EgocentricGoldConfig
from pipelines.memory.egocentric.store import AgentMemory, StoredMemory
from pipelines.memory.egocentric.strategy import (Egocentric, EgocentricGold, MemoSeq2Seq, Seq2Seq, load_dialogue,
                                                  memory_keeper, session_partner)

__all__ = ["AgentMemory", "Egocentric", "EgocentricConfig", "EgocentricGold", "EgocentricGoldConfig", "MemoSeq2Seq",
           "Seq2Seq", "StoredMemory", "load_dialogue", "memory_keeper", "session_partner"]
