"""The field's memory products as strategies under the same protocol (issue #32): each an adapter behind the one
memory interface (pipelines/memory/base.py), its package an optional extra of pyproject.toml, its language model and
embedder this project's (:mod:`.common`).

- ``mem0`` / ``mem0_raw`` (:mod:`.mem0`): mem0's open-source Memory (``mem0ai``), with and without its extraction.
- ``graphiti`` (:mod:`.graphiti`): Zep's Graphiti (``graphiti-core``) on its embedded Kuzu graph database.
- ``langmem`` (:mod:`.langmem`): LangChain's LangMem (``langmem``): its store manager over an in-process LangGraph
  store.

Importing this package registers them; a product whose package is not installed is listed by the benchmark as missing,
with the extra that installs it (:meth:`~.common.PeerStrategy.unavailable`).
"""

from pipelines.memory.peers import graphiti, langmem, mem0  # noqa: F401  (registers graphiti, langmem, mem0, mem0_raw)
