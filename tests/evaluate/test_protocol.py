import math

import pytest

from pipelines.errors import ConfigError, DataError
from pipelines.evaluate.protocol import (ProtocolConfig, aggregate, evaluate_episode, flat_metrics, ranking,
                                         run_protocol)
from pipelines.memory import MemoryStrategy, Retrieved, build_strategy

CONFIG = ProtocolConfig(ks=(1, 3), budget_tokens=100, show_progress=False)


def figures(agg):
    """An aggregate without its latencies (measurements of this machine's speed, not figures of the retrieval)."""
    if isinstance(agg, dict):
        return {k: figures(v) for k, v in agg.items() if k != "latency_ms_p50"}
    return agg


class Spy(MemoryStrategy):
    """Records what it has observed whenever it is asked; answers with its memories, newest first."""

    granularities = ("turn", "session", "memory")

    def __init__(self):
        super().__init__()
        self.observed: list[str] = []
        self.items: list[Retrieved] = []
        self.seen_at_query: dict[str, tuple[str, ...]] = {}

    def observe(self, episode, session):
        self.observed.append(session.id)
        for turn in session.turns:
            self.items.append(Retrieved(0.0, turn.text, session_id=session.id, turn_id=turn.id,
                                        order=len(self.items)))
        for memory in session.memories:
            self.items.append(Retrieved(0.0, memory.text, session_id=session.id, memory_id=memory.id,
                                        order=len(self.items)))

    def retrieve(self, query, k):
        self.seen_at_query[query.id] = tuple(self.observed)
        return sorted(self.items, key=lambda i: -i.order)[:k]

    def forget(self, selector):
        return 0

    def reset(self):
        self.observed, self.items = [], []

    def __len__(self):
        return len(self.items)


def test_a_query_only_ever_sees_strictly_earlier_sessions(episode):
    spy = Spy()
    scores, excluded = evaluate_episode(episode, spy, CONFIG, name="spy")
    assert spy.seen_at_query == {"Q1": ("p1:S1",), "Q2": ("p1:S1", "p1:S2"), "Q9": ("p1:S1", "p1:S2"),
                                 "Q6": ("p1:S1", "p1:S2", "p1:S3", "p1:S4")}
    assert spy.observed == ["p1:S1", "p1:S2", "p1:S3", "p1:S4"]  # time order, whatever the list order
    assert sorted((e.query_id, e.reason) for e in excluded) == [
        ("Q3", "evidence_not_earlier"), ("Q4", "evidence_not_earlier"), ("Q5", "abstention"),
        ("Q7", "evidence_not_earlier"), ("Q8", "no_evidence")]
    assert {(s.query_id, s.granularity) for s in scores} == {
        ("Q1", "turn"), ("Q1", "session"), ("Q2", "turn"), ("Q2", "session"), ("Q6", "turn"), ("Q6", "session"),
        ("Q9", "memory")}
    q9 = next(s for s in scores if s.query_id == "Q9")
    # memories newest first when Q9 is asked in S3: p1:S2:M1, p1:S1:M1 -> the evidence is at rank 2
    assert (q9.metrics["recall@1"], q9.metrics["recall@3"], q9.metrics["mrr"]) == (0.0, 1.0, 0.5)


def test_long_context_scores_are_exact(episode):
    scores, excluded = evaluate_episode(episode, build_strategy("long_context", include_dates=False), CONFIG)
    got = {(s.query_id, s.granularity): s for s in scores}
    # Q1 in S2: turns newest first [S1:T2, S1:T1]; the evidence S1:T1 is at rank 2
    assert got["Q1", "turn"].metrics == {"recall@1": 0.0, "recall@3": 1.0, "recall_any@1": 0.0, "recall_any@3": 1.0,
                                         "recall_all@1": 0.0, "recall_all@3": 1.0, "ndcg_any@1": 0.0,
                                         "ndcg_any@3": 1.0, "mrr": 0.5}
    # Q2 in S3: [S2:T2, S2:T1, S1:T2, S1:T1]; evidence S2:T1 (rank 2) and S1:T2 (rank 3)
    q2 = got["Q2", "turn"].metrics
    assert (q2["recall@1"], q2["recall@3"], q2["recall_all@3"], q2["mrr"]) == (0.0, 1.0, 1.0, 0.5)
    assert q2["ndcg_any@3"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    # sessions [S2, S1], both evidence
    assert got["Q2", "session"].metrics["recall@1"] == 0.5 and got["Q2", "session"].metrics["recall_all@1"] == 0.0
    assert got["Q6", "turn"].metrics["mrr"] == 1.0
    assert [(s.session_index, s.context_tokens, s.category) for s in scores if s.granularity == "turn"] == [
        (1, 12, "single-session"), (2, 24, "multi-session"), (4, 48, "uncategorised")]  # 6 tokens per turn
    assert ("Q9", "no_scored_granularity") in {(e.query_id, e.reason) for e in excluded}


def test_aggregate_overall_per_category_and_per_session(episode):
    result = run_protocol([episode], "long_context", CONFIG, settings={"include_dates": False})
    agg = result.aggregate()
    overall = agg["overall"]
    assert overall["queries"] == 3 and overall["context_tokens"] == 28.0  # (12 + 24 + 48) / 3
    assert overall["turn"]["queries"] == 3
    assert overall["turn"]["recall@1"] == pytest.approx(1 / 3)
    assert overall["turn"]["mrr"] == pytest.approx(2 / 3)
    assert overall["session"]["recall@1"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert sorted(agg["per_category"]) == ["multi-session", "single-session", "uncategorised"]
    assert agg["per_category"]["multi-session"]["turn"]["ndcg_any@3"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert sorted(agg["per_session"]) == [1, 2, 4]
    assert agg["per_session"][4]["context_tokens"] == 48.0
    assert result.exclusion_counts() == {"abstention": 1, "evidence_not_earlier": 3, "no_evidence": 1,
                                         "no_scored_granularity": 1}
    flat = flat_metrics(overall)
    assert flat["turn/mrr"] == pytest.approx(2 / 3) and flat["context_tokens"] == 28.0 and flat["queries"] == 3.0
    assert "turn/queries" not in flat
    assert aggregate([]) == {"overall": {"queries": 0, "context_tokens": 0.0, "latency_ms_p50": 0.0}, "per_category": {},
                             "per_session": {}}


def test_run_protocol_builds_a_fresh_strategy_per_episode(episode):
    built = []

    def factory():
        built.append(Spy())
        return built[-1]

    other = episode.model_copy(update={"id": "p2"})
    result = run_protocol([episode, other], factory, CONFIG, name="spy")
    assert len(built) == 3  # one for prepare(), one per episode
    assert built[1] is not built[2] and built[2].observed == ["p1:S1", "p1:S2", "p1:S3", "p1:S4"]
    assert result.episodes == 2 and len({s.episode_id for s in result.scores}) == 2


def test_a_named_strategy_runs_over_several_episodes_and_counts_what_it_wrote(episode):
    other = episode.model_copy(update={"id": "p2"})
    result = run_protocol([episode, other], "bm25", CONFIG)
    turns = sum(len(s.turns) for s in episode.sessions)
    assert result.memory == [("p1", 4, turns), ("p2", 4, turns)]   # every turn of its 4 sessions, per episode
    assert result.memory_written() == {"items": 2.0 * turns, "sessions": 8.0, "items_per_session": turns / 4}


class Cheat(Spy):
    """Returns an item from a session it has not observed."""

    def retrieve(self, query, k):
        return [Retrieved(1.0, "from the future", session_id="p1:S4", turn_id="p1:S4:T2")]


def test_a_retrieved_item_from_an_unobserved_session_is_a_leak(episode):
    with pytest.raises(RuntimeError, match="temporal leak"):
        evaluate_episode(episode, Cheat(), CONFIG)


def test_unresolvable_ids_raise_data_errors(episode):
    bad = episode.model_copy(deep=True)
    bad.queries[0].evidence_turns = ["p1:S1:T9"]
    with pytest.raises(DataError, match=r"query Q1.*field 'evidence_turns'.*evidence_resolves"):
        evaluate_episode(bad, Spy(), CONFIG)
    bad = episode.model_copy(deep=True)
    bad.queries[0].session_id = "p1:S9"
    with pytest.raises(DataError, match=r"query Q1.*field 'session_id'"):
        evaluate_episode(bad, Spy(), CONFIG)


def test_rankings_deduplicate_in_rank_order():
    items = [Retrieved(0.0, "x", session_id="s2", turn_id="t4"), Retrieved(0.0, "x", session_id="s1", turn_id="t1"),
             Retrieved(0.0, "x", session_id="s2", turn_id="t3"), Retrieved(0.0, "x", session_id="s3", memory_id="m1")]
    assert ranking(items, "turn") == ["t4", "t1", "t3"]
    assert ranking(items, "session") == ["s2", "s1", "s3"]
    assert ranking(items, "memory") == ["m1"]


@pytest.mark.parametrize("settings, match", [
    ({"ks": ()}, "ks"), ({"ks": (0, 3)}, "ks"), ({"ks": (3, 3)}, "repeat"),
    ({"budget_tokens": -1}, "budget_tokens"), ({"ks": (1, 10), "depth": 5}, "depth"),
])
def test_config_checks(settings, match):
    with pytest.raises(ConfigError, match=match):
        ProtocolConfig(**settings)


def test_ks_are_sorted():
    assert ProtocolConfig(ks=(10, 1, 5)).ks == (1, 5, 10)


# --- answer-level evaluation: the readers' contexts, recorded while the loop runs ----------------------------------

from pipelines.data.schema import Query  # noqa: E402
from pipelines.evaluate.protocol import AnswerRequest, answerable  # noqa: E402
from pipelines.memory import pack_context  # noqa: E402


def test_recording_the_readers_contexts_changes_no_retrieval_figure(episode):
    everything = frozenset(("p1", q.id) for q in episode.queries)
    probe = Query(id="probe", session_id="p1:S3", question="What sails?")
    request = AnswerRequest(everything, ks=(1, 3), probes={"p1": (probe,)})
    asked = ProtocolConfig(ks=(1, 3), budget_tokens=100, show_progress=False, answers=request)
    plain = run_protocol([episode], "long_context", CONFIG, settings={"include_dates": False})
    recorded = run_protocol([episode], "long_context", asked, settings={"include_dates": False})
    assert recorded.scores == plain.scores and recorded.excluded == plain.excluded and not plain.contexts
    assert figures(recorded.aggregate()) == figures(plain.aggregate())
    got = {(c.query_id, c.setting): c for c in recorded.contexts}
    # answered: the scored queries, the abstention Q5, Q8 without evidence, Q9 (memory evidence), and the probe;
    # never Q3, Q4, Q7, whose evidence is not earlier than their session
    assert {q for q, _ in got} == {"Q1", "Q2", "Q5", "Q6", "Q8", "Q9", "probe"}
    assert {s for _, s in got} == {"context", "top1", "top3"}
    assert [q.id for q, why in answerable(episode) if why] == ["Q3", "Q4", "Q7"]


def test_recorded_contexts_are_what_the_strategy_gives_at_the_question_s_time(episode):
    request = AnswerRequest(frozenset({("p1", "Q2"), ("p1", "Q5")}), ks=(1,))
    contexts = []
    evaluate_episode(episode, build_strategy("long_context", include_dates=False),
                     ProtocolConfig(ks=(1, 3), budget_tokens=100, show_progress=False, answers=request),
                     contexts=contexts)
    got = {(c.query_id, c.setting): c for c in contexts}
    # the same strategy, fed by hand the sessions before each question's own
    by_hand = build_strategy("long_context", include_dates=False)
    sessions = sorted(episode.sessions, key=lambda s: s.index)
    for s in sessions[:2]:
        by_hand.observe(episode, s)
    q2 = episode.queries[1]
    assert got["Q2", "context"].text == by_hand.context(q2, 100) and got["Q2", "context"].tokens == 24
    assert got["Q2", "top1"].text == pack_context(by_hand.retrieve(q2, 1), 100, by_hand.counter, False) \
        == "Ana: grey cat sleeps."                                # the newest turn: S2:T2
    by_hand.observe(episode, sessions[2])
    q5 = episode.queries[4]  # abstention, asked in S4: retrieved for, never scored
    assert got["Q5", "context"].text == by_hand.context(q5, 100) and len(got["Q5", "context"].text.splitlines()) == 6
    assert got["Q5", "top1"].text == "Ana: gold coin shines."


def test_a_request_without_a_list_for_the_contexts_is_refused(episode):
    config = ProtocolConfig(ks=(1,), show_progress=False, answers=AnswerRequest(frozenset({("p1", "Q1")})))
    with pytest.raises(ValueError, match="pass a list"):
        evaluate_episode(episode, Spy(), config)


# --- strategies that rank sessions themselves -------------------------------------------------------------------

class SessionRanker(Spy):
    """Ranks turns newest first, but sessions oldest first (its own session scoring)."""

    def session_ranking(self, query):
        return list(dict.fromkeys(self.observed))


def test_a_strategy_s_own_session_ranking_is_scored_at_session_granularity(episode):
    scores, _ = evaluate_episode(episode, SessionRanker(), CONFIG, name="ranker")
    plain, _ = evaluate_episode(episode, Spy(), CONFIG, name="spy")
    pick = lambda rows, q, g: next(s for s in rows if (s.query_id, s.granularity) == (q, g)).metrics  # noqa: E731
    # Q1 (asked in S2, evidence S1): S1 is the only session observed either way
    # Q6 (after S4, evidence S4): newest-first turns put S4 first; the oldest-first session ranking puts it 4th
    assert pick(plain, "Q6", "session")["recall@1"] == 1.0 and pick(plain, "Q6", "session")["mrr"] == 1.0
    assert pick(scores, "Q6", "session")["recall@1"] == 0.0 and pick(scores, "Q6", "session")["mrr"] == 0.25
    assert pick(scores, "Q6", "turn") == pick(plain, "Q6", "turn")  # turns keep the ranking of retrieve
    # under LongMemEval's scoring too: the session ranking, not turn2session of the turn ranking
    official = ProtocolConfig(ks=(1, 3), budget_tokens=100, show_progress=False, session_scoring="longmemeval")
    scores, _ = evaluate_episode(episode, SessionRanker(), official, name="ranker")
    assert pick(scores, "Q6", "session")["recall_any@1"] == 0.0 and pick(scores, "Q6", "session")["mrr"] == 0.25


class SessionCheat(Spy):
    def session_ranking(self, query):
        return ["p1:S4", *dict.fromkeys(self.observed)]


def test_a_session_ranking_naming_an_unobserved_session_is_a_leak(episode):
    with pytest.raises(RuntimeError, match="ranked session.*temporal leak"):
        evaluate_episode(episode, SessionCheat(), CONFIG)


def test_each_query_s_retrieval_latency_is_recorded_and_its_median_aggregated(episode):
    scores, _ = evaluate_episode(episode, Spy(), CONFIG, name="spy")
    assert all(s.latency_ms > 0 for s in scores)
    overall = aggregate(scores)["overall"]
    per_query = sorted({(s.episode_id, s.query_id): s.latency_ms for s in scores}.values())
    assert overall["latency_ms_p50"] == pytest.approx(per_query[len(per_query) // 2] if len(per_query) % 2 else
                                                      (per_query[len(per_query) // 2 - 1]
                                                       + per_query[len(per_query) // 2]) / 2)
    assert "latency_ms_p50" in flat_metrics(overall)


class Sized(Spy):
    def index_bytes(self):
        return 100 * len(self.items)


def test_index_bytes_are_recorded_per_episode_when_measured(episode):
    result = run_protocol([episode], Sized, CONFIG)
    assert result.index_bytes == [100 * 8 + 100 * 4]  # 8 turns and 4 memories held after the last session
    assert run_protocol([episode], Spy, CONFIG).index_bytes == []


class _Chat:
    """A writer as the benchmark sees it: a cumulative report, and a peak that starts afresh on reset_peaks."""

    def __init__(self):
        self.calls, self.longest_prompt = 0, 0

    def ask(self, tokens: int) -> None:
        self.calls += 1
        self.longest_prompt = max(self.longest_prompt, tokens)

    def reset_peaks(self) -> None:
        self.longest_prompt = 0

    def report(self) -> dict:
        return {"role": "peer.llm", "model": "m", "calls": self.calls, "longest_prompt": self.longest_prompt}


def test_each_episodes_writer_report_has_its_own_counts_and_its_own_longest_prompt(monkeypatch):
    """A peak is not a count: the second episode, whose prompts are shorter than the first's, reports its own
    longest prompt (before, the two maxima were subtracted: 0)."""
    from pipelines.evaluate.protocol import _writer_counts, _writer_delta
    from pipelines.memory import writers

    chat = _Chat()
    monkeypatch.setattr(writers, "_SHARED", {"chat": chat})
    reports = []
    for prompts in ([2507, 900], [1200, 300, 40]):
        before = _writer_counts(start=True)
        for tokens in prompts:
            chat.ask(tokens)
        reports.append(_writer_delta(before, _writer_counts()))
    assert reports == [[{"role": "peer.llm", "model": "m", "calls": 2, "longest_prompt": 2507}],
                       [{"role": "peer.llm", "model": "m", "calls": 3, "longest_prompt": 1200}]]
