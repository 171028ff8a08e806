"""Rule declarations: the fixed set of names (a contract with Dagster), families, blocking, checks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from pipelines.registry import CheckSpec
from pipelines.validate.rules import RULES, Rule, blank, ids, utc, written_in

# One asset check per name, declared before any data is seen: renames are deliberate.
NAMES = [
    "load_loss_within_limit", "episode_ids_unique", "split_in_set", "speaker_names_unique", "session_ids_unique",
    "session_index_non_negative", "turn_ids_unique", "turn_text_nonempty", "memory_ids_unique",
    "memory_text_nonempty", "query_ids_unique", "query_question_nonempty", "splits_disjoint",
    "main_speaker_listed", "session_order", "timestamps_non_decreasing", "memory_session_matches",
    "memory_tags_resolve", "memory_tags_not_future", "link_endpoints_resolve", "links_point_backwards",
    "query_session_resolves", "evidence_turns_resolve", "evidence_sessions_resolve",
    "evidence_memories_resolve", "short_utterances", "query_category_present", "memory_importance_in_range",
    "file_order_timestamps", "misc_four_speakers", "misc_six_sessions", "misc_one_partner_per_session",
    "misc_every_partner_appears", "misc_turn_speakers_match", "misc_utterance_min_length", "misc_memory_present",
    "misc_memory_speakers",
]


def test_rules_declared_up_front():
    assert list(RULES) == NAMES
    assert {n for n, r in RULES.items() if not r.blocking} == {
        "short_utterances", "query_category_present", "memory_importance_in_range", "file_order_timestamps"}
    assert {n for n, r in RULES.items() if r.profiles == ("misc",)} == {n for n in NAMES if n.startswith("misc_")}
    assert [n for n, r in RULES.items() if r.profiles == ("generic",)] == ["short_utterances"]
    assert all(r.description.endswith(".") and ". " not in r.description for r in RULES.values())  # one sentence
    assert RULES["turn_ids_unique"].spec() == CheckSpec("turn_ids_unique", "Turn ids are unique within an episode.",
                                                        True)


@pytest.mark.parametrize("args,message", [
    (("Bad-Name", "x.", True, "schema", "turns"), "must be snake_case"),
    (("x", "x.", False, "integrity", "turns"), "integrity rules are blocking"),
    (("x", "x.", True, "quality", "turns"), "quality rules are warnings"),
    (("x", "x.", True, "misc", "turns", ("other",)), "profiles must be a non-empty subset"),
])
def test_rule_declaration_checks(args, message):
    with pytest.raises(ValueError, match=message):
        Rule(*args)


def test_helpers():
    table = pd.DataFrame({"episode_pos": [0, 0, 1], "memory_id": ["m1", "m1", "m1"], "session_pos": [2, 3, 0]})
    assert written_in(table, "memory_id") == {(0, "m1"): 2, (1, "m1"): 0}  # first row wins
    assert ids(table, "memory_id") == {(0, "m1"), (1, "m1")}
    assert utc(datetime(2024, 1, 1, 12)) == datetime(2024, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))
    assert [blank(v) for v in (None, "", " \t\n", "a", 3)] == [True, True, True, False, True]
