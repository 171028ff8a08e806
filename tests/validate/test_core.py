"""validate(): a clean dataset passes every rule, one outcome per declared rule whatever the data."""

from __future__ import annotations

import pytest

from pipelines.errors import ConfigError
from pipelines.validate import RULES, validate

FILE = "misc/train.jsonl"
RECORDS = {"ep-a": "line 2", "ep-b": "line 3"}  # as in conftest


@pytest.mark.parametrize("profile", ["generic", "misc"])
def test_clean_fixture_passes_every_rule(episodes, profile):
    report = validate(episodes, file=FILE, profile=profile, records=RECORDS)
    assert [o.name for o in report.outcomes] == list(RULES)
    assert report.failed() == []
    assert all(o.passed and o.count == 0 and o.examples == [] for o in report.outcomes)
    assert report.passed and report.profile == profile and report.file == FILE
    not_applied = {o.name for o in report.outcomes if not o.metadata["applied"]}
    # without the LoadResult the loss policy has nothing to weigh; no source here keeps file order
    assert not_applied == {n for n, r in RULES.items() if profile not in r.profiles} | {
        "load_loss_within_limit", "file_order_timestamps"}


@pytest.mark.parametrize("profile", ["generic", "misc"])
def test_empty_dataset_yields_every_rule(profile):
    report = validate([], file="empty.jsonl", profile=profile)
    assert [o.name for o in report.outcomes] == list(RULES)
    assert report.passed and report.failed() == []
    assert report.counts == {name: 0 for name in ("episodes", "speakers", "sessions", "turns", "memories", "links",
                                                  "queries", "evidence", "triplets", "memory_tags")}
    applied = {o.name for o in report.outcomes if o.metadata["applied"]}
    assert "query_category_present" not in applied and "memory_importance_in_range" not in applied
    assert ("short_utterances" in applied) is (profile == "generic")
    assert ("misc_six_sessions" in applied) is (profile == "misc")


def test_unknown_profile_is_a_config_error(episodes):
    with pytest.raises(ConfigError, match="profile must be one of generic, misc, got 'locomo'"):
        validate(episodes, file="x.jsonl", profile="locomo")


def test_default_records_are_episode_positions(episodes):
    episodes[1].sessions[0].turns[0].text = ""
    report = validate(episodes, file="x.jsonl")
    assert report.outcome("turn_text_nonempty").examples == [
        "x.jsonl episode 1: turn 'ep-b:S1:T1' in session 'ep-b:S1' has a blank text ''"]


def test_outcome_metadata(episodes):
    episodes[1].sessions[2].turns[1].text = " "
    report = validate(episodes, file="x.jsonl", records={"ep-b": "line 9"})
    assert report.outcome("turn_text_nonempty").metadata == {
        "family": "schema", "unit": "turns", "profile": "generic", "applied": True, "records": ["line 9"],
        "messages": ["turn 'ep-b:S3:T2' in session 'ep-b:S3' has a blank text ' '"], "table": "turns",
        "expectation": "expect_column_values_to_match_regex", "element_count": 24, "unexpected_percent": 4.1667}
    assert report.outcome("memory_tags_resolve").metadata == {
        "family": "integrity", "unit": "memory tags", "profile": "generic", "applied": True, "records": [],
        "messages": []}
    assert report.duration_s > 0
