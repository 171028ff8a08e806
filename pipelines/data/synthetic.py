"""Synthetic mixed-session episodes: the tiny profile's dataset (METHODS.md section 0).

Offline and deterministic from a seed (no language model): it imitates the structure of MiSC
(Mixed-Session Conversation with Egocentric Memory, arXiv 2410.02503, sections 3.1-3.3) and the
query evidence of RealMem (seed 002) so that every stage has ground truth to learn from:

- Scenario (MiSC 3.1): one main speaker and P partners (names, job or relationship, persona
  sentences); sessions in time order, exactly one partner each, every partner at least once.
- Dialogue (3.2): turns alternate main speaker / partner; a fact turn states one fact of its
  speaker and carries its ground-truth triplet (subject, relation, object); chit-chat turns carry
  none (``distractor_density``). Facts can change later (job, city, plans, ...).
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
  order of mentions, or the value before the latest change).

Time gaps between sessions are drawn log-uniformly in [min_gap_hours, max_gap_days] and sorted, so
gaps grow from hours to months (Conversation Chronicles' "a few hours / days / months later").
Ids: episode "syn-0003", session "syn-0003:S2", turn "syn-0003:S2:T5", memory "syn-0003:S2:M1",
query "syn-0003:Q7"; all numbers in ids are 1-based while ``Session.index`` is 0-based.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from pipelines.data import synthetic_lexicon as lex
from pipelines.data.schema import (SPLITS, Episode, Memory, MemoryLink, Query, Session, Speaker,
                                   Triplet, Turn, write_episodes)
from pipelines.errors import ConfigError

SOURCE = "synthetic"
CATEGORIES = ("single-session", "multi-session", "knowledge-update", "temporal")


@dataclass(frozen=True)
class SyntheticConfig:
    """Knobs of the generator (params.yaml ``synthetic``); every field is validated on creation."""

    episodes: int = 24                 # number of episodes, split by episode into train/valid/test
    sessions: int = 6                  # sessions per episode (1 to 1000+)
    turns: int = 10                    # turns per session, alternating main speaker / partner
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
    min_gap_hours: float = 2.0         # shortest gap between consecutive sessions
    max_gap_days: float = 90.0         # longest gap between consecutive sessions
    start_year: int = 2022             # the first session falls in this year
    id_prefix: str = "syn"             # episode ids are f"{id_prefix}-{n:04d}"

    def __post_init__(self) -> None:
        ints = ("episodes", "sessions", "turns", "partners", "queries_per_session", "seed",
                "first_query_session", "start_year")
        for name in ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"synthetic.{name} must be an integer, got {value!r}.")
        floats = ("distractor_density", "train_fraction", "valid_fraction", "test_fraction", "update_rate",
                  "recall_rate", "min_gap_hours", "max_gap_days")
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
        for name in ("update_rate", "recall_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"synthetic.{name} must be in [0, 1], got {getattr(self, name)}.")
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

    def _chat(self) -> tuple[str, str]:
        topic, template = self.rng.choice(lex.CHIT_CHAT)
        slots = {name: self.rng.choice(pool) for name, pool in lex.CHAT_SLOTS.items()}
        for name, rel in (("city", "lives_in"), ("food", "favorite_food"), ("pet", "has_pet"),
                          ("team", "supports_team"), ("show", "watches_show")):
            slots[name] = self.rng.choice(lex.RELATION_BY_NAME[rel].values)
        return topic, template.format(**slots)

    def _session(self, k: int, partner: str) -> _SessionDraft:
        """The turns of session k: recall, fact or chit-chat, alternating main speaker / partner."""
        cfg, rng, draft = self.cfg, self.rng, _SessionDraft()
        sid = f"{self.eid}:S{k + 1}"
        content = [rng.random() >= cfg.distractor_density for _ in range(cfg.turns)]
        if not any(content):
            content[rng.randrange(cfg.turns)] = True      # every session has one non-chit-chat turn
        used = {self.main: set(), partner: set()}          # relations already stated this session
        recalled: set[str] = set()                          # memories already recalled this session
        last_was_fact = False
        for pos in range(cfg.turns):
            speaker = self.main if pos % 2 == 0 else partner
            tid = f"{sid}:T{pos + 1}"
            turn = None
            if content[pos] and speaker == self.main and rng.random() < cfg.recall_rate:
                turn = self._recall_turn(k, partner, recalled, draft)
            if content[pos] and turn is None:
                turn = self._fact_turn(k, pos, speaker, used[speaker], draft)
            if turn is None:
                topic, text = self._chat()
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
            draft.turns.append(Turn(id=tid, speaker=speaker, text=text, triplets=triplets,
                                    memory_tags=tags))
        return draft

    def _recall_turn(self, k: int, partner: str, recalled: set[str], draft: _SessionDraft):
        """The main speaker refers back to an earlier memory; the turn is tagged with its id."""
        memory = self._recall(k, partner, recalled)
        if memory is None:
            return None
        recalled.add(memory.memory_id)
        draft.recalls.append(memory)
        triplet = Triplet(subject=memory.person, relation=memory.relation.name, object=memory.value)
        return self._recall_text(memory, partner), [triplet], [memory.memory_id]

    def _fact_turn(self, k: int, pos: int, speaker: str, used: set[str], draft: _SessionDraft):
        """``speaker`` states a new fact or changes an earlier one (memory written at session end)."""
        picked = self._pick_fact(speaker, k, used)
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

    def _summary(self, draft: _SessionDraft, partner: str, when: datetime) -> str:
        rng = self.rng
        parts = [rng.choice(lex.SUMMARY_OPEN).format(main=self.main, partner=partner,
                                                     role=self.role[partner], date=_date(when))]
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
        """``queries_per_session`` queries asked in session k over facts of sessions < k."""
        rng, keys = self.rng, [key for p in self.keys_of for key in self.keys_of[p]]
        if not keys:
            return []
        makers = {"single-session": self._q_single, "multi-session": self._q_multi,
                  "knowledge-update": self._q_update, "temporal": self._q_temporal}
        out = []
        for _ in range(self.cfg.queries_per_session):
            # The intended category cycles through the four; an infeasible one (e.g. no fact has
            # changed yet) falls back to the others in random order.
            intended = CATEGORIES[(counter + len(out)) % len(CATEGORIES)]
            rest = [c for c in CATEGORIES if c != intended]
            made = fallback = None
            for category in [intended] + rng.sample(rest, len(rest)):
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
            evidence = sorted(evidence, key=lambda f: (f.session, f.position))
            number = counter + len(out) + 1
            out.append(Query(
                id=f"{self.eid}:Q{number}", session_id=sid, question=question, answer=answer,
                evidence_turns=list(dict.fromkeys(f.turn_id for f in evidence)),
                evidence_sessions=list(dict.fromkeys(f"{self.eid}:S{f.session + 1}" for f in evidence)),
                evidence_memories=list(dict.fromkeys(f.memory_id for f in evidence)),
                category=category, timestamp=when))
        return out

    def _q_single(self, keys):
        singles = [key for key in keys if len(self.chains[key]) == 1]
        if not singles:
            return None
        fact = self.chains[self.rng.choice(singles)][0]
        return self.rng.choice(fact.relation.ask).format(s=fact.person), fact.value, [fact]

    def _q_update(self, keys):
        """The newest value of a changed fact; evidence: the previous statement and the update."""
        changed = [key for key in keys if len(self.chains[key]) >= 2]
        if not changed:
            return None
        chain = self.chains[self.rng.choice(changed)]
        newest = chain[-1]
        base = self.rng.choice(newest.relation.ask).format(s=newest.person)
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
        question = self.rng.choice(lex.MULTI_ASK).format(a=a.person, n1=a.relation.noun,
                                                         b=b.person, n2=b.relation.noun)
        return question, f"{a.value} and {b.value}", [a, b]

    def _q_temporal(self, keys):
        rng = self.rng
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
        order, self.times = self._schedule()
        sessions, queries = [], []
        for k, (partner, when) in enumerate(zip(order, self.times)):
            sid = f"{self.eid}:S{k + 1}"
            if k + 1 >= self.cfg.first_query_session:
                queries += self._queries(k, sid, when, len(queries))
            draft = self._session(k, partner)
            memories, links = self._memories(draft, sid)
            sessions.append(Session(id=sid, index=k, timestamp=when, partner=partner,
                                    turns=draft.turns, memories=memories, links=links,
                                    summary=self._summary(draft, partner, when)))
        return Episode(id=self.eid, source=SOURCE, main_speaker=self.main, speakers=self.speakers,
                       sessions=sessions, queries=queries, split=split)


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
