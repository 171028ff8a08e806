"""MiSC Appendix D filters: one broken fixture per rule (profile "misc"), profile behaviour."""

from __future__ import annotations

import pytest

from pipelines.data.schema import Speaker
from pipelines.validate import RULES, validate
from pipelines.validate.rules import MISC_MIN_UTTERANCE_CHARS, MISC_PARTNERS, MISC_SESSIONS, MISC_SPEAKERS

FILE = "misc/train.jsonl"
RECORDS = {"ep-a": "line 2", "ep-b": "line 3"}  # as in conftest


def replace_partner(ep, s_pos: int, new: str) -> None:
    """Make ``new`` the partner of session ``s_pos``: its turns and memories follow."""
    ses = ep.sessions[s_pos]
    old = ses.partner
    ses.partner = new
    for turn in ses.turns:
        if turn.speaker == old:
            turn.speaker = new
    for mem in ses.memories:
        if mem.about == old:
            mem.about = new


def drop_last_session(eps):
    eps[0].sessions.pop()


def clear_last_memories(eps):
    ses = eps[1].sessions[-1]
    ses.memories, ses.links = [], []


def test_thresholds_are_the_papers():
    assert (MISC_SPEAKERS, MISC_PARTNERS, MISC_SESSIONS, MISC_MIN_UTTERANCE_CHARS) == (4, 3, 6, 10)


# rule, mutation, failing count, first example
CASES = [
    ("misc_four_speakers", lambda e: (e[0].speakers.append(Speaker(name="Eve")), replace_partner(e[0], 5, "Eve")),
     1, f"misc/train.jsonl line 2: episode 'ep-a' names 5 speakers with 4 partners besides main speaker 'Ana' "
        f"(MiSC: {MISC_SPEAKERS} speakers, {MISC_PARTNERS} partners)"),
    ("misc_six_sessions", drop_last_session, 1,
     f"misc/train.jsonl line 2: episode 'ep-a' has 5 sessions (MiSC: {MISC_SESSIONS})"),
    ("misc_one_partner_per_session", lambda e: setattr(e[1].sessions[3], "partner", None), 1,
     "misc/train.jsonl line 3: session 'ep-b:S4' names no partner"),
    ("misc_one_partner_per_session", lambda e: setattr(e[1].sessions[3], "partner", "Bob and Cara"), 1,
     "misc/train.jsonl line 3: session 'ep-b:S4' names partner 'Bob and Cara', not one of the scenario's "
     "partners 'Bob', 'Cara', 'Dan'"),
    ("misc_every_partner_appears", lambda e: (replace_partner(e[0], 2, "Bob"), replace_partner(e[0], 5, "Cara")),
     1, "misc/train.jsonl line 2: partner 'Dan' of episode 'ep-a' is in no session"),
    ("misc_turn_speakers_match", lambda e: setattr(e[0].sessions[0].turns[1], "speaker", "Cara"), 1,
     "misc/train.jsonl line 2: turn 'ep-a:S1:T2' is spoken by 'Cara', not by 'Ana' or 'Bob'"),
    ("misc_turn_speakers_match", lambda e: setattr(e[1].sessions[2].turns[1], "text", "Ana: I am fine, thanks."),
     1, "misc/train.jsonl line 3: turn 'ep-b:S3:T2' by 'Dan' opens with another speaker's name: 'Ana:'"),
    ("misc_utterance_min_length", lambda e: setattr(e[1].sessions[5].turns[0], "text", "Hey Dan!"), 1,
     f"misc/train.jsonl line 3: turn 'ep-b:S6:T1' has 8 characters (< {MISC_MIN_UTTERANCE_CHARS}): 'Hey Dan!'"),
    ("misc_memory_present", clear_last_memories, 1,
     "misc/train.jsonl line 3: session 'ep-b:S6' holds 0 memories (MiSC: at least 1)"),
    ("misc_memory_speakers", lambda e: setattr(e[0].sessions[1].memories[1], "owner", "Cara"), 1,
     "misc/train.jsonl line 2: memory 'ep-a:S2:M2' belongs to 'Cara', not to main speaker 'Ana'"),
    ("misc_memory_speakers", lambda e: setattr(e[0].sessions[0].memories[1], "about", "Dan"), 1,
     "misc/train.jsonl line 2: memory 'ep-a:S1:M2' in session 'ep-a:S1' is about 'Dan', not 'Ana' or the "
     "session's partner 'Bob'"),
]



@pytest.mark.parametrize("rule,mutate,count,example", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_misc_rule_fails_alone(fails_alone, rule, mutate, count, example):
    fails_alone("misc", rule, mutate, count, example)


def test_every_misc_rule_has_a_case():
    assert {c[0] for c in CASES} == {n for n, r in RULES.items() if r.family == "misc"}


def test_misc_rules_are_not_applied_under_generic(episodes):
    drop_last_session(episodes)  # breaks misc_six_sessions only
    report = validate(episodes, file=FILE, profile="generic", records=RECORDS)
    assert report.failed() == []
    assert report.outcome("misc_six_sessions").metadata["applied"] is False
    misc = validate(episodes, file=FILE, profile="misc", records=RECORDS)
    assert misc.failed() == ["misc_six_sessions"]
    assert misc.outcome("short_utterances").metadata["applied"] is False


def test_short_utterance_is_a_warning_in_generic_and_blocking_in_misc(episodes):
    episodes[0].sessions[0].turns[0].text = "Hi Bob."
    generic = validate(episodes, file=FILE, profile="generic", records=RECORDS)
    misc = validate(episodes, file=FILE, profile="misc", records=RECORDS)
    assert (generic.failed(), generic.passed) == (["short_utterances"], True)
    assert (misc.failed(), misc.passed) == (["misc_utterance_min_length"], False)


def test_session_without_partner_is_reported_once(episodes):
    # its partner's turns and the memories about the partner are not blamed on the missing name
    episodes[0].sessions[1].partner = None
    report = validate(episodes, file=FILE, profile="misc", records=RECORDS)
    assert report.failed() == ["misc_one_partner_per_session"]
    assert report.outcome("misc_one_partner_per_session").count == 1
