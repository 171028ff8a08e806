"""``graph``: G-Long's graph memory strategy (seed 003). Importing registers it."""

from pipelines.memory.graph.config import GraphConfig
from pipelines.memory.graph.strategy import GraphMemory

__all__ = ["GraphConfig", "GraphMemory"]
