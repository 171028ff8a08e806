"""Every registered memory strategy through the conformance kit (pipelines/memory/conformance.py), with the
test doubles the strategies that need a trained model get here; then what only some built-ins promise.

The kit's scenarios (issue 15, part 4; issue #32): forgetting Wren (Juno's partner in S1 and S3) leaves nothing said
by, to or about her reachable by any route or cache, and nothing of what was said with Vivek goes; two RealMem-like
episodes whose speakers are both "User" and "Assistant", fed to one instance, never answer each other's questions.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import torch

from pipelines.data.schema import Turn
from pipelines.memory import STRATEGIES, Selector, build_strategy
from pipelines.memory.bm25 import BM25
from pipelines.memory.conformance import (VIOLIN, ConformanceError, ask, check_strategy, everything, juno_episode,
                                          observe, user_episode)
from pipelines.memory.egocentric import (Egocentric, EgocentricConfig, EgocentricGold, EgocentricGoldConfig,
                                         memory_keeper)
from pipelines.memory.egocentric.strategy import _VECTORS
from pipelines.memory.fusion import FusionKeys, FusionKeysConfig
from pipelines.memory.peers.common import PeerStrategy
from pipelines.models.embeddings import CACHE_FILE, text_hash


NEW_MESSAGES = re.compile(r"## New Messages\n(.*?)\n\n## Observation Date", re.DOTALL)


def facts_of(messages) -> str:
    """A canned mem0 extraction (its JSON): each new message of its prompt, the role cut, as one fact."""
    lines = NEW_MESSAGES.search(messages[-1]["content"]).group(1).strip().splitlines()
    return json.dumps({"memory": [{"text": line.split(": ", 1)[1]} for line in lines if ": " in line]})


GRAPHITI_SCHEMA = re.compile(r"Respond with a JSON object in the following format:\n\n(\{.*)", re.DOTALL)
GRAPHITI_MESSAGE = re.compile(r"<CURRENT[ _]MESSAGE>\n(.*?)\n</CURRENT[ _]MESSAGE>", re.DOTALL)


def graph_of(messages) -> str:
    """A canned Graphiti model (its JSON, for the response model its prompt asks): each "speaker: text" line of the
    current message gives two entities, the speaker and what they said, and one fact between them, the text; no
    duplicates, dates or summaries."""
    prompt = messages[-1]["content"]
    schema, _ = json.JSONDecoder().raw_decode(GRAPHITI_SCHEMA.search(prompt).group(1))
    current = GRAPHITI_MESSAGE.search(prompt)
    lines = [line.split(": ", 1) for line in (current.group(1).splitlines() if current else []) if ": " in line]
    if schema["title"] == "ExtractedEntities":
        names = dict.fromkeys(name for who, text in lines for name in (who, text.rstrip(".")))
        return json.dumps({"extracted_entities": [{"name": n, "entity_type_id": 0} for n in names]})
    if schema["title"] == "ExtractedEdges":
        return json.dumps({"edges": [{"source_entity_name": who, "target_entity_name": text.rstrip("."),
                                      "relation_type": "SAID", "fact": text} for who, text in lines]})
    return json.dumps({name: [] for name in schema.get("required", [])})   # nothing to merge, date or summarise


LANGMEM_SESSION = re.compile(r"<session_[0-9a-f-]+>\n(.*?)\n</session_", re.DOTALL)


def langmem_of(messages) -> str:
    """A canned LangMem model (the tool-call JSON the adapter's bridge reads): each "speaker: text" message of the
    session in its prompt as one new ``Memory``, the text; nothing patched."""
    session = LANGMEM_SESSION.search(messages[-1]["content"])
    lines = [line.split(": ", 1)[1] for line in (session.group(1).splitlines() if session else [])
             if ": " in line and not line.startswith("=")]
    return json.dumps({"tool_calls": [{"name": "Memory", "arguments": {"content": text}} for text in lines]})


def peers_of(messages) -> str:
    """The canned model of every product: Graphiti's answers to its prompts, LangMem's to its, mem0's to the
    others."""
    prompt = messages[-1]["content"]
    if GRAPHITI_SCHEMA.search(prompt):
        return graph_of(messages)
    return langmem_of(messages) if LANGMEM_SESSION.search(prompt) else facts_of(messages)


class HashRetriever:
    """A deterministic stand-in for EMMA's dual encoder: word-hashing vectors for both towers (test double)."""

    def __init__(self):
        from pipelines.glong.embedding import HashingEmbedder

        self.hashing = HashingEmbedder(256)

    def encode_context(self, texts):
        return torch.from_numpy(self.hashing.embed(list(texts)))

    encode_memory = encode_context


TAGGED = re.compile(r"\[([^\]]+)\] ([^\[]+)")


def summariser(sources, max_new_tokens):
    """The dialogue module as a text-to-text double: a memory "X said: ..." per turn of X; a link when two
    memories share a word of six letters or more."""
    out = []
    for src in sources:
        if src.startswith("summarize [ABOUT_"):
            about, _, sequence = src[len("summarize [ABOUT_"):].partition("]: ")
            said = [text.strip() for who, text in TAGGED.findall(sequence.split("[NOW]", 1)[1]) if who == about]
            out.append(" [SEP] ".join(f"{about} said: {t}" for t in said) or "[NONE]")
        else:
            first, _, second = src[len("memory sentence 1: "):].partition(" memory sentence 2: ")
            words = [{w for w in re.findall(r"\w{6,}", s.lower())} for s in (first, second)]
            out.append("positive" if words[0] & words[1] else "negative")
    return out


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny untrained MDR teacher saved as stage mdr_teacher saves it (as in test_mdr_strategy)."""
    from pipelines.data.tasks import build_mdr_examples
    from pipelines.mdr.config import MDRConfig
    from pipelines.mdr.tasks import MDRTeacherTask, gpt2_factory
    from pipelines.mdr.text import Codec
    from pipelines.models.tokenizers import train_bpe_tokenizer

    episode = juno_episode()
    codec = Codec(train_bpe_tokenizer([t.text for _, t in episode.turns()], 300, min_frequency=1))
    cfg = MDRConfig(model="tiny", max_query_tokens=16, max_response_tokens=16, max_persona_tokens=16,
                    max_history_tokens=48)
    torch.manual_seed(0)
    task = MDRTeacherTask(cfg, build_mdr_examples([episode]), None, codec, gpt2_factory("tiny", codec))
    out = tmp_path_factory.mktemp("models") / "mdr_teacher"
    task.save_final(task.build_model(), out)
    return out


class Expander:
    """A stand-in for the LLM summariser of fusion_keys' key expansion: a session's "summary" is its lines,
    memoised by request, forgotten on request (as the writer drops its memo and cached responses)."""

    def __init__(self):
        self.memo: dict[str, str] = {}

    def request(self, session) -> str:
        return "\n".join(f"{t.speaker}: {t.text}" for t in session.turns)

    def __call__(self, sessions) -> list[str]:
        for session in sessions:
            request = self.request(session)
            self.memo.setdefault(request, "In short: " + request.replace("\n", " "))
        return [self.memo[self.request(session)] for session in sessions]

    def forget(self, requests) -> int:
        return sum(self.memo.pop(r, None) is not None for r in requests)


@pytest.fixture(scope="module")
def retriever_dir(tmp_path_factory):
    """A tiny random EMMA dual encoder saved as emma_retriever saves one, trained on no episode here."""
    from pipelines.data.folds import write_trained_on
    from tests.emma._tiny_retriever import save_tiny_dual_encoder

    out = save_tiny_dual_encoder(tmp_path_factory.mktemp("retriever"), memory_max_length=32)
    write_trained_on(out, [], [])
    return out


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    """A tiny random cross-encoder saved as the reranker stage saves one, trained on no episode here."""
    from pipelines.data.folds import write_trained_on
    from tests.rerank._tiny_reranker import save_tiny_cross_encoder

    out = save_tiny_cross_encoder(tmp_path_factory.mktemp("reranker"))
    write_trained_on(out, [], [])
    return out


@pytest.fixture
def build(teacher, retriever_dir, reranker_dir, tmp_path, fake):
    """``build(name)`` -> a fresh strategy: the registered one, with its caches under tmp_path and test doubles
    where a trained model would be needed (EMMA's retriever and dialogue module; the products' language model: a
    canned one that extracts each new message as a fact, behind the real response cache)."""
    cache = str(tmp_path / "cache")
    llm_cache = str(tmp_path / "llm")
    retriever = HashRetriever()
    fake(peers_of)
    builders = {
        "no_history": lambda: build_strategy("no_history"),
        "long_context": lambda: build_strategy("long_context"),
        "session_summary": lambda: build_strategy("session_summary"),
        "bm25": lambda: build_strategy("bm25"),
        "dense": lambda: build_strategy("dense", cache_dir=cache),
        "hybrid": lambda: build_strategy("hybrid", cache_dir=cache),
        "fusion": lambda: build_strategy("fusion", cache_dir=cache),
        "fusion_sessions": lambda: build_strategy("fusion_sessions", cache_dir=cache),
        "fusion_time": lambda: build_strategy("fusion_time", cache_dir=cache),
        "fusion_context": lambda: build_strategy("fusion_context", cache_dir=cache),
        "fusion_threads": lambda: build_strategy("fusion_threads", cache_dir=cache, link_min_cos=-1.0),
        "fusion_keys": lambda: FusionKeys(FusionKeysConfig(cache_dir=cache, expansion_llm={"backend": "local"}),
                                          expander=Expander()),
        "trained_dense": lambda: build_strategy("trained_dense", model_path=str(retriever_dir), cache_dir=cache),
        "rerank": lambda: build_strategy("rerank", reranker_path=str(reranker_dir), cache_dir=cache),
        "graph": lambda: build_strategy("graph", cache_dir=cache),
        "mdr": lambda: build_strategy("mdr", teacher=str(teacher)),
        "egocentric": lambda: Egocentric(EgocentricConfig(agents="all"), retriever=retriever, dialogue=summariser),
        "egocentric_gold": lambda: EgocentricGold(EgocentricGoldConfig(), retriever=retriever),
        # the products (pipelines/memory/peers): mem0, Graphiti and LangMem fed a turn per add, so that each fact has
        # one turn
        "mem0": lambda: build_strategy("mem0", cache_dir=cache, llm_cache_dir=llm_cache, turns_per_add=1),
        "mem0_raw": lambda: build_strategy("mem0_raw", cache_dir=cache, llm_cache_dir=llm_cache),
        "graphiti": lambda: build_strategy("graphiti", cache_dir=cache, llm_cache_dir=llm_cache, turns_per_add=1),
        "langmem": lambda: build_strategy("langmem", cache_dir=cache, llm_cache_dir=llm_cache, turns_per_add=1),
    }
    assert set(builders) == set(STRATEGIES), "a registered strategy is missing from the forget/isolation scenarios"
    return lambda name: builders[name]()


def extra_leaks(name: str):
    """The process caches of the built-ins the kit cannot see by itself: EMMA's retriever vectors, MDR's teacher
    features, the products' own stores and their requests in the response cache."""
    def leaks(strategy) -> list[str]:
        if isinstance(strategy, PeerStrategy):   # the product's own stores, and the requests in the response cache
            cached = [p.read_text() for p in strategy.config.llm_cache_dir and
                      Path(strategy.config.llm_cache_dir).glob("responses/??/*.json") or ()]
            return strategy.held_texts() + cached
        if name.startswith("egocentric"):
            return [text for _, text in _VECTORS.get(strategy.retriever, {})]
        if name == "mdr":
            decode = strategy.teacher.codec.decode
            return [decode(k) for k in strategy.teacher.features]
        return []
    return leaks


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_built_in_passes_the_conformance_kit(name, build, tmp_path):
    check_strategy(lambda: build(name), cache_dir=tmp_path / "cache", extra_leaks=extra_leaks(name),
                   empty_by_design=name == "no_history")


TURN_STRATEGIES = ("long_context", "bm25", "dense", "hybrid", "fusion", "fusion_sessions", "fusion_time",
                   "fusion_context", "fusion_threads", "fusion_keys", "trained_dense", "rerank", "mdr")


@pytest.mark.parametrize("name", TURN_STRATEGIES)
def test_a_turn_strategy_forgets_what_was_said_to_the_speaker(name, build):
    """The issue's turn: Juno's "Since you play the violin..." is said TO Wren, in her session, without her name."""
    strategy = build(name)
    observe(strategy, juno_episode())
    held = len(strategy)
    assert strategy.forget(Selector.of(speakers=["Wren"])) == held - len(strategy)   # exactly what went
    items, _ = everything(strategy)
    assert {i.turn_id for i in items} == {"f:S2:T1", "f:S2:T3"}                       # f:S3:T1 went


def test_egocentric_forgets_from_every_agent_store(build):
    """agents "all": Wren's and Vivek's own stores lose memories too, so more go than the current view held."""
    strategy = build("egocentric")
    observe(strategy, juno_episode())
    held = len(strategy)
    assert strategy.forget(Selector.of(speakers=["Wren"])) > held - len(strategy) > 0


class Leaky(BM25):
    """bm25 whose forget keeps a copy of every text it held: the kit must catch it."""

    def observe(self, episode, session):
        super().observe(episode, session)
        self.__dict__.setdefault("_copies", []).extend(t.text for t in session.turns)


def test_the_kit_catches_a_strategy_that_keeps_a_copy():
    with pytest.raises(ConformanceError, match=r"\[forgetting\] .*still held: .*violin"):
        check_strategy(lambda: Leaky(), checks=["forgetting"])


class Peeking(BM25):
    """bm25 that observes an episode's every session at its first one: it answers from the future."""

    def observe(self, episode, session):
        if session.index == 0:
            for later in episode.sessions:
                super().observe(episode, later)


def test_the_kit_catches_a_strategy_that_reads_the_future():
    with pytest.raises(ConformanceError, match=r"\[temporal\]"):
        check_strategy(lambda: Peeking(), checks=["temporal"])


class ReadingIds(BM25):
    """bm25 that puts the sessions whose id sorts first on top: a thread told by its name, not its content."""

    def retrieve(self, query, k):
        return sorted(super().retrieve(query, max(len(self), 1)), key=lambda i: i.session_id)[:k]


def test_the_kit_catches_a_strategy_that_reads_identifiers():
    with pytest.raises(ConformanceError, match=r"\[identifiers\] .*scrambling the ids changed the ranking"):
        check_strategy(lambda: ReadingIds(), checks=["identifiers"])
    check_strategy(lambda: BM25(), checks=["identifiers"])


def test_the_keeper_of_realmem_like_episodes_is_the_assistant():
    assert memory_keeper(user_episode("p", VIOLIN)) == "Assistant"
    assert memory_keeper(juno_episode()) == "Juno"                      # MiSC-like: the main speaker's memories
    assert memory_keeper(juno_episode().model_copy(update={"sessions": []})) == "Juno"   # no memories at all


def test_the_dense_cache_keeps_a_vector_another_held_turn_still_needs(build, tmp_path):
    episode = juno_episode()
    again = Turn(id="f:S2:T4", speaker="Juno", text="Hi Wren, I collect old stamps from Japan.")  # S1:T1's text
    twin = episode.sessions[1].model_copy(update={"turns": [*episode.sessions[1].turns, again]})
    episode = episode.model_copy(update={"sessions": [episode.sessions[0], twin]})
    strategy = build("dense")
    observe(strategy, episode)
    strategy.forget(Selector.of(sessions=["f:S1"]))          # S1:T1's text is also S2:T4's, still held
    with sqlite3.connect(tmp_path / "cache" / CACHE_FILE) as con:
        hashes = {h for (h,) in con.execute("SELECT hash FROM embedding")}
    assert text_hash("Juno: Hi Wren, I collect old stamps from Japan.") in hashes
    assert text_hash("Wren: I play the violin in a small orchestra.") not in hashes
    assert strategy.retrieve(ask("old stamps from Japan"), 1)[0].turn_id == "f:S2:T4"
