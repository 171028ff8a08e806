"""Referential integrity and quality warnings: one broken fixture per rule, each failing alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipelines.data.schema import MemoryLink
from pipelines.data.tables import to_tables
from pipelines.validate import RULES, validate
from pipelines.validate.integrity import short_turns


def dup_episode(eps, split):
    eps.append(eps[0].model_copy(deep=True, update={"split": split}))


# rule, mutation, failing count, first example
CASES = [
    ("splits_disjoint", lambda e: dup_episode(e, "valid"), 1,
     "misc/train.jsonl line 2: episode 'ep-a' is in splits train, valid"),
    ("main_speaker_listed", lambda e: setattr(e[1], "main_speaker", "Anna"), 1,
     "misc/train.jsonl line 3: episode 'ep-b': main speaker 'Anna' is not among its 4 speakers"),
    ("session_order", lambda e: setattr(e[0].sessions[3], "index", 2), 1,
     "misc/train.jsonl line 2: session 'ep-a:S4' has index 2 after session 'ep-a:S3' with index 2"),
    ("timestamps_non_decreasing",
     lambda e: setattr(e[1].sessions[2], "timestamp", e[1].sessions[1].timestamp - timedelta(hours=1)), 1,
     "misc/train.jsonl line 3: session 'ep-b:S3' at 2024-03-08T17:00:00 is earlier than session 'ep-b:S2' "
     "at 2024-03-08T18:00:00"),
    ("memory_session_matches", lambda e: setattr(e[0].sessions[1].memories[0], "session_id", "ep-a:S3"), 1,
     "misc/train.jsonl line 2: memory 'ep-a:S2:M1' is listed in session 'ep-a:S2' but names session 'ep-a:S3'"),
    ("memory_tags_resolve", lambda e: e[1].sessions[4].turns[0].memory_tags.append("ep-b:S9:M1"), 1,
     "misc/train.jsonl line 3: turn 'ep-b:S5:T1' tags memory 'ep-b:S9:M1', which is not a memory of episode "
     "'ep-b'"),
    ("memory_tags_not_future", lambda e: e[0].sessions[1].turns[0].memory_tags.append("ep-a:S3:M1"), 1,
     "misc/train.jsonl line 2: turn 'ep-a:S2:T1' in session 'ep-a:S2' tags memory 'ep-a:S3:M1', written later "
     "in session 'ep-a:S3'"),
    ("link_endpoints_resolve", lambda e: e[0].sessions[5].links.append(MemoryLink(from_id="ep-a:S6:M1",
                                                                                  to_id="ep-a:M404")), 1,
     "misc/train.jsonl line 2: link 'ep-a:S6:M1' -> 'ep-a:M404' in session 'ep-a:S6': 'ep-a:M404' not a memory "
     "of episode 'ep-a'"),
    ("links_point_backwards", lambda e: e[1].sessions[1].links.append(MemoryLink(from_id="ep-b:S2:M1",
                                                                                 to_id="ep-b:S5:M1")), 1,
     "misc/train.jsonl line 3: link 'ep-b:S2:M1' -> 'ep-b:S5:M1' points forward in time: memory 'ep-b:S5:M1' "
     "is written after memory 'ep-b:S2:M1'"),
    ("links_point_backwards", lambda e: e[1].sessions[1].links.append(MemoryLink(from_id="ep-b:S2:M1",
                                                                                 to_id="ep-b:S2:M1")), 1,
     "misc/train.jsonl line 3: link 'ep-b:S2:M1' -> 'ep-b:S2:M1' links a memory to itself"),
    ("query_session_resolves", lambda e: setattr(e[1].queries[0], "session_id", "ep-b:S0"), 1,
     "misc/train.jsonl line 3: query 'ep-b:Q1' is asked in session 'ep-b:S0', which is not a session of "
     "episode 'ep-b'"),
    ("evidence_turns_resolve", lambda e: e[0].queries[1].evidence_turns.append("ep-b:S2:T2"), 1,
     "misc/train.jsonl line 2: query 'ep-a:Q2' cites turn 'ep-b:S2:T2', which is not a turn of episode 'ep-a'"),
    ("evidence_sessions_resolve", lambda e: e[1].queries[0].evidence_sessions.append("ep-b:S7"), 1,
     "misc/train.jsonl line 3: query 'ep-b:Q1' cites session 'ep-b:S7', which is not a session of episode "
     "'ep-b'"),
    ("evidence_memories_resolve", lambda e: e[0].queries[0].evidence_memories.extend(["x", "y"]), 2,
     "misc/train.jsonl line 2: query 'ep-a:Q1' cites memory 'x', which is not a memory of episode 'ep-a'"),
    ("short_utterances", lambda e: setattr(e[0].sessions[0].turns[1], "text", " Hi Ana! "), 1,
     "misc/train.jsonl line 2: turn 'ep-a:S1:T2' has 7 characters (< 10): 'Hi Ana!'"),
    # RealMem keeps file order: a time going back there is this warning, not timestamps_non_decreasing
    ("file_order_timestamps", lambda e: [setattr(e[1], "source", "realmem"), setattr(
        e[1].sessions[2], "timestamp", e[1].sessions[1].timestamp - timedelta(days=1))], 1,
     "misc/train.jsonl line 3: session 'ep-b:S3' at 2024-03-07T18:00:00 is earlier than the session before it in "
     "the file, 'ep-b:S2' at 2024-03-08T18:00:00 (kept in file order)"),
]


@pytest.mark.parametrize("rule,mutate,count,example", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_integrity_rule_fails_alone(fails_alone, rule, mutate, count, example):
    fails_alone("generic", rule, mutate, count, example)


def test_every_integrity_and_python_quality_rule_has_a_case():
    expected = {n for n, r in RULES.items() if r.family == "integrity"} | {"short_utterances", "file_order_timestamps"}
    assert {c[0] for c in CASES} == expected


def test_forward_tag_to_unknown_memory_is_reported_once(fails_alone):
    # an unresolved tag is memory_tags_resolve's failure, never also memory_tags_not_future's
    fails_alone("generic", "memory_tags_resolve",
                lambda e: e[0].sessions[0].turns[0].memory_tags.append("ep-a:S6:M9"), 1,
                "misc/train.jsonl line 2: turn 'ep-a:S1:T1' tags memory 'ep-a:S6:M9', which is not a memory of "
                "episode 'ep-a'")


def test_short_turns_counts_visible_characters(episodes):
    turns = episodes[0].sessions[0].turns
    turns[0].text, turns[1].text = "   123456789   ", "1234567890"
    failures = short_turns(to_tables(episodes), 10)
    assert [f.message for f in failures] == ["turn 'ep-a:S1:T1' has 9 characters (< 10): '123456789'"]


def test_time_order_rules_apply_by_source(episodes):
    """timestamps_non_decreasing applies to every source but the file-order ones (RealMem), whose consecutive
    sessions file_order_timestamps compares instead; in mixed data each episode gets its own rule."""
    file, records = "misc/train.jsonl", {"ep-a": "line 2", "ep-b": "line 3"}  # as in conftest
    for e in episodes:
        e.sessions[2].timestamp = e.sessions[1].timestamp - timedelta(days=1)
    report = validate(episodes, file=file, records=records)
    assert report.outcome("file_order_timestamps").metadata["applied"] is False
    assert report.outcome("timestamps_non_decreasing").count == 2
    episodes[1].source = "realmem"
    report = validate(episodes, file=file, records=records)
    assert report.outcome("timestamps_non_decreasing").metadata["records"] == ["line 2"]  # ep-a only
    assert report.outcome("file_order_timestamps").metadata["records"] == ["line 3"]      # ep-b only
    episodes[0].source = "realmem"
    report = validate(episodes, file=file, records=records)
    blocking = report.outcome("timestamps_non_decreasing")
    assert (blocking.passed, blocking.metadata["applied"]) == (True, False) and report.passed
    assert report.outcome("file_order_timestamps").count == 2
