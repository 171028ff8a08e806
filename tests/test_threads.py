"""Thread links between sessions (:mod:`pipelines.threads`), the conversation so far as query context, and
the ``fusion_context`` / ``fusion_threads`` strategies, with the shipped all-MiniLM-L6-v2 as the dense ranker."""

import numpy as np
import pytest

from pipelines.data.schema import Query, Session, Turn
from pipelines.errors import ConfigError
from pipelines.evaluate.protocol import in_conversation
from pipelines.memory import STRATEGIES, build_strategy
from pipelines.memory.conformance import thread_episode
from pipelines.memory.fusion import FusionContext, FusionThreads
from pipelines.threads import expand, forest, lift, link, session_vectors


# --- the pure parts -------------------------------------------------------------------------------------------

def test_session_vectors_are_the_opening_and_the_whole_mean_normalised():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0]]) / np.c_[[1, 1, 1, np.sqrt(2)]]  # (N=4, D=2)
    session_of = np.array([0, 0, 0, 1])
    openings, centroids = session_vectors(vectors, session_of, 2, opening=1)
    assert openings[0] == pytest.approx([1.0, 0.0])                          # the first turn alone
    assert centroids[0] == pytest.approx(np.array([1.0, 2.0]) / np.sqrt(5))  # all three turns
    assert openings[1] == pytest.approx(centroids[1])


def test_a_session_links_to_the_earlier_session_it_continues_only_when_it_stands_out():
    centroids = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])   # (s=3, D)
    opening = np.array([0.1, 0.9, 0.1]) / np.linalg.norm([0.1, 0.9, 0.1])
    parent, cosine = link(opening, centroids, None, 0.0, min_cos=0.4)
    assert parent == 1 and cosine == pytest.approx(opening[1])
    assert link(opening, centroids, None, 0.0, min_cos=0.99) == (-1, pytest.approx(np.nan, nan_ok=True))
    # as close to every earlier session: it continues none of them (no margin over their mean)
    flat = np.ones(3) / np.sqrt(3)
    assert link(flat, centroids, None, 0.0, min_cos=0.4, min_margin=0.1)[0] == -1
    # the lexical score breaks a near tie of cosines
    near = np.array([0.7, 0.69, 0.0]) / np.linalg.norm([0.7, 0.69, 0.0])
    assert link(near, centroids, np.array([0.0, 5.0, 0.0]), 1.0, min_cos=0.4)[0] == 1
    assert link(opening, centroids[:0], None, 0.0, min_cos=0.4)[0] == -1    # the first session: nothing earlier


def test_forest_numbers_threads_and_counts_their_newer_sessions():
    threads = forest(np.array([-1, -1, 0, -1, 2]))   # 0 <- 2 <- 4; 1 and 3 alone
    assert threads.thread.tolist() == [0, 1, 0, 2, 0]     # numbered by their oldest session
    assert threads.thread[0] == threads.thread[2] == threads.thread[4]
    assert len({threads.thread[0], threads.thread[1], threads.thread[3]}) == 3
    assert threads.newer.tolist() == [2, 0, 1, 0, 0]
    assert threads.links == 2


def test_expand_lifts_the_latest_sessions_of_the_matched_thread():
    threads = forest(np.array([-1, -1, 0, -1, 2]))
    scores = np.array([1.0, 0.9, 0.2, 0.0, 0.1])     # the thread's oldest session matches the question best
    lifted = expand(scores, threads, weight=1.0, recency=0.5)
    # the thread's latest (4) gains theta = 1 in full, its middle (2) half, its oldest (0) a quarter
    assert lifted == pytest.approx([1.25, 0.9 + 0.9, 0.2 + 0.5, 0.0, 1.1])
    assert lifted[4] > lifted[3] and lifted[4] > scores[0] - 0.1   # the thread's latest passes the unlinked one
    assert expand(scores, threads, weight=0.0, recency=0.5).tolist() == scores.tolist()   # w_t = 0: as before
    filtered = expand(np.array([-np.inf, 0.5, 0.2, 0.0, 0.1]), threads, 1.0, 0.5)
    assert filtered[0] == -np.inf and np.isfinite(filtered[1:]).all()   # a session filtered out stays out


def test_lift_raises_the_whole_thread_of_the_linked_session_by_the_span():
    threads = forest(np.array([-1, -1, 0, -1, 2]))   # 0 <- 2 <- 4; 1 and 3 alone
    scores = np.array([0.5, 3.0, 1.0, 2.0, 1.0])    # span 2.5
    lifted = lift(scores, threads, link=2, weight=0.4)                       # the query's session continues 2
    assert lifted == pytest.approx([1.5, 3.0, 2.0, 2.0, 2.0])               # 0, 2, 4 gain 0.4 * 2.5 = 1
    assert lift(scores, threads, link=3, weight=0.4) == pytest.approx([0.5, 3.0, 1.0, 3.0, 1.0])   # 3 alone
    assert lift(scores, threads, link=-1, weight=0.4).tolist() == scores.tolist()   # continues none: as before
    assert lift(scores, threads, link=2, weight=0.0).tolist() == scores.tolist()
    filtered = lift(np.array([-np.inf, 3.0, 1.0, 2.0, 1.0]), threads, link=2, weight=0.5)
    assert filtered[0] == -np.inf and filtered[2] == pytest.approx(2.0)   # span of the finite scores; -inf stays


# --- the strategies -------------------------------------------------------------------------------------------

@pytest.fixture
def fusion(tmp_path):
    return lambda name, **settings: build_strategy(name, cache_dir=str(tmp_path / "cache"), **settings)


def test_the_new_steps_are_registered_with_their_settings():
    assert STRATEGIES["fusion_context"] is FusionContext and STRATEGIES["fusion_threads"] is FusionThreads
    c = FusionThreads().config
    assert (c.context_weight, c.thread_weight, c.time) == (0.5, 1.0, "rules")
    assert FusionContext().config.thread_weight == 0.0
    assert (c.query_link_weight, c.query_link_min_cos) == (0.3, 0.2) and FusionContext().config.query_link_weight == 0
    for bad in ({"thread_recency": 1.5}, {"link_min_cos": 2.0}, {"thread_weight": -1.0}, {"context_turns": 0},
                {"query_link_min_cos": -2.0}, {"query_link_weight": -0.1}, {"thread_weight": 0.0}):
        with pytest.raises(ConfigError):
            build_strategy("fusion_threads", **bad)


def test_threads_are_read_from_content_and_lift_the_latest_session_of_the_thread(fusion):
    episode = thread_episode()
    strategy = fusion("fusion_threads")
    for session in episode.sessions:
        strategy.observe(episode, session)
    threads = strategy._layout().threads
    trip = [0, 2, 4]   # sessions 1, 3 and 5 plan the trip; 2 (bread) and 4 (a budget sheet) continue nothing
    assert threads.thread[trip[0]] == threads.thread[trip[1]] == threads.thread[trip[2]]
    assert threads.parent[1] == -1 and threads.newer[4] == 0
    question = Query(id="q", question="Can you remind me what we planned?")
    plain = fusion("fusion_context")
    for session in episode.sessions:
        plain.observe(episode, session)
    assert strategy.session_ranking(question)[0] == episode.sessions[4].id
    assert strategy.session_ranking(question) != plain.session_ranking(question)


def test_a_question_asked_inside_a_session_lifts_the_thread_that_session_continues(fusion):
    episode = thread_episode()
    opening = [Turn(id="c0", speaker="User", text="I'm back about my Japan journey.")]
    asked = Query(id="q", session_id="new", turn_id="new:1", question="What was the budget again?").model_copy(
        update={"preceding": opening})          # the user's second turn of a new session
    linked, unlinked = fusion("fusion_threads", query_link_weight=1.0), fusion("fusion_threads", query_link_weight=0)
    for session in episode.sessions:
        linked.observe(episode, session)
        unlinked.observe(episode, session)
    ids = [s.id for s in episode.sessions]
    assert unlinked.session_ranking(asked)[0] == ids[3]        # "budget" alone: the monthly budget sheet
    # the new session continues the trip (sessions 1, 3, 5): its budget comes first, the sheet below the thread
    assert linked.session_ranking(asked)[:3] == [ids[2], ids[4], ids[0]]
    after_last = asked.model_copy(update={"session_id": None, "turn_id": None})   # asked in no session
    assert linked.session_ranking(after_last) == unlinked.session_ranking(after_last)
    lexical = fusion("fusion_threads", query_link_weight=1.0, dense_weight=0.0)   # BM25 turns; the link still reads
    for session in episode.sessions:                                              # the vectors of the opening
        lexical.observe(episode, session)
    assert lexical.session_ranking(asked)[:3] == [ids[2], ids[4], ids[0]]


def test_the_conversation_so_far_is_read_below_the_question(fusion):
    episode = thread_episode()
    conversation = [Turn(id="c0", speaker="User", text="My loaf came out flat and pale again."),
                    Turn(id="c1", speaker="Assistant", text="Let us look at your oven and your starter.")]
    vague = Query(id="q", question="What did you tell me to change?")
    asked = vague.model_copy(update={"preceding": conversation})
    with_context, without = fusion("fusion_context"), fusion("fusion_time")
    for session in episode.sessions:
        with_context.observe(episode, session)
        without.observe(episode, session)
    bread = episode.sessions[1].id
    assert with_context.session_ranking(asked)[0] == bread
    assert with_context.session_ranking(vague) == without.session_ranking(vague)   # no conversation: as before
    assert without.session_ranking(asked) == without.session_ranking(vague)        # context_weight 0 reads none


def test_a_query_asked_by_a_turn_gets_the_turns_before_it():
    turns = [Turn(id=f"s:{j}", speaker="User" if j % 2 == 0 else "Assistant", text=f"turn {j}") for j in range(5)]
    session = Session(id="s", index=0, turns=turns)
    query = Query(id="q", session_id="s", turn_id="s:3", question="turn 3")
    assert [t.id for t in in_conversation(query, session).preceding] == ["s:0", "s:1", "s:2"]
    first = query.model_copy(update={"turn_id": "s:0"})
    assert in_conversation(first, session).preceding == []
    after_last = Query(id="q2", question="a question after the last session")
    assert in_conversation(after_last, None) is after_last
    assert "preceding" not in in_conversation(query, session).model_dump()   # never written to a file
