"""Synthetic mixed-session episodes: the tiny profile's dataset (METHODS.md section 0).

Offline and deterministic from a seed (no language model): it imitates the structure of MiSC
(Mixed-Session Conversation with Egocentric Memory, arXiv 2410.02503, sections 3.1-3.3) and the
query evidence of RealMem (seed 002) so that every stage has ground truth to learn from, and so that
retrieval is not solved by any one signal (words, meaning, the session, the date) alone:

- Scenario (MiSC 3.1): one main speaker and P partners (names, job or relationship, persona
  sentences); sessions in time order, exactly one partner each, every partner at least once.
- Dialogue (3.2): turns alternate main speaker / partner; a fact turn states one fact of its
  speaker and carries its ground-truth triplet (subject, relation, object); chit-chat turns carry
  none (``distractor_density``); now and then chit-chat names a speaker who is not in the session.
  Facts can change later (job, city, plans, ...).
- Threads (RealMem's project threads): ``threads`` projects of the main speaker (a kitchen
  renovation, a wedding, a podcast, ...; ``synthetic_lexicon.PROJECTS``), each discussed over
  ``thread_sessions`` sessions drawn at random, so that threads interleave with each other and with the
  other sessions (session ids are numbered in time order and say nothing of the thread). A thread
  session opens on the project ("Quick update on the kitchen renovation."), states one or two of its
  facts (budget, contractor, ... : triplets of the main speaker, which later sessions of the thread may
  change) and the partner follows up on it.
- Distractor sessions (``decoy_rate``): look-alike turns that carry no fact: someone else's project of
  the kind of one of the episode's threads (its words, a speaker's name: "My sister renovated her kitchen
  last year and the budget doubled.") or a fact of someone who is not a speaker ("Guess what, my cousin
  works as a nurse."): lexical and semantic look-alikes of the evidence. Small talk is such a look-alike
  now and then too.
- Egocentric memory (3.3): at the end of session k the main speaker writes memories about itself
  and about the session's partner, in the third person ("Mia works as a nurse."). A changed fact
  becomes a new memory with MemoryLink(from_id=new, to_id=old); memories that share a fact across
  speakers are linked too ("across the memories of different speakers"). Nothing is removed.
- Memory tagging: a main-speaker turn that refers back to an earlier memory (or updates its own
  earlier fact) carries that memory's id in ``Turn.memory_tags``.
- Queries (RealMem's temporal protocol): asked in session k >= ``first_query_session`` with
  evidence (turns, sessions, memories) strictly from sessions < k, in four categories:
  single-session, multi-session (evidence in >= 2 sessions), knowledge-update (the newest value of
  a changed fact; evidence: the previous statement and the update turn) and temporal (dates /
  order of mentions, the value before the latest change, or the value at a time the question names).
  In a later session of a thread the first query is the session's opening question about the project,
  naming it vaguely ("About the kitchen renovation we discussed, which contractor did I hire?", "...,
  what did I decide last time?"), its evidence the newest statements of the thread's earlier sessions.
  Questions are worded like their evidence turn (sharing a word with it) or, with ``paraphrase_rate``,
  paraphrased: a question that shares no word with it, its words swapped through the synonym table
  (``synthetic_lexicon.SYNONYMS``) and a thread named by a vague name ("the home makeover"), so that
  lexical match fails and meaning still matches. With ``time_rate`` a question names when its evidence
  was said ("From our chat in March: ...", "... we discussed two weeks ago"), an expression that
  :mod:`pipelines.memory.temporal`'s rules resolve against the question's date to a range holding that
  session (:func:`time_expressions`; of those that fit, one holding the fewest earlier sessions); a
  fact of the main speaker is also asked by the partner it was told to.

Time gaps between sessions are drawn log-uniformly in [min_gap_hours, max_gap_days] and sorted, so
gaps grow from days to months (Conversation Chronicles' "a few hours / days / months later").
Ids: episode "syn-0003", session "syn-0003:S2", turn "syn-0003:S2:T5", memory "syn-0003:S2:M1",
query "syn-0003:Q7"; all numbers in ids are 1-based while ``Session.index`` is 0-based.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Sequence

from pipelines.data import synthetic_lexicon as lex
from pipelines.data.schema import (SPLITS, Episode, Memory, MemoryLink, Query, Session, Speaker,
                                   Triplet, Turn, write_episodes)
from pipelines.errors import ConfigError

SOURCE = "synthetic"
CATEGORIES = ("single-session", "multi-session", "knowledge-update", "temporal")


@dataclass(frozen=True)
class SyntheticConfig:
    """Knobs of the generator (params.yaml ``synthetic``); every field is validated on creation."""

    episodes: int = 12                 # number of episodes, split by episode into train/valid/test
    sessions: int = 16                 # sessions per episode (1 to 1000+)
    turns: int = 8                     # turns per session, alternating main speaker / partner
    partners: int = 3                  # partners of the main speaker (one per session)
    distractor_density: float = 0.3    # probability that a turn is chit-chat carrying no fact
    queries_per_session: int = 3       # queries asked in each session from first_query_session on
    seed: int = 2022                   # everything is a function of this seed
    train_fraction: float = 2 / 3      # share of episodes in the train split
    valid_fraction: float = 1 / 6      # share of episodes in the valid split
    test_fraction: float = 1 / 6       # share of episodes in the test split
    update_rate: float = 0.3           # probability that a fact turn changes an earlier mutable fact
    recall_rate: float = 0.3           # probability that a main-speaker turn refers to a memory
    first_query_session: int = 2       # 1-based session number of the first queries (>= 2)
    min_gap_hours: float = 72.0        # shortest gap between consecutive sessions
    max_gap_days: float = 90.0         # longest gap between consecutive sessions
    start_year: int = 2022             # the first session falls in this year
    id_prefix: str = "syn"             # episode ids are f"{id_prefix}-{n:04d}"
    threads: int = 3                   # project threads of the main speaker per episode (as many as fit:
                                       # threads x thread_sessions <= sessions), 0 to len(PROJECTS)
    thread_sessions: int = 4           # sessions per thread (at least 2: a thread continues an earlier one)
    decoy_rate: float = 0.5            # probability that a session is a distractor session (look-alike turns)
    paraphrase_rate: float = 0.3       # probability that a question is paraphrased (no word of its evidence)
    time_rate: float = 0.5             # probability that a question names the time of its evidence (if it can)

    def __post_init__(self) -> None:
        ints = ("episodes", "sessions", "turns", "partners", "queries_per_session", "seed",
                "first_query_session", "start_year", "threads", "thread_sessions")
        for name in ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"synthetic.{name} must be an integer, got {value!r}.")
        floats = ("distractor_density", "train_fraction", "valid_fraction", "test_fraction", "update_rate",
                  "recall_rate", "min_gap_hours", "max_gap_days", "decoy_rate", "paraphrase_rate", "time_rate")
        for name in floats:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"synthetic.{name} must be a finite number, got {value!r}.")
        if not isinstance(self.id_prefix, str):
            raise ConfigError(f"synthetic.id_prefix must be a string, got {self.id_prefix!r}.")
        for name in ("episodes", "sessions", "partners"):
            if getattr(self, name) < 1:
                raise ConfigError(f"synthetic.{name} must be at least 1, got {getattr(self, name)}.")
        if self.turns < 2:
            raise ConfigError(f"synthetic.turns must be at least 2 (one main-speaker turn and one "
                              f"partner turn), got {self.turns}.")
        if self.partners > len(lex.PARTNER_ROLES):
            raise ConfigError(f"synthetic.partners is {self.partners}, but only "
                              f"{len(lex.PARTNER_ROLES)} partner roles exist.")
        if self.queries_per_session < 0:
            raise ConfigError("synthetic.queries_per_session must be 0 or more.")
        if self.first_query_session < 2:
            raise ConfigError("synthetic.first_query_session must be 2 or more: a query's evidence "
                              "comes from earlier sessions, and session 1 has none.")
        if not 0.0 <= self.distractor_density < 1.0:
            raise ConfigError(f"synthetic.distractor_density must be in [0, 1), got "
                              f"{self.distractor_density}: at 1 no turn would carry a fact.")
        for name in ("update_rate", "recall_rate", "decoy_rate", "paraphrase_rate", "time_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"synthetic.{name} must be in [0, 1], got {getattr(self, name)}.")
        if not 0 <= self.threads <= len(lex.PROJECTS):
            raise ConfigError(f"synthetic.threads must be between 0 and {len(lex.PROJECTS)} (the projects of "
                              f"the word lists), got {self.threads}.")
        if self.thread_sessions < 2:
            raise ConfigError(f"synthetic.thread_sessions must be at least 2 (a thread continues an earlier "
                              f"session), got {self.thread_sessions}.")
        fractions = self.fractions()
        if any(f < 0 for f in fractions) or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
            raise ConfigError(f"synthetic split fractions (train, valid, test) = {fractions} must "
                              f"be non-negative and sum to 1.")
        if not 0 < self.min_gap_hours <= self.max_gap_days * 24:
            raise ConfigError(f"synthetic.min_gap_hours ({self.min_gap_hours}) must be positive and "
                              f"at most max_gap_days ({self.max_gap_days}) x 24 hours.")
        if not 1900 <= self.start_year <= 2900:
            raise ConfigError(f"synthetic.start_year must be between 1900 and 2900, got {self.start_year}.")
        if not self.id_prefix.strip() or ":" in self.id_prefix:
            raise ConfigError("synthetic.id_prefix must be non-empty and must not contain ':'.")

    def fractions(self) -> tuple[float, float, float]:
        """(train, valid, test) fractions."""
        return (self.train_fraction, self.valid_fraction, self.test_fraction)

    def to_dict(self) -> dict:
        """The resolved config (for MLflow params)."""
        return asdict(self)


def split_counts(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Episodes per split by largest remainder; each split with a positive fraction gets at least
    one episode when there are enough episodes (24 x (2/3, 1/6, 1/6) -> (16, 4, 4))."""
    exact = [n * f for f in fractions]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(3), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    positive = [i for i in range(3) if fractions[i] > 0]
    if n >= len(positive):
        for i in positive:
            if counts[i] == 0:
                donor = max(range(3), key=lambda j: (counts[j], -j))
                counts[donor] -= 1
                counts[i] = 1
    return counts[0], counts[1], counts[2]


@dataclass(eq=False)
class _Fact:
    """One statement of a fact in the dialogue (and the memory written for it)."""

    person: str
    relation: lex.Relation
    value: str
    session: int          # 0-based session index
    position: int         # 0-based turn index within the session
    turn_id: str
    memory_id: str
    update: bool          # True when it changes an earlier value of the same (person, relation)


@dataclass
class _SessionDraft:
    turns: list[Turn] = field(default_factory=list)
    facts: list[_Fact] = field(default_factory=list)
    recalls: list[_Fact] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)


class _EpisodeBuilder:
    """Builds one episode; all randomness comes from ``self.rng`` (seeded by seed and index)."""

    def __init__(self, config: SyntheticConfig, number: int):
        self.cfg = config
        self.rng = random.Random(f"mnemos-synthetic:{config.seed}:{number}")
        self.eid = f"{config.id_prefix}-{number:04d}"
        self.chains: dict[tuple[str, str], list[_Fact]] = {}   # (person, relation) -> statements
        self.keys_of: dict[str, list[tuple[str, str]]] = {}     # person -> chain keys, in order
        self.shared: dict[tuple[str, str], list[_Fact]] = {}    # (relation, value) -> statements
        self.asked: set[tuple[str, ...]] = set()  # (category, evidence memory ids) already asked
        self.text_of: dict[str, str] = {}                        # turn id -> text
        self.thread_at: dict[int, tuple[lex.Project, int]] = {}  # session index -> (project, j-th session of it)
        self.decoy_at: dict[int, lex.Project] = {}               # session index -> the project it looks like
        self.projects: list[lex.Project] = []                    # the episode's threads
        self._k = 0                                              # the session the queries are asked in
        self._para = False                                       # the query being made is paraphrased

    # --- scenario ---------------------------------------------------------------------------
    def _speakers(self) -> None:
        rng = self.rng
        names = rng.sample(lex.NAMES, self.cfg.partners + 1)
        self.main, self.partners = names[0], names[1:]
        # Each person's profile: the initial value of every relation.
        self.profile = {p: {r.name: rng.choice(r.values) for r in lex.RELATIONS} for p in names}
        roles = rng.sample(lex.PARTNER_ROLES, self.cfg.partners)
        self.role = {self.main: self.profile[self.main]["works_as"], **dict(zip(self.partners, roles))}
        self.speakers = []
        for p in names:
            persona_rel = rng.sample([r for r in lex.RELATIONS if not r.mutable], 3)
            persona = [r.fill(r.say[0], self.profile[p][r.name]) for r in persona_rel]
            self.speakers.append(Speaker(name=p, role=self.role[p], persona=persona))
            self.keys_of[p] = []

    def _schedule(self) -> tuple[list[str], list[datetime]]:
        """Partner of each session (a permutation of the partners, then rotating permutations
        that never repeat the previous partner) and the session timestamps."""
        rng, n = self.rng, self.cfg.sessions
        order: list[str] = []
        while len(order) < n:
            cycle = rng.sample(self.partners, len(self.partners))
            if order and len(cycle) > 1 and cycle[0] == order[-1]:
                cycle[0], cycle[-1] = cycle[-1], cycle[0]
            order.extend(cycle)
        lo, hi = math.log(self.cfg.min_gap_hours), math.log(self.cfg.max_gap_days * 24)
        gaps = sorted(math.exp(rng.uniform(lo, hi)) for _ in range(n - 1))   # hours, increasing
        t = datetime(self.cfg.start_year, 1, 1, rng.randint(8, 19), rng.choice((0, 15, 30, 45)))
        t += timedelta(days=rng.randint(0, 364))
        times = [t]
        for gap in gaps:
            t += timedelta(minutes=round(gap * 60))
            times.append(t)
        return order[:n], times

    def _plan(self) -> None:
        """The threads (as many projects as fit, each on ``thread_sessions`` sessions drawn at random, so that
        threads interleave) and the distractor sessions (each session with probability ``decoy_rate``: someone
        else's project of the kind of one of the other threads, or of any project when there is none)."""
        cfg, rng = self.cfg, self.rng
        count = min(cfg.threads, cfg.sessions // cfg.thread_sessions)
        self.projects = rng.sample(lex.PROJECTS, count)
        drawn = rng.sample(range(cfg.sessions), count * cfg.thread_sessions)
        for t, project in enumerate(self.projects):
            for j, k in enumerate(sorted(drawn[t * cfg.thread_sessions:(t + 1) * cfg.thread_sessions])):
                self.thread_at[k] = (project, j)
        for k in range(cfg.sessions):
            if rng.random() < cfg.decoy_rate:
                own = self.thread_at[k][0] if k in self.thread_at else None
                self.decoy_at[k] = rng.choice([p for p in self.projects if p is not own]
                                              or [p for p in lex.PROJECTS if p is not own])

    # --- dialogue ----------------------------------------------------------------------------
    def _pick_fact(self, person: str, k: int,
                   used: set[str]) -> tuple[lex.Relation, str, _Fact | None] | None:
        """A new fact of ``person``, or (with probability update_rate) a change of an older one."""
        rng = self.rng
        fresh = [r for r in lex.RELATIONS if (person, r.name) not in self.chains and r.name not in used]
        stale = [r for r in lex.RELATIONS if r.mutable and r.name not in used
                 and (person, r.name) in self.chains and self.chains[person, r.name][-1].session < k]
        if stale and (not fresh or rng.random() < self.cfg.update_rate):
            rel = rng.choice(stale)
            old = self.chains[person, rel.name][-1]
            return rel, rng.choice([v for v in rel.values if v != old.value]), old
        if fresh:
            rel = rng.choice(fresh)
            return rel, self.profile[person][rel.name], None
        return None

    def _pick_slot(self, project: lex.Project, k: int,
                   used: set[str]) -> tuple[lex.Relation, str, _Fact | None] | None:
        """A slot of the thread's project not stated yet, or (half the time when one can) a change of one
        stated in an earlier session of the thread."""
        rng, main = self.rng, self.main
        fresh = [r for r in project.slots if (main, r.name) not in self.chains and r.name not in used]
        stale = [r for r in project.slots if r.name not in used and (main, r.name) in self.chains
                 and self.chains[main, r.name][-1].session < k]
        if stale and (not fresh or rng.random() < 0.5):
            rel = rng.choice(stale)
            old = self.chains[main, rel.name][-1]
            return rel, rng.choice([v for v in rel.values if v != old.value]), old
        if fresh:
            rel = rng.choice(fresh)
            return rel, rng.choice(rel.values), None
        return None

    def _recall(self, k: int, partner: str, recalled: set[str]) -> _Fact | None:
        """A current (not superseded) memory from an earlier session: mostly about the partner."""
        rng = self.rng
        r = rng.random()
        others = [p for p in self.partners if p != partner]
        others = rng.sample(others, len(others))
        people = ([partner, self.main] + others if r < 0.6 else [self.main, partner] + others
                  if r < 0.8 else others + [partner, self.main])
        for person in people:
            keys = [key for key in self.keys_of[person] if self.chains[key][-1].session < k
                    and self.chains[key][-1].memory_id not in recalled]
            if keys:
                return self.chains[rng.choice(keys)][-1]
        return None

    def _chat(self, present: tuple[str, str]) -> tuple[str, str]:
        """Small talk; now and then naming a speaker of the episode who is not in the session."""
        absent = [p for p in [self.main, *self.partners] if p not in present]
        stated = [key[1] for key in self.chains if key[1] not in _PROJECT_SLOTS]
        if stated and self.rng.random() < 0.2:
            return self._look_alike(stated)
        if absent and self.rng.random() < 0.15:
            template = self.rng.choice(lex.NAME_CHAT)
            return "friends", template.format(name=self.rng.choice(absent),
                                              day=self.rng.choice(lex.CHAT_SLOTS["day"]))
        topic, template = self.rng.choice(lex.CHIT_CHAT)
        slots = {name: self.rng.choice(pool) for name, pool in lex.CHAT_SLOTS.items()}
        for name, rel in (("city", "lives_in"), ("food", "favorite_food"), ("pet", "has_pet"),
                          ("team", "supports_team"), ("show", "watches_show")):
            slots[name] = self.rng.choice(lex.RELATION_BY_NAME[rel].values)
        return topic, template.format(**slots)

    def _roles(self, k: int, content: list[bool]) -> list[str | None]:
        """What each turn of session k is beyond the usual (None): in a thread session the main speaker opens
        it ("open", no fact), states one or two of the project's facts ("slot") and the partner follows up on it
        ("follow", no fact); a distractor session has one to three look-alike turns ("decoy", no fact; two or
        three outside the threads), in place of small talk where there is some."""
        rng, n = self.rng, self.cfg.turns
        roles: list[str | None] = [None] * n
        facts = sum(content)
        if k in self.thread_at:
            _, j = self.thread_at[k]
            mains = list(range(0, n, 2))
            if len(mains) >= 2:
                roles[0], mains = "open", mains[1:]
            for pos in rng.sample(mains, min(2 if j == 0 else rng.choice((1, 2)), len(mains))):
                roles[pos], content[pos] = "slot", True
            partners = list(range(1, n, 2))
            if partners and rng.random() < 0.7:
                roles[rng.choice(partners)] = "follow"
        if k in self.decoy_at:
            free = [p for p in range(n) if roles[p] is None]
            chat = [p for p in free if not content[p]]
            rest = [p for p in free if content[p]]
            want = min(len(free), rng.choice((1, 2)) if k in self.thread_at else rng.choice((2, 3)))
            picked = rng.sample(chat, min(want, len(chat)))
            picked += rng.sample(rest, want - len(picked))
            for pos in picked:
                roles[pos] = "decoy"
        # As many turns as drawn still carry a fact (the roles took some or made some): the others swap.
        free = [p for p in range(n) if roles[p] is None]
        for pos in rng.sample(free, len(free)):
            now = sum(1 for p in range(n) if roles[p] == "slot" or roles[p] is None and content[p])
            if now != facts and content[pos] == (now > facts):
                content[pos] = not content[pos]
        return roles

    def _session(self, k: int, partner: str) -> _SessionDraft:
        """The turns of session k: recall, fact or chit-chat, alternating main speaker / partner; in a thread
        session the project's turns, in a distractor session the look-alike turns."""
        cfg, rng, draft = self.cfg, self.rng, _SessionDraft()
        sid = f"{self.eid}:S{k + 1}"
        content = [rng.random() >= cfg.distractor_density for _ in range(cfg.turns)]
        if not any(content):
            content[rng.randrange(cfg.turns)] = True      # every session has one non-chit-chat turn
        roles = self._roles(k, content)
        project, j = self.thread_at.get(k, (None, 0))
        decoy = self.decoy_at.get(k)
        used = {self.main: set(), partner: set()}          # relations already stated this session
        recalled: set[str] = set()                          # memories already recalled this session
        said: set[str] = set()                              # look-alike templates already used this session
        last_was_fact = False
        for pos in range(cfg.turns):
            speaker = self.main if pos % 2 == 0 else partner
            tid = f"{sid}:T{pos + 1}"
            turn = None
            role = roles[pos]
            if role == "slot":
                turn = self._fact_turn(k, pos, speaker, used[speaker], draft, project)
                if turn is not None and pos == 0:          # no turn left to open the session with
                    opener = rng.choice(project.opens if j == 0 else project.again)
                    turn = (f"{opener} {turn[0]}", *turn[1:])
            elif role == "open":
                turn = rng.choice(project.opens if j == 0 else project.again), [], []
            elif role == "follow":
                turn = rng.choice(project.follow_ups), [], []
            elif role == "decoy":
                turn = self._decoy_turn(speaker, decoy, said, draft)
            if role is None and content[pos] and speaker == self.main and rng.random() < cfg.recall_rate:
                turn = self._recall_turn(k, partner, recalled, draft)
            if turn is None and (role is None or role == "slot") and content[pos]:
                turn = self._fact_turn(k, pos, speaker, used[speaker], draft)
            if turn is None:
                topic, text = self._chat((self.main, partner))
                draft.topics.append(topic)
                turn = (text, [], [])
            text, triplets, tags = turn
            if last_was_fact and rng.random() < 0.35:
                text = f"{rng.choice(lex.REACTIONS)} {text}"
            if pos == 0:
                text = f"{rng.choice(lex.GREETINGS).format(name=partner)} {text}"
            elif pos == 1:
                text = f"{rng.choice(lex.GREETING_REPLIES).format(name=self.main)} {text}"
            last_was_fact = bool(draft.facts) and draft.facts[-1].turn_id == tid
            self.text_of[tid] = text
            draft.turns.append(Turn(id=tid, speaker=speaker, text=text, triplets=triplets,
                                    memory_tags=tags))
        return draft

    def _decoy_turn(self, speaker: str, project: lex.Project, said: set[str], draft: _SessionDraft):
        """A look-alike turn of a distractor session (no fact): half the time someone else's project of the kind
        of ``project`` (its words, a speaker's name), else a fact of someone who is not a speaker, of a relation
        the speakers have stated (its meaning, no speaker's name)."""
        rng = self.rng
        stated = list(dict.fromkeys(key[1] for key in self.chains if key[1] not in _PROJECT_SLOTS))
        if rng.random() < 0.5 or not stated:
            others = [p for p in [self.main, *self.partners] if p != speaker]
            fresh = [d for d in project.decoys if d not in said] or list(project.decoys)
            template = rng.choice(fresh)
            said.add(template)
            draft.topics.append(project.decoy_topic)
            return template.format(name=rng.choice(others)), [], []
        topic, text = self._look_alike(stated)
        draft.topics.append(topic)
        return text, [], []

    def _look_alike(self, stated: list[str]) -> tuple[str, str]:
        """(topic, text): a fact of one of the relations ``stated`` about someone who is not a speaker."""
        rel = lex.RELATION_BY_NAME[self.rng.choice(stated)]
        text = self.rng.choice(lex.LOOK_ALIKES).format(who=self.rng.choice(lex.THIRD_PARTIES),
                                                       vp=rel.fill(rel.vp, self.rng.choice(rel.values)))
        return lex.LOOK_ALIKE_TOPIC, text

    def _recall_turn(self, k: int, partner: str, recalled: set[str], draft: _SessionDraft):
        """The main speaker refers back to an earlier memory; the turn is tagged with its id."""
        memory = self._recall(k, partner, recalled)
        if memory is None:
            return None
        recalled.add(memory.memory_id)
        draft.recalls.append(memory)
        triplet = Triplet(subject=memory.person, relation=memory.relation.name, object=memory.value)
        return self._recall_text(memory, partner), [triplet], [memory.memory_id]

    def _fact_turn(self, k: int, pos: int, speaker: str, used: set[str], draft: _SessionDraft,
                   project: lex.Project | None = None):
        """``speaker`` states a new fact or changes an earlier one (memory written at session end); with
        ``project``, a fact of that thread (the main speaker's)."""
        picked = self._pick_slot(project, k, used) if project is not None else self._pick_fact(speaker, k, used)
        if picked is None:
            return None
        rng, (rel, value, old) = self.rng, picked
        sid = f"{self.eid}:S{k + 1}"
        used.add(rel.name)
        fact = _Fact(speaker, rel, value, k, pos, f"{sid}:T{pos + 1}", f"{sid}:M{len(draft.facts) + 1}",
                     old is not None)
        draft.facts.append(fact)
        self._remember(fact)
        text = rel.fill(rng.choice(rel.change if old else rel.say), value)
        if rng.random() < 0.15:
            text += rng.choice(lex.FOLLOW_UPS)
        # The main speaker changing its own fact uses (and is tagged with) its earlier memory.
        tags = [old.memory_id] if old is not None and speaker == self.main else []
        return text, [Triplet(subject=speaker, relation=rel.name, object=value)], tags

    def _recall_text(self, memory: _Fact, partner: str) -> str:
        rng, rel, value = self.rng, memory.relation, memory.value
        if memory.person == partner:
            return rng.choice(lex.RECALL_PARTNER).format(you=rel.fill(rel.you, value))
        if memory.person == self.main:
            said = rel.fill(rng.choice(rel.say), value)
            if not said.startswith(("I ", "I'")):
                said = said[0].lower() + said[1:]
            return rng.choice(lex.RECALL_SELF) + said
        return rng.choice(lex.RECALL_OTHER).format(name=memory.person, vp=rel.fill(rel.vp, value))

    def _remember(self, fact: _Fact) -> None:
        key = (fact.person, fact.relation.name)
        if key not in self.chains:
            self.chains[key] = []
            self.keys_of[fact.person].append(key)
        self.chains[key].append(fact)
        self.shared.setdefault((fact.relation.name, fact.value), []).append(fact)

    # --- egocentric memory and summary --------------------------------------------------------
    def _memories(self, draft: _SessionDraft, sid: str) -> tuple[list[Memory], list[MemoryLink]]:
        memories, links = [], []
        for fact in draft.facts:
            rel = fact.relation
            template = lex.MEMORY_UPDATE if fact.update else lex.MEMORY_FACT
            memories.append(Memory(id=fact.memory_id, owner=self.main, about=fact.person,
                                   text=template.format(s=fact.person, vp=rel.fill(rel.vp, fact.value),
                                                        vp_now=rel.vp_now(fact.value)),
                                   session_id=sid, kind="update" if fact.update else "fact"))
            chain = self.chains[fact.person, rel.name]
            at = chain.index(fact)
            if at > 0:                                    # the newer memory updates the older one
                links.append(MemoryLink(from_id=fact.memory_id, to_id=chain[at - 1].memory_id))
            same = self.shared[rel.name, fact.value]
            earlier = [f for f in same[: same.index(fact)] if f.person != fact.person]
            if earlier:                                   # the same fact of another speaker
                links.append(MemoryLink(from_id=fact.memory_id, to_id=earlier[-1].memory_id))
        return memories, links

    def _summary(self, k: int, draft: _SessionDraft, partner: str, when: datetime) -> str:
        rng = self.rng
        parts = [rng.choice(lex.SUMMARY_OPEN).format(main=self.main, partner=partner,
                                                     role=self.role[partner], date=_date(when))]
        if k in self.thread_at:
            parts.append(rng.choice(lex.SUMMARY_THREAD).format(main=self.main, partner=partner,
                                                               label=self.thread_at[k][0].label))
        for fact in draft.facts:
            rel = fact.relation
            template = rng.choice(lex.SUMMARY_UPDATE if fact.update else lex.SUMMARY_FACT)
            parts.append(template.format(s=fact.person, vp=rel.fill(rel.vp, fact.value),
                                         vp_now=rel.vp_now(fact.value), you=rel.fill(rel.you, fact.value)))
        for fact in draft.recalls:
            rel = fact.relation
            parts.append(rng.choice(lex.SUMMARY_RECALL).format(main=self.main, s=fact.person,
                                                               vp=rel.fill(rel.vp, fact.value)))
        if draft.topics:
            topics = list(dict.fromkeys(draft.topics))
            listed = topics[0] if len(topics) == 1 else ", ".join(topics[:-1]) + " and " + topics[-1]
            parts.append(rng.choice(lex.SUMMARY_CHAT).format(topics=listed))
        return " ".join(parts)

    # --- queries -----------------------------------------------------------------------------
    def _queries(self, k: int, sid: str, when: datetime, counter: int) -> list[Query]:
        """``queries_per_session`` queries asked in session k over facts of sessions < k; in a later session of
        a thread, the first is the thread's query (the session's opening question about the project)."""
        rng, keys = self.rng, [key for p in self.keys_of for key in self.keys_of[p]]
        if not keys:
            return []
        self._k = k
        makers = {"single-session": self._q_single, "multi-session": self._q_multi,
                  "knowledge-update": self._q_update, "temporal": self._q_temporal}
        out = []
        for _ in range(self.cfg.queries_per_session):
            self._para = rng.random() < self.cfg.paraphrase_rate
            made = fallback = None
            if not out and k in self.thread_at and self.thread_at[k][1] > 0:
                made = self._q_thread(self.thread_at[k][0])
            # The intended category cycles through the four; an infeasible one (e.g. no fact has
            # changed yet) falls back to the others in random order.
            intended = CATEGORIES[(counter + len(out)) % len(CATEGORIES)]
            rest = [c for c in CATEGORIES if c != intended]
            for category in ([] if made else [intended] + rng.sample(rest, len(rest))):
                for _attempt in range(4):                     # prefer a question not yet asked
                    candidate = makers[category](keys)
                    if candidate is None:
                        break
                    fallback = fallback or (category, *candidate)
                    if (category, *(f.memory_id for f in candidate[2])) not in self.asked:
                        made = (category, *candidate)
                        break
                if made is not None:
                    break
            category, question, answer, evidence = made or fallback
            self.asked.add((category, *(f.memory_id for f in evidence)))
            if self._para:
                question = self._paraphrase(question, evidence)
            evidence = sorted(evidence, key=lambda f: (f.session, f.position))
            number = counter + len(out) + 1
            out.append(Query(
                id=f"{self.eid}:Q{number}", session_id=sid, question=question, answer=answer,
                evidence_turns=list(dict.fromkeys(f.turn_id for f in evidence)),
                evidence_sessions=list(dict.fromkeys(f"{self.eid}:S{f.session + 1}" for f in evidence)),
                evidence_memories=list(dict.fromkeys(f.memory_id for f in evidence)),
                category=category, timestamp=when))
        return out

    def _ask(self, fact: _Fact, person: str) -> str:
        """A question about ``fact``'s relation for ``person``: one that shares a word with the turn that stated
        it (lexical match finds it), or, for a paraphrased question, one that shares none, when there is one."""
        said = _words(self.text_of[fact.turn_id])
        asks = fact.relation.ask
        share = [a for a in asks if _words(a.format(s=person)) & said]
        pool = [a for a in asks if a not in share] if self._para else share
        return self.rng.choice(pool or asks).format(s=person)

    def _paraphrase(self, question: str, evidence: list[_Fact]) -> str:
        """``question`` with each word that its evidence turns also use swapped for a synonym
        (:data:`~pipelines.data.synthetic_lexicon.SYNONYMS`) that they do not use; unchanged when that would
        bring an answer into the question."""
        said = set(_WORD.findall(" ".join(self.text_of[f.turn_id] for f in evidence).lower()))

        def swap(match: re.Match) -> str:
            word = match.group(0)
            options = [o for o in lex.SYNONYMS.get(word.lower(), ()) if not set(_WORD.findall(o.lower())) & said]
            if word.lower() not in said or not options:
                return word
            new = self.rng.choice(options)
            return new[0].upper() + new[1:] if word[0].isupper() else new

        out = _WORD.sub(swap, question)
        return question if any(f.value in out for f in evidence) else out

    def _when(self, target: int, others: Sequence[int] = ()) -> str | None:
        """With probability ``time_rate``, an expression naming the day of session ``target`` as seen from the
        query's session (:func:`time_expressions`) whose range holds no session of ``others``."""
        if self.rng.random() >= self.cfg.time_rate:
            return None
        return self._time_phrase(target, others)

    def _time_phrase(self, target: int, others: Sequence[int] = ()) -> str | None:
        """An expression naming session ``target``'s day whose range holds no session of ``others``; of those, one
        whose range holds the fewest earlier sessions (the most telling)."""
        day, today = self.times[target].date(), self.times[self._k].date()
        avoid = [self.times[i].date() for i in others]
        held = [self.times[i].date() for i in range(self._k)]
        fits = [(sum(start <= d <= end for d in held), phrase) for phrase, start, end in time_expressions(day, today)
                if not any(start <= d <= end for d in avoid)]
        if not fits:
            return None
        fewest = min(n for n, _ in fits)
        return self.rng.choice([phrase for n, phrase in fits if n == fewest])

    def _timed(self, question: str, fact: _Fact) -> str:
        """``question`` naming the time ``fact`` was said (``time_rate``), when the expression names no answer."""
        when = self._when(fact.session)
        if when is None or fact.value in when:
            return question
        return self.rng.choice(lex.TIME_WRAP).format(when=when, q_lower=question[0].lower() + question[1:])

    def _q_thread(self, project: lex.Project):
        """The opening question of a later session of a thread: names the project vaguely (by a hint, or by a
        vague name when the question is paraphrased) and asks about the newest of its facts (the latest statement, with the
        previous one when it changed: knowledge-update; or the two newest facts: multi-session), now and then
        with the time it was discussed."""
        rng, main = self.rng, self.main
        chains = [self.chains[main, r.name] for r in project.slots if (main, r.name) in self.chains]
        if not chains:
            return None
        chains.sort(key=lambda c: (c[-1].session, c[-1].position), reverse=True)
        pairs = [(a, b) for a in chains for b in chains if a[-1].session > b[-1].session]
        r = rng.random()
        if pairs and r < 0.3:
            a, b = pairs[0][0][-1], pairs[0][1][-1]
            category, evidence, answer = "multi-session", [a, b], f"{a.value} and {b.value}"
            q = rng.choice(lex.THREAD_MULTI).format(s="I", n1=a.relation.noun, n2=b.relation.noun)
        elif r < 0.55:                                      # the latest decision, asked vaguely
            newest = chains[0][-1]
            category, evidence, answer = "single-session", [newest], newest.value
            q = rng.choice(lex.THREAD_LAST)
        else:
            chain = chains[0] if rng.random() < 0.7 else rng.choice(chains)
            newest = chain[-1]
            q = self._ask(newest, "I")
            if len(chain) >= 2:
                category, evidence = "knowledge-update", chain[-2:]
                q = q[:-1] + rng.choice(lex.KU_SUFFIXES)
            else:
                category, evidence = "single-session", [newest]
            answer = newest.value
        hint = rng.choice(project.vague if self._para else project.hints)
        when = self._when(max(f.session for f in evidence))
        when = f" {when}" if when and not any(f.value in when for f in evidence) else ""
        question = rng.choice(lex.THREAD_ASK).format(hint=hint, when=when, q=q[0].lower() + q[1:])
        return category, question, answer, evidence

    def _q_single(self, keys):
        singles = [key for key in keys if len(self.chains[key]) == 1]
        if not singles:
            return None
        fact = self.chains[self.rng.choice(singles)][0]
        if fact.person == self.main and self.rng.random() < 0.4:     # asked by whom it was told to
            question = self.rng.choice(lex.TOLD_ASK).format(s=fact.person, partner=self.order[fact.session],
                                                            noun=fact.relation.noun)
            return question, fact.value, [fact]
        question = self._ask(fact, fact.person)
        return self._timed(question, fact), fact.value, [fact]

    def _q_update(self, keys):
        """The newest value of a changed fact; evidence: the previous statement and the update."""
        changed = [key for key in keys if len(self.chains[key]) >= 2]
        if not changed:
            return None
        chain = self.chains[self.rng.choice(changed)]
        newest = chain[-1]
        base = self._ask(newest, newest.person)
        return base[:-1] + self.rng.choice(lex.KU_SUFFIXES), newest.value, chain[-2:]

    def _two_facts(self, keys, pick):
        """Two facts from different sessions (``pick`` chooses each chain's statement)."""
        rng = self.rng
        first = pick(self.chains[rng.choice(keys)])
        others = [key for key in keys if pick(self.chains[key]).session != first.session]
        if not others:
            return None
        same_rel = [key for key in others if key[1] == first.relation.name]
        second = pick(self.chains[rng.choice(same_rel if same_rel and rng.random() < 0.5 else others)])
        return first, second

    def _q_multi(self, keys):
        pair = self._two_facts(keys, lambda chain: chain[-1])
        if pair is None:
            return None
        a, b = pair
        if self.rng.random() < 0.5:                        # two questions in one, each worded as alone
            q1, q2 = self._ask(a, a.person), self._ask(b, b.person)
            question = self.rng.choice(lex.MULTI_TWO).format(q1=q1[0].lower() + q1[1:], Q1=q1,
                                                             q2=q2[0].lower() + q2[1:])
        else:
            question = self.rng.choice(lex.MULTI_ASK).format(a=a.person, n1=a.relation.noun,
                                                             b=b.person, n2=b.relation.noun)
        return question, f"{a.value} and {b.value}", [a, b]

    def _q_at(self, keys):
        """The value a changed fact had at a time the question names, which holds none of its other
        statements (evidence: the statement made then)."""
        rng = self.rng
        changed = [key for key in keys if len(self.chains[key]) >= 2]
        for key in rng.sample(changed, len(changed)):
            chain = self.chains[key]
            for fact in rng.sample(chain, len(chain)):
                when = self._time_phrase(fact.session, [f.session for f in chain if f is not fact])
                if when is None or fact.value in when:
                    continue
                template = rng.choice(lex.TEMPORAL_AT)
                question = template.format(s=fact.person, noun=fact.relation.noun, when=when,
                                           When=when[0].upper() + when[1:])
                return question, fact.value, [fact]
        return None

    def _q_temporal(self, keys):
        rng = self.rng
        if rng.random() < self.cfg.time_rate:
            made = self._q_at(keys)
            if made is not None:
                return made
        kinds = ["first", "order"] + (["before"] if any(len(self.chains[k]) >= 2 for k in keys) else [])
        kind = rng.choice(kinds)
        if kind == "order":
            pair = self._two_facts(keys, lambda chain: chain[0])
            if pair is not None:
                a, b = pair
                question = rng.choice(lex.TEMPORAL_ORDER).format(a=a.person, n1=a.relation.noun,
                                                                 b=b.person, n2=b.relation.noun)
                earlier = a if a.session < b.session else b
                return question, f"{earlier.person}'s {earlier.relation.noun}", [a, b]
            kind = "first"
        if kind == "before":
            chain = self.chains[rng.choice([k for k in keys if len(self.chains[k]) >= 2])]
            old, new = chain[-2], chain[-1]
            question = rng.choice(lex.TEMPORAL_BEFORE).format(s=new.person, noun=new.relation.noun)
            return question, old.value, [old, new]
        fact = self.chains[rng.choice(keys)][0]
        question = rng.choice(lex.TEMPORAL_FIRST).format(s=fact.person, noun=fact.relation.noun)
        return question, _date(self.times[fact.session]), [fact]

    # --- the episode -------------------------------------------------------------------------
    def build(self, split: str) -> Episode:
        self._speakers()
        self.order, self.times = self._schedule()
        self._plan()
        sessions, queries = [], []
        for k, (partner, when) in enumerate(zip(self.order, self.times)):
            sid = f"{self.eid}:S{k + 1}"
            if k + 1 >= self.cfg.first_query_session:
                queries += self._queries(k, sid, when, len(queries))
            draft = self._session(k, partner)
            memories, links = self._memories(draft, sid)
            sessions.append(Session(id=sid, index=k, timestamp=when, partner=partner,
                                    turns=draft.turns, memories=memories, links=links,
                                    summary=self._summary(k, draft, partner, when)))
        return Episode(id=self.eid, source=SOURCE, main_speaker=self.main, speakers=self.speakers,
                       sessions=sessions, queries=queries, split=split)


_WORD = re.compile(r"\w+")
_STOP = frozenset("what which who whom does do did is the a an to of in on for and or s their they them has have i my "
                  "me you at with be been how where when will about it that this was are up so not get into from "
                  "there here its some all any most more m ve ll d t re".split())


def _words(text: str) -> set[str]:
    """The content words of ``text``, lower-cased (what a lexical match can match on)."""
    return set(_WORD.findall(text.lower())) - _STOP

_PROJECT_SLOTS = frozenset(r.name for r in lex.PROJECT_RELATIONS)


def time_expressions(day: date, today: date) -> list[tuple[str, date, date]]:
    """The expressions that name ``day`` as seen from ``today`` (the question's date), each with the range of
    days it stands for under the rules of :mod:`pipelines.memory.temporal` (a month without a year: the latest
    one not after today; weeks from Monday): "earlier today", "yesterday", "three days ago", "last week", "two
    weeks ago", "earlier this month", "last month", "four months ago", "in March" ("in March 2022" more than a
    year back), "on March 5" ("on March 5, 2022")."""
    if day > today:
        return []
    words, out = lex.NUMBER_WORDS, []
    days = (today - day).days
    if days == 0:
        out.append(("earlier today", today, today))
    elif days == 1:
        out.append(("yesterday", day, day))
    elif days < len(words):
        out.append((f"{words[days]} days ago", day, day))
    monday = day - timedelta(days=day.weekday())
    weeks = ((today - timedelta(days=today.weekday())) - monday).days // 7
    if 1 <= weeks < len(words):
        out.append(("last week" if weeks == 1 else f"{words[weeks]} weeks ago", monday, monday + timedelta(days=6)))
    months = (today.year - day.year) * 12 + today.month - day.month
    first = day.replace(day=1)
    last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    name = lex.MONTHS[day.month - 1]
    if months == 0 and days > 0:
        out.append(("earlier this month", first, today))
    elif 1 <= months < len(words):
        out.append(("last month" if months == 1 else f"{words[months]} months ago", first, last))
    out.append((f"in {name}" if months < 12 else f"in {name} {day.year}", first, last))
    recent = (day.month, day.day) <= (today.month, today.day) and day.year == today.year or \
        (day.month, day.day) > (today.month, today.day) and day.year == today.year - 1
    out.append((f"on {name} {day.day}" if recent else f"on {name} {day.day}, {day.year}", day, day))
    return out


def _date(when: datetime) -> str:
    """'14 March 2022' (locale-independent)."""
    return f"{when.day} {lex.MONTHS[when.month - 1]} {when.year}"


def generate(config: SyntheticConfig | None = None) -> list[Episode]:
    """All episodes of ``config`` (deterministic: the same config gives byte-identical JSON).

    Episode n depends only on (seed, n); splits are assigned by episode from a seeded shuffle
    with :func:`split_counts` episodes per split.
    """
    config = config or SyntheticConfig()
    counts = split_counts(config.episodes, config.fractions())
    numbers = list(range(1, config.episodes + 1))
    random.Random(f"mnemos-synthetic-splits:{config.seed}").shuffle(numbers)
    split_of: dict[int, str] = {}
    at = 0
    for split, count in zip(SPLITS, counts):
        for number in numbers[at: at + count]:
            split_of[number] = split
        at += count
    return [_EpisodeBuilder(config, n).build(split_of[n]) for n in range(1, config.episodes + 1)]


def write_splits(episodes: list[Episode], out_dir: str | Path) -> dict[str, int]:
    """Write ``train.jsonl``, ``valid.jsonl`` and ``test.jsonl`` (every file, even when empty)
    under ``out_dir`` with :func:`schema.write_episodes`; returns the episode count per split."""
    out_dir = Path(out_dir)
    return {split: write_episodes(out_dir / f"{split}.jsonl", [e for e in episodes if e.split == split])
            for split in SPLITS}
