"""The conformance kit: the checks every memory strategy passes, for a strategy of your own in one line (issue #32).

    from pipelines.memory.conformance import check_strategy

    def test_my_memory_conforms(tmp_path):
        check_strategy(lambda: MyMemory(MyConfig(cache_dir=str(tmp_path / "cache"))), cache_dir=tmp_path / "cache")

``make()`` builds a fresh instance (called several times); every built-in strategy of the project runs through the
same function in ``tests/memory/test_conformance.py``. A failed check raises :class:`ConformanceError` (an
AssertionError, so pytest reports it as a failed test) naming the check, the strategy and what was found. The checks,
on small scenarios of the ARCHITECTURE's memory contract (``pipelines/memory/base.py``):

1. ``contract``: the five calls. ``retrieve(q, k)`` gives at most ``k`` :class:`Retrieved` items, best first (scores
   never increase), whose session / turn / memory ids are the observed ones; ``len`` is the depth of a full ranking;
   ``context(q, B)`` holds at most ``B`` tokens by the strategy's own counter, for every budget (an empty memory: an
   empty context); ``prepare(episodes)`` adds nothing to memory; ``reset()`` forgets everything.
2. ``temporal``: nothing from the future. After each session is observed, nothing retrieved comes from a session not
   observed yet (the temporal protocol asks each question after the sessions before it only).
3. ``forgetting``: by every route. ``forget`` of a speaker (Wren: what she said, what was said to her, whatever names
   her), of a session, of a turn and of a memory leaves the selected content reachable by no route: ``retrieve``,
   ``context``, ``len``, any string the strategy object still holds, the on-disk embedding cache under ``cache_dir``
   (pipelines.models.embeddings) and whatever ``extra_leaks(strategy)`` inspects (a process cache of your own);
   what was not selected stays; ``forget`` returns at least the number of items that went.
4. ``isolation``: one memory per episode. Two RealMem-like episodes whose speakers are both "User" and "Assistant",
   fed to one instance without a reset, never answer each other's questions; the first's memory is kept for when it
   is entered again; an episode entered before its first session holds nothing of another; episodes sharing session
   and turn ids (LongMemEval's haystacks) each observe their own.

5. ``identifiers``: rankings from content alone. A user's thread of sessions (a trip planned over three sessions
   between others) is fed twice: as it is, and with every identifier and title it carries scrambled (the episode's,
   the sessions', turns', memories' and queries' ids: what a published file names its sessions and turns with,
   LongMemEval's ``answer_`` ids, LoCoMo's dia_ids, RealMem's session uuids; RealMem's ``session_identifier``, which
   names the project, is kept by no loader). Every question, asked after the last session and by a turn of a new
   session in a conversation (``Query.preceding``, its session and turn ids scrambled too), must get the same
   ranking of the same texts, the same session ranking and the same context from both: a strategy that reads an
   identifier (a thread told by its name) fails.

``empty_by_design=True`` for a strategy that holds nothing on purpose (the ``no_history`` floor): the checks that
need something retrieved are skipped, the others still run.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Iterable

from pipelines.data.schema import Episode, Memory, MemoryLink, Query, Session, Speaker, Triplet, Turn
from pipelines.memory.base import MemoryStrategy, Retrieved, Selector
from pipelines.models.embeddings import CACHE_FILE, text_hash

T0 = datetime(2023, 1, 5, 10, 0)
FORGOTTEN = re.compile(r"violin|wren|stamps|practis", re.IGNORECASE)   # in every item about Wren, in no other
KEPT = re.compile(r"snakes|kyoto", re.IGNORECASE)                       # what the Vivek session keeps
PROBES = ("What instrument is played in the orchestra?", "Which hobby involves collecting old things?",
          "What happens every evening?", "Who is afraid of snakes?", "Where did Juno move?")   # no marker in them
BUDGETS = (0, 8, 64, 4096)


class ConformanceError(AssertionError):
    """A strategy failed one check of the kit (the message names the check and what was found)."""


# --- the scenarios -------------------------------------------------------------------------------------------------

def _turn(sid: str, n: int, speaker: str, text: str, *triplets: tuple[str, str, str]) -> Turn:
    return Turn(id=f"{sid}:T{n}", speaker=speaker, text=text,
                triplets=[Triplet(subject=s, relation=r, object=o) for s, r, o in triplets])


def juno_episode() -> Episode:
    """Juno (the main speaker) talks with Wren (S1, S3) and Vivek (S2); S3 opens with what Juno says TO Wren without
    her name ("Since you play the violin..."). Summaries, memories, a link and triplets on every turn."""
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
QUESTIONS = ("What do I do every Sunday?", "Who is my teacher?")


TRIP = [("I want to plan a trip to Kyoto in April for the cherry blossoms.",
         "Kyoto in April is lovely; let us draft a day-by-day plan with temples and gardens."),
        ("I bake sourdough bread every Sunday and want a better crust.",
         "A hotter oven and steam in the first minutes give a better sourdough crust."),
        ("About the trip: can we add a day in Nara to the plan and keep the budget under 2000 euros?",
         "Nara fits as a day trip from Kyoto; the plan now has seven days and stays under 2000 euros."),
        ("I need a spreadsheet for my monthly budget with rent and groceries.",
         "Here is a budget spreadsheet with columns for rent, groceries and savings."),
        ("Back to the Kyoto plan: book the ryokan near the station for the first three nights.",
         "The ryokan near Kyoto station is booked for the first three nights of the trip.")]
THREAD_QUESTIONS = ("Where do we stay at the start of the trip?", "What is the budget of the trip?",
                    "How do I get a better crust?")


def thread_episode(eid: str = "trip") -> Episode:
    """A RealMem-like user's five sessions, of which the first, third and fifth plan one trip (a thread that no
    identifier names), and the second and fourth are about other things."""
    sessions = [Session(id=f"{eid}:S{k + 1}", index=k, timestamp=T0 + timedelta(days=7 * k), partner="Assistant",
                        turns=[Turn(id=f"{eid}:S{k + 1}:0", speaker="User", text=user),
                               Turn(id=f"{eid}:S{k + 1}:1", speaker="Assistant", text=assistant)],
                        memories=[Memory(id=f"{eid}:S{k + 1}:M1", owner="Assistant", about="User", text=user,
                                         session_id=f"{eid}:S{k + 1}")])
                for k, (user, assistant) in enumerate(TRIP)]
    return Episode(id=eid, source="realmem", main_speaker="User",
                   speakers=[Speaker(name="User"), Speaker(name="Assistant")], sessions=sessions, split="test")


def scrambled(episode: Episode) -> tuple[Episode, dict[str, str]]:
    """(``episode`` with every identifier replaced by an opaque one of another order, the map new id -> old)."""
    new_of: dict[str, str] = {}

    def new(old: str) -> str:
        return new_of.setdefault(old, "x" + hashlib.sha1(f"scrambled:{old}".encode()).hexdigest()[:12])

    sessions = [s.model_copy(update={
        "id": new(s.id),
        "turns": [t.model_copy(update={"id": new(t.id), "memory_tags": [new(m) for m in t.memory_tags]})
                  for t in s.turns],
        "memories": [m.model_copy(update={"id": new(m.id), "session_id": new(m.session_id)}) for m in s.memories],
        "links": [link.model_copy(update={"from_id": new(link.from_id), "to_id": new(link.to_id)})
                  for link in s.links]}) for s in episode.sessions]
    queries = [q.model_copy(update={"id": new(q.id), "session_id": q.session_id and new(q.session_id),
                                    "turn_id": q.turn_id and new(q.turn_id),
                                    "evidence_turns": [new(i) for i in q.evidence_turns],
                                    "evidence_sessions": [new(i) for i in q.evidence_sessions],
                                    "evidence_memories": [new(i) for i in q.evidence_memories]})
               for q in episode.queries]
    twin = episode.model_copy(update={"id": new(episode.id), "sessions": sessions, "queries": queries})
    return twin, {v: k for k, v in new_of.items()}


# --- probes ------------------------------------------------------------------------------------------------------

def ask(question: str) -> Query:
    return Query(id="q", question=question)


def observe(strategy: MemoryStrategy, episode: Episode) -> None:
    for session in episode.sessions:
        strategy.observe(episode, session)


def everything(strategy: MemoryStrategy, probes: Iterable[str] = PROBES) -> tuple[list[Retrieved], list[str]]:
    """Every item a probe reaches (a ranking as deep as the memory) and every context (a large budget)."""
    probes = list(probes)
    items = [i for p in probes for i in strategy.retrieve(ask(p), max(len(strategy), 1))]
    return items, [strategy.context(ask(p), 4096) for p in probes]


def answers(strategy: MemoryStrategy) -> list[set[tuple]]:
    """What each question retrieves (as sets: a strategy may reorder ties between calls, e.g. by access time)."""
    return [{(i.text, i.turn_id, i.session_id, i.memory_id) for i in strategy.retrieve(ask(q), 10)}
            for q in QUESTIONS]


def held_strings(obj, packages: tuple[str, ...] = ("pipelines.",)) -> list[str]:
    """Every string reachable from ``obj`` through containers and the objects of ``packages`` (the project's, the
    strategy's own, networkx graphs and rank_bm25 indexes); models, arrays, functions and input Episodes are not
    memory."""
    owners = (*packages, "networkx.", "rank_bm25")
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
        elif type(x).__module__.startswith(owners) and hasattr(x, "__dict__"):
            todo += list(vars(x).values())
    return out


def episode_texts(episode: Episode) -> set[str]:
    """Every text of a scenario an embedder may have cached: turns (bare and "speaker: text"), triplets and their
    entities, memories, summaries."""
    texts = set()
    for session in episode.sessions:
        texts |= {m.text for m in session.memories} | ({session.summary} if session.summary else set())
        for t in session.turns:
            texts |= {t.text, f"{t.speaker}: {t.text}"}
            texts |= {x for tr in t.triplets for x in (tr.serialise(), tr.subject, tr.object)}
    return texts


# --- the kit -----------------------------------------------------------------------------------------------------

@dataclass
class _Kit:
    make: Callable[[], MemoryStrategy]
    cache_dir: Path | None
    extra_leaks: Callable[[MemoryStrategy], list[str]] | None
    empty_by_design: bool
    name: str = ""

    def fail(self, check: str, message: str) -> None:
        raise ConformanceError(f"[{check}] strategy {self.name!r}: {message}")

    def expect(self, ok: bool, check: str, message: str) -> None:
        if not ok:
            self.fail(check, message)

    def fresh(self) -> MemoryStrategy:
        strategy = self.make()
        if not isinstance(strategy, MemoryStrategy):
            self.fail("contract", f"make() returned {type(strategy).__name__}, not a MemoryStrategy")
        self.name = self.name or strategy.name or type(strategy).__name__
        return strategy

    def leaks(self, strategy: MemoryStrategy, pattern: re.Pattern[str], episode: Episode) -> list[str]:
        """Content matching ``pattern`` still held by the strategy object or by a cache it fills."""
        module = type(strategy).__module__
        packages = ("pipelines.", module.split(".")[0] + ".", module)
        found = [s for s in held_strings(strategy, packages) if pattern.search(s)]
        db = self.cache_dir / CACHE_FILE if self.cache_dir is not None else None
        if db is not None and db.exists():
            with sqlite3.connect(db) as con:
                hashes = {h for (h,) in con.execute("SELECT hash FROM embedding")}
            found += [f"on disk: {t}" for t in episode_texts(episode) if pattern.search(t) and text_hash(t) in hashes]
        if self.extra_leaks is not None:
            found += [s for s in self.extra_leaks(strategy) if pattern.search(s)]
        return found

    # 1. the five calls
    def contract(self) -> None:
        episode = juno_episode()
        strategy = self.fresh()
        strategy.prepare([episode])
        self.expect(len(strategy) == 0, "contract", f"prepare() added {len(strategy)} items (only observe adds)")
        strategy.enter(episode)
        for budget in BUDGETS:
            text = strategy.context(ask(PROBES[0]), budget)
            self.expect(text == "", "contract", f"an empty memory gave a context of {text!r}")
        observe(strategy, episode)
        observed = {s.id for s in episode.sessions}
        turns = {t.id for s in episode.sessions for t in s.turns}
        depth = len(strategy)
        if not self.empty_by_design:
            self.expect(depth > 0, "contract", "observing three sessions left the memory empty")
        for probe in PROBES:
            for k in (1, 3, max(depth, 1)):
                got = strategy.retrieve(ask(probe), k)
                self.expect(len(got) <= k, "contract", f"retrieve(q, {k}) gave {len(got)} items")
                self.expect(all(isinstance(i, Retrieved) for i in got), "contract",
                            "retrieve() must give Retrieved items")
                scores = [i.score for i in got]
                self.expect(all(a >= b for a, b in zip(scores, scores[1:])), "contract",
                            f"retrieve() must rank best first (scores never increase), got {scores}")
                for item in got:
                    self.expect(item.session_id is None or item.session_id in observed, "contract",
                                f"an item names session {item.session_id!r}, never observed")
                    self.expect(item.turn_id is None or item.turn_id in turns, "contract",
                                f"an item names turn {item.turn_id!r}, never observed")
            full = strategy.retrieve(ask(probe), max(depth, 1))
            self.expect(len(full) <= depth, "contract",   # a graph may reach only what a query's entities connect
                        f"len() is {depth} but a full ranking holds {len(full)} items")
            for budget in BUDGETS:
                text = strategy.context(ask(probe), budget)
                used = strategy.counter.count(text)
                self.expect(used <= budget, "contract", f"context(q, {budget}) holds {used} tokens")
        strategy.reset()
        self.expect(len(strategy) == 0 and strategy.retrieve(ask(PROBES[0]), 5) == [], "contract",
                    "reset() left items in memory")

    # 2. nothing from the future
    def temporal(self) -> None:
        episode = juno_episode()
        strategy = self.fresh()
        seen: set[str] = set()
        for session in episode.sessions:
            strategy.observe(episode, session)
            seen.add(session.id)
            for probe in PROBES:
                for item in strategy.retrieve(ask(probe), max(len(strategy), 1)):
                    self.expect(item.session_id is None or item.session_id in seen, "temporal",
                                f"after sessions {sorted(seen)} an item comes from {item.session_id!r}")
                context = strategy.context(ask(probe), 4096)
                later = [t.text for s in episode.sessions if s.id not in seen for t in s.turns if t.text in context]
                self.expect(not later, "temporal", f"the context holds later sessions' turns: {later}")

    # 3. forgetting, by every route
    def forgetting(self) -> None:
        episode = juno_episode()
        strategy = self.fresh()
        observe(strategy, episode)
        items, contexts = everything(strategy)
        if not self.empty_by_design:   # the content to forget was there, by some route
            self.expect(any(FORGOTTEN.search(i.text) for i in items) and any(FORGOTTEN.search(c) for c in contexts),
                        "forgetting", "nothing about Wren was retrieved before the forget (the scenario needs it)")
        held = len(strategy)
        removed = strategy.forget(Selector.of(speakers=["Wren"]))
        self.expect(isinstance(removed, int) and removed >= held - len(strategy), "forgetting",
                    f"forget() returned {removed!r} but {held - len(strategy)} items went")
        leaks = self.leaks(strategy, FORGOTTEN, episode)
        self.expect(not leaks, "forgetting", f"after forget(speakers=['Wren']) still held: {leaks[:5]}")
        items, contexts = everything(strategy)
        self.expect(not [i.text for i in items if FORGOTTEN.search(i.text)], "forgetting",
                    f"retrieve() still reaches Wren: {[i.text for i in items if FORGOTTEN.search(i.text)][:3]}")
        self.expect(not [c for c in contexts if FORGOTTEN.search(c)], "forgetting", "context() still names Wren")
        self.expect(all(i.session_id in (None, "f:S2") for i in items), "forgetting",
                    f"items of Wren's sessions remain: {sorted({i.session_id for i in items} - {'f:S2'})}")
        self.expect(len(strategy) == len(strategy.retrieve(ask(PROBES[0]), max(len(strategy), 1))), "forgetting",
                    "len() disagrees with a full ranking after the forget")
        if not self.empty_by_design:   # the rest stays: what was said with Vivek and does not name Wren
            self.expect(len(strategy) > 0 and any(KEPT.search(i.text) for i in items), "forgetting",
                        "forgetting Wren also removed what was said with Vivek")
        self.expect(not self.leaks(strategy, FORGOTTEN, episode), "forgetting", "the probes brought Wren back")
        self._routes()

    def _routes(self) -> None:
        """forget by session, by turn and by memory: the selected content unreachable, by its exact text."""
        routes = [("session", Selector.of(sessions=["f:S3"]),
                   ("Since you play the violin, I thought of you the other day.",
                    "That is kind, I practise every evening.")),
                  ("turn", Selector.of(turns=["f:S2:T1"]), ("I am terrified of snakes.",)),
                  ("memory", Selector.of(memories=["f:S1:M1"]), ())]
        for route, selector, texts in routes:
            episode = juno_episode()
            strategy = self.fresh()
            observe(strategy, episode)
            held = len(strategy)
            removed = strategy.forget(selector)
            self.expect(isinstance(removed, int) and removed >= held - len(strategy), "forgetting",
                        f"forget by {route} returned {removed!r} but {held - len(strategy)} items went")
            items, contexts = everything(strategy)
            gone = [i for i in items if (route == "session" and i.session_id == "f:S3")
                    or (route == "turn" and i.turn_id == "f:S2:T1") or (route == "memory" and i.memory_id == "f:S1:M1")]
            self.expect(not gone, "forgetting", f"forget by {route}: items of it remain: {[i.text for i in gone][:3]}")
            pattern = re.compile("|".join(re.escape(t) for t in texts)) if texts else None
            if pattern is not None:
                reached = [i.text for i in items if pattern.search(i.text)] + [c for c in contexts if pattern.search(c)]
                self.expect(not reached, "forgetting", f"forget by {route}: still reached: {reached[:3]}")
                leaks = self.leaks(strategy, pattern, episode)
                self.expect(not leaks, "forgetting", f"forget by {route}: still held: {leaks[:3]}")

    # 4. one memory per episode
    def isolation(self) -> None:
        a = user_episode("persona-a", VIOLIN, sids=("a1", "a2"))
        b = user_episode("persona-b", BREAD, sids=("b1", "b2"))
        only_a, only_b = self.fresh(), self.fresh()
        observe(only_a, a)
        observe(only_b, b)
        if not self.empty_by_design:
            self.expect(all(answers(only_b)) and all(answers(only_a)), "isolation",
                        "a memory of one episode did not answer its own questions")
        shared = self.fresh()          # one instance fed both, never reset
        observe(shared, a)
        observe(shared, b)
        self.expect(answers(shared) == answers(only_b) and len(shared) == len(only_b), "isolation",
                    "an instance fed two episodes answers the second differently from one fed the second alone")
        self.expect(not any(OF_A.search(text) for got in answers(shared) for text, *_ in got), "isolation",
                    "the second episode's questions reach the first episode's items")
        self.expect(not any(OF_A.search(shared.context(ask(q), 4096)) for q in QUESTIONS), "isolation",
                    "the second episode's context holds the first episode's items")
        shared.enter(a)                # A's memory was kept, apart
        self.expect(answers(shared) == answers(only_a) and len(shared) == len(only_a), "isolation",
                    "entering the first episode again did not give back its memory")
        self.expect(not any(OF_B.search(text) for got in answers(shared) for text, *_ in got), "isolation",
                    "the first episode's questions reach the second episode's items")
        shared.enter(b)                # forgetting in B's scope leaves A's alone
        shared.forget(Selector.of(sessions=["b1", "b2"]))
        self.expect(len(shared) == 0 and answers(shared) == [set(), set()], "isolation",
                    "forgetting every session of the current episode left items")
        shared.enter(a)
        self.expect(len(shared) == len(only_a), "isolation", "a forget in one episode removed another's items")

        fresh = self.fresh()           # an episode entered before its first session holds nothing of another
        observe(fresh, a)
        fresh.enter(b)
        self.expect(len(fresh) == 0 and answers(fresh) == [set(), set()], "isolation",
                    "an episode entered before its first session holds another's items")
        self.expect(not any(OF_A.search(fresh.context(ask(q), 4096)) for q in QUESTIONS), "isolation",
                    "an episode entered before its first session has another's context")
        fresh.reset()
        fresh.enter(a)
        self.expect(len(fresh) == 0, "isolation", "reset() did not forget every episode")

        qa, qb = user_episode("q-a", VIOLIN), user_episode("q-b", BREAD)   # shared session and turn ids
        only_qb, both = self.fresh(), self.fresh()
        observe(only_qb, qb)
        observe(both, qa)
        observe(both, qb)
        self.expect(answers(both) == answers(only_qb), "isolation",
                    "episodes sharing session ids: the second did not observe its own sessions")
        both.forget(Selector.of(turns=["s1:0"]))   # ids name items of the current episode only
        both.enter(qa)
        only_qa = self.fresh()
        observe(only_qa, qa)
        self.expect(answers(both) == answers(only_qa), "isolation",
                    "a forget by id in one episode reached another episode's item of the same id")


    # 5. rankings from content alone
    def identifiers(self) -> None:
        episode = thread_episode()
        twin, old_of = scrambled(episode)
        plain, other = self.fresh(), self.fresh()
        conversation = [Turn(id=f"{episode.id}:S6:0", speaker="User", text="I'm back to finish planning."),
                        Turn(id=f"{episode.id}:S6:1", speaker="Assistant", text="Welcome back, where were we?")]

        def restore(value: str | None) -> str | None:
            return old_of.get(value, value) if value is not None else None

        for k, (session, copy) in enumerate(zip(episode.sessions, twin.sessions)):
            plain.observe(episode, session)
            other.observe(twin, copy)
            for question in THREAD_QUESTIONS:
                for preceding in ([], conversation):
                    # in a conversation: asked by the third turn of a sixth session (the thread it continues
                    # lifted); else after the last session
                    inside = {"session_id": f"{episode.id}:S6", "turn_id": f"{episode.id}:S6:2"} if preceding else {}
                    asked = Query(id="q", question=question, preceding=preceding, **inside)
                    twin_asked = asked.model_copy(update={
                        "preceding": [t.model_copy(update={"id": f"x{n}"}) for n, t in enumerate(preceding)],
                        **({"session_id": "xs6", "turn_id": "xs6t2"} if preceding else {})})
                    a = plain.retrieve(asked, max(len(plain), 1))
                    b = other.retrieve(twin_asked, max(len(other), 1))
                    where = f"after {k + 1} sessions, {question!r}" + (" in a conversation" if preceding else "")
                    # a memory a strategy writes has an id of its own (made of a session's id, perhaps)
                    self.expect([(i.text, i.session_id, i.turn_id, i.memory_id in old_of.values()) for i in a]
                                == [(i.text, restore(i.session_id), restore(i.turn_id), i.memory_id in old_of)
                                    for i in b], "identifiers",
                                f"{where}: scrambling the ids changed the ranking ({[i.text[:30] for i in a][:3]} "
                                f"against {[i.text[:30] for i in b][:3]})")
                    ranked_a, ranked_b = plain.session_ranking(asked), other.session_ranking(twin_asked)
                    self.expect(ranked_a == (None if ranked_b is None else [restore(s) for s in ranked_b]),
                                "identifiers", f"{where}: scrambling the ids changed the session ranking")
                    self.expect(plain.context(asked, 4096) == other.context(twin_asked, 4096), "identifiers",
                                f"{where}: scrambling the ids changed the context")


CHECKS = ("contract", "temporal", "forgetting", "isolation", "identifiers")


def check_strategy(make: Callable[[], MemoryStrategy], *, cache_dir: str | Path | None = None,
                   extra_leaks: Callable[[MemoryStrategy], list[str]] | None = None, empty_by_design: bool = False,
                   checks: Iterable[str] = CHECKS) -> None:
    """Run the kit's ``checks`` (default: all five) on fresh strategies from ``make()``; a :class:`ConformanceError`
    names the first that fails. ``cache_dir``: where the strategy keeps its on-disk embedding cache (checked for
    forgotten texts); ``extra_leaks(strategy)``: the strings of any other cache the strategy fills."""
    kit = _Kit(make, Path(cache_dir) if cache_dir is not None else None, extra_leaks, empty_by_design)
    for check in checks:
        if check not in CHECKS:
            raise ValueError(f"unknown check {check!r}; the kit's checks: {', '.join(CHECKS)}")
        getattr(kit, check)()
