"""The validation rules, declared up front: names, descriptions, blocking flags, thresholds.

METHODS.md section 1: a failed rule stops the downstream stages and produces a readable report
(which rule, which records, how many). Every rule has a stable snake_case name, a one-sentence
description, a ``blocking`` flag, a family and a ``unit`` (what its failure count counts):

- ``load`` (blocking): the loss policy over what the loader left out (``pipelines.validate.load``):
  a load that lost every record of a kind (every turn, every query, ...), held no episode or no
  turn, kept no query from a source that publishes questions (:data:`QUESTION_SOURCES`), or
  dropped more than ``ingest.max_dropped_turn_share`` of its turns is broken input, however
  clean the rest looks.
- ``schema`` (blocking): per-table expectations run by great-expectations
  (``pipelines.validate.expectations``): ids unique, texts non-blank, split in the set, ...
- ``integrity`` (blocking): cross-table rules in pandas (``pipelines.validate.integrity``;
  great-expectations has no foreign-key check): every evidence / tag / link / query-session id
  resolves in its episode, tags and links never point forward in time, session indices
  increase, timestamps never go back (except in the sources of :data:`FILE_ORDER_SOURCES`),
  memories name the session that lists them, no episode id in two splits, the main speaker is a
  listed speaker.
- ``quality`` (warnings, never blocking): soft signals that leave the data usable: very short
  utterances outside MiSC, a missing query category in a source that has categories, memory
  importance outside [0, 1], a time going backwards in a source kept in file order.
- ``misc`` (blocking, profile "misc" only): the post-filters of MiSC, arXiv 2410.02503
  Appendix D (``pipelines.validate.misc``), with the thresholds below.

Blocking policy: anything that makes a record unusable or an id ambiguous (schema), anything a
downstream stage would dereference and crash on or silently mis-evaluate (integrity), and MiSC's
own acceptance criteria (misc) block; the rest warns.

One failure, one report: a rule that needs a valid upstream fact skips records where that fact is
already reported by another rule (a blank text is only ``turn_text_nonempty``, never also a short
utterance; a tag that does not resolve is only ``memory_tags_resolve``, never also a forward tag).

The set of rules never depends on the data or the profile (the Dagster layer declares one asset
check per rule up front); a rule that does not apply to a profile or a source passes with
``metadata["applied"] = False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Literal, Mapping

import pandas as pd

from pipelines.registry import CheckSpec

Family = Literal["load", "schema", "integrity", "quality", "misc"]
Profile = Literal["generic", "misc"]
PROFILES: tuple[str, ...] = ("generic", "misc")

# --- MiSC Appendix D thresholds ---------------------------------------------------------------
MISC_SPEAKERS = 4                # speakers named by a scenario: one main speaker + three partners
MISC_PARTNERS = 3                # partners of the main speaker
MISC_SESSIONS = 6                # sessions per episode
MISC_MIN_UTTERANCE_CHARS = 10    # "utterances that are less than 10 characters long" are rejected
MISC_MIN_MEMORIES_PER_SESSION = 1  # a session without any memory counts as missing memory
# outside MiSC, utterances this short are reported as a warning only
SHORT_UTTERANCE_CHARS = MISC_MIN_UTTERANCE_CHARS
IMPORTANCE_RANGE = (0.0, 1.0)    # G-Long normalises importance into (0, 1]
MAX_DROPPED_TURN_SHARE = 0.05    # default of params.yaml ingest.max_dropped_turn_share (the loss policy)
# Sources whose time order is their file order: their own evaluation walks the sessions as listed
# (RealMem's eval/ never sorts by current_time, which goes backwards in three of its ten personas).
# Session.index follows the file; a timestamp going back is a warning there, not a blocking failure.
FILE_ORDER_SOURCES: tuple[str, ...] = ("realmem",)
# Sources that publish questions (the benchmark datasets): a load of one that keeps no query is broken input
# (e.g. a renamed ``qa`` key), whereas dialogue-only sources (ConvAI2, MSC, CC, MiSC, PersonaExt) have none.
QUESTION_SOURCES: tuple[str, ...] = ("locomo", "longmemeval", "realmem")


@dataclass(frozen=True)
class Rule:
    """One validation rule as declared up front (one Dagster asset check each)."""

    name: str                      # stable snake_case name, the asset-check name
    description: str               # one sentence: what must hold
    blocking: bool                 # a failure stops everything downstream
    family: Family                 # load | schema (GX) | integrity | quality | misc
    unit: str                      # what the failure count counts, e.g. "turns"
    profiles: tuple[str, ...] = PROFILES  # profiles in which the rule is applied

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"rule name {self.name!r} must be snake_case")
        if self.family in ("load", "schema", "integrity", "misc") and not self.blocking:
            raise ValueError(f"rule {self.name!r}: {self.family} rules are blocking")
        if self.family == "quality" and self.blocking:
            raise ValueError(f"rule {self.name!r}: quality rules are warnings, not blocking")
        if not set(self.profiles) <= set(PROFILES) or not self.profiles:
            raise ValueError(f"rule {self.name!r}: profiles must be a non-empty subset of {PROFILES}")

    def spec(self) -> CheckSpec:
        return CheckSpec(self.name, self.description, self.blocking)


def _rules(*rules: Rule) -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for rule in rules:
        if rule.name in out:
            raise ValueError(f"rule {rule.name!r} declared twice")
        out[rule.name] = rule
    return out


_MISC = ("misc",)
RULES: dict[str, Rule] = _rules(
    # load: what the loader left out (pipelines.validate.load)
    Rule("load_loss_within_limit", "Loading kept at least one episode and one turn (and one query from a source "
         f"that publishes questions: {', '.join(QUESTION_SOURCES)}), lost no whole kind of record it read (every "
         "turn, every query, every session, ...), and left out at most ingest.max_dropped_turn_share of the turns "
         f"(default {MAX_DROPPED_TURN_SHARE:.0%}).", True, "load", "losses"),
    # schema: great-expectations suites over the tables
    Rule("episode_ids_unique", "Episode ids are unique within each split.", True, "schema", "episodes"),
    Rule("split_in_set", "Every episode's split is one of train, valid, test.", True, "schema", "episodes"),
    Rule("speaker_names_unique", "Speaker names are unique within an episode.", True, "schema", "speakers"),
    Rule("session_ids_unique", "Session ids are unique within an episode.", True, "schema", "sessions"),
    Rule("session_index_non_negative", "Every session index is 0 or more.", True, "schema", "sessions"),
    Rule("turn_ids_unique", "Turn ids are unique within an episode.", True, "schema", "turns"),
    Rule("turn_text_nonempty", "Every turn has a non-blank text.", True, "schema", "turns"),
    Rule("memory_ids_unique", "Memory ids are unique within an episode.", True, "schema", "memories"),
    Rule("memory_text_nonempty", "Every memory has a non-blank text.", True, "schema", "memories"),
    Rule("query_ids_unique", "Query ids are unique within an episode.", True, "schema", "queries"),
    Rule("query_question_nonempty", "Every query has a non-blank question.", True, "schema", "queries"),
    # integrity: cross-table rules in pandas
    Rule("splits_disjoint", "No episode id appears in more than one split.", True, "integrity", "episode ids"),
    Rule("main_speaker_listed", "The main speaker is one of the episode's speakers whenever speakers are listed.",
         True, "integrity", "episodes"),
    Rule("session_order", "Session indices strictly increase in the order the sessions are listed.",
         True, "integrity", "sessions"),
    Rule("timestamps_non_decreasing", "Session timestamps never go back in time within an episode "
         "(sessions without a timestamp are skipped, naive times are read as UTC, and a source whose time order is "
         f"its file order, {', '.join(FILE_ORDER_SOURCES)}, is left to the warning file_order_timestamps).",
         True, "integrity", "sessions"),
    Rule("memory_session_matches", "A memory's session_id is the id of the session that lists it.",
         True, "integrity", "memories"),
    Rule("memory_tags_resolve", "Every memory tag of a turn is the id of a memory of the same episode.",
         True, "integrity", "memory tags"),
    Rule("memory_tags_not_future", "A memory tag points to a memory written in the same or an earlier "
         "session than the tagging turn.", True, "integrity", "memory tags"),
    Rule("link_endpoints_resolve", "Both ends of every memory link are memories of the same episode.",
         True, "integrity", "links"),
    Rule("links_point_backwards", "A memory link points from a memory to a different memory of the same or "
         "an earlier session.", True, "integrity", "links"),
    Rule("query_session_resolves", "A query's session_id, when given, is a session of its episode.",
         True, "integrity", "queries"),
    Rule("evidence_turns_resolve", "Every evidence turn id of a query is a turn of its episode.",
         True, "integrity", "evidence ids"),
    Rule("evidence_sessions_resolve", "Every evidence session id of a query is a session of its episode.",
         True, "integrity", "evidence ids"),
    Rule("evidence_memories_resolve", "Every evidence memory id of a query is a memory of its episode.",
         True, "integrity", "evidence ids"),
    # quality: warnings
    Rule("short_utterances", f"Utterances have at least {SHORT_UTTERANCE_CHARS} characters (a warning outside "
         "MiSC, where misc_utterance_min_length rejects them).", False, "quality", "turns",
         profiles=("generic",)),
    Rule("query_category_present", "Every query has a category when the source gives categories at all.",
         False, "quality", "queries"),
    Rule("memory_importance_in_range", "Memory importance, where given, lies in [0, 1].", False, "quality",
         "memories"),
    Rule("file_order_timestamps", "In a source whose time order is its file order "
         f"({', '.join(FILE_ORDER_SOURCES)}: its own evaluation walks the sessions as listed), a session's "
         "timestamp is not earlier than the previous session's; a warning only: the sessions keep the file order, "
         "so 'earlier' in the temporal protocol means earlier in the file.", False, "quality", "sessions"),
    # misc: MiSC Appendix D filters
    Rule("misc_four_speakers", f"A MiSC scenario names {MISC_SPEAKERS} speakers: the main speaker and "
         f"{MISC_PARTNERS} partners.", True, "misc", "episodes", _MISC),
    Rule("misc_six_sessions", f"A MiSC episode has {MISC_SESSIONS} sessions.", True, "misc", "episodes", _MISC),
    Rule("misc_one_partner_per_session", "Each MiSC session names exactly one partner, one of the scenario's "
         "partners.", True, "misc", "sessions", _MISC),
    Rule("misc_every_partner_appears", "Every partner of a MiSC scenario is the partner of at least one session.",
         True, "misc", "partners", _MISC),
    Rule("misc_turn_speakers_match", "Every MiSC utterance is spoken by the main speaker or the session's partner "
         "and does not open with another speaker's name.", True, "misc", "turns", _MISC),
    Rule("misc_utterance_min_length", f"MiSC utterances have at least {MISC_MIN_UTTERANCE_CHARS} characters.",
         True, "misc", "turns", _MISC),
    Rule("misc_memory_present", f"Every MiSC session holds at least {MISC_MIN_MEMORIES_PER_SESSION} memory.",
         True, "misc", "sessions", _MISC),
    Rule("misc_memory_speakers", "Every MiSC memory is the main speaker's, about the main speaker or the "
         "session's partner.", True, "misc", "memories", _MISC),
)


# Rules whose failures over a dataset are not the failures over each of its episodes put together:
# two episodes sharing an id or listed in two splits, and a warning that applies to every query as
# soon as one query of the dataset has a category. The streaming validator (pipelines.validate.stream)
# checks them once over the WHOLE_TABLES (a few rows per episode, kept for the whole file) and every
# other rule chunk by chunk, so a new rule that compares episodes, or whose ``applies`` is not "some
# row of these tables has a value", must be listed here and read only WHOLE_TABLES.
WHOLE_TABLES: tuple[str, ...] = ("episodes", "speakers", "queries", "evidence")
WHOLE_FILE_RULES: tuple[str, ...] = ("episode_ids_unique", "splits_disjoint", "query_category_present")


@dataclass(frozen=True)
class Failure:
    """One failing record: its locator in the file and what is wrong with it."""

    record: str   # e.g. "line 3" or "episode 0"
    message: str  # names the ids involved, e.g. "turn 'e1:S1:T2' has a blank text"


Tables = Mapping[str, pd.DataFrame]
Check = Callable[[Tables], list[Failure]]
CHECKS: dict[str, Check] = {}  # plain-Python rules: name -> check over the tables
APPLIES: dict[str, Callable[[Tables], bool]] = {}  # name -> does the rule apply to these tables (default: yes)


def check(name: str, applies: Callable[[Tables], bool] | None = None) -> Callable[[Check], Check]:
    """Register ``fn(tables) -> list[Failure]`` as the implementation of rule ``name``.

    ``applies(tables)`` False makes the rule pass with ``metadata["applied"] = False`` (e.g. a rule
    about sources that are not in the data).
    """

    def wrap(fn: Check) -> Check:
        if name not in RULES:
            raise ValueError(f"check {name!r} implements no declared rule")
        CHECKS[name] = fn
        if applies is not None:
            APPLIES[name] = applies
        return fn

    return wrap


# --- helpers shared by the check modules ----------------------------------------------------

def written_in(table: pd.DataFrame, id_column: str) -> dict[tuple[int, str], int]:
    """(episode_pos, id) -> session_pos of the first row with that id."""
    out: dict[tuple[int, str], int] = {}
    for e_pos, key, s_pos in zip(table["episode_pos"], table[id_column], table["session_pos"]):
        out.setdefault((e_pos, key), s_pos)
    return out


def ids(table: pd.DataFrame, id_column: str) -> set[tuple[int, str]]:
    """The (episode_pos, id) pairs of a table: what an id of the same episode may resolve to."""
    return set(zip(table["episode_pos"], table[id_column]))


def utc(ts: datetime) -> datetime:
    """A comparable timestamp: naive times are read as UTC."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=timezone.utc)


def blank(value) -> bool:
    """True for None, non-strings and strings without a visible character."""
    return not isinstance(value, str) or not value.strip()
