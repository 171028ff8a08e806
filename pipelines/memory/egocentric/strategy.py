"""``egocentric``: EMMA's egocentric memory (seed 000, arXiv 2410.02503, sections 3.3 and 4).

Writing (end of each session, :meth:`Egocentric.observe`): every agent of the session (the episode's
keeper, or every speaker with ``agents: all``) writes memories about itself and about its partner,
from its own perspective, into its own store, under that partner. The memories are the dialogue module's
answers to ``summarize [ABOUT_X]: {final sequence}`` (``memory_source: model``, EMMA's system, the default)
or the dataset's own (``gold``: the ``egocentric_gold`` oracle). Then they are linked (``link_source``): the
dialogue module asked ``memory sentence 1: {earlier} memory sentence 2: {new}`` for each new memory against
the new memories before it in the session, then against every earlier memory of the agent (about either
speaker), a link being kept on "positive"; or the dataset's links. Nothing is overwritten or deleted by an
update; a newer memory links the old one.

The dialogue module is ``dialogue=`` (any text-to-text callable), loaded from the ``dialogue`` setting
(:func:`load_dialogue`), or, with ``memory_source`` / ``link_source: llm``, a language model asked the same inputs
through pipelines/llm (``dialogue_llm``; :class:`pipelines.memory.writers.LLMDialogue`, its calls in the response
cache, what they cost logged after ``prepare``). Its outputs are memoised per input sequence
(:class:`MemoSeq2Seq`: greedy decoding is a function of the input), and :meth:`Egocentric.prepare` decodes every summary of the episodes to come in
batches, then every link question, so that :meth:`observe` finds its answers ready: the memory still
changes only in ``observe``.

Retrieval (section 4.2): the dual encoder scores sim(c, m_i) = cos(E_c(c), E_m(m_i)) (eq. 1) over the
agent's memories, with c the dialogue context in the generation format (speakers, [NOW], each turn of the
session so far after its speaker's tag, the main speaker's tag last), as the retriever is trained. A query
whose question is a dialogue excerpt (one ``Speaker: text`` line per turn, every speaker one of the
episode's: MiSC's memory-tag queries) is read as those turns; any other question as one utterance of the
session's partner. EMMA keeps the top-1 memory plus every memory linked to it (one hop, both directions:
the update of a retrieved memory and the memory a retrieved update replaced). For ranking metrics at
depth k > 1 the ranking continues the same way: the next memory by similarity, followed by its linked
memories not yet listed (linked items carry the score of the memory that brought them in).
``context()`` is the generation sequence the dialogue module reads, with EMMA's selection as its memory
block (``context_k`` is not used: the selection is top-1 plus links).

Scoring granularities: a model-written memory has an id of its own (``<session>:<agent>:M<n>``), never a
dataset memory id, so ``egocentric`` is scored at session level only; ``egocentric_gold`` at memory and
session level.

The keeper (:func:`memory_keeper`) is the agent whose memory answers the episode's queries: the main speaker
(MiSC, the synthetic data), unless the dataset's memories all belong to one other speaker (RealMem: the User
asks, the Assistant answers from its memories about the User). ``agents: main`` gives a memory to the keeper
only, and a query is read as said to the keeper by its partner in the query's session.

Agents are isolated: an agent retrieves only from its own store; ``retrieve``/``context`` speak for the
keeper, ``retrieve_for``/``compose`` for any agent. Stores are kept per episode and agent (never per agent
name alone: every RealMem and LongMemEval episode has a "User"), :mod:`pipelines.memory.base` scopes.

Forgetting removes the memories a :class:`~pipelines.memory.base.Selector` names, by id, session or turn, and
every memory about a selected speaker by the shared rule (owner or subject, a participant of the session it
was written in, or named in its text), from every agent's items, per-partner lists, links and vectors; then it
purges the process caches of what went: the retriever vectors of the forgotten sentences (unless a held memory
has the same one), and every cached retriever context and dialogue-module answer that holds a forgotten
sentence, reads a forgotten session or names a forgotten speaker.
"""

from __future__ import annotations

import json
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from pipelines.data.schema import Episode, Query, Session
from pipelines.emma.formats import (GenerationInput, link_source, parse_link, parse_summary, render_memory,
                                    summarize_source)
from pipelines.errors import ConfigError, DataError, ModelNotTrained
from pipelines.memory.base import (MemoryStrategy, Retrieved, Selector, check_k, register_strategy,
                                   session_participants)
from pipelines.memory.egocentric.config import EgocentricConfig, EgocentricGoldConfig
from pipelines.memory.egocentric.store import AgentMemory, StoredMemory

# The dialogue module as a text-to-text function: (input sequences, max new tokens) -> output sequences.
Seq2Seq = Callable[[Sequence[str], int], list[str]]
UNKNOWN_PARTNER = "USER"   # tag of the query's speaker when its session (hence its partner) is unknown
DIALOGUE_CONFIG = "emma_dialogue.json"   # pipelines.emma.dialogue_config.CONFIG_FILE: what makes a saved module


class MemoSeq2Seq:
    """A :data:`Seq2Seq` that decodes each distinct (input, max new tokens) once.

    Inputs are sent to ``fn`` in batches padded to their longest: a batch holds at most ``batch_size``
    inputs as long as its longest, in characters, as ``batch_size`` inputs of ``CHARS_PER_INPUT``
    (about 512 tokens) would; short inputs (link questions) go up to ``8 * batch_size`` at once. With
    more than one batch the inputs are grouped by length (longest first), so that little is padding.
    """

    CHARS_PER_INPUT = 2048

    def __init__(self, fn: Seq2Seq, batch_size: int = 32):
        self.fn, self.batch_size = fn, batch_size
        self.memo: dict[tuple[str, int], str] = {}
        self.decoded = 0                                  # inputs actually sent to ``fn``

    def _fits(self, n: int, longest: int) -> bool:
        return n <= 8 * self.batch_size and n * max(longest, self.CHARS_PER_INPUT // 8) <= \
            self.batch_size * self.CHARS_PER_INPUT

    def batches(self, todo: list[str]) -> list[list[str]]:
        """``todo`` cut into the batches :meth:`__call__` sends (one batch, in order, when it fits)."""
        if not todo or self._fits(len(todo), max(map(len, todo))):
            return [todo] if todo else []
        out: list[list[str]] = []
        for text in sorted(todo, key=len, reverse=True):
            if out and self._fits(len(out[-1]) + 1, len(out[-1][0])):
                out[-1].append(text)
            else:
                out.append([text])
        return out

    def __call__(self, sources: Sequence[str], max_new_tokens: int) -> list[str]:
        from tqdm.auto import tqdm

        todo = list(dict.fromkeys(s for s in sources if (s, max_new_tokens) not in self.memo))
        batches = self.batches(todo)
        with tqdm(total=len(todo), desc="egocentric: dialogue module", unit="input",
                  disable=len(batches) < 2) as bar:      # long work shows progress (a pretrained module on a CPU)
            for chunk in batches:
                outputs = self.fn(chunk, max_new_tokens)
                if len(outputs) != len(chunk):
                    raise RuntimeError(f"the dialogue module returned {len(outputs)} outputs for {len(chunk)} inputs")
                self.memo.update(((s, max_new_tokens), o) for s, o in zip(chunk, outputs))
                self.decoded += len(chunk)
                bar.update(len(chunk))
        return [self.memo[(s, max_new_tokens)] for s in sources]


def load_dialogue(ref: str | Path, batch_size: int = 32) -> MemoSeq2Seq:
    """The trained dialogue module saved in ``ref`` (pipelines.emma.dialogue.EMMADialogue.load) as a memoised
    :data:`Seq2Seq`, loaded once per process (and again when the saved module changes); ModelNotTrained
    when ``ref`` holds none."""
    path = Path(ref)
    if not (path / DIALOGUE_CONFIG).is_file():
        raise ModelNotTrained(f"egocentric: dialogue = {str(ref)!r} is not a trained EMMA dialogue module "
                              f"(no {DIALOGUE_CONFIG})", path=str(ref), stage="emma_dialogue")
    return _load_dialogue(str(path.resolve()), (path / DIALOGUE_CONFIG).stat().st_mtime_ns, batch_size)


@lru_cache(maxsize=2)
def _load_dialogue(path: str, saved_ns: int, batch_size: int) -> MemoSeq2Seq:
    """One loaded module per (folder, time it was saved, batch size), as :func:`_load_retriever` caches."""
    from pipelines.emma.dialogue import EMMADialogue

    return MemoSeq2Seq(EMMADialogue.load(path).generate_text, batch_size)


def llm_dialogue(config: EgocentricConfig) -> MemoSeq2Seq:
    """The language model of ``config.dialogue_llm`` as the memoised dialogue module, one per process and settings
    (a fresh strategy serves each episode: the memo and the writer's tally are shared)."""
    from pipelines.memory.writers import writer_config

    llm = writer_config("dialogue", config.dialogue_llm, "egocentric.dialogue_llm")
    return _llm_dialogue(json.dumps(llm.as_params(), sort_keys=True, default=str), config.llm_cache_dir,
                         config.dialogue_llm_instructed, config.dialogue_batch_size)


@lru_cache(maxsize=4)
def _llm_dialogue(llm: str, cache_dir: str | None, instructed: bool, batch_size: int) -> MemoSeq2Seq:
    from pipelines.memory.writers import shared_writer

    writer = shared_writer("dialogue", json.loads(llm), cache_dir, role="egocentric.dialogue_llm",
                           instructed=instructed)
    return MemoSeq2Seq(writer, batch_size)


# retriever -> {(tower, text): L2-normalised vector}: a text is encoded once per retriever, whichever strategy
# instance asks (a fresh one serves each episode; egocentric and egocentric_gold share the contexts)
_VECTORS: "weakref.WeakKeyDictionary[object, dict[tuple[str, str], object]]" = weakref.WeakKeyDictionary()
MAX_CACHED_VECTORS = 200_000   # ~300 MB of 384-d vectors; the cache starts afresh beyond
ENCODE_BATCH = 32              # texts per encoder call


@lru_cache(maxsize=2)
def _load_retriever(ref: str, device: str):
    """The dual encoder in eval mode, loaded once per process (a fresh strategy serves each episode)."""
    from pipelines.emma.retriever import DualEncoder, RetrieverConfig

    model = DualEncoder.from_pretrained(RetrieverConfig()) if ref == "minilm" else DualEncoder.load(ref)
    return model.to(device).eval()


def memory_keeper(episode: Episode) -> str:
    """The agent whose memory answers ``episode``'s queries: the main speaker, unless the dataset's memories of
    the episode all belong to one other speaker, who keeps them and is asked (RealMem: memories owned by the
    Assistant, about the User, the main speaker; MiSC and the synthetic data: the main speaker's own)."""
    owners = {m.owner for s in episode.sessions for m in s.memories}
    if len(owners) == 1 and episode.main_speaker not in owners:
        return next(iter(owners))
    return episode.main_speaker


def session_partner(episode: Episode, session: Session, agent: str | None = None) -> str | None:
    """The partner of ``agent`` (default: the main speaker) in ``session``: ``Session.partner`` for the main
    speaker, else the first other speaker of its turns (the main speaker for a partner agent)."""
    agent = agent or episode.main_speaker
    if agent != episode.main_speaker:
        return episode.main_speaker
    return session.partner or next((t.speaker for t in session.turns if t.speaker != agent), None)


@register_strategy("egocentric")
class Egocentric(MemoryStrategy):
    """Each agent's own memory, per partner, written and linked by the dialogue module; top-1 retrieval
    plus linked memories."""

    config_class = EgocentricConfig
    model_settings = {"retriever": "emma_retriever", "dialogue": "emma_dialogue"}
    untrained_values = frozenset({"minilm"})
    granularities = ("session",)

    @classmethod
    def required_models(cls, settings: dict) -> dict[str, str]:
        """The retriever always; the dialogue module when memories or links are the model's."""
        sources = {settings.get(k, cls._default(k)) for k in ("memory_source", "link_source")}
        return {k: v for k, v in cls.model_settings.items() if k != "dialogue" or "model" in sources}

    @classmethod
    def unavailable(cls, episodes: Sequence[Episode], settings: dict) -> str | None:
        """With ``memory_source: gold`` (the oracle), the data must list memories: without any, every
        store stays empty. Model-written memories need nothing from the data."""
        if settings.get("memory_source", cls._default("memory_source")) != "gold":
            return None
        sessions = [s for e in episodes for s in e.sessions]
        if any(s.memories for s in sessions):
            return None
        return (f"the data lists no memories (none of the {len(sessions)} sessions of the {len(episodes)} "
                f"episodes has one), and memory_source 'gold' retrieves the dataset's own memories")

    @classmethod
    def _default(cls, name: str):
        from dataclasses import fields

        return next(f.default for f in fields(cls.config_class) if f.name == name)

    def __init__(self, config: EgocentricConfig | None = None, counter=None, retriever=None,
                 dialogue: Seq2Seq | None = None):
        super().__init__(config, counter)
        if self.config.needs_model and dialogue is None and self.config.dialogue is None:
            raise ConfigError("egocentric memory_source/link_source is 'model' but no dialogue module was given: "
                              "set dialogue: <the directory of a trained EMMA dialogue module> (models/emma_dialogue), "
                              "pass dialogue= (a text-to-text callable), or use 'gold' (the egocentric_gold oracle).")
        if dialogue is None and self.config.needs_model and not (Path(self.config.dialogue) / DIALOGUE_CONFIG).is_file():
            raise ModelNotTrained(f"strategy {self.name!r}: dialogue = {self.config.dialogue!r} is not a trained EMMA "
                                  f"dialogue module", path=self.config.dialogue, stage="emma_dialogue")
        if dialogue is None and self.config.needs_llm:
            dialogue = llm_dialogue(self.config)
        if dialogue is not None and not isinstance(dialogue, MemoSeq2Seq):
            dialogue = MemoSeq2Seq(dialogue, self.config.dialogue_batch_size)
        self._dialogue = dialogue
        self._retriever = retriever
        # a model-written memory never carries a dataset memory id: scored at session level only
        self.granularities = ("memory", "session") if self.config.memory_source == "gold" else ("session",)
        self.reset()

    # --- state ------------------------------------------------------------------------------------
    def reset(self) -> None:
        super().reset()
        self._order = 0   # over every episode: memories are ordered in time

    def _empty_scope(self) -> dict:
        return {"agents": {},        # agent -> its AgentMemory, in this episode
                "_episode": None,    # the episode (speakers, sessions) its queries are read in
                "_seen": set()}      # observed session ids

    def enter(self, episode: Episode) -> None:
        super().enter(episode)
        self._episode = episode

    @property
    def keeper(self) -> str | None:
        """The agent the current episode's queries are asked of (:func:`memory_keeper`)."""
        return memory_keeper(self._episode) if self._episode is not None else None

    def __len__(self) -> int:
        return len(self.agents[self.keeper]) if self.keeper in self.agents else 0

    def memory_of(self, agent: str) -> AgentMemory:
        """The agent's store (empty when it has written nothing)."""
        return self.agents.get(agent) or AgentMemory(agent)

    @property
    def retriever(self):
        """The dual encoder (pipelines.emma.retriever.DualEncoder), loaded on first use."""
        if self._retriever is None:
            self._retriever = _load_retriever(self.config.retriever, self.config.device)
        return self._retriever

    @property
    def dialogue(self) -> MemoSeq2Seq | None:
        """The dialogue module (memoised), loaded on first use; None when memories and links are gold."""
        if self._dialogue is None and self.config.needs_model:
            self._dialogue = load_dialogue(self.config.dialogue, self.config.dialogue_batch_size)
        return self._dialogue

    # --- writing ----------------------------------------------------------------------------------
    def _agents(self, episode: Episode, session: Session) -> list[tuple[str, str]]:
        """(agent, partner) of every agent that writes memories at the end of ``session``: the keeper, and with
        ``agents: all`` its partner too."""
        keeper = memory_keeper(episode)
        partner = session_partner(episode, session, keeper)
        if partner is None:
            raise DataError("the session names no partner and no other speaker talks in it",
                            record=f"episode {episode.id}, session {session.id}", field="partner")
        return [(keeper, partner)] + ([(partner, keeper)] if self.config.agents == "all" else [])

    def observe(self, episode: Episode, session: Session) -> None:
        self.enter(episode)
        if session.id in self._seen:
            raise DataError("session observed twice; each finished session enters memory once",
                            record=f"episode {episode.id}, session {session.id}", rule="observe_once")
        self._seen.add(session.id)
        participants = session_participants(episode, session)
        for agent, other in self._agents(episode, session):
            memory = self.agents.setdefault(agent, AgentMemory(agent))
            new = [self._stored(session, participants, agent, other, mid, about, text)
                   for mid, about, text in self._written(episode, session, agent, other)]
            if new:
                vectors = self._memory_vectors([m.rendered for m in new])        # (n, H)
                for m, v in zip(new, vectors):
                    memory.add(m, v)
            self._link(session, memory, new)

    def _stored(self, session: Session, participants: frozenset[str], agent: str, partner: str, mid: str,
                about: str, text: str) -> StoredMemory:
        self._order += 1
        return StoredMemory(mid, agent, about, text.strip(), self._render(text, about, session),
                            session.id, session.index, partner, self._order, session.timestamp,
                            frozenset(t.id for t in session.turns), participants)

    def _render(self, text: str, about: str, session: Session) -> str:
        return render_memory(text, about, session.index + 1, self.config.memory_provenance)

    def _summary_sources(self, episode: Episode, session: Session, agent: str, partner: str) -> list[str]:
        """The summariser's inputs: about the agent, then about its partner."""
        final = self._input(episode, agent, partner, session.index + 1,
                            [(t.speaker, t.text) for t in session.turns]).final_sequence()
        return [summarize_source(about, final) for about in (agent, partner)]

    def _written(self, episode: Episode, session: Session, agent: str, partner: str) -> list[tuple[str, str, str]]:
        """(id, about, text) of the memories ``agent`` writes at the end of ``session``, in order."""
        if self.config.memory_source == "gold":
            return [(m.id, m.about, m.text) for m in session.memories if m.owner == agent]
        outputs = self.dialogue(self._summary_sources(episode, session, agent, partner), self.config.max_new_tokens)
        texts = [(about, text) for about, out in zip((agent, partner), outputs)
                 for text in dict.fromkeys(parse_summary(out))]    # a sentence repeated in one output: once
        return [(f"{session.id}:{agent}:M{n}", about, text) for n, (about, text) in enumerate(texts, start=1)]

    @staticmethod
    def _link_pairs(new: Sequence, earlier: Sequence) -> list[tuple]:
        """(earlier, newer) pairs the linker is asked about: each new memory against the new ones before it
        in its session first, then against the agent's earlier memories (section 4.1)."""
        return [(old, m) for i, m in enumerate(new) for old in list(new[:i]) + list(earlier)]

    def _link(self, session: Session, memory: AgentMemory, new: list[StoredMemory]) -> None:
        if self.config.link_source == "gold":
            for link in session.links:
                memory.link(link.from_id, link.to_id)        # links of other agents' memories are not held
            return
        new_ids = {m.id for m in new}
        pairs = self._link_pairs(new, [m for m in memory.ordered() if m.id not in new_ids])
        if not pairs:
            return
        outputs = self.dialogue([link_source(old.rendered, m.rendered) for old, m in pairs],
                                self.config.link_max_new_tokens)
        for (old, m), out in zip(pairs, outputs):
            if parse_link(out):
                memory.link(m.id, old.id)

    def prepare(self, episodes: Sequence[Episode]) -> None:
        """Batch the pure work of the episodes to come: decode every summary their sessions will ask for, then
        every link question (the dialogue module is memoised: :meth:`observe` reads the answers), and encode
        every memory sentence and every query's context with the retriever (cached per retriever). Nothing
        enters memory."""
        episodes = list(episodes)
        jobs = [(e, s, agent, other) for e in episodes for s in sorted(e.sessions, key=lambda s: s.index)
                for agent, other in self._agents(e, s)]
        if self.config.memory_source in ("model", "llm"):
            self.dialogue([src for job in jobs for src in self._summary_sources(*job)], self.config.max_new_tokens)
        memories: list[str] = []
        links: list[str] = []
        held: dict[tuple[str, str], list[str]] = {}
        for episode, session, agent, other in jobs:
            new = [self._render(text, about, session) for _, about, text in self._written(episode, session, agent, other)]
            memories += new
            if self.config.link_source in ("model", "llm"):
                earlier = held.setdefault((episode.id, agent), [])
                links += [link_source(old, m) for old, m in self._link_pairs(new, earlier)]
                earlier.extend(new)
        if links:
            self.dialogue(links, self.config.link_max_new_tokens)
        if self.config.needs_llm and hasattr(self.dialogue.fn, "log_report"):
            self.dialogue.fn.log_report()
        self._vectors("memory", memories)
        self._vectors("context", [self._query_input(q, e).context() for e in episodes for q in e.queries])

    # --- retrieval --------------------------------------------------------------------------------
    def _vectors(self, tower: str, texts: Sequence[str]):
        """L2-normalised (n, H) vectors of ``texts`` by the ``tower`` ("context" or "memory") encoder, each
        distinct text encoded once per retriever (:data:`_VECTORS`), :data:`ENCODE_BATCH` at a time."""
        import torch
        import torch.nn.functional as F

        cache = _VECTORS.setdefault(self.retriever, {})
        todo = [t for t in dict.fromkeys(texts) if (tower, t) not in cache]
        if len(cache) + len(todo) > MAX_CACHED_VECTORS:
            cache.clear()
            todo = list(dict.fromkeys(texts))
        encode = self.retriever.encode_context if tower == "context" else self.retriever.encode_memory
        with torch.no_grad():
            for i in range(0, len(todo), ENCODE_BATCH):
                chunk = todo[i:i + ENCODE_BATCH]
                cache.update(zip(((tower, t) for t in chunk), F.normalize(encode(chunk).float(), dim=-1).cpu()))
        if not texts:
            return torch.zeros(0)
        return torch.stack([cache[(tower, t)] for t in texts])

    def _memory_vectors(self, texts: list[str]):
        return self._vectors("memory", texts)                                       # (n, H)

    def _context_vector(self, context: str):
        return self._vectors("context", [context])[0]                               # (H,)

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
                history: list[tuple[str, str]], episode: Episode | None = None) -> GenerationInput:
        """The generation input of ``agent``'s next turn: retrieve with its context, fill the memory block.
        ``episode`` (default: the one observed) gives the speakers' jobs; before any session is observed
        the memory is empty and so is the block."""
        episode = episode or self._episode
        if episode is None:
            raise RuntimeError("compose() needs an episode (speakers and jobs come from it): pass episode=")
        inp = self._input(episode, agent, partner, session_number, history)
        return self._with_memories(inp)

    def bare_input(self, episode: Episode, agent: str, partner: str | None, session_number: int,
                   history: list[tuple[str, str]]) -> GenerationInput:
        """The generation input of ``agent``'s next turn without memories: its ``context()`` is what the
        retriever reads for that turn."""
        return self._input(episode, agent, partner, session_number, history)

    def encode_contexts(self, contexts: Sequence[str]) -> None:
        """Encode retriever contexts ahead, in batches (e.g. every turn :meth:`compose` will be asked for):
        pure precomputation, cached per retriever."""
        self._vectors("context", list(contexts))

    def _with_memories(self, inp: GenerationInput) -> GenerationInput:
        inp.memories = [(top.rendered, [m.rendered for m in linked])
                        for top, linked in self.selection(inp.main, inp.context())]
        return inp

    @staticmethod
    def dialogue_turns(episode: Episode, question: str) -> list[tuple[str, str]] | None:
        """A question that is a dialogue excerpt, one ``Speaker: text`` line per turn with every speaker one
        of the episode's, as (speaker, text) turns; None for any other question."""
        names = {s.name for s in episode.speakers} | {t.speaker for s in episode.sessions for t in s.turns}
        turns = []
        for line in question.splitlines():
            if not line.strip():
                continue
            speaker, sep, text = line.partition(": ")
            if not sep or speaker.strip() not in names or not text.strip():
                return None
            turns.append((speaker.strip(), text.strip()))
        return turns or None

    def _query_input(self, query: Query, episode: Episode | None = None) -> GenerationInput:
        """The keeper about to answer ``query`` in the session it is asked in: the query's dialogue turns when
        it is a dialogue excerpt (:meth:`dialogue_turns`), else the question said by the keeper's partner (the
        main speaker when the keeper is another speaker). A query after the last session is asked in the
        session after it."""
        episode = episode or self._episode
        keeper = memory_keeper(episode)
        session = episode.session_by_id().get(query.session_id) if query.session_id else None
        partner = (session_partner(episode, session, keeper) if session
                   else episode.main_speaker if keeper != episode.main_speaker else None)
        number = session.index + 1 if session else max((s.index for s in episode.sessions), default=-1) + 2
        history = self.dialogue_turns(episode, query.question) or [(partner or UNKNOWN_PARTNER, query.question)]
        return self._input(episode, keeper, partner, number, history)

    def retrieve(self, query: Query, k: int) -> list[Retrieved]:
        check_k(k)
        if self._episode is None:
            return []
        return self.retrieve_for(self.keeper, self._query_input(query).context(), k)

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
        """Remove the memories ``selector`` names from every agent and index of the current episode: by memory id,
        by the session they were written in, by any turn of that session, or as memories about a selected
        speaker (owner or subject, a participant of their session, or named in their text); then purge the
        process caches of what went (:meth:`_purge`)."""
        removed: list[StoredMemory] = []
        for memory in self.agents.values():
            gone = [m for m in memory.items.values()
                    if selector.matches(memory_id=m.id, session_id=m.session_id, turns=m.turn_ids,
                                        speakers=(m.owner, m.about), participants=m.participants, text=m.text)]
            memory.remove({m.id for m in gone})
            removed += gone
        for agent in [a for a, memory in self.agents.items() if not len(memory) and selector.about(speakers=(a,))]:
            del self.agents[agent]  # a forgotten agent's store goes with its memories
        self._purge(selector, removed)
        return len(removed)

    def _purge(self, selector: Selector, removed: list[StoredMemory]) -> None:
        """Drop from the process caches what holds forgotten content: the retriever's memory vectors of the removed
        sentences (unless a held memory, of any episode, has the same one); every cached retriever context and
        dialogue-module answer (summaries, link verdicts) whose input or output holds a removed sentence, is the
        summariser's input for a session whose memories went, or names a selected speaker."""
        held = {m.rendered for state in self.held_scopes() for memory in state["agents"].values()
                for m in memory.items.values()}
        sentences = {m.text for m in removed} | {m.rendered for m in removed}
        sessions = {m.session_id for m in removed} | set(selector.session_ids)
        sources: set[str] = set()
        episode = self._episode
        if episode is not None and self.config.memory_source in ("model", "llm"):
            for session in episode.sessions:
                if session.id in sessions or selector.matches(turns=[t.id for t in session.turns],
                                                              participants=session_participants(episode, session)):
                    for agent, partner in self._agents(episode, session):
                        sources.update(self._summary_sources(episode, session, agent, partner))

        def stale(text: str) -> bool:
            return text in sources or selector.about(text=text) or any(x in text for x in sentences)

        vectors = _VECTORS.get(self._retriever) if self._retriever is not None else None
        if vectors:
            for key in [k for k in vectors if (k[0] == "memory" and k[1] in sentences and k[1] not in held)
                        or (k[0] == "context" and stale(k[1]))]:
                del vectors[key]
        if self._dialogue is not None:
            memo = self._dialogue.memo
            gone = [k for k, out in memo.items() if stale(k[0]) or stale(out)]
            for key in gone:
                del memo[key]
            if gone and hasattr(self._dialogue.fn, "forget"):   # a language model's: its cached responses too
                self._dialogue.fn.forget(gone)


@register_strategy("egocentric_gold")
class EgocentricGold(Egocentric):
    """An oracle: EMMA's retrieval over the dataset's own (gold) memories and links, an upper bound for
    ``egocentric`` whose memories the dialogue module writes."""

    config_class = EgocentricGoldConfig
    granularities = ("memory", "session")
    oracle = "the dataset's own (gold) memories and links, EMMA's retrieval: an upper bound for egocentric"
