"""Question -> evidence training pairs (issue #18): examples from a hand-built episode, and the pairs config."""

from __future__ import annotations

import pytest

from pipelines.data import folds as folds_mod
from pipelines.data.schema import Query
from pipelines.emma import retriever as R
from pipelines.errors import ConfigError
from pipelines.memory.turn_store import TurnItem


def _with_queries(episode, *queries):
    episode.queries = list(queries)
    return episode


def test_positives_are_evidence_turns_and_candidates_the_earlier_sessions(episode):
    """A question in session 3 with evidence in session 1: positives = the evidence turn rendered as the turn
    retrievers index it; candidates = every turn of sessions 1 and 2 (hard negatives of the same episode)."""
    ep = _with_queries(episode, Query(id="q1", session_id="E1:S3", question="Where is Leo moving?",
                                      evidence_turns=["E1:S1:T2", "E1:S3:T1"]))    # S3:T1: not before the question
    [ex] = R.question_examples([ep])
    s1, s2 = ep.sessions[0], ep.sessions[1]
    assert ex.context == "Where is Leo moving?" and (ex.episode_id, ex.turn_id) == ("E1", "q1")
    assert ex.positives == ("Leo: Congratulations! I am moving to Lisbon in May.",)
    assert ex.candidates == tuple(f"{t.speaker}: {t.text}" for t in (*s1.turns, *s2.turns))
    assert len(ex.negatives) == len(s1.turns) + len(s2.turns) - 1
    item = TurnItem("E1:S1:T2", "E1:S1", 0, "Leo", s1.turns[1].text, None, 0)       # exactly as Dense indexes it
    assert ex.positives[0] == item.indexed_text(True) == R.turn_text("Leo", s1.turns[1].text)


def test_after_the_last_session_every_turn_is_a_candidate(episode):
    ep = _with_queries(episode, Query(id="q1", question="Who moved?", evidence_turns=["E1:S3:T1"]))
    [ex] = R.question_examples([ep])
    assert len(ex.candidates) == sum(len(s.turns) for s in ep.sessions)
    assert ex.positives == ("Leo: I finally moved to Lisbon!",)


@pytest.mark.parametrize("query", [
    Query(id="q", question="What is Mia's job?", abstention=True, evidence_turns=["E1:S1:T1"]),  # abstention
    Query(id="q", question="Unanswered?"),                                                          # no evidence
    Query(id="q", session_id="E1:S1", question="Too early?", evidence_turns=["E1:S1:T1"]),        # not earlier
    Query(id="q", session_id="E9:S1", question="Unknown session?", evidence_turns=["E1:S1:T1"]),
    Query(id="q", session_id="E1:S3", question="Sessions only?", evidence_sessions=["E1:S1"]),    # not this kind
])
def test_questions_without_usable_turn_evidence_give_no_example(episode, query):
    assert R.question_examples([_with_queries(episode, query)]) == []


def test_session_questions_take_the_main_speakers_turns_of_the_evidence_sessions(episode):
    """RealMem: session evidence only. Positives = Mia's turns of session 1; Leo's turns of session 1 are neither
    positives nor negatives; session 2's turns are the negatives."""
    ep = _with_queries(episode, Query(id="q1", session_id="E1:S3", question="What did Mia tell Leo?",
                                      evidence_sessions=["E1:S1"]),
                       Query(id="q2", session_id="E1:S3", question="Turn evidence", evidence_turns=["E1:S1:T1"]))
    [ex] = R.question_examples([ep], sessions=True)
    assert ex.turn_id == "q1"
    assert ex.positives == ("Mia: Hi Leo, I adopted a puppy last week.", "Mia: Lisbon sounds lovely, I will miss you.")
    assert not any(c.startswith("Leo:") for c in ex.candidates)
    assert set(ex.negatives) == {f"{t.speaker}: {t.text}" for t in ep.sessions[1].turns}
    assert [e.turn_id for e in R.examples_of("questions", [ep])] == ["q2"]


def test_pairs_config():
    assert R.RetrieverConfig().pairs == ("memory_tags",)
    assert R.RetrieverConfig(pairs=["memory_tags", "questions"]).pairs == ("memory_tags", "questions")
    for bad in ([], ["questions", "questions"], ["turns"]):
        with pytest.raises(ConfigError, match="emma.retriever.pairs"):
            R.RetrieverConfig(pairs=bad)


def test_folds_are_balanced_stable_and_validation_is_a_share():
    ids = [f"conv-{n}" for n in range(10)]
    folds = folds_mod.assign_folds(ids, 5)
    assert sorted(folds) == sorted(ids) and sorted(list(folds.values()).count(i) for i in range(5)) == [2] * 5
    assert folds_mod.assign_folds(reversed(ids), 5) == folds                      # file order does not matter
    with pytest.raises(ConfigError, match="every fold needs one"):
        folds_mod.assign_folds(ids[:3], 5)
    assert len(folds_mod.validation_ids(ids[:8], 0.1)) == 1 and folds_mod.validation_ids(ids[:8], 0.0) == set()
    assert folds_mod.validation_ids(ids[:1], 0.5) == set()                        # never the only training episode
    # Two episodes (a user's two histories): the main model trains on both, not on one as the fold model of the
    # other does (the same episodes: a copy); three or more keep one for validation.
    assert folds_mod.validation_ids(ids[:2], 0.1) == set() and len(folds_mod.validation_ids(ids[:3], 0.1)) == 1
    assert len(folds_mod.validation_ids(ids[:5], 0.1)) == 1 and len(folds_mod.validation_ids(ids[:2], 0.5)) == 1
    with pytest.raises(ConfigError, match="k must be an integer >= 2"):
        folds_mod.Folds(k=1)


def test_task_trains_on_the_selected_kinds(tmp_path, episode):
    from tests.emma._tiny_retriever import write_tiny_encoder

    ep = _with_queries(episode, Query(id="q1", session_id="E1:S3", question="Where is Leo moving?",
                                      evidence_turns=["E1:S1:T2"]))
    cfg = R.RetrieverConfig(model=str(write_tiny_encoder(tmp_path / "tiny")), context_max_length=128,
                            memory_max_length=64, pairs=("memory_tags", "questions"))
    task = R.RetrieverTask(cfg, [ep], [ep])
    assert task.counts == {"memory_tags": 3, "questions": 1, "triplets": 4}
    assert [i.context for i in task.train_dataset()][-1] == "Where is Leo moving?"
    scores = task.evaluate(R.DualEncoder.from_pretrained(cfg))
    assert scores["queries"] == 3 and scores["questions/queries"] == 1
    only = R.RetrieverTask(R.RetrieverConfig(model=cfg.model, context_max_length=128, pairs=("questions",)), [ep])
    assert only.counts == {"questions": 1, "triplets": 1} and len(only.train_dataset()) == 1


def test_thread_pairs_are_mined_from_content_alone(tmp_path):
    """A user's five sessions, three of them one trip: the later trip sessions' first turns become questions whose
    positives are the User's turns of the trip session they continue (read by MiniLM, no label or id used); the
    sessions about bread and a budget sheet continue nothing and give none."""
    from pipelines.memory.conformance import scrambled, thread_episode
    from pipelines.models.embeddings import Embedder, EmbeddingCache, load_encoder

    embed = Embedder(load_encoder(), cache=EmbeddingCache(tmp_path / "cache")).embed
    episode = thread_episode()
    examples = R.thread_examples([episode], embed)
    assert [ex.turn_id for ex in examples] == ["trip:S3:thread", "trip:S5:thread"]
    first_trip = "User: " + episode.sessions[0].turns[0].text
    for ex, session in zip(examples, (episode.sessions[2], episode.sessions[4])):
        assert ex.context == session.turns[0].text and ex.positives == (first_trip,)
        assert "Assistant: " + episode.sessions[0].turns[1].text not in ex.candidates   # the continued session's
        assert first_trip in ex.candidates and len(ex.negatives) == len(ex.candidates) - 1   # partner: left out
    twin, _ = scrambled(episode)                     # the same pairs whatever the ids
    assert [(ex.context, ex.positives, ex.candidates) for ex in R.thread_examples([twin], embed)] == \
        [(ex.context, ex.positives, ex.candidates) for ex in examples]
    assert R.examples_of("thread_pairs", []) == []
