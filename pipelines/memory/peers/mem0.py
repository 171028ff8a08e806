"""``mem0`` and ``mem0_raw``: mem0's open-source ``Memory`` (the ``mem0ai`` package, 2.2) under the temporal protocol.

mem0 (Chhikara et al. 2025, "Mem0: Building Production-Ready AI Agents with Scalable Long-Term Memory",
arXiv:2504.19413) keeps a user's memory as short facts in a vector store. Its open-source ``Memory.add(messages,
user_id=...)`` (2.x, "additive extraction") asks its language model once per call, with its system prompt
(``ADDITIVE_EXTRACTION_PROMPT``, about 8.5k tokens) and a user prompt holding the last messages of the scope, the ten
stored memories most similar to the new messages, the new messages and the date, for a JSON object
``{"memory": [{"text": ...}, ...]}``; each new fact is embedded and stored (no update or delete by the model in 2.x).
``Memory.search(query, filters={"user_id": ...})`` ranks the scope's memories by the cosine of their embedding to the
query's, fused with BM25 over a sparse index and entity boosts when those are available (both need models downloaded
at run time: fastembed's ``Qdrant/bm25``, spaCy's ``en_core_web_sm``; offline they are off and mem0 logs so: the
ranking is its semantic one). ``add(..., infer=False)`` stores each message as it is, one memory per message, without
a model: the no-inference mode (``mem0_raw``).

Here (issue #32):

- the vector store is an in-process Qdrant (``QdrantClient(":memory:")``, mem0's own qdrant provider), the history
  database SQLite in memory: nothing on disk but the project's caches;
- the embedder is the dense strategy's (the shipped all-MiniLM-L6-v2 and its embedding cache), the language model the
  project's LLM layer (:class:`~pipelines.memory.writers.LLMChat`: the response cache; the shipped SmolLM2 by default,
  any OpenAI-compatible server by ``llm.base_url``), both handed to ``Memory`` in place of the ones its config builds;
- a session is fed as one ``add`` call (``turns_per_add``: mem0's own LoCoMo evaluation adds two messages a call), the
  episode's main speaker as ``user``, the others as ``assistant``, each message ``"speaker: text"`` with the speaker as
  its ``name`` (mem0's evaluation writes the speaker into the content the same way), the session's and turns' ids in
  the metadata; one mem0 user per episode;
- mem0's open-source ``add`` rejects a ``timestamp`` ("platform-only") and dates its prompt by the wall clock (its
  "Observation Date" and "Current Date" sections): the adapter writes the session's date there, so that a memory is
  dated as the conversation was and the request (hence the response cache) is the same on every day;
- the answers mem0 cannot read as its JSON (it logs and stores nothing) are counted (``unreadable``), as are the
  prompts over the model's window (``refused_too_long``: SmolLM2-135M's window is 8,192 tokens, mem0's system prompt
  alone 8,530: with the shipped model every extraction is refused and ``mem0`` writes nothing; a served model with a
  longer window is one ``base_url`` away) and mem0's own exceptions (``product_errors``);
- ``forget`` deletes through ``Memory.delete``; mem0 keeps a deleted memory's text in its ``history`` table and the
  raw messages of the scope in its ``messages`` table: the adapter deletes those rows too (mem0 has no call for it).
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

from pipelines.data.schema import Episode, Query, Session, Turn
from pipelines.memory.base import register_strategy
from pipelines.memory.peers.common import PeerConfig, PeerStrategy

DATE_SECTION = re.compile(r"(## (?:Observation|Current) Date\n)\d{4}-\d{2}-\d{2}")
COLLECTION = "mnemos"


@dataclass(frozen=True)
class Mem0Config(PeerConfig):
    """mem0's settings (over the adapters' shared ones)."""

    infer: bool = True           # mem0's extraction by its language model; False: each message stored as it is
    threshold: float = 0.0       # mem0's search threshold (its default 0.1 would cut the ranking short)


def _quiet() -> None:
    """mem0 without telemetry (no network here) and without its per-call notices."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    for name in ("mem0", "mem0.memory.main", "mem0.utils", "mem0.vector_stores.qdrant"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")


class _Embedder:
    """mem0's embedder interface (``embed(text, action)``, ``embed_batch(texts, action)``) over the strategy's."""

    def __init__(self, strategy: "Mem0"):
        self.strategy = strategy

    def embed(self, text, memory_action=None):
        return self.strategy.embed([text])[0].tolist()

    def embed_batch(self, texts, memory_action="add"):
        return [v.tolist() for v in self.strategy.embed(list(texts))] if texts else []


class _LLM:
    """mem0's language-model interface (``generate_response(messages, response_format, ...)``) over the layer; each
    answer checked the way mem0 reads it, an unreadable one counted."""

    def __init__(self, strategy: "Mem0"):
        self.strategy = strategy
        self.date: str | None = None   # the session being added

    def generate_response(self, messages, response_format=None, tools=None, tool_choice="auto", **kwargs):
        if self.date is not None:
            messages = [{**m, "content": DATE_SECTION.sub(rf"\g<1>{self.date}", m["content"])} for m in messages]
        answer = self.strategy.ask(messages)
        if not _readable(answer):
            self.strategy.chat.outcome("unreadable")
        return answer


def _readable(answer: str) -> bool:
    """Whether mem0 reads ``answer`` as its extraction JSON (its own steps: code fences cut, ``json.loads``, else the
    JSON found in the text); an empty answer is read as "nothing to add"."""
    from mem0.memory.utils import extract_json, remove_code_blocks

    text = remove_code_blocks(answer)
    if not text or not text.strip():
        return True
    for candidate in (text, extract_json(text)):
        try:
            return isinstance(json.loads(candidate, strict=False), dict)
        except (json.JSONDecodeError, TypeError):
            continue
    return False


@register_strategy("mem0")
class Mem0(PeerStrategy):
    """mem0's open-source Memory: facts extracted by its language model, searched by embedding (see the module)."""

    config_class = Mem0Config
    package = "mem0"
    extra = "mem0"
    ingredient = "mem0 (mem0ai 2.2): LLM-extracted facts, semantic search"

    @property
    def uses_llm(self) -> bool:
        return bool(self.config.infer)

    def prepared_texts(self, episodes) -> list[str]:
        """The questions, and without inference the messages (mem0 embeds each as it stores it)."""
        texts = super().prepared_texts(episodes)
        if not self.config.infer:
            texts += [self.content(t) for e in episodes for _, t in e.turns()]
        return texts

    def _build(self) -> Any:
        _quiet()
        from mem0 import Memory
        from mem0.configs.base import MemoryConfig
        from qdrant_client import QdrantClient

        dims = int(self.embedder.embed(["dimension probe"]).shape[1])
        config = MemoryConfig(**{
            "vector_store": {"provider": "qdrant", "config": {"collection_name": COLLECTION,
                                                              "embedding_model_dims": dims,
                                                              "client": QdrantClient(":memory:")}},
            # built by mem0 and replaced below: no client of these is ever called
            "llm": {"provider": "openai", "config": {"api_key": "unused", "model": "mnemos-llm-layer"}},
            "embedder": {"provider": "openai", "config": {"api_key": "unused", "embedding_dims": dims}},
            "history_db_path": ":memory:",
        })
        memory = Memory(config)
        memory.embedding_model = _Embedder(self)
        memory.llm = _LLM(self)
        return memory

    def _close(self) -> None:
        self._product.close()

    def _ingest(self, episode: Episode, session: Session, chunk: list[Turn]) -> list[tuple[str, str, Iterable[str]]]:
        memory = self.product
        messages = [{"role": "user" if t.speaker == episode.main_speaker else "assistant",
                     "content": self.content(t), "name": t.speaker} for t in chunk]
        metadata = {"session_id": session.id, "turn_ids": [t.id for t in chunk]}
        if session.timestamp is not None:
            metadata["session_date"] = session.timestamp.date().isoformat()
        memory.llm.date = metadata.get("session_date")
        result = memory.add(messages, user_id=self.scope_id(), metadata=metadata, infer=self.config.infer)
        written = [r for r in result.get("results", []) if r.get("event") == "ADD"]
        if not self.config.infer:   # one memory per message, in order (mem0 skips none of ours)
            return [(r["id"], r["memory"], [t.id]) for r, t in zip(written, chunk)]
        return [(r["id"], r["memory"], [t.id for t in chunk]) for r in written]

    def _search(self, query: Query, k: int) -> list[tuple[str, float]]:
        found = self.product.search(query.question, top_k=k, filters={"user_id": self.scope_id()},
                                    threshold=self.config.threshold)
        return [(r["id"], float(r.get("score") or 0.0)) for r in found.get("results", [])]

    def _delete(self, ids: list[str]) -> None:
        for memory_id in ids:
            self.product.delete(memory_id)

    def _purge(self, contents: list[str], ids: list[str]) -> None:
        if self._product is None:
            return
        db = self._product.db
        with db._lock:
            db.connection.executemany("DELETE FROM history WHERE memory_id = ?", [(i,) for i in ids])
            db.connection.executemany("DELETE FROM messages WHERE content = ?", [(c,) for c in contents])
            db.connection.commit()

    def held_texts(self) -> list[str]:
        """Texts in mem0's stores: the vector store's payloads, the history and messages tables."""
        if self._product is None:
            return []
        memory = self._product
        out: list[str] = []
        client = memory.vector_store.client
        for collection in client.get_collections().collections:   # the memories', and the entities' when used
            offset = None
            while True:
                points, offset = client.scroll(collection.name, limit=256, offset=offset, with_payload=True)
                out += [json.dumps(p.payload, ensure_ascii=False) for p in points]
                if offset is None:
                    break
        rows = memory.db.connection.execute("SELECT old_memory, new_memory FROM history").fetchall()
        out += [x for row in rows for x in row if x]
        out += [c for (c,) in memory.db.connection.execute("SELECT content FROM messages").fetchall() if c]
        return out


@dataclass(frozen=True)
class Mem0RawConfig(Mem0Config):
    infer: bool = False


@register_strategy("mem0_raw")
class Mem0Raw(Mem0):
    """mem0's no-inference mode: each message stored as it is (``add(..., infer=False)``), searched by embedding."""

    config_class = Mem0RawConfig
    ingredient = "mem0 (mem0ai 2.2), infer=False: messages stored as they are"
