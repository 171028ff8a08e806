"""The questions every reader answers, and the reference readers (full history, oracle).

The episode is tests/evaluate/conftest.py's: sessions S1..S4 of two turns each, every line "Ana: <three words>."
(4 words, the fake model's tokens); its queries cover each protocol rule.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from pipelines.data.schema import Episode, Memory, Query, Session, Speaker, Turn
from pipelines.evaluate.answers.readers import (ModelTokens, answer_request, base_item, history_context,
                                                reference_items, select_questions, window_budget)
from pipelines.llm.base import TEMPLATE_TOKENS_PER_MESSAGE
from pipelines.evaluate.answers.prompts import reader_messages
from pipelines.evaluate.suite import Suite
from pipelines.memory import DEFAULT_COUNTER
from tests.evaluate.answers._fakes import FakeLLM


def suite(**answers) -> Suite:
    return Suite(name="t", version=1, source="canonical", strategies=("bm25",),
                 answers={"judges": ["token_f1"], "references": ["full_history", "oracle"], **answers})


def question(episode, query_id: str, max_questions=None):
    chosen = select_questions(suite(), [episode], max_questions)
    return next(q for q in chosen.items if q.query.id == query_id)


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_questions_are_every_answerable_query_abstention_included(episode):
    chosen = select_questions(suite(), [episode])
    # Q3, Q4, Q7: evidence in the session asked in or later (or flagged so): no memory can answer them
    assert [q.query.id for q in chosen.items] == ["Q1", "Q2", "Q5", "Q6", "Q8", "Q9"]
    assert chosen.total == 6 and chosen.not_answered == {"evidence_not_earlier": 3}
    q5 = next(q for q in chosen.items if q.query.id == "Q5")
    assert q5.query.abstention and q5.position == 3  # the abstention question is answered (a refusal is expected)
    q6 = next(q for q in chosen.items if q.query.id == "Q6")
    assert q6.position == 4 and q6.session_index == 4  # after the last session


def test_max_questions_is_an_evenly_spaced_subset_the_same_every_time(episode):
    first = select_questions(suite(), [episode], max_questions=3)
    again = select_questions(suite(), [episode], max_questions=3)
    assert [q.query.id for q in first.items] == [q.query.id for q in again.items] == ["Q1", "Q5", "Q8"]
    assert first.total == 6  # the cap does not hide how many the data holds
    request = answer_request(suite(accuracy_ks=[1, 3]), first)
    assert request.queries == {("p1", "Q1"), ("p1", "Q5"), ("p1", "Q8")} and request.ks == (1, 3)
    assert answer_request(Suite(name="t", version=1, source="canonical", strategies=("bm25",)), first) is None


def test_full_history_keeps_the_newest_turns_that_fit_never_the_question_s_session(episode):
    q2 = question(episode, "Q2")  # asked in S3
    text = history_context(episode, q2, budget=12, counter=ModelTokens(FakeLLM()))
    # 3 lines of 4 words fit: the newest first (S2's two turns, then S1's second), written in time order
    assert lines(text) == ["Ana: blue boat sails.", "Ana: green tea steeps.", "Ana: grey cat sleeps."]
    everything = history_context(episode, q2, budget=None, counter=ModelTokens(FakeLLM()))
    assert lines(everything) == ["Ana: red kite flies.", "Ana: blue boat sails.", "Ana: green tea steeps.",
                                 "Ana: grey cat sleeps."]  # S3 (the question's own session) and S4 never
    q6 = question(episode, "Q6")  # after the last session: the whole dialogue
    assert len(lines(history_context(episode, q6, None, ModelTokens(FakeLLM())))) == 8


def test_full_history_fills_the_reader_s_window_less_the_prompt_and_the_answer(episode):
    q2 = question(episode, "Q2")
    the_suite = suite()
    empty = base_item(the_suite, episode, q2, "full_history", "context", "", 0)
    prompt = sum(len(m["content"].split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in reader_messages("default", empty))
    window = prompt + 16 + 12  # room for 16 answer tokens and 3 lines of history
    llm = FakeLLM(window=window)
    assert window_budget(llm, "default", empty, max_new_tokens=16) == 12
    assert window_budget(llm, "default", empty, max_new_tokens=16, cap=8) == 8   # llm.full_history_tokens
    assert window_budget(FakeLLM(window=None), "default", empty, 16) is None      # a server that does not say
    assert window_budget(FakeLLM(window=None), "default", empty, 16, cap=8) == 8
    [full, oracle] = reference_items(the_suite, {"p1": episode}, [q2], llm, DEFAULT_COUNTER, max_new_tokens=16)
    assert (full.reader, full.setting, oracle.reader) == ("full_history", "context", "oracle")
    assert lines(full.context) == ["Ana: blue boat sails.", "Ana: green tea steeps.", "Ana: grey cat sleeps."]
    assert full.context_tokens == DEFAULT_COUNTER.count(full.context)  # the suite's counter, as the strategies'
    used = sum(len(m["content"].split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in reader_messages("default", full))
    assert used + 16 <= window


@pytest.mark.parametrize("style", ["longmemeval", "realmem", "locomo", "default"])
def test_full_history_fits_the_whole_prompt_of_a_style_that_lays_out_the_history(episode, style):
    """LongMemEval's prompt adds session headers and dates around the history: the budget summed line by line
    would overflow the window (found on the real LongMemEval sample: 8138 + 64 tokens > 8192); the prompt as
    sent is counted again and the history shrunk until it fits."""
    q2 = question(episode, "Q2")
    the_suite = suite(reader_prompt=style)
    empty = base_item(the_suite, episode, q2, "full_history", "context", "", 0)
    prompt = sum(len(m["content"].split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in reader_messages(style, empty))
    window = prompt + 16 + 12
    [full, _] = reference_items(the_suite, {"p1": episode}, [q2], FakeLLM(window=window), DEFAULT_COUNTER,
                                max_new_tokens=16)
    used = sum(len(m["content"].split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in reader_messages(style, full))
    assert used + 16 <= window and full.context  # fits, and still reads some history


def test_oracle_reads_the_evidence_sessions_only_and_never_a_later_one(episode):
    counter = ModelTokens(FakeLLM())
    q2 = question(episode, "Q2")  # evidence S1:T2 and S2:T1, sessions S1 and S2: both whole
    assert lines(history_context(episode, q2, None, counter, evidence_only=True)) == [
        "Ana: red kite flies.", "Ana: blue boat sails.", "Ana: green tea steeps.", "Ana: grey cat sleeps."]
    q6 = question(episode, "Q6")  # evidence S4:T2, asked after the last session
    assert lines(history_context(episode, q6, None, counter, evidence_only=True)) == [
        "Ana: white snow falls.", "Ana: black ink dries."]
    q9 = question(episode, "Q9")  # memory evidence S1:M1: the session the memory was written in
    assert lines(history_context(episode, q9, None, counter, evidence_only=True)) == [
        "Ana: red kite flies.", "Ana: blue boat sails."]
    q5 = question(episode, "Q5")  # abstention without evidence: nothing to read
    assert history_context(episode, q5, None, counter, evidence_only=True) == ""
    # evidence in a later session (Q4 is never asked; forced here): the oracle still reads nothing of it
    late = q2.__class__("p1", episode.queries[3], "What dries?", "", 1, 1)
    assert history_context(episode, late, None, counter, evidence_only=True) == ""


def test_items_carry_the_question_date_type_and_evidence_texts():
    when = datetime(2023, 5, 30, 23, 40)
    sessions = [Session(id="s1", index=0, timestamp=datetime(2023, 5, 1), turns=[Turn(id="t1", speaker="User",
                        text="I adopted a cat.")], memories=[Memory(id="m1", owner="User", about="User",
                                                                     text="User adopted a cat.", session_id="s1")])]
    query = Query(id="q1", question="What pet do I have?", answer="a cat", evidence_sessions=["s1"],
                  evidence_memories=["m1"], category="single-session-user", timestamp=when)
    episode = Episode(id="e1", source="longmemeval", main_speaker="User", sessions=sessions, queries=[query])
    lme = Suite(name="lme", version=1, source="longmemeval", strategies=("bm25",),
                answers={"reader_prompt": "longmemeval", "judges": ["longmemeval"]})
    [q] = select_questions(lme, [episode]).items
    item = base_item(lme, episode, q, "bm25", "context", "ctx", 1)
    assert item.question_date == "2023/05/30 (Tue) 23:40"  # LongMemEval's published question_date format
    assert item.category == "single-session-user" and item.reference == "a cat"
    assert item.evidence == ("User adopted a cat.",)        # RealMem's memory points: the texts the query used


def test_response_rounds_from_the_second_session_with_the_dialogue_so_far():
    def session(i, pairs):
        turns = []
        for j, (a, b) in enumerate(pairs):
            turns += [Turn(id=f"s{i}:p{j}", speaker="Bo", text=a), Turn(id=f"s{i}:m{j}", speaker="Ana", text=b)]
        return Session(id=f"s{i}", index=i, turns=turns)

    episode = Episode(id="e", source="msc", main_speaker="Ana", speakers=[Speaker(name="Ana"), Speaker(name="Bo")],
                      sessions=[session(0, [("hi", "hello")]), session(1, [("how are you", "fine"),
                                                                            ("and the cat", "asleep")])])
    msc = Suite(name="msc", version=1, source="canonical", strategies=("bm25",), max_generation_examples=5,
                answers={"task": "response", "reader_prompt": "response", "judges": ["geval"],
                         "references": ["full_history"]})
    chosen = select_questions(msc, [episode])
    assert chosen.not_answered == {"first_session": 1} and chosen.total == 2
    first, second = chosen.items
    assert (first.question, first.reference, first.query.question) == ("Bo: how are you", "fine", "how are you")
    assert second.question == "Bo: how are you\nAna: fine\nBo: and the cat" and second.reference == "asleep"
    assert second.query.session_id == "s1" and second.query.category == "session 2"
    request = answer_request(msc, chosen)
    assert [p.id for p in request.probes["e"]] == ["s1:m0:response", "s1:m1:response"]
    assert [q.query.id for q in select_questions(msc, [episode], max_questions=1).items] == ["s1:m0:response"]


@pytest.mark.parametrize("answers, match", [
    ({"judges": ["nope"]}, "answers.judges"),
    ({"judges": []}, "at least one judge"),
    ({"judges": ["exact"], "reader_prompt": "chatty"}, "answers.reader_prompt"),
    ({"judges": ["exact"], "task": "chat"}, "answers.task"),
    ({"judges": ["exact"], "accuracy_ks": [0]}, "answers.accuracy_ks"),
    ({"judges": ["exact"], "accuracy_ks": "3"}, "answers.accuracy_ks"),
    ({"judges": ["exact"], "references": ["oracle", "oracle"]}, "given twice"),
    ({"judges": ["exact"], "references": ["everything"]}, "answers.references"),
    ({"judges": ["geval"], "task": "response", "references": ["oracle"]}, "oracle reads"),
    ({"judges": ["geval"], "task": "response", "accuracy_ks": [3]}, "must be \\[\\] for the response task"),
    ({"judges": ["exact"], "reference": {"judge": "x", "rows": []}}, "answers.reference"),
    ({"judges": ["exact"], "reference": {"judges": "x"}}, "unknown key"),
    ({"judges": ["exact"], "readers": ["oracle"]}, "unknown key\\(s\\) \\['readers'\\]"),
])
def test_bad_answers_name_the_suite_file_and_key(answers, match):
    from pipelines.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        Suite(name="t", version=1, source="canonical", strategies=("bm25",), answers=answers, file="t.yaml")
