from pipelines.memory import Selector, build_strategy


def test_no_history_keeps_nothing(episode, fill, q):
    strategy = build_strategy("no_history")
    fill(strategy, episode)
    assert len(strategy) == 0
    assert strategy.retrieve(q("Who is learning the cello?"), 5) == []
    assert strategy.context(q("Who is learning the cello?"), 1024) == ""
    assert strategy.forget(Selector.of(sessions=["e1:S1"])) == 0
