"""``langmem``: LangMem (the ``langmem`` package, 0.0.30), LangChain's long-term memory SDK, with its memory store
in-process, under the temporal protocol.

LangMem (github.com/langchain-ai/langmem; docs: langchain-ai.github.io/langmem) gives an agent long-term memory in
two layers. Its *memory manager* (``create_memory_manager``) is a stateless extraction: given a conversation and the
memories it already holds, its language model writes new memories, patches existing ones and may remove them, all
as tool calls that ``trustcall`` validates (a ``Memory`` tool with one ``content`` string by default, ``PatchDoc``
for the updates, ``RemoveDoc`` for the removals). Its *store manager* (``create_memory_store_manager``) runs that
manager over a LangGraph ``BaseStore``: for each conversation it searches the store (in a namespace, by default
``("memories", "{langgraph_user_id}")`` filled from the run's ``config["configurable"]``) for the ``query_limit``
memories most similar to the latest messages, gives them to the manager as the existing ones, and writes back what
the manager inserted or updated (``store.put``, each memory embedded by the store's index).

Here (issue #32):

- the store is LangGraph's ``InMemoryStore`` with a vector index (``index={"dims": ..., "embed": ...}``, every field
  of a memory embedded as LangMem's docs configure it), its embedder the dense strategy's (the shipped
  all-MiniLM-L6-v2 and its embedding cache); nothing on disk but the project's caches;
- the language model is the project's LLM layer (:class:`~pipelines.memory.writers.LLMChat`: the response cache;
  the shipped SmolLM2 by default, any OpenAI-compatible server by ``llm.base_url``) behind a LangChain
  ``BaseChatModel``: LangMem and trustcall bind their tools (``bind_tools``), the bridge writes the tools' JSON
  schemas and the form of the answer (``{"tool_calls": [{"name": ..., "arguments": {...}}]}``) at the end of the
  prompt, as a served model without native tool calling is asked, and reads the tool calls back from the answer's
  JSON; an answer it cannot read is counted (``unreadable``) and is an answer with no tool call (LangMem writes
  nothing), never retried; a prompt over the model's window is refused and counted by the layer;
- LangMem is fed as its docs feed a conversation, ``manager.invoke({"messages": [{"role", "content"}, ...]},
  config={"configurable": {"langgraph_user_id": ...}})``: a session per call (``turns_per_add``: a few turns a
  call), the episode's main speaker as ``user``, the others as ``assistant``, each message ``"speaker: text"``; the
  namespace is LangMem's default with the benchmark episode as its user (``("memories", "episode-<id>")``, periods
  replaced: LangGraph refuses them), so two users' memories never mix. The manager runs through its async path
  (``ainvoke``) on the strategy's own event loop, so that the store's embeddings are computed in the calling thread
  (the sync path embeds in a thread pool; the embedding cache's SQLite connection belongs to one thread);
- LangMem draws ``uuid4`` for the tag of the session in its prompt and for the keys of new memories (which later
  prompts show, as ids, beside the existing memories): during a call the adapter draws them from the call's place
  (the episode, the session, the chunk, the draw's rank), so that the prompts, hence the response cache's keys, are
  the same on every run and a rerun asks nothing;
- an item is a memory new to the store after a call, its provenance the session and turns of the call; a memory a
  later call updates (LangMem's ``PatchDoc``) takes the new text and adds the turns of that call to its provenance;
- the search is the store's own (``store.asearch(namespace, query=..., limit=k)``: the cosine of the query's
  embedding to the memories', max-pooled over a memory's fields), with its scores;
- tracing is off (``LANGSMITH_TRACING`` / ``LANGCHAIN_TRACING_V2`` false: trustcall's steps are ``traceable``);
  nothing is downloaded: the model and the embedder are the project's (LangMem's ``init_chat_model`` and
  ``langchain_openai``, which would fetch tiktoken's files, are never reached), and no prompt comes from a hub.

Forgetting. A forgotten turn takes the memories made or updated from the call it was fed in, through the store's
own delete (``store.delete(namespace, key)``, which drops the memory and its vectors); a memory forgotten by its
memory id goes the same way; the response cache loses every request asked while a forgotten turn was held, the
embedding cache every text embedded then. LangMem keeps no log of its own (the manager is stateless, the store
holds the memories only). What LangMem cannot forget as the protocol asks: a turn goes with every memory of the call
it was fed in (``turns_per_add: 1`` forgets exactly one turn's memories); a memory a later call updated goes whole
with the turns of either call; and a memory inserted in a later call may restate an earlier memory its prompt showed
(LangMem gives the model the existing memories most similar to the conversation): it carries only its own call's
turns, so forgetting the earlier turn leaves that restatement.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

from pipelines.data.schema import Episode, Query, Session, Turn
from pipelines.errors import ConfigError
from pipelines.memory.base import register_strategy
from pipelines.memory.peers.common import PeerConfig, PeerStrategy

NAMESPACE = ("memories", "{langgraph_user_id}")   # LangMem's default namespace template
TOOLS_HEADER = "You can call these tools (name, description, JSON schema of the arguments):"
ANSWER_FORM = ('Answer with one JSON object and nothing else: {"tool_calls": [{"name": "<tool name>", "arguments": '
               '{...}}, ...]}, one entry per call.')
FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class LangMemConfig(PeerConfig):
    """LangMem's settings (over the adapters' shared ones)."""

    query_limit: int = 5       # existing memories the store manager shows its model per call (LangMem's default)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.query_limit, int) or isinstance(self.query_limit, bool) or self.query_limit < 1:
            raise ConfigError(f"query_limit must be a positive integer, got {self.query_limit!r}.")


def _quiet() -> None:
    """LangChain without tracing (no network here) and LangMem / trustcall without their per-call logs."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING"):
        os.environ[name] = "false"
    for name in ("langmem", "trustcall", "langgraph"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def tools_prompt(tools: list[dict], tool_choice: Any) -> str:
    """The tools and the form of the answer, as written at the end of the prompt."""
    lines = [TOOLS_HEADER]
    for tool in tools:
        fn = tool.get("function", tool)
        lines.append(json.dumps({"name": fn["name"], "description": fn.get("description") or "",
                                 "parameters": fn.get("parameters") or {}}, ensure_ascii=False, sort_keys=True))
    if isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "any", "required"):
        lines.append(f"Call the tool {tool_choice}.")
    elif tool_choice in ("any", "required", True):
        lines.append("Call at least one tool.")
    lines.append(ANSWER_FORM)
    return "\n".join(lines)


def _arguments(call: dict) -> dict | None:
    args = next((call[k] for k in ("arguments", "args", "parameters") if k in call), {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return args if isinstance(args, dict) else None


def read_tool_calls(answer: str, names: Iterable[str]) -> list[dict] | None:
    """The tool calls of ``answer`` (``{"tool_calls": [...]}``, a list of calls or one call, each ``{"name",
    "arguments"}``; a code fence cut) whose name is one of ``names``, as ``(name, args)`` dicts; None when the answer
    is not such JSON or names no tool it was given (an explicit empty list is read as "no call")."""
    text = answer or ""
    fenced = FENCE.match(text)
    text = (fenced.group(1) if fenced else text).strip()
    value = None
    for start in [0] + [m.start() for m in re.finditer(r"[\[{]", text)][:20]:
        try:
            value, _ = json.JSONDecoder().raw_decode(text, start)
            break
        except json.JSONDecodeError:
            continue
    if isinstance(value, dict) and "tool_calls" in value:
        value = value["tool_calls"]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return None
    allowed = set(names)
    calls = []
    for call in value:
        if isinstance(call, dict) and call.get("name") in allowed and (args := _arguments(call)) is not None:
            calls.append({"name": call["name"], "args": args})
    return calls if calls or not value else None


def render(messages, tools: list[dict] | None, tool_choice: Any) -> list[dict[str, str]]:
    """LangChain messages as the layer's conversation: system, user and assistant turns (an assistant's tool calls
    written as the JSON it answers with, a tool's result as a user turn); the tools at the end of the last turn."""
    out: list[dict[str, str]] = []
    for m in messages:
        text = m.content if isinstance(m.content, str) else m.text
        if m.type == "system":
            out.append({"role": "system", "content": text})
        elif m.type == "ai":
            calls = [{"name": c["name"], "arguments": c["args"]} for c in getattr(m, "tool_calls", [])]
            out.append({"role": "assistant",
                        "content": json.dumps({"tool_calls": calls}, ensure_ascii=False) if calls else text})
        elif m.type == "tool":
            out.append({"role": "user", "content": f"Result of the tool call {m.tool_call_id}: {text}"})
        else:
            out.append({"role": "user", "content": text})
    if tools:
        block = tools_prompt(tools, tool_choice)
        if out and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{block}"}
        else:
            out.append({"role": "user", "content": block})
    return out


@lru_cache(maxsize=1)
def _bridges() -> tuple[type, type]:
    """LangChain's chat model and embeddings interfaces over the strategy's layers (defined once langchain_core is
    imported)."""
    from langchain_core.embeddings import Embeddings
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import ConfigDict

    class LayerChatModel(BaseChatModel):
        """LangMem's language model: the strategy's LLM layer; tool calls read from the answer's JSON."""

        model_config = ConfigDict(arbitrary_types_allowed=True)
        strategy: Any = None

        @property
        def _llm_type(self) -> str:
            return "mnemos-llm-layer"

        def bind_tools(self, tools, *, tool_choice=None, **kwargs):
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

        def _generate(self, messages, stop=None, run_manager=None, *, tools=None, tool_choice=None, **kwargs):
            strategy = self.strategy
            if strategy._layer_error is not None:   # refused or unreachable already in this call: not asked again
                raise strategy._layer_error
            with strategy._asking:
                answer = strategy.ask(render(messages, tools, tool_choice))
            if not tools:
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])
            calls = read_tool_calls(answer, [t["function"]["name"] for t in tools])
            if calls is None:
                strategy.chat.outcome("unreadable")
                calls = []
            digest = hashlib.sha1(answer.encode()).hexdigest()[:12]
            tool_calls = [{**c, "id": f"call_{digest}_{n}", "type": "tool_call"} for n, c in enumerate(calls)]
            message = AIMessage(content="" if tool_calls else answer, tool_calls=tool_calls)
            return ChatResult(generations=[ChatGeneration(message=message)])

        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            return self._generate(messages, stop, None, **kwargs)   # in the loop's thread, one request at a time

    class LayerEmbeddings(Embeddings):
        """The store's embedder: the strategy's (the dense encoder and its cache), in the calling thread."""

        def __init__(self, strategy: "LangMem"):
            self.strategy = strategy

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [v.tolist() for v in self.strategy.embed(list(texts))] if texts else []

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

        async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
            return self.embed_documents(texts)

        async def aembed_query(self, text: str) -> list[float]:
            return self.embed_query(text)

    return LayerChatModel, LayerEmbeddings


class _DrawnUUIDs:
    """The ``uuid`` module as LangMem's extraction sees it during one call: ``uuid4`` drawn from the call's place."""

    def __init__(self, seed: str):
        self.seed, self.drawn = seed, 0

    def uuid4(self) -> uuid.UUID:
        self.drawn += 1
        return uuid.uuid5(uuid.NAMESPACE_URL, f"mnemos-langmem:{self.seed}#{self.drawn}")

    def __getattr__(self, name: str) -> Any:
        return getattr(uuid, name)


@contextmanager
def drawn_uuids(seed: str):
    """LangMem's ``uuid4`` draws (its prompt's session tag, its new memories' keys) made the same on every run."""
    from langmem.knowledge import extraction

    real, extraction.uuid = extraction.uuid, _DrawnUUIDs(seed)
    try:
        yield
    finally:
        extraction.uuid = real


def memory_text(value: dict) -> str:
    """A stored memory's text: the ``content`` of LangMem's ``Memory``, else the memory's JSON."""
    content = value.get("content") if isinstance(value, dict) else value
    if isinstance(content, dict) and set(content) == {"content"} and isinstance(content["content"], str):
        return content["content"]
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, sort_keys=True)


@register_strategy("langmem")
class LangMem(PeerStrategy):
    """LangMem's store manager over an in-process LangGraph store: memories its language model writes and patches as
    tool calls, searched by embedding (see the module)."""

    config_class = LangMemConfig
    package = "langmem"
    extra = "langmem"
    ingredient = "langmem (langmem 0.0.30, InMemoryStore): LLM-managed memories (tool calls), semantic search"

    scope_refuses = r"[.\x00]"   # LangGraph refuses periods (and NUL) in a namespace

    def __init__(self, config=None, counter=None):
        self._asking = threading.Lock()
        super().__init__(config, counter)

    def namespace(self) -> tuple[str, ...]:
        return (NAMESPACE[0], self.scope_id())

    def run_config(self) -> dict:
        return {"configurable": {"langgraph_user_id": self.scope_id()}}

    # --- the product -------------------------------------------------------------------------------------------
    def _build(self) -> Any:
        _quiet()
        from langgraph.store.memory import InMemoryStore
        from langmem import create_memory_store_manager

        model, embeddings = _bridges()
        dims = int(self.embedder.embed(["dimension probe"]).shape[1])
        store = InMemoryStore(index={"dims": dims, "embed": embeddings(self)})
        return create_memory_store_manager(model(strategy=self), namespace=NAMESPACE, store=store,
                                           query_limit=self.config.query_limit)

    @property
    def store(self):
        return self.product.store

    def _ingest(self, episode: Episode, session: Session, chunk: list[Turn]) -> list[tuple[str, str, Iterable[str]]]:
        manager = self.product
        messages = [{"role": "user" if t.speaker == episode.main_speaker else "assistant", "content": self.content(t)}
                    for t in chunk]
        turn_ids = [t.id for t in chunk]
        with drawn_uuids(f"{self.scope_id()}/{session.id}/{chunk[0].id}"):
            puts = self.run(manager.ainvoke({"messages": messages}, config=self.run_config()))
        written = []
        for put in puts:
            key, text = put["key"], memory_text(put["value"])
            held = self._items.get(key)
            if held is not None:   # a memory LangMem updated: its new text, the call's turns added
                held.text = text
                held.turn_ids = held.turn_ids | frozenset(turn_ids)
                held.speakers = held.speakers | {t.speaker for t in chunk}
            elif text.strip():
                written.append((key, text, turn_ids))
        return written

    def _search(self, query: Query, k: int) -> list[tuple[str, float]]:
        found = self.run(self.store.asearch(self.namespace(), query=query.question, limit=k))
        return [(item.key, float(item.score or 0.0)) for item in found]

    def _delete(self, ids: list[str]) -> None:
        for key in ids:
            self.store.delete(self.namespace(), key)

    def held_texts(self) -> list[str]:
        """Every memory of the store, in every namespace (its value as JSON)."""
        if self._product is None:
            return []
        return [json.dumps(item.value, ensure_ascii=False)
                for items in self.store._data.values() for item in items.values()]
