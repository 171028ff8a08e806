"""The report: raise_if_blocking's message, the HTML page and the JSON document."""

from __future__ import annotations

import json

import pytest

from pipelines.errors import DataError, ValidationFailed
from pipelines.validate import RULES, render_html, validate, write_report

FILE = "misc/train.jsonl"
RECORDS = {"ep-a": "line 2", "ep-b": "line 3"}  # episode id -> line in FILE


@pytest.fixture
def broken(episodes):
    """Two blocking failures (a blank turn, two unknown evidence turns) and one warning."""
    episodes[0].sessions[1].turns[0].text = ""
    episodes[1].queries[0].evidence_turns += ["ep-b:S9:T1", "<b>ep-b:S9:T2</b>"]
    episodes[1].sessions[0].turns[1].text = "Hi, Ana."
    return validate(episodes, file=FILE, records=RECORDS)


def test_raise_if_blocking_names_file_record_rule_and_counts_the_others(broken):
    assert broken.failed() == ["turn_text_nonempty", "evidence_turns_resolve", "short_utterances"]
    with pytest.raises(ValidationFailed) as info:
        broken.raise_if_blocking()
    err = info.value
    assert isinstance(err, DataError)
    assert (err.file, err.record, err.rule) == (FILE, "line 2", "turn_text_nonempty")
    assert str(err) == (
        "file misc/train.jsonl, record line 2, rule 'turn_text_nonempty': Every turn has a non-blank text. "
        "Failing turns: 1; first: turn 'ep-a:S2:T1' in session 'ep-a:S2' has a blank text ''. "
        "Other blocking failures: evidence_turns_resolve (evidence ids: 2).")


def test_warnings_alone_do_not_raise(episodes):
    episodes[0].sessions[0].turns[0].text = "Hi Bob."
    report = validate(episodes, file=FILE, records=RECORDS)
    assert [o.name for o in report.warnings()] == ["short_utterances"]
    assert report.passed
    report.raise_if_blocking()  # returns without raising


def test_write_report_html_and_json(broken, tmp_path):
    html_path, json_path = tmp_path / "r" / "misc.html", tmp_path / "r" / "misc.json"
    write_report(broken, html_path, json_path)
    html = html_path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert "<title>Validation report: misc/train.jsonl</title>" in html
    assert '<span class="status FAILED">FAILED</span>' in html  # overall status
    assert "2 blocking failures" in html and "1 warning." in html
    assert "<code>turn_text_nonempty</code> (1), <code>evidence_turns_resolve</code> (2)" in html
    assert '<tr><td>turns</td><td class="num">24</td></tr>' in html  # dataset counts
    assert '<tr id="rule-short_utterances">' in html and '<span class="status WARNING">WARNING</span>' in html
    assert '<span class="status N/A">' not in html and 'status N-A">N/A</span>' in html  # misc rules not applied
    assert RULES["evidence_turns_resolve"].description in html
    # examples are escaped text, never markup
    assert ("misc/train.jsonl line 3: query &#39;ep-b:Q1&#39; cites turn &#39;&lt;b&gt;ep-b:S9:T2&lt;/b&gt;&#39;"
            in html)
    assert "<b>ep-b" not in html
    assert "<script" not in html and "http" not in html.split("<body>")[0]  # self-contained, inline CSS only
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    assert doc == json.loads(json.dumps(broken.to_dict(), default=str))
    assert (doc["file"], doc["profile"], doc["passed"]) == (FILE, "generic", False)
    assert doc["blocking_failures"] == ["turn_text_nonempty", "evidence_turns_resolve"]
    assert doc["warnings"] == ["short_utterances"]
    assert doc["counts"] == {"episodes": 2, "speakers": 8, "sessions": 12, "turns": 24, "memories": 24,
                             "links": 6, "queries": 4, "evidence": 18, "triplets": 0, "memory_tags": 6}
    rules = {r["name"]: r for r in doc["rules"]}
    assert list(rules) == list(RULES)
    assert rules["evidence_turns_resolve"]["count"] == 2
    assert rules["evidence_turns_resolve"]["examples"] == [
        "misc/train.jsonl line 3: query 'ep-b:Q1' cites turn 'ep-b:S9:T1', which is not a turn of episode 'ep-b'",
        "misc/train.jsonl line 3: query 'ep-b:Q1' cites turn '<b>ep-b:S9:T2</b>', which is not a turn of episode "
        "'ep-b'"]
    assert rules["short_utterances"]["blocking"] is False
    assert rules["misc_six_sessions"]["metadata"]["applied"] is False


def test_render_html_of_a_passing_report(episodes):
    html = render_html(validate(episodes, file=FILE, profile="misc", records=RECORDS))
    assert f'<span class="status PASSED">PASSED</span> &mdash; {len(RULES)} rules, 0 blocking failures,' in html
    # N/A: short_utterances (misc profile), load_loss_within_limit (no LoadResult), file_order_timestamps (no RealMem)
    assert html.count('<span class="status PASSED">PASSED</span>') == 1 + len(RULES) - 3


def test_normalised_on_load_section_names_reasons_counts_and_first_records(episodes, tmp_path):
    from pipelines.data.loaders.base import LoadResult

    load = LoadResult(episodes=episodes)
    load.drop("blank_turn", "x.json item 3 turn 8: turn <s1:8> has a blank content ''", n=2)
    load.flag("sessions_sorted_by_date", "x.json item 5 (q7): 3 of 40 haystack sessions moved into date order")
    report = validate(episodes, file=FILE, records=RECORDS, load=load)
    write_report(report, tmp_path / "r.html", tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["load"] == {"dropped": {"blank_turn": 2}, "flagged": {"sessions_sorted_by_date": 1},
                           "lost": {"turns": 2},
                           "examples": {"blank_turn": ["x.json item 3 turn 8: turn <s1:8> has a blank content ''"],
                                        "sessions_sorted_by_date": [
                                            "x.json item 5 (q7): 3 of 40 haystack sessions moved into date order"]}}
    html = (tmp_path / "r.html").read_text()
    section = html.split("<h2>Normalised on load</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<td><code>blank_turn</code></td><td>dropped</td><td class=\"num\">2</td>" in section
    assert "<td><code>sessions_sorted_by_date</code></td><td>flagged</td><td class=\"num\">1</td>" in section
    assert "turn &lt;s1:8&gt; has a blank content" in section  # examples escaped
    assert "Normalised on load" not in render_html(validate(episodes, file=FILE, records=RECORDS))  # no load given
