from pipelines.memory import Selector, build_strategy


def test_retrieves_sessions_by_their_summary(episode, fill, q):
    strategy = build_strategy("session_summary")
    fill(strategy, episode)
    assert len(strategy) == 2  # S3 has no summary
    items = strategy.retrieve(q("Who became a pharmacist?"), 5)
    assert [i.session_id for i in items] == ["e1:S2", "e1:S1"]
    assert items[0].turn_id is None and items[0].text.startswith("Ana became a pharmacist.")
    assert strategy.granularities == ("session",)
    assert strategy.context(q("Who became a pharmacist?"), 100).startswith("[2023-01-05] Ana has a greyhound")


def test_forget_by_turn_session_or_partner_removes_the_summary(episode, fill, q):
    strategy = build_strategy("session_summary")
    fill(strategy, episode)
    assert strategy.forget(Selector.of(turns=["e1:S1:T3"])) == 1  # the summary was made from that turn
    assert [i.session_id for i in strategy.retrieve(q("Lisbon"), 5)] == ["e1:S2"]
    assert strategy.forget(Selector.of(speakers=["Cleo"])) == 1
    assert strategy.retrieve(q("pharmacist"), 5) == []
    fill_again = build_strategy("session_summary")
    fill(fill_again, episode)
    assert fill_again.forget(Selector.of(speakers=["Ana"])) == 2  # the main speaker is in every session
