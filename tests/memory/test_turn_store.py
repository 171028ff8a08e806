import numpy as np
import pytest

from pipelines.errors import DataError
from pipelines.memory import Selector
from pipelines.memory.turn_store import TurnStrategy


class Constant(TurnStrategy):
    """Every turn scores the same except those containing 'cello'."""

    def _scores(self, query):
        return np.asarray([2.0 if "cello" in i.text else 1.0 for i in self._items])


def test_ties_go_to_the_more_recent_turn(episode, fill, q):
    strategy = Constant()
    fill(strategy, episode)
    ids = [i.turn_id for i in strategy.retrieve(q("?"), 9)]
    assert ids == ["e1:S3:T2", "e1:S1:T2", "e1:S3:T3", "e1:S3:T1", "e1:S2:T3", "e1:S2:T2", "e1:S2:T1",
                   "e1:S1:T3", "e1:S1:T1"]


def test_items_carry_their_source_ids_and_time(episode, fill, q):
    strategy = Constant()
    fill(strategy, episode)
    top = strategy.retrieve(q("?"), 1)[0]
    assert (top.turn_id, top.session_id, top.speaker, top.text, top.score, top.order) == \
        ("e1:S3:T2", "e1:S3", "Ben", "The cello recital went well.", 2.0, 7)
    assert top.memory_id is None and top.timestamp.isoformat() == "2023-03-01T00:00:00"


def test_a_session_is_observed_once(episode):
    strategy = Constant()
    strategy.observe(episode, episode.sessions[0])
    with pytest.raises(DataError, match="session e1:S1.*observe_once"):
        strategy.observe(episode, episode.sessions[0])


def test_forget_by_speaker_turn_and_session(episode, fill, q):
    strategy = Constant()
    fill(strategy, episode)
    assert strategy.forget(Selector.of(turns=["e1:S2:T2"], sessions=["e1:S1"])) == 4
    assert [i.turn_id for i in strategy.items] == ["e1:S2:T1", "e1:S2:T3", "e1:S3:T1", "e1:S3:T2", "e1:S3:T3"]
    # Ben: what he said (S3:T2) and what Ana said to him (S3:T1, S3:T3: S3 is a session with him)
    assert strategy.forget(Selector.of(speakers=["Ben"])) == 3
    assert [i.turn_id for i in strategy.items] == ["e1:S2:T1", "e1:S2:T3"]
    assert strategy.forget(Selector.of(memories=["m1"])) == 0
    # a forgotten session may be observed again
    strategy.observe(episode, episode.sessions[0])
    assert len(strategy) == 5


@pytest.mark.parametrize("k", [0, -2, 1.5])
def test_k_must_be_positive(episode, fill, q, k):
    strategy = Constant()
    fill(strategy, episode)
    with pytest.raises(ValueError, match="k must be"):
        strategy.retrieve(q("?"), k)
