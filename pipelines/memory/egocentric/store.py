"""One agent's egocentric memory: its memories per partner, their links, their retriever vectors.

EMMA (seed 000, section 3.3): the main speaker keeps, for each partner, memories about itself and about
that partner, written from its own perspective at the end of each session, and links between related
memories. A memory is never overwritten or deleted by an update: the newer memory is added and linked to
the one it updates (section 4.1, "Memory Linker"). Only :meth:`AgentMemory.remove` (an explicit forget)
deletes, and it deletes from every index: the items, the per-partner lists, the links and the vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pipelines.errors import DataError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class StoredMemory:
    """A memory as an agent holds it."""

    id: str                    # Memory.id (gold) or "<session id>:<agent>:M<n>" (model-written)
    owner: str                 # the agent whose memory it is
    about: str                 # the speaker it describes (the agent itself or the partner)
    text: str                  # the memory sentence as written
    rendered: str              # the sentence the retriever and the generator read (with provenance)
    session_id: str            # the session at whose end it was written
    session_index: int         # Session.index of that session
    partner: str               # the partner of that session (the per-partner store it belongs to)
    order: int                 # insertion order over the whole strategy (time order)
    timestamp: datetime | None = None
    turn_ids: frozenset[str] = frozenset()  # the turns of the session it was written from
    participants: frozenset[str] = frozenset()  # who took part in that session (pipelines.memory.base)


class AgentMemory:
    """Memories of one agent: ``items`` by id, ``by_partner`` lists, undirected ``links``, ``vectors``."""

    def __init__(self, agent: str):
        self.agent = agent
        self.items: dict[str, StoredMemory] = {}
        self.by_partner: dict[str, list[str]] = {}
        self.links: dict[str, set[str]] = {}
        self.vectors: dict[str, "torch.Tensor"] = {}     # id -> (H,) L2-normalised memory-encoder vector

    def __len__(self) -> int:
        return len(self.items)

    def add(self, memory: StoredMemory, vector: "torch.Tensor") -> None:
        if memory.owner != self.agent:
            raise ValueError(f"memory {memory.id} belongs to {memory.owner!r}, not to agent {self.agent!r}")
        if memory.id in self.items:
            raise DataError(f"memory {memory.id!r} is already held by {self.agent}: memories are never "
                            f"overwritten", record=f"session {memory.session_id}", field="memories",
                            rule="memory_never_overwritten")
        self.items[memory.id] = memory
        self.by_partner.setdefault(memory.partner, []).append(memory.id)
        self.links[memory.id] = set()
        self.vectors[memory.id] = vector

    def link(self, newer: str, earlier: str) -> bool:
        """Link two held memories (either direction counts at retrieval); False if one is not held."""
        if newer not in self.items or earlier not in self.items or newer == earlier:
            return False
        self.links[newer].add(earlier)
        self.links[earlier].add(newer)
        return True

    def linked(self, memory_id: str) -> list[StoredMemory]:
        """Every memory linked to ``memory_id`` (one hop, both directions), in time order."""
        return sorted((self.items[m] for m in self.links.get(memory_id, ())), key=lambda m: m.order)

    def with_partner(self, partner: str) -> list[StoredMemory]:
        """The per-partner store: memories written in sessions with ``partner`` (about either of them)."""
        return [self.items[m] for m in self.by_partner.get(partner, [])]

    def ordered(self) -> list[StoredMemory]:
        return sorted(self.items.values(), key=lambda m: m.order)

    def remove(self, ids: set[str]) -> int:
        """Delete ``ids`` from every index; returns how many were held."""
        gone = ids & set(self.items)
        for mid in gone:
            memory = self.items.pop(mid)
            self.by_partner[memory.partner].remove(mid)
            if not self.by_partner[memory.partner]:
                del self.by_partner[memory.partner]
            for other in self.links.pop(mid):
                self.links[other].discard(mid)
            del self.vectors[mid]
        return len(gone)
