"""The great-expectations suites: one broken fixture per expectation rule, counts beyond the
sampled rows, regex semantics, applicability.

Mutations that the pydantic schema itself would refuse (a negative index, a split outside the set,
a blank question) are written with ``force`` (straight into the model's ``__dict__``), as a loader
that builds records with ``model_construct`` could.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from pipelines.data.schema import Memory, Query, Session, Speaker, Turn
from pipelines.data.tables import to_tables
from pipelines.validate import validate
from pipelines.validate.expectations import EXPECTATION_RULES, RESULT_FORMAT, run_expectations
from pipelines.validate.rules import RULES


def force(model, **fields):
    model.__dict__.update(fields)


def dup_episode(eps, split):
    eps.append(eps[0].model_copy(deep=True, update={"split": split}))


def add_session_with_used_id(eps):
    ep = eps[0]
    ep.sessions.append(Session(id="ep-a:S1", index=6, timestamp=ep.sessions[-1].timestamp + timedelta(days=1),
                               partner="Bob"))


# rule, mutation, failing count (GX counts every row of a duplicated pair), first example
CASES = [
    ("episode_ids_unique", lambda e: dup_episode(e, "train"), 2,
     "misc/train.jsonl line 2: episode 'ep-a' is listed more than once in split 'train'"),
    ("split_in_set", lambda e: force(e[1], split="dev"), 1,
     "misc/train.jsonl line 3: episode 'ep-b' has split 'dev', not one of train, valid, test"),
    ("speaker_names_unique", lambda e: e[0].speakers.append(Speaker(name="Bob")), 2,
     "misc/train.jsonl line 2: speaker 'Bob' is listed more than once in episode 'ep-a'"),
    ("session_ids_unique", add_session_with_used_id, 2,
     "misc/train.jsonl line 2: session id 'ep-a:S1' is used more than once in episode 'ep-a'"),
    ("session_index_non_negative", lambda e: force(e[1].sessions[0], index=-1), 1,
     "misc/train.jsonl line 3: session 'ep-b:S1' has index -1"),
    ("turn_ids_unique", lambda e: e[0].sessions[2].turns.append(Turn(id="ep-a:S3:T1", speaker="Ana",
                                                                     text="One more thing, Dan.")), 2,
     "misc/train.jsonl line 2: turn id 'ep-a:S3:T1' is used more than once in episode 'ep-a'"),
    ("turn_text_nonempty", lambda e: setattr(e[1].sessions[1].turns[0], "text", "  \n"), 1,
     "misc/train.jsonl line 3: turn 'ep-b:S2:T1' in session 'ep-b:S2' has a blank text '  \\n'"),
    ("memory_ids_unique", lambda e: e[1].sessions[0].memories.append(
        Memory(id="ep-b:S1:M1", owner="Ana", about="Ana", text="Ana likes tea.", session_id="ep-b:S1")), 2,
     "misc/train.jsonl line 3: memory id 'ep-b:S1:M1' is used more than once in episode 'ep-b'"),
    ("memory_text_nonempty", lambda e: setattr(e[0].sessions[4].memories[1], "text", ""), 1,
     "misc/train.jsonl line 2: memory 'ep-a:S5:M2' in session 'ep-a:S5' has a blank text ''"),
    ("query_ids_unique", lambda e: e[0].queries.append(Query(id="ep-a:Q1", question="Where is Bob?",
                                                             category="single-session")), 2,
     "misc/train.jsonl line 2: query id 'ep-a:Q1' is used more than once in episode 'ep-a'"),
    ("query_question_nonempty", lambda e: force(e[0].queries[1], question=" "), 1,
     "misc/train.jsonl line 2: query 'ep-a:Q2' has a blank question ' '"),
    ("query_category_present", lambda e: setattr(e[1].queries[1], "category", None), 1,
     "misc/train.jsonl line 3: query 'ep-b:Q2' has no category while other queries have one"),
    ("memory_importance_in_range", lambda e: setattr(e[0].sessions[0].memories[0], "importance", 1.5), 1,
     "misc/train.jsonl line 2: memory 'ep-a:S1:M1' has importance 1.5"),

]


@pytest.mark.parametrize("rule,mutate,count,example", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_expectation_rule_fails_alone(fails_alone, rule, mutate, count, example):
    fails_alone("generic", rule, mutate, count, example)


def test_every_expectation_rule_has_a_case():
    assert {c[0] for c in CASES} == set(EXPECTATION_RULES)


def test_schema_rules_are_expectations():
    assert {n for n, r in RULES.items() if r.family == "schema"} < set(EXPECTATION_RULES)
    assert set(EXPECTATION_RULES) - {n for n, r in RULES.items() if r.family == "schema"} == {
        "query_category_present", "memory_importance_in_range"}


def test_count_covers_every_failing_row_and_examples_stay_short(episodes):
    session = episodes[0].sessions[0]
    session.turns += [Turn(id=f"blank-{i}", speaker="Ana", text="\t") for i in range(30)]
    report = validate(episodes, file="x.jsonl")
    outcome = report.outcome("turn_text_nonempty")
    assert outcome.count == 30  # GX unexpected_count, not the 20 sampled rows
    assert RESULT_FORMAT["partial_unexpected_count"] == 20
    assert outcome.examples == [f"x.jsonl episode 0: turn 'blank-{i}' in session 'ep-a:S1' has a blank text '\\t'"
                                for i in range(5)]


def test_blank_means_no_visible_character(episodes):
    turns = episodes[0].sessions[0].turns
    turns[0].text = "  Hello Bob, padded with spaces.  "
    turns[1].text = "\u00a0 \n"  # non-breaking space and newline only
    results = run_expectations(to_tables(episodes))
    assert results["turn_text_nonempty"].count == 1
    assert [f.message for f in results["turn_text_nonempty"].failures] == [
        "turn 'ep-a:S1:T2' in session 'ep-a:S1' has a blank text '\\xa0 \\n'"]


def test_duplicate_ids_in_different_episodes_are_fine(episodes):
    episodes[1].sessions[0].turns[0].id = "ep-a:S1:T1"  # same id as a turn of ep-a
    episodes[1].queries[0].evidence_turns = ["ep-a:S1:T1"]
    results = run_expectations(to_tables(episodes))
    assert results["turn_ids_unique"].count == 0 and results["turn_ids_unique"].applied


def test_optional_columns_are_not_applied_when_absent(episodes):
    for ep in episodes:
        for query in ep.queries:
            query.category = None
        for memory in ep.memories():
            memory.importance = None
    results = run_expectations(to_tables(episodes))
    for rule in ("query_category_present", "memory_importance_in_range"):
        assert (results[rule].applied, results[rule].count) == (False, 0)


@pytest.mark.parametrize("root_level, quiet", [(logging.INFO, True), (logging.DEBUG, False)])
def test_great_expectations_logs_stay_quiet_unless_debug(root_level, quiet):
    """The issue: every ingest printed about 214 INFO lines of great-expectations; `-v` (debug) still shows them."""
    root, gx = logging.getLogger(), logging.getLogger("great_expectations")
    child = logging.getLogger("great_expectations.data_context.types.base")  # set to INFO by gx on import
    saved = root.level, gx.level, child.level
    try:
        root.setLevel(root_level)
        gx.setLevel(logging.NOTSET)
        child.setLevel(logging.INFO)
        validate([], file="empty.jsonl")
        expected = (logging.WARNING, logging.WARNING) if quiet else (logging.NOTSET, logging.INFO)
        assert (gx.level, child.level) == expected
    finally:
        root.setLevel(saved[0])
        gx.setLevel(saved[1])
        child.setLevel(saved[2])
