"""EMMA's three dialogue-module tasks in the input formats of Appendix E.1 (seed 000, arXiv 2410.02503).

One FLAN-T5 model learns three tasks, told apart by the prefix of the input sequence (Appendix E.1):

    generation: [MAIN SPEAKER NAME] MAIN SPEAKER JOB [SUB SPEAKER NAME] SUB SPEAKER JOB
        [MEMORY] MEMORY SENTENCE 1 [LINK] LINK MEMORY SENTENCE [LINK] ... [MEMORY] MEMORY SENTENCE N [LINK] ...
        [NOW] SESSION NUM [USER] USER UTTERANCE [BOT]                       -> the main speaker's next utterance
    summarize [ABOUT WHO]: {FINAL GENERATION SEQUENCE}                     -> memories "m1 [SEP] m2" or "[NONE]"
    memory sentence 1: {MEMORY 1} memory sentence 2: {MEMORY 2}             -> "positive" or "negative"

The paper leaves its placeholders open; they are resolved as the authors' released inference code
resolves them, so that a model trained here reads what the published EMMA reads:

- a bracketed speaker placeholder is the speaker's name in brackets: ``[Mia] nurse [Leo] her brother``;
- ``[USER]`` / ``[BOT]`` are the bracketed names of the partner and of the main speaker, and every turn
  of the current session so far follows its speaker's tag, so the sequence ends with the main speaker's
  tag: ``... [Leo] How was work? [Mia]`` (``turn_tags="roles"`` writes the literal ``[USER]`` / ``[BOT]``);
- SESSION NUM is the ordinal session: ``[NOW] second session``;
- ``[ABOUT WHO]`` is ``[ABOUT_Mia]``;
- the FINAL GENERATION SEQUENCE is the finished session in the generation format without the prefix
  and the memory block: speakers, ``[NOW]``, every turn ("we use the entire session history as input");
- a memory sentence carries its provenance, ``Leo got a dog. (about Leo, from first session)``, as the
  authors' code stores memories (``memory_provenance``; summarisation targets never carry it);
- the linking prefix is the paper's ``memory sentence 1:`` (the authors' script writes ``sentence1:``).

Which memories a generation example shows (sections 3.3 and 4.2): the memories the turn is tagged with
(MiSC's memory tags; at inference, the retriever's top-1), each followed by every memory linked to it in
either direction (one hop) that already exists, i.e. was written at the end of an earlier session; links
run from a newer memory to the earlier one it refers to or updates, so both the update of a retrieved
memory and the memory a retrieved update replaced are shown. Summarisation: at the end of each session,
one example about the main speaker and one about the partner, whose target is the session's memories
about that speaker (owned by the main speaker, in stored order) joined by `` [SEP] ``, or ``[NONE]``.
Linking: memory sentence 1 is the earlier memory, 2 the newer one (section 4.1: a new memory is compared
with the memories before it in its own session, then with those of earlier sessions, across speakers;
:func:`link_candidates` lists the pairs in that order);
each gold link is a "positive" example, and ``negatives_per_positive`` times as many "negative" pairs are
drawn, seeded per episode, from the unlinked pairs of that same candidate set (one owner).

LoCoMo's per-session observations (memories of kind ``observation``, pipelines/data/loaders/locomo.py: the facts
each speaker told about themselves in a session, with no owner's point of view, no links and no memory tags) are
summarisation data of another shape: such an episode gives summarisation examples only
(:func:`observation_examples`), one per session about the main speaker and one about the partner, whose target is
that speaker's observations of the session in the summarisation target form (``o1 [SEP] o2``, or ``[NONE]``).
LoCoMo publishes one file (a test split): emma_examples divides the conversations of such episodes by episode
into EMMA's train / valid / test examples with ``observation_split`` (:func:`split_by_episode`, seeded).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator, Literal, Sequence

from pipelines.data.schema import SPLITS, Episode, Memory, Session
from pipelines.data.synthetic import split_counts
from pipelines.errors import ConfigError, DataError
from pipelines.jsonl import iter_jsonl, write_jsonl

TASKS = ("generation", "summarize", "link")
MEMORY, LINK, NOW, SEP, NONE, USER, BOT = "[MEMORY]", "[LINK]", "[NOW]", "[SEP]", "[NONE]", "[USER]", "[BOT]"
SPECIAL_TOKENS = (MEMORY, LINK, NOW, SEP, NONE, USER, BOT)  # added to the tokenizer as whole tokens
POSITIVE, NEGATIVE = "positive", "negative"
OBSERVATION = "observation"   # Memory.kind of LoCoMo's per-session observations

_UNITS = ("zero first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
          "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_TENS_ORD = "_ _ twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split()
_CARDINAL = ("_ one two three four five six seven eight nine").split()


def ordinal(n: int) -> str:
    """English ordinal word of a 1-based session number: 1 -> "first", 42 -> "forty-second"; 100+ -> "100th"."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"a session number is a positive integer, got {n!r}")
    if n < 20:
        return _UNITS[n]
    if n < 100:
        tens, unit = divmod(n, 10)
        return _TENS_ORD[tens] if unit == 0 else f"{_TENS[tens]}-{_UNITS[unit]}"
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class FormatConfig:
    """How episodes become EMMA task examples (params.yaml ``emma.formats``)."""

    memory_provenance: bool = True     # write memory sentences as "text (about X, from first session)"
    turn_tags: Literal["names", "roles"] = "names"  # speaker tags before turns: "[Mia]" or literal "[USER]"/"[BOT]"
    negatives_per_positive: float = 1.0  # sampled "negative" link pairs per gold link, per episode
    seed: int = 0                      # negative sampling is a function of (seed, episode id)
    tasks: tuple[str, ...] = TASKS     # which tasks build_examples returns
    # (train, valid, test) shares of the episodes with observations (LoCoMo, published as one test split),
    # divided by episode for EMMA's examples (split_by_episode, seeded by ``seed``)
    observation_split: tuple[float, float, float] = (0.6, 0.2, 0.2)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))
        shares = self.observation_split
        if (not isinstance(shares, (list, tuple)) or len(shares) != 3
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in shares)
                or not math.isclose(sum(shares), 1.0, abs_tol=1e-6)):
            raise ConfigError("emma.formats.observation_split must be three shares (train, valid, test) in [0, 1] "
                              f"summing to 1, got {shares!r}.")
        object.__setattr__(self, "observation_split", tuple(float(x) for x in shares))
        if self.turn_tags not in ("names", "roles"):
            raise ConfigError(f"emma.formats.turn_tags must be 'names' or 'roles', got {self.turn_tags!r}.")
        if not (self.negatives_per_positive >= 0 and math.isfinite(self.negatives_per_positive)):
            raise ConfigError("emma.formats.negatives_per_positive must be a finite number >= 0, got "
                              f"{self.negatives_per_positive!r}.")
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ConfigError(f"emma.formats.tasks must be a non-empty subset of {TASKS}, got {self.tasks!r}.")


@dataclass(frozen=True)
class Example:
    """One input/target pair of the dialogue module."""

    task: str          # "generation" | "summarize" | "link"
    source: str        # the input sequence, prefix included
    target: str        # the expected output sequence
    episode_id: str
    session_id: str
    ref: str = ""      # turn id (generation), the speaker summarised (summarize), "to_id>from_id" (link)


# --- rendering: pure string functions shared by training data and inference -----------------------

def tag(name: str) -> str:
    return f"[{name}]"


def render_memory(text: str, about: str, session_number: int, provenance: bool = True) -> str:
    """A stored memory sentence: ``"Leo got a dog. (about Leo, from first session)"``."""
    text = text.strip()
    return f"{text} (about {about}, from {ordinal(session_number)} session)" if provenance else text


def render_speakers(main: str, main_job: str | None, sub: str | None, sub_job: str | None) -> str:
    """``"[Mia] nurse [Leo] her brother"`` (a missing job, or an unknown partner, is left out, not written blank)."""
    parts = [tag(main), main_job] + ([tag(sub), sub_job] if sub else [])
    return " ".join(p.strip() for p in parts if p and p.strip())


def render_memory_block(memories: Sequence[tuple[str, Sequence[str]]]) -> str:
    """``"[MEMORY] m1 [LINK] l1 [LINK] l2 [MEMORY] m2"`` from (memory, linked memories) pairs."""
    parts: list[str] = []
    for memory, linked in memories:
        parts += [MEMORY, memory]
        for other in linked:
            parts += [LINK, other]
    return " ".join(parts)


def _turn_tag(speaker: str, main: str, turn_tags: str) -> str:
    if turn_tags == "roles":
        return BOT if speaker == main else USER
    return tag(speaker)


@dataclass
class GenerationInput:
    """Everything a generation sequence holds, kept apart so that a caller can drop the oldest turns
    to fit a token budget (:func:`fit_history`) and render again."""

    main: str                                   # the speaking agent (the BOT)
    main_job: str | None
    sub: str | None                             # the session's partner (the USER); None: unknown
    sub_job: str | None
    session_number: int                         # 1-based
    memories: list[tuple[str, list[str]]] = field(default_factory=list)  # (memory sentence, linked sentences)
    history: list[tuple[str, str]] = field(default_factory=list)         # (speaker name, text), oldest first
    turn_tags: str = "names"

    def _now(self, closing: bool) -> list[str]:
        parts = [f"{NOW} {ordinal(self.session_number)} session"]
        parts += [f"{_turn_tag(s, self.main, self.turn_tags)} {t.strip()}" for s, t in self.history]
        if closing:                             # the [BOT] slot the target fills
            parts.append(_turn_tag(self.main, self.main, self.turn_tags))
        return parts

    def dialogue(self, closing: bool) -> str:
        """Speakers, [NOW], the turns; ``closing`` appends the main speaker's tag (the [BOT] slot)."""
        return " ".join([render_speakers(self.main, self.main_job, self.sub, self.sub_job),
                         *self._now(closing)])

    def context(self) -> str:
        """The retriever's dialogue context: the sequence without prefix and memories (section 4.2)."""
        return self.dialogue(closing=True)

    def final_sequence(self) -> str:
        """The FINAL GENERATION SEQUENCE a finished session is summarised from."""
        return self.dialogue(closing=False)

    def render(self) -> str:
        """The full generation sequence: prefix, speakers, memory block, [NOW], turns, [BOT] slot."""
        head = render_speakers(self.main, self.main_job, self.sub, self.sub_job)
        block = render_memory_block(self.memories)
        return " ".join(p for p in ("generation:", head, block, *self._now(closing=True)) if p)


def fit_history(inp: GenerationInput, count_tokens, budget: int) -> GenerationInput:
    """Drop the oldest turns until ``count_tokens(inp.render()) <= budget`` (the speakers, the memories,
    [NOW] and the latest turn are kept: Appendix E's max input length is 1024 tokens)."""
    history = list(inp.history)
    while len(history) > 1:
        trial = GenerationInput(**{**inp.__dict__, "history": history})
        if count_tokens(trial.render()) <= budget:
            return trial
        history.pop(0)
    return GenerationInput(**{**inp.__dict__, "history": history})


GENERATION_PREFIX, SUMMARIZE_PREFIX = "generation:", "summarize [ABOUT_"
_NOW_MARK = re.compile(re.escape(NOW) + r" \S+ session")     # "[NOW] second session", "[NOW] twenty-first session"
_TAG = re.compile(r"\[[^\[\]]+\]")


@dataclass(frozen=True)
class SourceLayout:
    """Where a generation / summarisation source (Appendix E.1's formats) keeps what a cut to the model's max
    input length must not lose, in character offsets (used by pipelines.emma.dialogue_encoding.encode_all).

    ``head_end``: the end of the head, i.e. the task prefix, the speakers, the memory block and the
    ``[NOW] <ordinal> session`` marker (just the prefix when there is no marker). ``turn_starts``: the space
    before each turn's speaker tag, oldest turn first; the closing ``[Main]`` / ``[BOT]`` slot of a generation
    source, which no text follows, is not a turn start.
    """

    head_end: int
    turn_starts: tuple[int, ...]


def source_layout(text: str) -> SourceLayout | None:
    """The :class:`SourceLayout` of a generation or summarisation source; None for any other text (a link
    source, a target). Turns are found by the speaker tags of the head (``[Mia]``, ``[Leo]``) and the role
    tags ``[USER]`` / ``[BOT]``, each between spaces after the ``[NOW]`` marker; an utterance that itself
    contains " [Leo] " only adds a cut point inside that turn."""
    if text.startswith(GENERATION_PREFIX):
        prefix_end = len(GENERATION_PREFIX)
    elif text.startswith(SUMMARIZE_PREFIX) and "]:" in text:
        prefix_end = text.index("]:") + 2
    else:
        return None
    now = _NOW_MARK.search(text, prefix_end)
    if now is None:
        return SourceLayout(prefix_end, ())
    speakers_end = text.find(MEMORY, prefix_end, now.start())
    speakers = text[prefix_end: speakers_end if speakers_end >= 0 else now.start()]
    tags = sorted({t for t in _TAG.findall(speakers) if t not in SPECIAL_TOKENS} | {USER, BOT})
    turn = re.compile(" (?:" + "|".join(map(re.escape, tags)) + ") ")
    return SourceLayout(now.end(), tuple(m.start() for m in turn.finditer(text, now.end())))


def summarize_source(about: str, final_sequence: str) -> str:
    return f"summarize [ABOUT_{about}]: {final_sequence}"


def summarize_target(memories: Sequence[str]) -> str:
    texts = [m.strip() for m in memories if m.strip()]
    return f" {SEP} ".join(texts) if texts else NONE


def parse_summary(output: str) -> list[str]:
    """Inverse of :func:`summarize_target`: ``"[NONE]"`` -> [], ``"a [SEP] b"`` -> ["a", "b"]."""
    if NONE in output:
        return []
    return [part.strip() for part in output.split(SEP) if part.strip()]


def link_source(memory_1: str, memory_2: str) -> str:
    return f"memory sentence 1: {memory_1} memory sentence 2: {memory_2}"


def parse_link(output: str) -> bool:
    """True when the linker answered "positive" (the authors test ``'positive' in response``)."""
    return POSITIVE in output.strip().lower()


# --- an episode seen from its main speaker -----------------------------------------------------------

class EpisodeView:
    """Lookups over one episode from one owner's point of view, with referential checks.

    ``order[m]`` is (session index, position in the session's memory list): the time order of memories.
    Raises DataError (naming the episode, session and field) on links or tags that do not resolve, on
    duplicate memory ids and on a tag naming a memory not yet written when the turn is spoken.
    """

    def __init__(self, episode: Episode, config: FormatConfig | None = None, owner: str | None = None,
                 file: str | None = None):
        self.episode, self.cfg, self.file = episode, config or FormatConfig(), file
        self.owner = owner or episode.main_speaker
        self.jobs = {s.name: s.role for s in episode.speakers}
        self.memory: dict[str, Memory] = {}
        self.order: dict[str, tuple[int, int]] = {}
        self.session_of: dict[str, Session] = {}
        for session in episode.sessions:
            for pos, m in enumerate(session.memories):
                if m.id in self.memory:
                    raise self._error(session, "memories", f"memory id {m.id!r} is used twice")
                self.memory[m.id], self.order[m.id], self.session_of[m.id] = m, (session.index, pos), session
        self.neighbours: dict[str, set[str]] = {mid: set() for mid in self.memory}
        self.links: set[tuple[str, str]] = set()          # (earlier, newer) memory ids
        for session in episode.sessions:
            for link in session.links:
                for end in (link.from_id, link.to_id):
                    if end not in self.memory:
                        raise self._error(session, "links", f"link {link.from_id}->{link.to_id} names "
                                          f"unknown memory {end!r}", rule="link_resolves")
                self.neighbours[link.from_id].add(link.to_id)
                self.neighbours[link.to_id].add(link.from_id)
                # stored as (earlier, newer) in time order, whichever way round the source wrote it
                self.links.add(tuple(sorted((link.to_id, link.from_id), key=self.order.__getitem__)))

    def _error(self, session: Session, fld: str, message: str, rule: str | None = None) -> DataError:
        return DataError(message, file=self.file, record=f"episode {self.episode.id}, session {session.id}",
                         field=fld, rule=rule)

    def owned(self, memory_id: str) -> bool:
        return self.memory[memory_id].owner == self.owner

    def partner(self, session: Session) -> str:
        """The session's partner: ``Session.partner``, else the one other speaker of its turns."""
        if session.partner:
            return session.partner
        others = sorted({t.speaker for t in session.turns if t.speaker != self.owner})
        if len(others) != 1:
            raise self._error(session, "partner", f"no partner given and the turns have {len(others)} "
                              f"speakers besides {self.owner!r}: {others}", rule="one_partner_per_session")
        return others[0]

    def rendered(self, memory_id: str) -> str:
        m = self.memory[memory_id]
        return render_memory(m.text, m.about, self.session_of[memory_id].index + 1, self.cfg.memory_provenance)

    def linked(self, memory_id: str, before_session: int) -> list[str]:
        """Memories linked to ``memory_id`` (either direction) written before session ``before_session``."""
        found = [m for m in self.neighbours[memory_id] if self.order[m][0] < before_session and self.owned(m)]
        return sorted(found, key=self.order.__getitem__)

    def generation_input(self, session: Session, upto: int, memory_ids: Sequence[str]) -> GenerationInput:
        """The input for the turn at position ``upto`` of ``session`` showing ``memory_ids``."""
        sub = self.partner(session)
        memories = [(self.rendered(m), [self.rendered(x) for x in self.linked(m, session.index)])
                    for m in memory_ids]
        history = [(t.speaker, t.text) for t in session.turns[:upto]]
        return GenerationInput(self.owner, self.jobs.get(self.owner), sub, self.jobs.get(sub),
                               session.index + 1, memories, history, self.cfg.turn_tags)


# --- the three task builders ------------------------------------------------------------------------

def generation_examples(episode: Episode, config: FormatConfig | None = None, file: str | None = None,
                        count_tokens: Callable[[str], int] | None = None, budget: int | None = None) -> list[Example]:
    """One example per turn of the main speaker: its memory tags as [MEMORY] (with their links).

    With ``count_tokens`` and ``budget`` (the model's max input length), the oldest turns of a long
    session are dropped until the sequence fits (:func:`fit_history`)."""
    view = EpisodeView(episode, config, file=file)
    out = []
    for session in episode.sessions:
        for pos, turn in enumerate(session.turns):
            if turn.speaker != view.owner:
                continue
            for mid in turn.memory_tags:
                if mid not in view.memory:
                    raise DataError(f"turn {turn.id} is tagged with unknown memory {mid!r}", file=file,
                                    record=f"episode {episode.id}, session {session.id}",
                                    field="memory_tags", rule="memory_tag_resolves")
                if view.order[mid][0] >= session.index:
                    raise DataError(f"turn {turn.id} is tagged with memory {mid!r}, written at the end of "
                                    f"session {view.session_of[mid].id}, not before this session", file=file,
                                    record=f"episode {episode.id}, session {session.id}",
                                    field="memory_tags", rule="memory_tag_from_earlier_session")
            inp = view.generation_input(session, pos, turn.memory_tags)
            if count_tokens is not None and budget is not None:
                inp = fit_history(inp, count_tokens, budget)
            out.append(Example("generation", inp.render(), turn.text.strip(), episode.id, session.id, turn.id))
    return out


def summarize_examples(episode: Episode, config: FormatConfig | None = None,
                       file: str | None = None) -> list[Example]:
    """Two examples per session, about the main speaker and about the partner (in that order)."""
    view = EpisodeView(episode, config, file=file)
    out = []
    for session in episode.sessions:
        sub = view.partner(session)
        final = view.generation_input(session, len(session.turns), []).final_sequence()
        for about in (view.owner, sub):
            texts = [m.text for m in session.memories if m.owner == view.owner and m.about == about]
            out.append(Example("summarize", summarize_source(about, final), summarize_target(texts),
                               episode.id, session.id, about))
    return out


def has_observations(episode: Episode) -> bool:
    """True when the episode's memories include LoCoMo's per-session observations."""
    return any(m.kind == OBSERVATION for s in episode.sessions for m in s.memories)


def observation_examples(episode: Episode, config: FormatConfig | None = None,
                         file: str | None = None) -> list[Example]:
    """Two summarisation examples per session with turns, about the main speaker and about the partner (as
    :func:`summarize_examples`), each targeting that speaker's observations of the session, in their published
    order, joined by `` [SEP] `` (``[NONE]`` when the speaker has none there). The episode's other memories (LoCoMo's
    session summary) are not observations and are left out."""
    view = EpisodeView(episode, config, file=file)
    out = []
    for session in episode.sessions:
        if not session.turns:
            continue
        final = view.generation_input(session, len(session.turns), []).final_sequence()
        for about in (view.owner, view.partner(session)):
            texts = [m.text for m in session.memories if m.kind == OBSERVATION and m.about == about]
            out.append(Example("summarize", summarize_source(about, final), summarize_target(texts),
                               episode.id, session.id, about))
    return out


def split_by_episode(episode_ids: Sequence[str], shares: Sequence[float], seed: int) -> dict[str, str]:
    """Episode id -> "train" / "valid" / "test": :func:`pipelines.data.synthetic.split_counts` episodes per split
    (largest remainder), assigned by a shuffle of the sorted ids seeded by ``seed`` (the same ids always split the
    same way, whatever order they come in)."""
    ids = sorted(dict.fromkeys(episode_ids))
    random.Random(f"emma-observation-split:{seed}").shuffle(ids)
    out, start = {}, 0
    for split, count in zip(SPLITS, split_counts(len(ids), tuple(shares))):
        out.update((episode_id, split) for episode_id in ids[start:start + count])
        start += count
    return out


def link_candidates(view: EpisodeView) -> list[tuple[str, str]]:
    """Every (earlier, newer) pair the linker is asked about, in the order of section 4.1: newer memories in
    time order; for each, first the memories before it in its own session ("connections are initially
    established within the memory generated in ongoing sessions"), then those of earlier sessions ("these
    connections extend to incorporate memories from previous sessions"), each group in time order. The
    egocentric memory's linker asks in the same order at inference."""
    owned = sorted((m for m in view.memory if view.owned(m)), key=view.order.__getitem__)
    pairs = []
    for i, newer in enumerate(owned):
        session = view.order[newer][0]
        same = [m for m in owned[:i] if view.order[m][0] == session]
        pairs += [(earlier, newer) for earlier in same + [m for m in owned[:i] if view.order[m][0] < session]]
    return pairs


def link_examples(episode: Episode, config: FormatConfig | None = None,
                  file: str | None = None) -> list[Example]:
    """Gold links as "positive"; seeded "negative" pairs drawn from the unlinked candidates."""
    cfg = config or FormatConfig()
    view = EpisodeView(episode, cfg, file=file)
    candidates = link_candidates(view)
    positives = [pair for pair in candidates if pair in view.links]
    # drawn from the unlinked pairs in time order (newer, then earlier): the draw does not depend on the asking order
    unlinked = sorted((pair for pair in candidates if pair not in view.links),
                      key=lambda pair: (view.order[pair[1]], view.order[pair[0]]))
    wanted = min(len(unlinked), round(cfg.negatives_per_positive * len(positives)))
    rng = random.Random(f"emma-link-negatives:{cfg.seed}:{episode.id}")
    negatives = set(rng.sample(unlinked, wanted))
    out = []
    for earlier, newer in candidates:         # the asking order, positives and negatives interleaved
        if (earlier, newer) in view.links or (earlier, newer) in negatives:
            label = POSITIVE if (earlier, newer) in view.links else NEGATIVE
            out.append(Example("link", link_source(view.rendered(earlier), view.rendered(newer)), label,
                               episode.id, view.session_of[newer].id, f"{earlier}>{newer}"))
    return out


BUILDERS = {"generation": generation_examples, "summarize": summarize_examples, "link": link_examples}


def build_examples(episodes: Iterable[Episode], config: FormatConfig | None = None, file: str | None = None,
                   count_tokens: Callable[[str], int] | None = None, budget: int | None = None) -> list[Example]:
    """All examples of ``config.tasks`` for ``episodes``, task by task within each episode (generation
    inputs fitted to ``budget`` tokens when a counter is given); an episode with observations (LoCoMo) gives
    its :func:`observation_examples` only, when ``summarize`` is one of the tasks."""
    cfg = config or FormatConfig()
    out = []
    for episode in episodes:
        if has_observations(episode):
            out += observation_examples(episode, cfg, file) if "summarize" in cfg.tasks else []
            continue
        for task in cfg.tasks:
            if task == "generation":
                out += generation_examples(episode, cfg, file, count_tokens, budget)
            else:
                out += BUILDERS[task](episode, cfg, file)
    return out


# --- storage ----------------------------------------------------------------------------------------

EXAMPLES_SCHEMA, EXAMPLES_VERSION = "mnemos.emma_examples", 1


def write_examples(path: str | os.PathLike, examples: Iterable[Example]) -> int:
    """One JSON object per line (``task, source, target, episode_id, session_id, ref``), atomically."""
    return write_jsonl(path, EXAMPLES_SCHEMA, EXAMPLES_VERSION,
                       (json.dumps(asdict(ex), ensure_ascii=False) for ex in examples))


def iter_examples(path: str | os.PathLike) -> Iterator[Example]:
    names = {f for f in Example.__dataclass_fields__}
    for lineno, obj in iter_jsonl(path, EXAMPLES_SCHEMA, EXAMPLES_VERSION):
        missing = [k for k in ("task", "source", "target", "episode_id", "session_id") if k not in obj]
        if missing:
            raise DataError("missing field", file=str(path), record=f"line {lineno}", field=missing[0])
        if obj["task"] not in TASKS:
            raise DataError(f"unknown task {obj['task']!r}, expected one of {TASKS}", file=str(path),
                            record=f"line {lineno}", field="task")
        yield Example(**{k: v for k, v in obj.items() if k in names})
