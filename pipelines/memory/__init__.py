"""Memory strategies behind one interface (ARCHITECTURE.md "Memory strategies").

Importing this package registers every strategy: ``build_strategy("bm25")`` etc.
"""

from pipelines.memory.base import (GRANULARITIES, STRATEGIES, MemoryStrategy, Retrieved, Selector,
                                   StrategyConfig, build_strategy, missing_models, pack_context,
                                   register_strategy, render_line)
from pipelines.memory.tokens import DEFAULT_COUNTER, TokenCounter

# Strategy modules, imported for their @register_strategy side effect (heavy imports stay lazy).
from pipelines.memory import no_history, long_context, bm25, dense, hybrid, fusion, session_summary, trained_dense  # noqa: E402,F401
from pipelines.memory import rerank  # noqa: E402,F401
from pipelines.memory import graph, egocentric, mdr  # noqa: E402,F401
from pipelines.memory import peers  # noqa: E402,F401  (the products: mem0, ...)
from pipelines.memory.base import load_strategy_plugins  # noqa: E402

load_strategy_plugins()  # installed packages' strategies, after the built-ins (pipelines/plugins.py)

__all__ = ["GRANULARITIES", "STRATEGIES", "MemoryStrategy", "Retrieved", "Selector", "StrategyConfig",
           "TokenCounter", "DEFAULT_COUNTER", "build_strategy", "missing_models", "pack_context", "register_strategy",
           "render_line"]
