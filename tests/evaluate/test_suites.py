"""Every shipped benchmark suite loads, validates and runs on a fixture in its published format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.errors import ConfigError, NothingToScore, ValidationFailed
from pipelines.evaluate.report import write_report
from pipelines.evaluate.suite import (list_suites, load_suite, main_speaker_corpus, memory_tag_queries,
                                      suite_episodes)
from pipelines.evaluate.suite_run import evaluate_suite
from pipelines.evaluate.tables import category_names

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "loaders" / "fixtures"
DATA = {"locomo": FIXTURES / "locomo10_fixture.json", "longmemeval_s": FIXTURES / "longmemeval_s_fixture.json",
        "longmemeval_m": FIXTURES / "longmemeval_s_fixture.json",
        "longmemeval_oracle": FIXTURES / "longmemeval_s_fixture.json", "realmem": FIXTURES / "realmem",
        "msc": FIXTURES / "msc" / "test.jsonl", "cc": FIXTURES / "cc" / "test.jsonl",
        "misc": Path(__file__).parent / "fixtures" / "misc" / "test.jsonl", "convai2": FIXTURES / "convai2" / "valid_self_original.txt"}
BASELINES = {"no_history", "long_context", "bm25", "dense", "hybrid"}


def test_the_issue_s_suites_are_shipped():
    assert set(list_suites()) == {"synthetic", *DATA}


@pytest.mark.parametrize("name", sorted(DATA))
def test_suite_runs_on_its_published_format(name, tmp_path):
    suite = load_suite(name)
    assert suite.version >= 1 and BASELINES <= set(suite.strategies)
    for system, row in suite.reference.get("rows", {}).items():
        assert row and all(isinstance(v, (int, float)) for v in row.values()), system
    episodes = suite_episodes(suite, DATA[name])
    assert episodes
    cheap = suite.with_overrides(strategies=("no_history", "bm25"), generation=[])
    if not any(e.queries for e in episodes):  # dialogue-only data without its generation scores nothing: an error
        with pytest.raises(NothingToScore, match=f"suite '{name}' scores nothing.*0 queries.*none configured"):
            evaluate_suite(cheap, episodes, show_progress=False)
        return
    run = evaluate_suite(cheap, episodes, show_progress=False)
    assert set(run.results) == {"no_history", "bm25"} and not run.missing
    for strategy, metrics in run.metrics().items():
        assert "context_tokens" in metrics and "queries" in metrics, strategy
        if metrics["queries"]:
            assert {f"turn/recall@{k}" for k in suite.ks} <= set(metrics) or "session/mrr" in metrics


def test_longmemeval_suites_index_user_turns_only():
    suite = load_suite("longmemeval_s")
    assert (suite.corpus, suite.session_scoring) == ("main_speaker", "longmemeval")
    episodes = suite_episodes(suite, DATA["longmemeval_s"])
    for e in episodes:
        assert all(t.speaker == e.main_speaker for s in e.sessions for t in s.turns)
        kept = {t.id for s in e.sessions for t in s.turns}
        assert all(set(q.evidence_turns) <= kept for q in e.queries)


def test_main_speaker_corpus_moves_session_evidence_to_the_kept_turns(episode):
    filtered = main_speaker_corpus(episode)
    kept = {t.id for s in filtered.sessions for t in s.turns}
    turn_session = {t.id: s.id for s in filtered.sessions for t in s.turns}
    for before, after in zip(episode.queries, filtered.queries):
        if before.evidence_turns:
            assert after.evidence_turns == [t for t in before.evidence_turns if t in kept]
            assert after.evidence_sessions == list(dict.fromkeys(turn_session[t] for t in after.evidence_turns))
        else:
            assert after == before


@pytest.mark.parametrize("text, match", [
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25]\nks: [0]\n", "'ks'"),
    ("name: x\nversion: 1\nsource: nowhere\nstrategies: [bm25]\n", "'source'"),
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25, nope]\n", "unknown strategy"),
    ("name: x\nversion: 0\nsource: synthetic\nstrategies: [bm25]\n", "'version'"),
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25]\nstrategy_settings: {dense: {}}\n", "does not run"),
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25]\ncorpus: some\n", "'corpus'"),
    ("name: x\nsource: synthetic\nstrategies: [bm25]\n", "missing key"),
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25, dense]\nablation: {steps: [bm25, hybrid]}\n",
     "'ablation.steps'.*hybrid.*not strategies of the suite"),
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25, dense]\nablation: {steps: [bm25]}\n",
     "'ablation.steps'.*at least two"),
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25, dense]\nablation: {steps: [bm25, dense], "
     "metrics: [turn/recall@7]}\n", "'ablation.metrics'.*turn/recall@7"),
    ("name: x\nversion: 1\nsource: synthetic\nstrategies: [bm25, dense]\nablation: {steps: [bm25, dense], "
     "order: 1}\n", "'ablation'.*mapping"),
])
def test_bad_suite_files_name_the_file_and_key(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_suite(path)
    assert str(path) in str(err.value)


def test_misc_loader_fixture_stops_on_miscs_filters():
    """The loader fixture has 3 sessions per episode: MiSC's blocking rules stop the benchmark."""
    with pytest.raises(ValidationFailed, match="misc_six_sessions"):
        suite_episodes(load_suite("misc"), FIXTURES / "misc" / "val.jsonl")


def test_misc_queries_come_from_memory_tags():
    """tests/evaluate/fixtures/misc/test.jsonl: two six-session MiSC episodes whose main speaker
    tags one utterance per session from session 2 on; every tag names an earlier memory."""
    episodes = suite_episodes(load_suite("misc"), DATA["misc"])
    alice = episodes[0]
    assert [len(e.queries) for e in episodes] == [5, 5]
    sid = [s.id for s in alice.sessions]
    mem = {m.text: m.id for s in alice.sessions for m in s.memories}
    first, last = alice.queries[0], alice.queries[-1]
    assert first.session_id == sid[1] and first.question == "Carol: How is my son Bob doing in class these days?"
    assert first.answer == "He struggles with algebra, so we meet on Mondays."
    assert first.evidence_memories == [mem["Alice offered Bob extra algebra lessons on Monday."],
                                       mem["Bob struggles with algebra this term."]]
    assert first.evidence_sessions == [sid[0]]
    assert last.session_id == sid[5]
    assert last.evidence_memories == [mem["Dan asked Alice about students at risk."], mem["Bob passed the algebra quiz."]]
    assert last.evidence_sessions == [sid[2], sid[3]]
    # the memory strategy is scored at memory granularity, every strategy at session granularity
    run = evaluate_suite(load_suite("misc").with_overrides(strategies=("no_history", "bm25"), generation=[]),
                         episodes, show_progress=False)
    bm25, nothing = run.metrics()["bm25"], run.metrics()["no_history"]
    assert bm25["queries"] == nothing["queries"] == 10 and nothing["session/mrr"] == 0.0
    assert bm25["session/recall_all@10"] == 1.0 and bm25["session/mrr"] > 0.5   # lexical overlap finds them


def test_memory_tag_queries_skip_tags_of_the_same_session_and_opening_turns():
    episode = suite_episodes(load_suite("misc"), DATA["misc"])[0]
    s2 = episode.sessions[1]
    own = s2.memories[0].id                               # written in session 2 itself
    turns = list(s2.turns)
    turns[1] = turns[1].model_copy(update={"memory_tags": [own]})
    turns[0] = turns[0].model_copy(update={"speaker": episode.main_speaker,
                                           "memory_tags": [episode.sessions[0].memories[0].id]})
    sessions = list(episode.sessions)
    sessions[1] = s2.model_copy(update={"turns": turns})
    out = memory_tag_queries(episode.model_copy(update={"sessions": sessions}))
    assert all(q.session_id != s2.id for q in out.queries) and len(out.queries) == 4


def test_locomo_report_names_the_published_categories(tmp_path):
    """LoCoMo stores category codes; the report labels them with the names of LoCoMo's evaluation."""
    assert category_names("locomo")["2"] == "temporal" and category_names("msc") == {}
    suite = load_suite("locomo").with_overrides(strategies=("bm25",), generation=[])
    write_report([evaluate_suite(suite, suite_episodes(suite, DATA["locomo"]), show_progress=False)], tmp_path)
    md = (tmp_path / "benchmark.md").read_text()
    per_category = md.split("### Per category", 1)[1].split("###", 1)[0]
    header = next(line for line in per_category.splitlines() if line.startswith("| strategy |"))
    assert "| 1 (multi-hop) |" in header and "| 2 (temporal) |" in header, header


ANSWERS = {  # suite -> (reader prompt, judges, accuracy_ks, task): each benchmark's own
    "synthetic": ("default", ("token_f1", "answer_check"), (), "qa"),
    "locomo": ("locomo", ("locomo_f1", "locomo_llm"), (), "qa"),
    "longmemeval_s": ("longmemeval", ("longmemeval",), (3, 5), "qa"),
    "longmemeval_m": ("longmemeval", ("longmemeval",), (3, 5), "qa"),
    "longmemeval_oracle": ("longmemeval", ("longmemeval",), (3, 5), "qa"),
    "realmem": ("realmem", ("realmem_qa", "realmem_memory"), (), "qa"),
    "msc": ("response", ("geval",), (), "response"),
    "cc": ("response", ("geval",), (), "response"),
}


def test_shipped_suites_answer_with_their_benchmark_s_prompt_and_judges():
    for name in list_suites():
        answers = load_suite(name).answers
        if name not in ANSWERS:
            assert answers is None, name  # MiSC, ConvAI2: no questions to answer
            continue
        assert (answers.reader_prompt, answers.judges, answers.accuracy_ks, answers.task) == ANSWERS[name], name
        assert "full_history" in answers.references
        for system, row in answers.reference.get("rows", {}).items():
            assert row and all(isinstance(v, (int, float)) for v in row.values()), (name, system)
    lme = load_suite("longmemeval_s").answers.reference
    assert lme["judge"] == "gpt-4o-mini" and lme["rows"]["G-Long (paper)"] == {"accuracy@3": 0.5783, "accuracy@5": 0.62}
    assert load_suite("locomo").with_overrides(strategies=("bm25",)).answers == load_suite("locomo").answers


@pytest.mark.parametrize("name", sorted(ANSWERS.keys() - {"synthetic", "msc"}))
def test_suite_answers_on_its_published_format(name):
    """Questions, the protocol's recorded contexts and the reference readers on each published fixture, with a
    fake model (no judge output parses: counted unparseable, never correct). The MSC fixture has no response
    round (its main speaker opens both sessions, each of two turns); CC's fixture covers the response task."""
    from pipelines.evaluate.answers.run import AnswerSettings, evaluate_and_answer
    from tests.evaluate.answers._fakes import FakeLLM

    class Pair:
        reader = judge = FakeLLM()

    suite = load_suite(name).with_overrides(strategies=("no_history", "bm25"), generation=[])
    published = suite_episodes(suite, DATA[name], corpus=False)
    run, answers = evaluate_and_answer(suite, published, {}, Pair, AnswerSettings(max_questions=4),
                                       show_progress=False)
    assert answers is not None and 0 < answers.questions <= 4 and answers.records
    readers = {r.item.reader for r in answers.records}
    assert readers == {"no_history", "bm25", *suite.answers.references}
    per_reader = {}
    for r in answers.records:
        per_reader.setdefault((r.item.reader, r.item.setting), set()).add(r.item.query_id)
        assert set(r.verdicts) <= set(answers.judges)
    assert len(set(map(frozenset, per_reader.values()))) == 1  # the same questions for every reader and setting
    if name.startswith("longmemeval"):
        dated = [r.item for r in answers.records if r.item.question_date]
        assert dated and all(d.question_date[4] == "/" and "(" in d.question_date for d in dated)
        # the reference readers read the published dialogue: the assistant's turns too (the corpus indexes the user's)
        full = next(r.item for r in answers.records if r.item.reader == "full_history" and r.item.context)
        assert "assistant:" in full.context.lower()
    if name == "realmem":
        assert any(r.item.evidence for r in answers.records)
    if suite.answers.task == "response":
        # the dialogue so far, its last line the partner's turn the response answers; asked from session 2 on
        assert all(r.item.category.startswith("session ") and r.item.category != "session 1"
                   and ": " in r.item.question.splitlines()[-1] for r in answers.records)


def test_shipped_ablations_add_one_ingredient_per_step():
    """Every suite with an ablation runs its steps; the defaults show the headline metrics its ks allow."""
    for name in list_suites():
        suite = load_suite(name)
        if suite.ablation:
            assert set(suite.ablation["steps"]) <= set(suite.strategies), name
            assert suite.ablation["steps"][0] == "bm25", name
            assert "session/recall_all@5" in suite.ablation["metrics"], name
    trimmed = load_suite("locomo").with_overrides(strategies=("bm25", "fusion", "dense"))
    assert trimmed.ablation["steps"] == ("bm25", "fusion")
    assert not load_suite("locomo").with_overrides(strategies=("bm25", "dense")).ablation


def test_the_ablation_table_gives_each_step_s_gain_and_cost(episode, tmp_path):
    from pipelines.evaluate.report import ablation_rows
    from pipelines.evaluate.suite import Suite

    suite = Suite(name="abl", version=1, source="synthetic", strategies=("long_context", "bm25", "fusion_sessions"),
                  ks=(1, 3), ablation={"steps": ["long_context", "bm25", "fusion_sessions"],
                                       "metrics": ["turn/recall@3", "session/mrr"]})
    settings = {"fusion_sessions": {"cache_dir": str(tmp_path / "cache")}}
    run = evaluate_suite(suite, [episode], settings=settings, show_progress=False)
    rows = ablation_rows(run)
    assert [r["strategy"] for r in rows] == ["long_context", "bm25", "fusion_sessions"]
    flat = run.metrics()
    for before, row in zip(rows, rows[1:]):
        for metric in ("turn/recall@3", "session/mrr"):
            assert row[metric] == flat[row["strategy"]][metric]
            assert row[f"gain {metric}"] == pytest.approx(row[metric] - before[metric])
    assert rows[0]["gain turn/recall@3"] is None and all(r["latency_ms_p50"] > 0 for r in rows)
    assert "score fusion" in rows[2]["adds"] or "session" in rows[2]["adds"]
    write_report([run], tmp_path / "out")
    md = (tmp_path / "out" / "benchmark.md").read_text()
    table = md.split("### Ablation", 1)[1].split("###", 1)[0]
    assert "| 2 | bm25 |" in table and "| 3 | fusion_sessions |" in table and "latency p50 (ms)" in table
    assert (tmp_path / "out" / "plots" / "abl" / "ablation.png").stat().st_size > 0


def test_a_run_whose_strategies_all_could_not_run_says_why_each_did_not(tmp_path):
    suite = load_suite("locomo").with_overrides(strategies=("rerank",), generation=[])
    episodes = suite_episodes(suite, DATA["locomo"])
    absent = tmp_path / "no-reranker"
    with pytest.raises(NothingToScore, match=r"ran: none; not run: rerank \(.*" + re.escape(str(absent))) as caught:
        evaluate_suite(suite, episodes, settings={"rerank": {"reranker_path": str(absent)}}, show_progress=False)
    assert "says above why it did not run" in caught.value.hint      # not "fix the record named above"
