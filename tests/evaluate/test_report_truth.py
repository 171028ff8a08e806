"""Reports that tell the truth on real data (issue 15, part 6).

- A strategy that cannot run on a dataset (``session_summary`` without summaries, ``egocentric_gold``
  without memories, ``graph`` reading triplets that are not there) is not run and is listed as missing
  with the reason, in benchmark.md, metrics.json (never as zeros), the plots and the CLI's warning.
- A strategy that ran but retrieved nothing for any query is flagged under the tables and plots.
- Per-session tables and the recall-by-session plot: one column per session up to ten, else at most ten
  ranges of sessions, each cell a mean over the queries of the range, with a row counting them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipelines.data.schema import Episode, Triplet
from pipelines.data.synthetic import SyntheticConfig, generate
from pipelines.evaluate.protocol import QueryScore, aggregate_sessions, session_ranges
from pipelines.evaluate.report import plot_note, run_benchmark, write_report
from pipelines.evaluate.suite import Suite
from pipelines.evaluate.suite_run import evaluate_suite
from pipelines.memory import STRATEGIES



def _realmem_session(n: int, memories: list[str], turns: list[dict]) -> dict:
    """One session of a ``<Name>_dialogues_256k.json`` file as RealMem publishes it (no summary field)."""
    return {"session_identifier": f"Financial_Planning_1:S{n}_01", "session_uuid": f"u{n}",
            "current_time": f"2024-03-0{n} 09:00:00",
            "extracted_memory": [{"index": f"P1-DM-S{n}_01-0{k}", "type": "Dynamic", "content": text,
                                  "source_turn": 0, "source_content_snapshot": text, "source_role_snapshot": "User",
                                  "session_uuid": f"u{n}"} for k, text in enumerate(memories, 1)],
            "dialogue_turns": turns}


def _turn(speaker: str, text: str, query: str | None = None, used: tuple[int, str] | None = None) -> dict:
    turn = {"speaker": speaker, "content": text, "is_query": query is not None}
    if query:
        turn.update(query_id=query, category_name="Financial_Planning")
    if used:
        turn.update(memory_used=[{"session_uuid": f"u{used[0]}", "content": used[1]}],
                    memory_session_uuids=[f"u{used[0]}"])
    return turn


@pytest.fixture
def realmem_dir(tmp_path) -> Path:
    """A RealMem persona file: three sessions with extracted memories, two queries about earlier sessions."""
    dialogues = [
        _realmem_session(1, ["Ana is saving for a flat."], [
            _turn("User", "I am saving for a flat in Lisbon."), _turn("Assistant", "Let us set a monthly target.")]),
        _realmem_session(2, ["Ana meets the bank on Friday."], [
            _turn("User", "What was I saving for?", query="Q1"),
            _turn("Assistant", "You are saving for a flat.", used=(1, "Ana is saving for a flat.")),
            _turn("User", "I meet the bank on Friday."), _turn("Assistant", "Good luck at the bank.")]),
        _realmem_session(3, [], [
            _turn("User", "When do I meet the bank?", query="Q2"),
            _turn("Assistant", "On Friday.", used=(2, "Ana meets the bank on Friday."))]),
    ]
    folder = tmp_path / "realmem"
    folder.mkdir()
    (folder / "Ana_Lima_dialogues_256k.json").write_text(json.dumps(
        {"_metadata": {"person_name": "Ana Lima", "total_sessions": 3, "total_tokens": 100}, "dialogues": dialogues}))
    return folder


def _without_memories(episode: Episode) -> Episode:
    """The episode with no memory (and no query with memory evidence)."""
    return episode.model_copy(update={"sessions": [s.model_copy(update={"memories": [], "links": []})
                                                   for s in episode.sessions],
                                      "queries": [q for q in episode.queries if not q.evidence_memories]})


def _section(md: str, title: str) -> str:
    return md.split(title, 1)[1].split("\n### ", 1)[0]


# --- strategies that cannot run on the data -----------------------------------------------------------


def test_unavailable_reads_what_each_strategy_needs_from_the_data(episode):
    """The class hook, per strategy and settings: None when the data has what the strategy reads."""
    bare = _without_memories(episode)
    summarised = episode.model_copy(update={"sessions": [s.model_copy(update={"summary": "Ana talks."})
                                                         for s in episode.sessions]})
    with_triplets = episode.model_copy(update={"sessions": [
        s.model_copy(update={"turns": [t.model_copy(update={"triplets": [Triplet(subject="Ana", relation="likes",
                                                                                object="kites")]})
                                       for t in s.turns]}) for s in episode.sessions]})
    assert "no session summaries (none of the 4 sessions of the 1 episodes" in \
        STRATEGIES["session_summary"].unavailable([episode], {})
    assert STRATEGIES["session_summary"].unavailable([summarised], {}) is None
    assert "lists no memories" in STRATEGIES["egocentric_gold"].unavailable([bare], {})
    assert STRATEGIES["egocentric_gold"].unavailable([episode], {}) is None
    assert STRATEGIES["egocentric"].unavailable([bare], {}) is None                    # the model writes them
    assert "lists no memories" in STRATEGIES["egocentric"].unavailable([bare], {"memory_source": "gold"})
    assert "no triplets (none of the 8 turns" in STRATEGIES["graph"].unavailable([episode], {})
    assert STRATEGIES["graph"].unavailable([episode], {"extraction": "model"}) is None  # the extractor writes them
    assert STRATEGIES["graph"].unavailable([with_triplets], {}) is None
    assert all(STRATEGIES[name].unavailable([bare], {}) is None
               for name in ("no_history", "long_context", "bm25", "dense", "hybrid", "mdr"))


def test_a_strategy_that_cannot_run_is_missing_with_its_reason_never_zeros(episode, tmp_path):
    """session_summary on data without summaries and egocentric_gold on data without memories (their memory
    could only stay empty): not run, listed as missing with why in the tables, metrics.json and plots."""
    bare = _without_memories(episode)
    out = run_benchmark([bare], ["no_history", "bm25", "session_summary", "egocentric_gold"], ks=(1, 3),
                        out_dir=tmp_path, show_progress=False)
    missing = out["missing"]["synthetic"]
    assert list(missing) == ["session_summary", "egocentric_gold"]
    assert missing["session_summary"].startswith("cannot run on this data: the data has no session summaries")
    assert missing["egocentric_gold"].startswith("cannot run on this data: the data lists no memories")
    metrics = json.loads((tmp_path / "metrics.json").read_text())["synthetic"]
    assert list(metrics) == ["no_history", "bm25", "session_summary", "egocentric_gold"]     # the suite's order
    assert metrics["session_summary"] == {"missing": missing["session_summary"]}
    assert metrics["egocentric_gold"] == {"missing": missing["egocentric_gold"]}
    md = (tmp_path / "benchmark.md").read_text()
    assert "(missing: session_summary, egocentric_gold)" in md
    for table in ("### turn granularity", "### session granularity"):
        rows = _section(md, table)
        assert "| session_summary | missing: cannot run on this data: the data has no session summaries" in rows
        assert "| egocentric_gold (oracle) | missing: cannot run on this data: the data lists no memories" in rows
    queries = [json.loads(line) for line in open(tmp_path / "queries.jsonl")]
    assert {q["strategy"] for q in queries} == {"no_history", "bm25"}                       # nothing scored
    assert not any("session_summary" in p.name or "egocentric" in p.name for p in out["plots"])
    header = (tmp_path / "plots" / "synthetic" / "recall_at_k.csv").read_text().splitlines()[0]
    assert "session_summary" not in header and "egocentric_gold" not in header           # no zero column


def test_plots_note_the_strategies_not_drawn_and_why(episode, tmp_path):
    suite = Suite(name="s", version=1, source="canonical", strategies=("bm25", "session_summary"), ks=(1,))
    run = evaluate_suite(suite, [episode], show_progress=False)
    note = plot_note(run)
    assert note.startswith("not run: session_summary (cannot run on this data: the data has no session summaries")
    assert len(note) < 200                                               # shortened to fit under the panels
    assert plot_note(evaluate_suite(suite.with_overrides(strategies=("bm25",)), [episode],
                                    show_progress=False)) == ""


def test_realmem_through_the_cli_lists_session_summary_as_missing(realmem_dir, tmp_path, caplog, capsys):
    """The issue's case: ``benchmark --suite realmem`` on RealMem files (no session summaries, memories in
    each session's extracted_memory): session_summary is not scored 0 but missing, with the reason, in the
    CLI's warning, its last stdout line (metrics.json) and benchmark.md."""
    from pipelines.cli import main

    caplog.set_level(logging.WARNING, logger="mnemos")
    code = main(["benchmark", "--suite", "realmem", "--path", str(realmem_dir), "--strategies",
                 "no_history,bm25,session_summary", "--out", str(tmp_path / "out"), "--models-root",
                 str(tmp_path), "--no-answers", "-q"])  # retrieval only: the answers have tests of their own
    assert code == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    why = last["realmem"]["session_summary"]["missing"]
    assert why.startswith("cannot run on this data: the data has no session summaries")
    assert last["realmem"]["bm25"]["queries"] > 0
    assert any(r.getMessage() == f"strategy session_summary is missing: {why}" for r in caplog.records)
    md = (tmp_path / "out" / "benchmark.md").read_text()
    assert f"| session_summary | missing: {why} |" in md


# --- a strategy that ran and retrieved nothing ----------------------------------------------------------


def test_a_strategy_that_retrieved_nothing_is_flagged(episode, tmp_path, caplog):
    """session_summary with a summary in the last session only (the data has one: it runs) never has one to
    give when a query is asked: its zeros are flagged under the tables, in the plots' note and in a warning;
    no_history, empty by design, is not."""
    sessions = [s.model_copy(update={"summary": "Ana: white snow falls." if s.id == "p1:S4" else None})
                for s in episode.sessions]
    episode = episode.model_copy(update={"sessions": sessions, "queries": [q for q in episode.queries
                                                                           if q.session_id is not None]})
    caplog.set_level(logging.WARNING, logger="mnemos")
    suite = Suite(name="s", version=1, source="canonical", strategies=("no_history", "bm25", "session_summary"),
                  ks=(1,))
    run = evaluate_suite(suite, [episode], show_progress=False)
    assert run.missing == {} and run.retrieved_nothing() == ["session_summary"]
    assert run.results["bm25"].retrieved_nothing() is False and run.results["no_history"].retrieved_nothing()
    scored = run.results["session_summary"].aggregate()["overall"]["queries"]
    assert scored == 2
    out = write_report([run], tmp_path)
    md = (tmp_path / "benchmark.md").read_text()
    note = ("**Retrieved nothing:** `session_summary` returned no item for any of its 2 scored queries. Its "
            "memory stayed empty on this data: the zeros measure no retrieval, not a poor one.")
    assert note in md and note in out["markdown"]["s"]
    assert "`no_history`" not in md
    assert plot_note(run) == "retrieved nothing for any query (drawn at 0): session_summary"
    assert any("strategy session_summary retrieved nothing for any of the 2 scored queries" in r.getMessage()
               for r in caplog.records)
    rows = [json.loads(line) for line in open(tmp_path / "queries.jsonl")]
    assert {r["retrieved"] for r in rows if r["strategy"] == "session_summary"} == {0}
    assert all(r["retrieved"] > 0 for r in rows if r["strategy"] == "bm25")


# --- per-session tables: ranges beyond ten sessions ------------------------------------------------------


@pytest.mark.parametrize("indices, ranges", [
    ([0, 1, 3], [(0, 0), (1, 1), (3, 3)]),                                   # up to ten: one per session
    (range(10), [(i, i) for i in range(10)]),
    (range(270), [(27 * i, 27 * i + 26) for i in range(10)]),                # RealMem: 1-27, 28-54, ...
    (range(11), [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 10)]),
    ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100], [(0, 10), (99, 100)]),            # ranges without a session dropped
    ([], []),
])
def test_session_ranges(indices, ranges):
    assert session_ranges(indices) == ranges
    assert len(session_ranges(indices)) <= 10


def _score(session: int, recall: float, query: str) -> QueryScore:
    return QueryScore("bm25", "e", query, "turn", "c", session, 10, 1, 1, {"recall@1": recall})


def test_a_range_is_the_mean_over_its_queries_not_of_session_means():
    scores = [_score(0, 1.0, "a"), _score(1, 0.0, "b"), _score(1, 0.0, "c"), _score(1, 0.0, "d")]
    groups = aggregate_sessions(scores, [(0, 1), (5, 9)])
    assert list(groups) == [(0, 1)]                                          # an empty range is left out
    assert groups[(0, 1)]["turn"]["recall@1"] == 0.25 and groups[(0, 1)]["queries"] == 4  # not (1 + 0) / 2


def test_per_session_table_groups_more_than_ten_sessions(tmp_path):
    """25 sessions with queries: at most ten columns of session ranges, each the mean over its queries (checked
    against queries.jsonl), and a row counting them."""
    (episode,) = generate(SyntheticConfig(episodes=1, sessions=25, turns=4, partners=2, queries_per_session=2))
    out = run_benchmark([episode], ["no_history", "bm25"], ks=(1, 5), out_dir=tmp_path, show_progress=False)
    md = (tmp_path / "benchmark.md").read_text()
    part = _section(md, "### Per session (the session a query is asked in, numbered from 1): recall@5")
    assert "grouped into" in part and "not a mean of per-session means" in part
    table = part.split("session granularity:\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    columns = [c.strip() for c in table[0].strip("|").split("|")][1:]
    assert 2 <= len(columns) <= 10 and all(c.startswith("sessions ") for c in columns[:-1])
    rows = [json.loads(line) for line in open(tmp_path / "queries.jsonl")]
    bm25 = [r for r in rows if r["strategy"] == "bm25" and r["granularity"] == "session"]
    counts = next(line for line in table if line.startswith("| queries |"))
    counted = [int(c) for c in counts.strip("|").split("|")[1:]]
    assert sum(counted) == len(bm25)                                     # every scored query in one range
    cells = next(line for line in table if line.startswith("| bm25 |")).strip("|").split("|")[1:]
    for column, cell, n in zip(columns, cells, counted):
        first, _, last = column.removeprefix("sessions ").removeprefix("session ").partition("-")
        low, high = int(first) - 1, int(last or first) - 1
        inside = [r["metrics"]["recall@5"] for r in bm25 if low <= r["session_index"] <= high]
        assert len(inside) == n and float(cell.strip().strip("*")) == pytest.approx(sum(inside) / n, abs=5e-5)
    assert (tmp_path / "plots" / "synthetic" / "recall_by_session.png").read_bytes()[:4] == b"\x89PNG"
    assert out["plots"]


def test_per_session_table_keeps_one_column_per_session_up_to_ten(episode, tmp_path):
    run_benchmark([episode], ["bm25"], ks=(1,), out_dir=tmp_path, show_progress=False)
    md = (tmp_path / "benchmark.md").read_text()
    part = _section(md, "### Per session (the session a query is asked in, numbered from 1): recall@1")
    assert "grouped into" not in part
    assert "| strategy | session 2 | session 3 | session 5 |" in part   # Q1 in S2, Q2 in S3, Q6 after S4
    assert "| queries | 1 | 1 | 1 |" in part
