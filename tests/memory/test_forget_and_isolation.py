"""Every registered memory strategy through the same two scenarios (issue 15, part 4).

Forgetting: Juno (the main speaker) talks with Wren (S1, S3) and Vivek (S2). After ``forget(speakers=
["Wren"])`` nothing said by, to or about Wren may be reached by any route: ``retrieve``, ``context``,
``len``, and every cache (every string the strategy object still holds, the on-disk embedding cache,
the process caches of retriever vectors, dialogue-module answers and teacher features). Juno's
"Since you play the violin..." (said TO Wren, in her session, without her name) is the case the turn
strategies used to keep. What was said with Vivek and does not name Wren stays.

Isolation: two RealMem-like episodes whose speakers are both "User" and "Assistant", fed to one
instance without a reset, must never answer the second's questions with the first's items; the
first's memory is kept for when it is entered again; with colliding session ids (as LongMemEval's
shared haystack sessions) each episode observes its own.
"""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime, timedelta

import pytest
import torch

from pipelines.data.schema import Episode, Memory, MemoryLink, Query, Session, Speaker, Triplet, Turn
from pipelines.memory import STRATEGIES, Selector, build_strategy
from pipelines.memory.egocentric import (Egocentric, EgocentricConfig, EgocentricGold, EgocentricGoldConfig,
                                         memory_keeper)
from pipelines.memory.egocentric.strategy import _VECTORS
from pipelines.memory.embeddings import CACHE_FILE, text_hash
from pipelines.memory.fusion import FusionKeys, FusionKeysConfig

T0 = datetime(2023, 1, 5, 10, 0)
FORGOTTEN = re.compile(r"violin|wren|stamps|practis", re.IGNORECASE)   # in every item about Wren, in no other
KEPT = re.compile(r"snakes|kyoto", re.IGNORECASE)                       # what the Vivek session keeps
PROBES = ["What instrument is played in the orchestra?", "Which hobby involves collecting old things?",
          "What happens every evening?", "Who is afraid of snakes?", "Where did Juno move?"]  # no marker in them


def _turn(sid, n, speaker, text, *triplets):
    return Turn(id=f"{sid}:T{n}", speaker=speaker, text=text,
                triplets=[Triplet(subject=s, relation=r, object=o) for s, r, o in triplets])


def juno_episode() -> Episode:
    s1 = Session(id="f:S1", index=0, timestamp=T0, partner="Wren",
                 summary="Juno told Wren about her old stamps; Wren plays the violin.", turns=[
                     _turn("f:S1", 1, "Juno", "Hi Wren, I collect old stamps from Japan.",
                           ("Juno", "collects", "old stamps")),
                     _turn("f:S1", 2, "Wren", "I play the violin in a small orchestra.",
                           ("Wren", "plays", "the violin"))],
                 memories=[Memory(id="f:S1:M1", owner="Juno", about="Juno", text="Juno collects old stamps.",
                                  session_id="f:S1"),
                           Memory(id="f:S1:M2", owner="Juno", about="Wren", text="Wren plays the violin.",
                                  session_id="f:S1")])
    s2 = Session(id="f:S2", index=1, timestamp=T0 + timedelta(days=30), partner="Vivek",
                 summary="Vivek is terrified of snakes and Juno moved to Kyoto.", turns=[
                     _turn("f:S2", 1, "Vivek", "I am terrified of snakes.", ("Vivek", "afraid of", "snakes")),
                     _turn("f:S2", 2, "Juno", "My friend Wren plays the violin beautifully.",
                           ("Wren", "plays", "the violin")),
                     _turn("f:S2", 3, "Juno", "I moved to Kyoto last spring.", ("Juno", "lives in", "Kyoto"))],
                 memories=[Memory(id="f:S2:M1", owner="Juno", about="Vivek", text="Vivek is terrified of snakes.",
                                  session_id="f:S2"),
                           Memory(id="f:S2:M2", owner="Juno", about="Juno", text="Juno moved to Kyoto.",
                                  session_id="f:S2")])
    s3 = Session(id="f:S3", index=2, timestamp=T0 + timedelta(days=60), partner="Wren",
                 summary="Juno remembered that Wren plays the violin.", turns=[
                     _turn("f:S3", 1, "Juno", "Since you play the violin, I thought of you the other day.",
                           ("Wren", "plays", "the violin")),
                     _turn("f:S3", 2, "Wren", "That is kind, I practise every evening.",
                           ("Wren", "practises", "every evening"))],
                 memories=[Memory(id="f:S3:M1", owner="Juno", about="Wren", text="Wren practises every evening.",
                                  session_id="f:S3")],
                 links=[MemoryLink(from_id="f:S3:M1", to_id="f:S1:M2")])
    return Episode(id="f", source="test", main_speaker="Juno",
                   speakers=[Speaker(name=n) for n in ("Juno", "Wren", "Vivek")], sessions=[s1, s2, s3])


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
    from pipelines.emma import retriever as R
    from tests.emma._tiny_retriever import save_tiny_dual_encoder

    out = save_tiny_dual_encoder(tmp_path_factory.mktemp("retriever"), memory_max_length=32)
    R.write_trained_on(out, [], [])
    return out


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    """A tiny random cross-encoder saved as the reranker stage saves one, trained on no episode here."""
    from pipelines.training.folds import write_trained_on
    from tests.rerank._tiny_reranker import save_tiny_cross_encoder

    out = save_tiny_cross_encoder(tmp_path_factory.mktemp("reranker"))
    write_trained_on(out, [], [])
    return out


@pytest.fixture
def build(teacher, retriever_dir, reranker_dir, tmp_path):
    """``build(name)`` -> a fresh strategy: the registered one, with its caches under tmp_path and test doubles
    where a trained model would be needed (EMMA's retriever and dialogue module)."""
    cache = str(tmp_path / "cache")
    retriever = HashRetriever()
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
        "fusion_keys": lambda: FusionKeys(FusionKeysConfig(cache_dir=cache, expansion_llm={"backend": "local"}),
                                          expander=Expander()),
        "trained_dense": lambda: build_strategy("trained_dense", model_path=str(retriever_dir), cache_dir=cache),
        "rerank": lambda: build_strategy("rerank", reranker_path=str(reranker_dir), cache_dir=cache),
        "graph": lambda: build_strategy("graph", cache_dir=cache),
        "mdr": lambda: build_strategy("mdr", teacher=str(teacher)),
        "egocentric": lambda: Egocentric(EgocentricConfig(agents="all"), retriever=retriever, dialogue=summariser),
        "egocentric_gold": lambda: EgocentricGold(EgocentricGoldConfig(), retriever=retriever),
    }
    assert set(builders) == set(STRATEGIES), "a registered strategy is missing from the forget/isolation scenarios"
    return lambda name: builders[name]()


def observe(strategy, episode):
    for session in episode.sessions:
        strategy.observe(episode, session)


def ask(question):
    return Query(id="q", question=question)


def everything(strategy) -> tuple[list, list[str]]:
    """Every item a probe reaches (a ranking as deep as the memory) and every context (large budget)."""
    items = [i for p in PROBES for i in strategy.retrieve(ask(p), max(len(strategy), 1))]
    return items, [strategy.context(ask(p), 4096) for p in PROBES]


# --- every cache ----------------------------------------------------------------------------------------------

def held_strings(obj) -> list[str]:
    """Every string reachable from ``obj`` through containers and the project's own objects (and the networkx
    graphs and rank_bm25 indexes they hold); models, arrays, functions and the input Episode are not memory."""
    out, seen, todo = [], set(), [obj]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            todo += [*x.keys(), *x.values()]
        elif isinstance(x, (list, tuple, set, frozenset)):
            todo += list(x)
        elif isinstance(x, Episode):
            continue
        elif type(x).__module__.startswith(("pipelines.", "networkx.", "rank_bm25")) and hasattr(x, "__dict__"):
            todo += list(vars(x).values())
    return out


def candidate_texts(episode) -> set[str]:
    """Every text of the scenario an embedder may have cached: turns (bare and "speaker: text"), triplets and
    their entities, memories, summaries."""
    texts = set()
    for session in episode.sessions:
        texts |= {m.text for m in session.memories} | ({session.summary} if session.summary else set())
        for t in session.turns:
            texts |= {t.text, f"{t.speaker}: {t.text}"}
            texts |= {x for tr in t.triplets for x in (tr.serialise(), tr.subject, tr.object)}
    return texts


def cache_leaks(strategy, name, episode, cache_dir) -> list[str]:
    """Forgotten content still held by the strategy or by a cache it fills."""
    leaks = [s for s in held_strings(strategy) if FORGOTTEN.search(s)]
    db = cache_dir / CACHE_FILE
    if db.exists():
        with sqlite3.connect(db) as con:
            hashes = {h for (h,) in con.execute("SELECT hash FROM embedding")}
        leaks += [f"on disk: {t}" for t in candidate_texts(episode) if FORGOTTEN.search(t) and text_hash(t) in hashes]
    if name.startswith("egocentric"):
        vectors = _VECTORS.get(strategy.retriever, {})
        leaks += [f"retriever vector: {text}" for _, text in vectors if FORGOTTEN.search(text)]
    if name == "mdr":
        decode = strategy.teacher.codec.decode
        leaks += [f"teacher feature: {decode(k)}" for k in strategy.teacher.features if FORGOTTEN.search(decode(k))]
    return leaks


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_forgetting_a_speaker_leaves_nothing_said_by_to_or_about_them(name, build, tmp_path):
    episode = juno_episode()
    strategy = build(name)
    observe(strategy, episode)
    items, contexts = everything(strategy)
    if name != "no_history":  # the forgotten content was there, by some route
        assert any(FORGOTTEN.search(i.text) for i in items) and any(FORGOTTEN.search(c) for c in contexts)
        assert cache_leaks(strategy, name, episode, tmp_path / "cache")
    held = len(strategy)

    removed = strategy.forget(Selector.of(speakers=["Wren"]))

    assert cache_leaks(strategy, name, episode, tmp_path / "cache") == []       # before any new probe
    if name == "egocentric":    # agents "all": Wren's and Vivek's own stores lose memories too
        assert removed > held - len(strategy) > 0
    else:
        assert removed == held - len(strategy)
    items, contexts = everything(strategy)
    assert not [i.text for i in items if FORGOTTEN.search(i.text)]
    assert not [c for c in contexts if FORGOTTEN.search(c)]
    assert all(i.session_id == "f:S2" for i in items)
    assert len(strategy) == len(strategy.retrieve(ask(PROBES[0]), max(len(strategy), 1)))
    if name != "no_history":  # the rest stays: what was said with Vivek and does not name Wren
        assert len(strategy) > 0 and any(KEPT.search(i.text) for i in items)
    if name in ("long_context", "bm25", "dense", "hybrid", "fusion", "fusion_sessions", "fusion_time", "fusion_keys",
                "trained_dense", "rerank", "mdr"):
        # the turn, said to Wren, is gone
        assert {i.turn_id for i in items} == {"f:S2:T1", "f:S2:T3"}          # f:S3:T1 ("Since you...") went
    assert cache_leaks(strategy, name, episode, tmp_path / "cache") == []       # the probes brought nothing back


# --- isolation ------------------------------------------------------------------------------------------------

def user_episode(eid: str, sessions: list[tuple[str, str, str, str, Triplet]], sids=("s1", "s2")) -> Episode:
    """A RealMem-like episode: "User" (main speaker) and "Assistant", the Assistant's memories about the User."""
    out = []
    for k, ((user, assistant, memory, summary, triplet), sid) in enumerate(zip(sessions, sids)):
        out.append(Session(id=sid, index=k, timestamp=T0 + timedelta(days=7 * k), partner="Assistant", summary=summary,
                           turns=[Turn(id=f"{sid}:0", speaker="User", text=user, triplets=[triplet]),
                                  Turn(id=f"{sid}:1", speaker="Assistant", text=assistant)],
                           memories=[Memory(id=f"m{k + 1}", owner="Assistant", about="User", text=memory,
                                            session_id=sid)]))
    return Episode(id=eid, source="realmem", main_speaker="User",
                   speakers=[Speaker(name="User"), Speaker(name="Assistant")], sessions=out, split="test")


VIOLIN = [("I play the violin every Sunday.", "Violin practice on Sundays sounds lovely.",
           "The user plays the violin on Sundays.", "The user plays the violin on Sundays.",
           Triplet(subject="User", relation="plays", object="the violin")),
          ("My violin teacher is called Marta.", "Marta sounds like a patient violin teacher.",
           "The user's violin teacher is Marta.", "The user's violin teacher is Marta.",
           Triplet(subject="User", relation="has teacher", object="Marta"))]
BREAD = [("I bake sourdough bread every Sunday.", "Sourdough baking on Sundays sounds lovely.",
          "The user bakes sourdough on Sundays.", "The user bakes sourdough on Sundays.",
          Triplet(subject="User", relation="bakes", object="sourdough bread")),
         ("My baking teacher is called Pedro.", "Pedro sounds like a patient baking teacher.",
          "The user's baking teacher is Pedro.", "The user's baking teacher is Pedro.",
          Triplet(subject="User", relation="has teacher", object="Pedro"))]
OF_A, OF_B = re.compile(r"violin|marta", re.IGNORECASE), re.compile(r"sourdough|pedro|bak", re.IGNORECASE)
QUESTIONS = ["What do I do every Sunday?", "Who is my teacher?"]


def answers(strategy) -> list[set[tuple]]:
    """What each question retrieves (as sets: G-Long's access times move its ranking between calls)."""
    return [{(i.text, i.turn_id, i.session_id, i.memory_id) for i in strategy.retrieve(ask(q), 10)}
            for q in QUESTIONS]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_one_instance_never_answers_an_episode_with_another_ones_items(name, build):
    a = user_episode("persona-a", VIOLIN, sids=("a1", "a2"))
    b = user_episode("persona-b", BREAD, sids=("b1", "b2"))
    only_a, only_b = build(name), build(name)
    observe(only_a, a)
    observe(only_b, b)
    if name != "no_history":
        assert all(answers(only_b)) and all(answers(only_a))   # each memory alone answers its own questions

    shared = build(name)            # the case: one instance fed both, never reset
    observe(shared, a)
    observe(shared, b)
    assert answers(shared) == answers(only_b) and len(shared) == len(only_b)
    assert not any(OF_A.search(text) for got in answers(shared) for text, *_ in got)
    assert not any(OF_A.search(shared.context(ask(q), 4096)) for q in QUESTIONS)

    shared.enter(a)                 # A's memory was kept, apart
    assert answers(shared) == answers(only_a) and len(shared) == len(only_a)
    assert not any(OF_B.search(text) for got in answers(shared) for text, *_ in got)

    shared.enter(b)                 # forgetting in B's scope leaves A's alone
    shared.forget(Selector.of(sessions=["b1", "b2"]))
    assert len(shared) == 0 and answers(shared) == [set(), set()]
    shared.enter(a)
    assert len(shared) == len(only_a)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_an_episode_entered_before_its_first_session_holds_nothing_of_another(name, build):
    a, b = user_episode("persona-a", VIOLIN, sids=("a1", "a2")), user_episode("persona-b", BREAD, sids=("b1", "b2"))
    strategy = build(name)
    observe(strategy, a)
    strategy.enter(b)               # B's first queries come before B's first session
    assert len(strategy) == 0 and answers(strategy) == [set(), set()]
    assert not any(OF_A.search(strategy.context(ask(q), 4096)) for q in QUESTIONS)
    strategy.reset()                # reset forgets every episode
    strategy.enter(a)
    assert len(strategy) == 0


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_episodes_sharing_session_and_turn_ids_each_observe_their_own(name, build):
    """LongMemEval's questions share haystack session ids: one instance observes both episodes' s1 and s2."""
    a, b = user_episode("q-a", VIOLIN), user_episode("q-b", BREAD)
    only_b, shared = build(name), build(name)
    observe(only_b, b)
    observe(shared, a)
    observe(shared, b)              # no "session observed twice": s1 of q-b is not s1 of q-a
    assert answers(shared) == answers(only_b)
    shared.forget(Selector.of(turns=["s1:0"]))                   # ids name items of the current episode only
    shared.enter(a)
    assert answers(shared) == answers(build_observed(build, name, a))


def build_observed(build, name, episode):
    strategy = build(name)
    observe(strategy, episode)
    return strategy


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
