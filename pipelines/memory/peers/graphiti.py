"""``graphiti``: Zep's Graphiti (the ``graphiti-core`` package, 0.31) on its embedded Kuzu graph database, under the
temporal protocol.

Graphiti (Rasmussen et al. 2025, "Zep: A Temporal Knowledge Graph Architecture for Agent Memory",
arXiv:2501.13956; github.com/getzep/graphiti) keeps a memory as a temporal knowledge graph: each ingested episode (an
``Episodic`` node holding the raw text) is read by its language model, which extracts entities (``Entity`` nodes,
deduplicated against those of the graph, each with a summary) and facts between them (``RELATES_TO`` edges, each a
sentence with its embedding, the episodes that support it and when it held: ``valid_at`` / ``invalid_at``, a newer
fact that contradicts it expires it). ``Graphiti.add_episode(name, episode_body, source=EpisodeType.message,
reference_time, group_id)`` asks, per episode: entity extraction, node deduplication when a name is not matched
exactly, fact extraction, fact deduplication when a similar fact exists, the facts' dates, and the entities'
summaries (about 2k tokens a prompt: it fits SmolLM2-135M's window). ``Graphiti.search(query, group_ids,
num_results)`` ranks the facts by reciprocal-rank fusion of BM25 (Kuzu's full-text index) and the cosine of their
embeddings to the query's.

Here (issue #32):

- the graph database is Kuzu in memory (``KuzuDriver(db=":memory:")``, one per strategy instance: nothing on disk,
  so nothing forgotten lingers in database files), its full-text indexes built by Graphiti's own Kuzu maintenance
  call (``KuzuDriver.build_indices_and_constraints`` is a no-op in 0.31.2 and the fact search needs them); two
  graphiti-core 0.31.2 bugs on Kuzu are worked around: ``KuzuDriver`` never sets the ``_database`` that
  ``add_episode`` reads (set to ``""``: Kuzu holds one database), and the Kuzu backend warns that it is deprecated
  (upstream Kuzu is no longer maintained; the warning is silenced);
- the language model is the project's LLM layer (:class:`~pipelines.memory.writers.LLMChat`: the response cache; the
  shipped SmolLM2 by default, any OpenAI-compatible server by ``llm.base_url``) behind an ``LLMClient`` of
  Graphiti's: its base class renders the response model's JSON schema into the prompt (as its generic
  OpenAI-compatible client does for a server without structured output), and the answer is read as Graphiti's own
  client reads one (a code fence cut, ``json.loads``) and checked against the response model; an answer it cannot
  read is counted (``unreadable``) and taken as "nothing found" (an empty list of entities, facts, duplicates, ...),
  never retried (Graphiti's retry of a malformed answer waits 5 to 120 s and asks the same greedy model again);
  requests run one at a time (``max_coroutines=1``), so that they come in the same order, hence the same cache keys,
  on every run;
- the embedder is the dense strategy's (the shipped all-MiniLM-L6-v2 and its embedding cache); the cross-encoder,
  which the fact search does not call, orders passages by the same embedder's cosine (Graphiti's own ones call
  OpenAI, Gemini or download a BGE model);
- a session is fed as one ``add_episode`` (``turns_per_add``: a few turns an episode), the body one
  ``"speaker: text"`` line a turn (the form of Graphiti's conversation examples and of its ``EpisodeType.message``
  prompt, which takes the part before the colon as the speaker), dated by the session (``reference_time``; an
  undated session: 2000-01-01 plus its index in days, so that the order holds and the prompts are the same every
  day), its ``group_id`` the episode's (``episode-<id>``, characters Graphiti refuses replaced): two users' graphs
  never mix, and Graphiti's "previous messages" context is the episode's own earlier episodes;
- an item is a fact (edge) new to the graph in that call, its provenance the session and turns of the call; a fact
  Graphiti merges with one already held keeps the first one's provenance;
- the search is Graphiti's own (``search_`` with the recipe ``Graphiti.search`` uses, ``EDGE_HYBRID_SEARCH_RRF``,
  which also gives the scores) with ``sim_min_score`` -1 by default: Graphiti's 0.6 cuts a ranking short of the
  memory (the protocol ranks every item);
- telemetry is off (``GRAPHITI_TELEMETRY_ENABLED=false``: it would post to PostHog); nothing is downloaded.

Forgetting. A forgotten turn takes the Graphiti episode it was fed in, through Graphiti's own ``remove_episode``: the
``Episodic`` node (the raw text), the facts only it supports, the entities only it mentions, and the summaries of the
entities it shares with other episodes, which Graphiti rewrites from the episodes that remain (a request to the
model; the adapter clears those summaries first, so that a rewrite that fails leaves none). The facts made from the
call go with their item; a forgotten fact (by its memory id) is deleted by Graphiti's edge delete, and the summaries
of its two entities, which Graphiti wrote with the fact appended, are cleared. What Graphiti cannot forget as the
protocol asks: a turn is forgotten with the whole episode it was fed in (its other turns and their facts go too: a
turn per episode, ``turns_per_add: 1``, forgets exactly); a fact Graphiti merged from two calls goes with the first
one's turns (Graphiti would keep it while another episode supports it); an entity that other episodes still mention
keeps its name (said in a turn that stays). Kuzu's full-text index follows its deletes.
"""

from __future__ import annotations

import json
import logging
import os
import typing
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, Iterable

from pipelines.data.schema import Episode, Query, Session, Turn
from pipelines.memory.base import Selector, register_strategy
from pipelines.memory.peers.common import PeerConfig, PeerStrategy

UNDATED = datetime(2000, 1, 1, tzinfo=timezone.utc)   # an undated session's reference time: this plus its index
SOURCE_DESCRIPTION = "conversation"
# the strings Graphiti's stores hold (for held_texts): its node tables, one query each
STORED_TEXTS = ("MATCH (n:Episodic) RETURN n.name, n.content, n.source_description",
                "MATCH (n:Entity) RETURN n.name, n.summary, n.attributes",
                "MATCH (n:RelatesToNode_) RETURN n.name, n.fact, n.attributes",
                "MATCH (n:Community) RETURN n.name, n.summary",
                "MATCH (n:Saga) RETURN n.name")


@dataclass(frozen=True)
class GraphitiConfig(PeerConfig):
    """Graphiti's settings (over the adapters' shared ones)."""

    # the fact search's least cosine (Graphiti's default 0.6 cuts a ranking short; -1 ranks every fact)
    sim_min_score: float = -1.0


def _quiet() -> None:
    """Graphiti without telemetry (no network here) and without its per-call logs."""
    os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"
    logging.getLogger("graphiti_core").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="The Kuzu backend is deprecated", category=DeprecationWarning)


def _nothing(model) -> dict[str, Any]:
    """The answer "nothing found" for Graphiti's ``model`` (its required lists empty, its required strings blank)."""
    if model is None:
        return {}
    out: dict[str, Any] = {}
    for name, f in model.model_fields.items():
        if f.is_required():
            out[name] = [] if typing.get_origin(f.annotation) is list or f.annotation is list else ""
    return out


def read_answer(answer: str, model) -> dict[str, Any] | None:
    """``answer`` as Graphiti reads it (its generic client's steps: a code fence cut, ``json.loads``) when it is a
    JSON object ``model`` accepts; None when it is not."""
    from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
    from pydantic import ValidationError

    try:
        value = json.loads(OpenAIGenericClient._strip_code_fences(answer or ""))
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(value, dict):
        return None
    if model is not None:
        try:
            model.model_validate(value)
        except ValidationError:
            return None
    return value


@lru_cache(maxsize=1)
def _bridges() -> tuple[type, type, type]:
    """Graphiti's client interfaces over the strategy's layers (defined once graphiti_core is imported)."""
    from graphiti_core.cross_encoder.client import CrossEncoderClient
    from graphiti_core.embedder.client import EmbedderClient
    from graphiti_core.llm_client.client import LLMClient
    from graphiti_core.llm_client.config import LLMConfig

    class LayerLLM(LLMClient):
        """Graphiti's language model: the strategy's LLM layer; an answer Graphiti cannot read is counted and read
        as "nothing found"."""

        def __init__(self, strategy: "Graphiti"):
            super().__init__(LLMConfig(api_key="unused", model="mnemos-llm-layer"), cache=False)
            self.strategy = strategy

        async def _generate_response(self, messages, response_model=None, max_tokens=None, model_size=None, *,
                                     model=None) -> dict[str, Any]:
            answer = self.strategy.ask([{"role": m.role, "content": m.content} for m in messages])
            value = read_answer(answer, response_model)
            if value is None:
                self.strategy.chat.outcome("unreadable")
                return _nothing(response_model)
            return value

    class LayerEmbedder(EmbedderClient):
        """Graphiti's embedder: the strategy's (the dense encoder and its cache)."""

        def __init__(self, strategy: "Graphiti"):
            self.strategy = strategy

        async def create(self, input_data) -> list[float]:
            text = input_data if isinstance(input_data, str) else list(input_data)[0]   # as OpenAIEmbedder: the first
            return self.strategy.embed([text])[0].tolist()

        async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
            return [v.tolist() for v in self.strategy.embed(list(input_data_list))] if input_data_list else []

    class EmbedderCrossEncoder(CrossEncoderClient):
        """Graphiti's reranker, without a network: the passages by the cosine of their embeddings to the query's."""

        def __init__(self, strategy: "Graphiti"):
            self.strategy = strategy

        async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
            if not passages:
                return []
            vectors = self.strategy.embed([query, *passages])
            scores = vectors[1:] @ vectors[0]
            return sorted(zip(passages, (float(s) for s in scores)), key=lambda x: -x[1])

    return LayerLLM, LayerEmbedder, EmbedderCrossEncoder


@register_strategy("graphiti")
class Graphiti(PeerStrategy):
    """Zep's Graphiti on embedded Kuzu: facts of a temporal knowledge graph its language model builds, searched by
    BM25 and embedding (see the module)."""

    config_class = GraphitiConfig
    package = "graphiti_core"
    extra = "graphiti"
    ingredient = "graphiti (graphiti-core 0.31, Kuzu): LLM-built temporal knowledge graph, hybrid fact search"

    scope_refuses = r"[^A-Za-z0-9_-]"   # Graphiti's group ids: letters, digits, - and _

    def __init__(self, config=None, counter=None):
        self._forgotten: frozenset[str] = frozenset()   # the turns being forgotten (during forget)
        super().__init__(config, counter)

    def _empty_scope(self) -> dict:
        return {**super()._empty_scope(),
                "_episodes": {}}   # Graphiti's episode uuid -> the turns fed in it

    # --- the product -------------------------------------------------------------------------------------------
    def _build(self) -> Any:
        _quiet()
        from graphiti_core import Graphiti as Product
        from graphiti_core.driver.kuzu_driver import KuzuDriver

        llm, embedder, cross_encoder = _bridges()
        driver = KuzuDriver(db=":memory:")
        driver._database = ""   # graphiti-core 0.31.2 reads it in add_episode; KuzuDriver never sets it
        # KuzuDriver.build_indices_and_constraints is a no-op; the full-text indexes the fact search queries:
        self.run(driver.graph_ops.build_indices_and_constraints(driver))
        return Product(graph_driver=driver, llm_client=llm(self), embedder=embedder(self),
                       cross_encoder=cross_encoder(self), max_coroutines=1)

    def _close(self) -> None:
        self.run(self._product.close())
        self._product.driver.client.close()
        self._product.driver.db.close()

    def reference_time(self, session: Session) -> datetime:
        """The session's date as Graphiti's ``reference_time`` (UTC when it names no zone)."""
        when = session.timestamp or UNDATED + timedelta(days=session.index)
        return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)

    def _ingest(self, episode: Episode, session: Session, chunk: list[Turn]) -> list[tuple[str, str, Iterable[str]]]:
        from graphiti_core.edges import EntityEdge
        from graphiti_core.nodes import EpisodeType

        product = self.product
        whole = len(chunk) == len([t for t in session.turns if t.text.strip()])
        name = session.id if whole else chunk[0].id if len(chunk) == 1 else f"{chunk[0].id} .. {chunk[-1].id}"
        result = self.run(product.add_episode(
            name=name, episode_body="\n".join(self.content(t) for t in chunk),
            source_description=SOURCE_DESCRIPTION, reference_time=self.reference_time(session),
            source=EpisodeType.message, group_id=self.scope_id()))
        turn_ids = [t.id for t in chunk]
        self._episodes[result.episode.uuid] = frozenset(turn_ids)
        new: dict[str, EntityEdge] = {}
        for edge in result.edges:   # the facts of the call; those merged into a held one keep its provenance
            if edge.uuid not in self._items and edge.fact.strip():
                new.setdefault(edge.uuid, edge)
        return [(uuid, edge.fact, turn_ids) for uuid, edge in new.items()]

    def _search(self, query: Query, k: int) -> list[tuple[str, float]]:
        from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF

        config = EDGE_HYBRID_SEARCH_RRF.model_copy(deep=True)   # Graphiti.search's recipe (it sets the shared one)
        config.limit = k
        config.edge_config.sim_min_score = self.config.sim_min_score
        found = self.run(self.product.search_(query.question, config=config, group_ids=[self.scope_id()]))
        scores = found.edge_reranker_scores or [1.0 / (1 + rank) for rank in range(len(found.edges))]
        return [(edge.uuid, float(score)) for edge, score in zip(found.edges, scores)]

    # --- forgetting --------------------------------------------------------------------------------------------
    def forget(self, selector: Selector) -> int:
        self._forgotten = frozenset(self.selected_turns(selector))
        try:
            return super().forget(selector)
        finally:
            self._forgotten = frozenset()

    def _delete(self, ids: list[str]) -> None:
        """Graphiti's edge delete; the summaries of the facts' entities (written with the facts appended) cleared."""
        from graphiti_core.edges import EntityEdge

        driver = self.product.driver
        self.clear_summaries("MATCH (n:Entity)-[:RELATES_TO]-(e:RelatesToNode_) WHERE e.uuid IN $uuids "
                             "RETURN DISTINCT n.uuid AS uuid", uuids=ids)
        self.run(EntityEdge.delete_by_uuids(driver, ids))

    def clear_summaries(self, query: str, **params) -> None:
        """Blank the summaries of the entities ``query`` returns (``uuid``), one entity a statement: Kuzu 0.11.3
        crashes (a segmentation fault) on a later delete after one statement has set a full-text-indexed property of
        several nodes."""
        driver = self.product.driver
        records, _, _ = self.run(driver.execute_query(query, **params))
        for uuid in sorted({r["uuid"] for r in records}):
            self.run(driver.execute_query("MATCH (n:Entity {uuid: $uuid}) SET n.summary = ''", uuid=uuid))

    def _purge(self, contents: list[str], ids: list[str]) -> None:
        """Graphiti's ``remove_episode`` of every episode a forgotten turn was fed in (its raw text, the facts only it
        supports, the entities only it mentions; the summaries of the entities it shares cleared, then rewritten by
        Graphiti from the episodes that remain: those requests are dropped from the response cache with the rest)."""
        if self._product is None:
            return
        episodes = [uuid for uuid, turns in self._episodes.items() if not turns.isdisjoint(self._forgotten)]
        self._seen_now = self._forgotten   # what is asked while removing may quote an episode still to remove
        try:
            for uuid in episodes:
                self.clear_summaries("MATCH (:Episodic {uuid: $uuid})-[:MENTIONS]->(n:Entity) RETURN n.uuid AS uuid",
                                     uuid=uuid)
                self.run(self._product.remove_episode(uuid))
                del self._episodes[uuid]
        finally:
            self._seen_now = frozenset()

    def held_texts(self) -> list[str]:
        """Every string of Graphiti's graph: episodes' names and raw text, entities' names and summaries, facts."""
        if self._product is None:
            return []
        out: list[str] = []
        for query in STORED_TEXTS:
            records, _, _ = self.run(self._product.driver.execute_query(query))
            out += [v for row in records for v in row.values() if isinstance(v, str) and v]
        return out
