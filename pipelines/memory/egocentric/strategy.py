"""``egocentric``: EMMA's egocentric memory (seed 000, arXiv 2410.02503, sections 3.3 and 4).

Writing (end of each session, :meth:`Egocentric.observe`): every agent of the session (the episode's
main speaker, or every speaker with ``agents: all``) writes memories about itself and about its partner,
from its own perspective, into its own store, under that partner. The memories are the dataset's
(``memory_source: gold``) or the dialogue module's answers to ``summarize [ABOUT_X]: {final sequence}``
(``model``). Then they are linked (``link_source``): the dataset's links, or the dialogue module asked
``memory sentence 1: {earlier} memory sentence 2: {new}`` for each new memory against the new memories
before it in the session, then against every earlier memory of the agent (about either speaker), a link
being kept on "positive". Nothing is overwritten or deleted by an update; a newer memory links the old one.

Retrieval (section 4.2): the dual encoder scores sim(c, m_i) = cos(E_c(c), E_m(m_i)) (eq. 1) over the
agent's memories, with c the dialogue context in the generation format (speakers, [NOW], the query as
the partner's utterance). EMMA keeps the top-1 memory plus every memory linked to it (one hop, both
directions: the update of a retrieved memory and the memory a retrieved update replaced). For ranking
metrics at depth k > 1 the ranking continues the same way: the next memory by similarity, followed by
its linked memories not yet listed (linked items carry the score of the memory that brought them in).
``context()`` is the generation sequence the dialogue module reads, with EMMA's selection as its memory
block (``context_k`` is not used: the selection is top-1 plus links).

Agents are isolated: an agent retrieves only from its own store; ``retrieve``/``context`` speak for the
episode's main speaker, ``retrieve_for``/``compose`` for any agent.
"""

from __future__ import annotations

from functools import lru_cache

from typing import Callable, Sequence

from pipelines.data.schema import Episode, Query, Session
from pipelines.emma.formats import (GenerationInput, link_source, parse_link, parse_summary, render_memory,
                                    summarize_source)
from pipelines.errors import ConfigError, DataError
from pipelines.memory.base import MemoryStrategy, Retrieved, Selector, check_k, register_strategy
from pipelines.memory.egocentric.config import EgocentricConfig
from pipelines.memory.egocentric.store import AgentMemory, StoredMemory

# The dialogue module as a text-to-text function: (input sequences, max new tokens) -> output sequences.
Seq2Seq = Callable[[Sequence[str], int], list[str]]
UNKNOWN_PARTNER = "USER"   # tag of the query's speaker when its session (hence its partner) is unknown


@lru_cache(maxsize=2)
def _load_retriever(ref: str, device: str):
    """The dual encoder in eval mode, loaded once per process (a fresh strategy serves each episode)."""
    from pipelines.emma.retriever import DualEncoder, RetrieverConfig

    model = DualEncoder.from_pretrained(RetrieverConfig()) if ref == "minilm" else DualEncoder.load(ref)
    return model.to(device).eval()


@register_strategy("egocentric")
class Egocentric(MemoryStrategy):
    """Each agent's own memory, per partner, linked; top-1 retrieval plus linked memories."""

    config_class = EgocentricConfig
    model_settings = {"retriever": "emma_retriever"}
    untrained_values = frozenset({"minilm"})
    granularities = ("memory", "session")

    def __init__(self, config: EgocentricConfig | None = None, counter=None, retriever=None,
                 dialogue: Seq2Seq | None = None):
        super().__init__(config, counter)
        if self.config.needs_model and dialogue is None:
            raise ConfigError("egocentric memory_source/link_source is 'model' but no dialogue module was given: "
                              "pass dialogue= (pipelines.emma.dialogue.EMMADialogue.generate_text), or use 'gold'.")
        self.dialogue = dialogue
        self._retriever = retriever
        self.reset()

    # --- state ------------------------------------------------------------------------------------
    def reset(self) -> None:
        self.agents: dict[str, AgentMemory] = {}
        self._episode: Episode | None = None
        self._seen: set[str] = set()
        self._last_index = -1
        self._order = 0

    def __len__(self) -> int:
        main = self._episode.main_speaker if self._episode else None
        return len(self.agents[main]) if main in self.agents else 0

    def memory_of(self, agent: str) -> AgentMemory:
        """The agent's store (empty when it has written nothing)."""
        return self.agents.get(agent) or AgentMemory(agent)

    @property
    def retriever(self):
        """The dual encoder (pipelines.emma.retriever.DualEncoder), loaded on first use."""
        if self._retriever is None:
            self._retriever = _load_retriever(self.config.retriever, self.config.device)
        return self._retriever

    # --- writing ----------------------------------------------------------------------------------
    def observe(self, episode: Episode, session: Session) -> None:
        if session.id in self._seen:
            raise DataError("session observed twice; each finished session enters memory once",
                            record=f"episode {episode.id}, session {session.id}", rule="observe_once")
        self._seen.add(session.id)
        self._episode, self._last_index = episode, max(self._last_index, session.index)
        main = episode.main_speaker
        partner = session.partner or next((t.speaker for t in session.turns if t.speaker != main), None)
        if partner is None:
            raise DataError("the session names no partner and no other speaker talks in it",
                            record=f"episode {episode.id}, session {session.id}", field="partner")
        pairs = [(main, partner)] + ([(partner, main)] if self.config.agents == "all" else [])
        for agent, other in pairs:
            memory = self.agents.setdefault(agent, AgentMemory(agent))
            new = self._write(episode, session, agent, other)
            if new:
                vectors = self._memory_vectors([m.rendered for m in new])        # (n, H)
                for m, v in zip(new, vectors):
                    memory.add(m, v)
            self._link(session, memory, new)

    def _stored(self, session: Session, agent: str, partner: str, mid: str, about: str, text: str) -> StoredMemory:
        self._order += 1
        return StoredMemory(mid, agent, about, text.strip(),
                            render_memory(text, about, session.index + 1, self.config.memory_provenance),
                            session.id, session.index, partner, self._order, session.timestamp,
                            frozenset(t.id for t in session.turns))

    def _write(self, episode: Episode, session: Session, agent: str, partner: str) -> list[StoredMemory]:
        if self.config.memory_source == "gold":
            return [self._stored(session, agent, partner, m.id, m.about, m.text)
                    for m in session.memories if m.owner == agent]
        final = self._input(episode, agent, partner, session.index + 1, [(t.speaker, t.text) for t in session.turns])
        abouts = (agent, partner)
        outputs = self.dialogue([summarize_source(a, final.final_sequence()) for a in abouts],
                                self.config.max_new_tokens)
        texts = [(about, text) for about, out in zip(abouts, outputs) for text in parse_summary(out)]
        return [self._stored(session, agent, partner, f"{session.id}:{agent}:M{n}", about, text)
                for n, (about, text) in enumerate(texts, start=1)]

    def _link(self, session: Session, memory: AgentMemory, new: list[StoredMemory]) -> None:
        if self.config.link_source == "gold":
            for link in session.links:
                memory.link(link.from_id, link.to_id)        # links of other agents' memories are not held
            return
        new_ids = {m.id for m in new}
        earlier = [m for m in memory.ordered() if m.id not in new_ids]
        pairs = [(old, m) for i, m in enumerate(new) for old in new[:i] + earlier]  # in-session first
        if not pairs:
            return
        outputs = self.dialogue([link_source(old.rendered, m.rendered) for old, m in pairs], self.config.max_new_tokens)
        for (old, m), out in zip(pairs, outputs):
            if parse_link(out):
                memory.link(m.id, old.id)

    # --- retrieval --------------------------------------------------------------------------------
    def _memory_vectors(self, texts: list[str]):
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            return F.normalize(self.retriever.encode_memory(texts).float(), dim=-1).cpu()        # (n, H)

    def _context_vector(self, context: str):
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            return F.normalize(self.retriever.encode_context([context]).float(), dim=-1).cpu()[0]  # (H,)

    def ranked(self, agent: str, context: str) -> list[tuple[StoredMemory, float]]:
        """The agent's memories by sim(c, m) (eq. 1), best first (ties: older first)."""
        memory = self.agents.get(agent)
        if memory is None or not len(memory):
            return []
        import torch

        items = memory.ordered()
        scores = torch.stack([memory.vectors[m.id] for m in items]) @ self._context_vector(context)  # (N,)
        order = torch.argsort(scores, descending=True, stable=True).tolist()
        return [(items[i], float(scores[i])) for i in order]

    def retrieve_for(self, agent: str, context: str, k: int) -> list[Retrieved]:
        """Top-1 plus its linked memories, then the link-expanded rest of the ranking, at most ``k``."""
        check_k(k)
        memory = self.memory_of(agent)
        out: list[Retrieved] = []
        listed: set[str] = set()

        def emit(m: StoredMemory, score: float) -> None:
            listed.add(m.id)
            out.append(Retrieved(score=score, text=m.rendered, session_id=m.session_id, memory_id=m.id,
                                 speaker=m.owner, timestamp=m.timestamp, order=m.order))

        for m, score in self.ranked(agent, context):
            if len(out) >= k:
                break
            if m.id in listed:
                continue
            emit(m, score)
            for linked in memory.linked(m.id):
                if len(out) < k and linked.id not in listed:
                    emit(linked, score)
        return out

    def selection(self, agent: str, context: str) -> list[tuple[StoredMemory, list[StoredMemory]]]:
        """EMMA's memory block: [(top-1 memory, the memories linked to it)], or [] with no memory."""
        ranked = self.ranked(agent, context)
        if not ranked:
            return []
        top = ranked[0][0]
        return [(top, self.memory_of(agent).linked(top.id))]

    def _input(self, episode: Episode, agent: str, partner: str | None, number: int,
               history: list[tuple[str, str]]) -> GenerationInput:
        jobs = {s.name: s.role for s in episode.speakers}
        return GenerationInput(agent, jobs.get(agent), partner, jobs.get(partner) if partner else None, number,
                               [], history, self.config.turn_tags)

    def compose(self, agent: str, partner: str | None, session_number: int,
                history: list[tuple[str, str]]) -> GenerationInput:
        """The generation input of ``agent``'s next turn: retrieve with its context, fill the memory block."""
        if self._episode is None:
            raise RuntimeError("compose() needs an observed episode (speakers and jobs come from it)")
        inp = self._input(self._episode, agent, partner, session_number, history)
        return self._with_memories(inp)

    def _with_memories(self, inp: GenerationInput) -> GenerationInput:
        inp.memories = [(top.rendered, [m.rendered for m in linked])
                        for top, linked in self.selection(inp.main, inp.context())]
        return inp

    def _query_input(self, query: Query) -> GenerationInput:
        """The main speaker about to answer ``query``, said by the partner of the session it is asked in."""
        episode = self._episode
        session = episode.session_by_id().get(query.session_id) if query.session_id else None
        partner = session.partner if session else None
        number = session.index + 1 if session else self._last_index + 2
        return self._input(episode, episode.main_speaker, partner, number,
                           [(partner or UNKNOWN_PARTNER, query.question)])

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        if self._episode is None:
            return []
        return self.retrieve_for(self._episode.main_speaker, self._query_input(query).context(), k)

    def context(self, query: Query, budget_tokens: int) -> str:
        """The generation sequence with EMMA's memory block, cut to ``budget_tokens``: linked memories go
        first (last one first), then the top-1; "" when even the bare sequence does not fit or nothing is held."""
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}.")
        if self._episode is None or not len(self):
            return ""
        inp = self._with_memories(self._query_input(query))
        memories = [(m, list(links)) for m, links in inp.memories]
        while True:
            inp.memories = memories
            text = inp.render()
            if self.counter.count(text) <= budget_tokens:
                return text
            if not memories:
                return ""
            if memories[-1][1]:
                memories[-1][1].pop()
            else:
                memories.pop()

    # --- forgetting -------------------------------------------------------------------------------
    def forget(self, selector: Selector) -> int:
        """Remove the memories ``selector`` names from every agent and index: by memory id, by the session
        they were written in, by any turn of that session, or by owner / subject among its speakers."""
        removed = 0
        for agent, memory in self.agents.items():
            ids = {m.id for m in memory.items.values()
                   if selector.matches(memory_id=m.id, session_id=m.session_id, speakers=(m.owner, m.about))
                   or m.turn_ids & selector.turn_ids}
            removed += memory.remove(ids)
        return removed
