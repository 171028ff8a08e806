"""The emma_retriever stage's non-blocking check ``beats_untrained`` (issue #47, point 4): a dual encoder that
ranks the held-out queries below the untrained encoder it starts from fails it, and says by how much, on which
queries, and what it learnt from."""

from __future__ import annotations

from pipelines.emma.retriever_check import BEATS, beats_untrained


def test_a_retriever_below_the_untrained_encoder_fails_and_says_on_what():
    lost = beats_untrained({"test_untrained_recall@1": 0.190, "test_trained_recall@1": 0.143,
                            "test_untrained_questions/recall@1": 0.30, "test_trained_questions/recall@1": 0.35,
                            "folds_untrained_recall@1": 0.1, "folds_trained_recall@1": 0.9}, ["synthetic"])
    assert lost.name == BEATS and not lost.passed and not lost.blocking and lost.count == 1
    assert lost.metadata["measured_on"] == "the test split"                 # the test split first
    [message] = lost.examples
    assert "tagged turns 14.3% against 19.0%" in message and "learnt from synthetic" in message
    assert "questions" not in message.split("(")[1].split(")")[0]          # the kind it gains on is not named
    assert lost.metadata["questions: recall@1"] == 0.35 and lost.metadata["tagged turns: untrained recall@1"] == 0.19


def test_the_fold_models_figures_count_when_there_is_no_test_split():
    both = {"folds_untrained_session_questions/recall@1": 0.288, "folds_trained_session_questions/recall@1": 0.296,
            "folds_untrained_thread_pairs/recall@1": 0.305, "folds_trained_thread_pairs/recall@1": 0.289,
            "folds_trained_session_questions/mrr": 0.4}
    check = beats_untrained(both, ["realmem"])
    assert not check.passed and check.metadata["measured_on"] == "the episodes each fold model held out"
    assert "thread_pairs 28.9% against 30.5%" in check.examples[0] and "session_questions" not in check.examples[0]
    both["folds_trained_thread_pairs/recall@1"] = 0.305                        # a tie does not lose
    assert beats_untrained(both, ["realmem"]).passed


def test_nothing_scored_passes_and_says_so():
    check = beats_untrained({"test_scores": "none: no test episode", "test_trained_recall@1": 0.5}, ["locomo"])
    assert check.passed and check.metadata == {"measured_on": "none"}     # a trained figure without its baseline
