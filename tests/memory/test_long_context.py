from pipelines.memory import Selector, TokenCounter, build_strategy

NEWEST_FIRST = ["e1:S3:T3", "e1:S3:T2", "e1:S3:T1", "e1:S2:T3", "e1:S2:T2", "e1:S2:T1",
                "e1:S1:T3", "e1:S1:T2", "e1:S1:T1"]


def test_ranking_is_reverse_chronological(episode, fill, q):
    strategy = build_strategy("long_context")
    fill(strategy, episode)
    items = strategy.retrieve(q("anything at all"), 9)
    assert [i.turn_id for i in items] == NEWEST_FIRST
    assert [i.score for i in items] == [0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0]
    assert [i.turn_id for i in strategy.retrieve(q("anything"), 2)] == NEWEST_FIRST[:2]


# Line costs in regex tokens, dated: "[2023-03-01] " is 7 tokens, "Ana: " 2.
#   S3:T3 "[2023-03-01] Ana: I booked a trip to Oslo."          7 + 2 + 7 = 16
#   S3:T2 "[2023-03-01] Ben: The cello recital went well."      7 + 2 + 6 = 15
#   S3:T1 "[2023-03-01] Ana: Biscuit chewed my running shoes."  7 + 2 + 6 = 15
#   S2:T3 "[2023-02-10] Ana: The weather was awful on Tuesday." 7 + 2 + 7 = 16
S3 = ("[2023-03-01] Ana: Biscuit chewed my running shoes.\n"
      "[2023-03-01] Ben: The cello recital went well.\n"
      "[2023-03-01] Ana: I booked a trip to Oslo.")


def test_budget_keeps_the_most_recent_whole_turns_and_counts_tokens_exactly(episode, fill, q):
    strategy = build_strategy("long_context")
    fill(strategy, episode)
    counter = TokenCounter()
    assert strategy.context(q("?"), 46) == S3
    assert counter.count(S3) == 46
    assert strategy.context(q("?"), 61) == S3  # S2:T3 would need 62
    with_s2 = strategy.context(q("?"), 62)
    assert with_s2 == "[2023-02-10] Ana: The weather was awful on Tuesday.\n" + S3
    assert counter.count(with_s2) == 62
    assert strategy.context(q("?"), 16) == "[2023-03-01] Ana: I booked a trip to Oslo."
    assert strategy.context(q("?"), 15) == ""  # the newest turn does not fit whole
    full = strategy.context(q("?"), 10_000)
    assert full.count("\n") == 8 and full.startswith("[2023-01-05] Ana: I adopted")


def test_undated_history_has_no_date_prefix(undated_episode, fill, q):
    strategy = build_strategy("long_context")
    fill(strategy, undated_episode)
    assert strategy.context(q("?"), 17) == "Ben: The cello recital went well.\nAna: I booked a trip to Oslo."


def test_forget_removes_turns_from_ranking_and_context(episode, fill, q):
    strategy = build_strategy("long_context")
    fill(strategy, episode)
    assert strategy.forget(Selector.of(sessions=["e1:S3"])) == 3
    assert [i.turn_id for i in strategy.retrieve(q("?"), 3)] == NEWEST_FIRST[3:6]
    assert strategy.context(q("?"), 16) == "[2023-02-10] Ana: The weather was awful on Tuesday."
    strategy.reset()
    assert len(strategy) == 0 and strategy.context(q("?"), 100) == ""
