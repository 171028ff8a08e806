"""Time-aware retrieval (pipelines/memory/temporal.py): the rule-based time ranges of questions asked on a fixed
date (each expression, the false positives it must not read), the LLM variant with a canned model behind the layer's
real response cache, and the weights in both modes. Offline and fast: no model, no network."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone
from typing import Any, Callable, Sequence

import numpy as np
import pytest

from pipelines.llm import LLM, CachedLLM, Completion, GenerationSettings, ResponseCache
from pipelines.llm import build as llm_build
from pipelines.llm.base import Messages
from pipelines.memory.temporal import (EXAMPLES, RECENT_DAYS, SYSTEM_PROMPT, LLMTimeRangeExtractor, TimeRange,
                                       extract_time_range, parse_time_range, question_date_text, time_order,
                                       time_weights)

Q = datetime(2023, 5, 17, 14, 30)       # a Wednesday; weeks run Monday to Sunday


def days(r: TimeRange | None) -> tuple[str | None, str | None] | None:
    return None if r is None else (r.start and r.start.date().isoformat(), r.end and r.end.date().isoformat())


# --- rules ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("question, expected", [
    # days
    ("What did I cook yesterday?", ("2023-05-16", "2023-05-16")),
    ("What did I eat today?", ("2023-05-17", "2023-05-17")),
    ("Who did I call this morning?", ("2023-05-17", "2023-05-17")),
    ("Where did I go last night?", ("2023-05-16", "2023-05-17")),
    ("What did I buy the day before yesterday?", ("2023-05-15", "2023-05-15")),
    # calendar periods
    ("Where did I go last week?", ("2023-05-08", "2023-05-14")),
    ("What have I read this week?", ("2023-05-15", "2023-05-21")),
    ("What am I doing next week?", ("2023-05-22", "2023-05-28")),
    ("Which shoes did I clean last month?", ("2023-04-01", "2023-04-30")),
    ("How much did I spend this month?", ("2023-05-01", "2023-05-31")),
    ("What is planned for next month?", ("2023-06-01", "2023-06-30")),
    ("Which country did I visit last year?", ("2022-01-01", "2022-12-31")),
    ("How many books have I read this year?", ("2023-01-01", "2023-12-31")),
    ("What did I cook last weekend?", ("2023-05-13", "2023-05-14")),
    ("What did I do this past weekend?", ("2023-05-13", "2023-05-14")),
    ("Any plans this weekend?", ("2023-05-20", "2023-05-21")),
    ("Where am I going next weekend?", ("2023-05-27", "2023-05-28")),
    ("What did I do this past week?", ("2023-05-08", "2023-05-14")),
    # N units ago, numbers in digits and words, vague counts
    ("What did I plant three days ago?", ("2023-05-14", "2023-05-14")),
    ("What did I plant 3 days ago?", ("2023-05-14", "2023-05-14")),
    ("Who visited me a day ago?", ("2023-05-16", "2023-05-16")),
    ("Which film did I watch two weeks ago?", ("2023-05-01", "2023-05-07")),
    ("Which film did I watch a week ago?", ("2023-05-08", "2023-05-14")),
    ("What did I order a couple of weeks ago?", ("2023-04-24", "2023-05-07")),
    ("What did I fix a few days ago?", ("2023-05-13", "2023-05-15")),
    ("What did I bake 2 months ago?", ("2023-03-01", "2023-03-31")),
    ("Where did I live a year ago?", ("2022-01-01", "2022-12-31")),
    ("Where did I work two years ago?", ("2021-01-01", "2021-12-31")),
    # rolling windows
    ("What did I buy in the past 3 days?", ("2023-05-14", "2023-05-17")),
    ("What did I buy over the last two weeks?", ("2023-05-03", "2023-05-17")),
    ("How often did I run in the past week?", ("2023-05-10", "2023-05-17")),
    ("What did I learn in the past few months?", ("2023-01-17", "2023-05-17")),
    ("What did I learn over the past couple of months?", ("2023-02-17", "2023-05-17")),
    ("Where did I travel in the last year?", ("2022-05-17", "2023-05-17")),
    ("What did I cook in the last 10 days?", ("2023-05-07", "2023-05-17")),
    # vague recency: the last RECENT_DAYS days
    ("What have I been reading recently?", ("2023-04-17", "2023-05-17")),
    ("Which band have I been listening to lately?", ("2023-04-17", "2023-05-17")),
    # months, days, years
    ("Where did I go in May?", ("2023-05-01", "2023-05-31")),
    ("What did I buy in December?", ("2022-12-01", "2022-12-31")),       # never in the future
    ("What did I buy in december?", ("2022-12-01", "2022-12-31")),       # not a verb: any case
    ("What happened in May 2022?", ("2022-05-01", "2022-05-31")),
    ("What happened in June of 2021?", ("2021-06-01", "2021-06-30")),
    ("Who did I meet on May 5?", ("2023-05-05", "2023-05-05")),
    ("Who did I meet on May 20?", ("2022-05-20", "2022-05-20")),         # latest May 20 not after Q
    ("What did I do May 5th?", ("2023-05-05", "2023-05-05")),
    ("What did I do on the 5th of May?", ("2023-05-05", "2023-05-05")),
    ("Ana's birthday party on 3 March, who came?", ("2023-03-03", "2023-03-03")),
    ("What did I sign on May 5, 2021?", ("2021-05-05", "2021-05-05")),
    ("What did I sign on Sept. 3, 2022?", ("2022-09-03", "2022-09-03")),
    ("What did I do on Jan 5?", ("2023-01-05", "2023-01-05")),
    ("What did I do on May 5 at 3 pm?", ("2023-05-05", "2023-05-05")),
    ("Which car did I buy in 2022?", ("2022-01-01", "2022-12-31")),
    ("What did I do in the summer of 2022?", ("2022-01-01", "2022-12-31")),
    ("What did I do last May?", ("2022-05-01", "2022-05-31")),           # this May is not over
    ("What did I do last March?", ("2023-03-01", "2023-03-31")),
    ("What did I do from February to April?", ("2023-02-01", "2023-04-30")),
    ("What did I do between March and April?", ("2023-03-01", "2023-04-30")),
    ("What did I do between November and February?", ("2022-11-01", "2023-02-28")),
    # weekdays
    ("Who did I meet last Monday?", ("2023-05-15", "2023-05-15")),
    ("Who did I meet last Wednesday?", ("2023-05-10", "2023-05-10")),    # Q is a Wednesday: the one before
    ("Who did I meet on Friday?", ("2023-05-12", "2023-05-12")),
    ("Who did I meet on Wednesday?", ("2023-05-17", "2023-05-17")),      # on or before Q
    ("Who did I meet this Monday?", ("2023-05-15", "2023-05-15")),
    ("What did we discuss at last Friday's meeting?", ("2023-05-12", "2023-05-12")),
    # relations and parts
    ("What have I bought since March?", ("2023-03-01", "2023-05-17")),
    ("What have I cooked since last week?", ("2023-05-08", "2023-05-17")),
    ("What have I read since 2021?", ("2021-01-01", "2023-05-17")),
    ("Where did I live before April?", (None, "2023-03-31")),
    ("Where did I live before 2020?", (None, "2019-12-31")),
    ("What did I do after March?", ("2023-04-01", "2023-05-17")),
    ("Which phone did I use until yesterday?", (None, "2023-05-16")),
    ("Which trips did I take earlier this year?", ("2023-01-01", "2023-05-17")),
    ("What did I do earlier this week?", ("2023-05-15", "2023-05-17")),
    ("What did I do at the beginning of March?", ("2023-03-01", "2023-03-10")),
    ("What did I do at the start of last month?", ("2023-04-01", "2023-04-10")),
    ("What did I do in the middle of April?", ("2023-04-11", "2023-04-20")),
    ("What did I pay at the end of April?", ("2023-04-21", "2023-04-30")),
    ("What did I do in early April?", ("2023-04-01", "2023-04-10")),
    ("What did I do mid-April?", ("2023-04-11", "2023-04-20")),
    ("What did I do in late March?", ("2023-03-21", "2023-03-31")),
    ("What did I do in early 2022?", ("2022-01-01", "2022-05-01")),
    ("What did I do before the end of April?", (None, "2023-04-20")),
    ("Was I late last week?", ("2023-05-08", "2023-05-14")),               # a week is not cut in thirds
    ("What did I do the last week of April?", ("2023-04-01", "2023-04-30")),  # read as April
    # several expressions: the smallest range covering them
    ("Did I run more in March or last week?", ("2023-03-01", "2023-05-14")),
    ("What did I do in May and last week?", ("2023-05-01", "2023-05-31")),
])
def test_rule_ranges(question, expected):
    assert days(extract_time_range(question, Q)) == expected


@pytest.mark.parametrize("question", [
    "May I ask what my dog's name is?",                 # the modal verb
    "may i ask where I parked?",
    "I will march on, what was my motto?",              # the verb
    "March on! What was that song?",
    "May 5 of us join the trip?",                       # a count after "May"
    "What did a few of my friends recommend?",          # "a few" alone
    "What did I buy a few times?",
    "How many days ago did I buy the lamp?",            # the question asks for the time
    "How long have I been using my Fitbit?",
    "What is my favourite day of the week?",
    "Ask June about the recipe she sent.",              # a name
    "What did I tell April?",
    "Do I work on Fridays?",                            # a habit
    "What did I buy on Good Friday?",                   # a holiday, not covered
    "What does Friday's menu say?",
    "What did I do in the past?",                       # no unit
    "What did I do in the past months?",                # how many?
    "I walked 2000 steps, what was my record?",
    "What did I tell Jan about the plan?",
    "What was the last time I went swimming?",
    "What is the next step of my plan?",
    "What is my plan for the week?",
    "In my 2020s plans, what was first?",
    "June 31 was the deadline?",                        # no such day
    "How old was I in the 90s?",
])
def test_no_time_is_read_where_there_is_none(question):
    assert extract_time_range(question, Q) is None


@pytest.mark.parametrize("question", [
    "What did I buy before I moved?",
    "What did I buy after my trip in May?",             # "in May" is read, but the time is relative to the trip
    "Since I like jazz, which concert did I go to last week?",
    "Which restaurant did I try after the wedding last month?",
    "What had I read prior to starting my new job?",
    "Which car did I drive until I sold it in 2022?",
])
def test_a_time_relative_to_an_event_is_left_to_the_llm(question):
    assert extract_time_range(question, Q) is None


@pytest.mark.parametrize("question, expected", [
    ("What happened in May 2022?", ("2022-05-01", "2022-05-31")),      # absolute: no question date needed
    ("What did I sign on May 5, 2021?", ("2021-05-05", "2021-05-05")),
    ("Which car did I buy in 2022?", ("2022-01-01", "2022-12-31")),
    ("Where did I live before 2020?", (None, "2019-12-31")),
    ("What have I read since 2021?", ("2021-01-01", None)),           # open: up to an unknown question date
    ("Where did I go last week?", None),                               # relative: needs the question date
    ("Where did I go in May?", None),
    ("What did I eat yesterday?", None),
    ("What have I been reading recently?", None),
    ("What happened in May 2022 and last week?", None),                # one unresolvable expression: nothing
])
def test_without_a_question_date_only_absolute_expressions_are_read(question, expected):
    assert days(extract_time_range(question, None)) == expected


def test_the_range_keeps_what_it_was_read_from_as_inclusive_midnights():
    r = extract_time_range("What did I do since March, and in the past 3 days?", Q)
    assert r == TimeRange(datetime(2023, 3, 1), datetime(2023, 5, 17), "since March; in the past 3 days")
    assert r.contains(datetime(2023, 5, 17, 23, 59)) and not r.contains(datetime(2023, 2, 28, 23, 59))


def test_recency_window_and_a_tz_aware_question_date():
    assert days(extract_time_range("What did I do recently?", Q, recent_days=7)) == ("2023-05-10", "2023-05-17")
    assert RECENT_DAYS == 30
    aware = Q.replace(tzinfo=timezone(timedelta(hours=-5)))
    assert days(extract_time_range("What did I eat yesterday?", aware)) == ("2023-05-16", "2023-05-16")
    with pytest.raises(ValueError, match="recent_days"):
        extract_time_range("recently", Q, recent_days=0)


def test_month_ends_and_leap_days():
    march31 = datetime(2023, 3, 31)
    assert days(extract_time_range("What did I buy a month ago?", march31)) == ("2023-02-01", "2023-02-28")
    assert days(extract_time_range("What did I buy in the past month?", march31)) == ("2023-02-28", "2023-03-31")
    assert days(extract_time_range("Who called on Feb 29?", datetime(2024, 3, 1))) == ("2024-02-29", "2024-02-29")
    assert extract_time_range("Who called on Feb 29?", datetime(2023, 3, 1)) is None
    assert days(extract_time_range("What did I do last month?", datetime(2023, 1, 9))) == ("2022-12-01", "2022-12-31")
    assert extract_time_range("What did I do after May?", Q) is None   # May is not over: no such range


def test_time_range_checks():
    with pytest.raises(ValueError, match="open at both ends"):
        TimeRange(None, None)
    with pytest.raises(ValueError, match="before it starts"):
        TimeRange(datetime(2023, 5, 2), datetime(2023, 5, 1))
    r = TimeRange(datetime(2023, 5, 1), datetime(2023, 5, 31))
    assert r.days_outside(date(2023, 6, 3)) == 3 and r.days_outside(date(2023, 6, 3), slack_days=2) == 1
    assert r.days_outside(datetime(2023, 4, 30, 23)) == 1 and r.contains(datetime(2023, 5, 31, 23, 59))
    assert TimeRange(None, datetime(2023, 1, 1)).contains(date(1990, 1, 1))


def test_the_few_shot_examples_agree_with_the_rules_where_the_rules_read_a_time():
    for when, question, (start, end) in EXAMPLES:
        r = extract_time_range(question, datetime.strptime(when[:10], "%Y-%m-%d"))
        if start is None:
            assert r is None, question
        elif r is not None:
            assert start <= r.start.date().isoformat() and r.end.date().isoformat() <= end, question


# --- the LLM variant --------------------------------------------------------------------------------------------

class CannedLLM(LLM):
    """A fake model: ``answer(question)`` is its text for the question of the last message; records what it was
    asked (as tests/memory/test_writers.py's)."""

    backend = "local"

    def __init__(self, answer: Callable[[str], str]):
        self.answer, self.asked = answer, []

    @property
    def model(self) -> str:
        return "canned"

    def identity(self) -> dict[str, Any]:
        return {"backend": "fake", "model": "canned"}

    def generate(self, batch: Sequence[Messages], settings: GenerationSettings, progress=None) -> list[Completion]:
        self.asked += [list(m) for m in batch]
        return [Completion(text=self.answer(m[-1]["content"].split("Question:\n")[1].split("\n\n")[0]),
                           prompt_tokens=10, completion_tokens=5) for m in batch]


ANSWERS = {
    "What did I buy before I moved to Denver?": '{"start": null, "end": "2023-03-31"}',
    "Which restaurant did I try last month?": '```json\n{"start": "2023-04-01", "end": "2023-04-30"}\n```',
    "How many plants do I own?": '{"start": null, "end": null}',
    "How long have I been learning Spanish?": "N/A",
    "What did I do today?": '{"start": "2023-05-17", "end": "2023-05-17"}',
    "What did I do last week?": "<think>Q is a Wednesday.</think>{\"start\": \"2023-05-08\", \"end\": \"2023-05-14\"}",
    "Where did I go in spring?": "The range is March to May.",
}


def test_llm_extractor_asks_once_through_the_cache_and_counts_each_outcome(tmp_path):
    canned = CannedLLM(ANSWERS.__getitem__)
    extractor = LLMTimeRangeExtractor(CachedLLM(canned, ResponseCache(tmp_path)))
    questions = [*ANSWERS, "What did I do yesterday?"]
    ranges = extractor(questions, [Q] * len(ANSWERS) + [None])
    assert [days(r) for r in ranges] == [(None, "2023-03-31"), ("2023-04-01", "2023-04-30"), None, None,
                                         None, ("2023-05-08", "2023-05-14"), None, None]
    assert extractor.counts == {"range": 3, "no_range": 2, "dropped": 1, "unparseable": 1, "no_question_date": 1}
    assert len(canned.asked) == len(ANSWERS)                        # the undated question is not asked
    prompt = canned.asked[0]
    assert prompt[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert [m["role"] for m in prompt[1:]] == ["user", "assistant"] * len(EXAMPLES) + ["user"]
    assert prompt[-1]["content"].startswith("Question date: 2023-05-17 (Wed) 14:30\nQuestion:\nWhat did I buy before")
    assert prompt[2]["content"] == '{"start": "2023-07-01", "end": "2023-07-31"}'
    # a rerun (a fresh extractor, the same cache folder) asks the model nothing
    again = LLMTimeRangeExtractor(CachedLLM(canned, ResponseCache(tmp_path)))
    assert [days(r) for r in again(questions, [Q] * len(ANSWERS) + [None])] == [days(r) for r in ranges]
    assert len(canned.asked) == len(ANSWERS)
    report = again.report()
    assert report["hits"] == len(ANSWERS) and report["misses"] == 0 and report["model"] == "local:canned"


def test_llm_extractor_zero_shot_keeps_the_quirk_optional_and_checks_lengths():
    canned = CannedLLM(lambda q: '{"start": "2023-05-17", "end": "2023-05-17"}')
    extractor = LLMTimeRangeExtractor(canned, examples=False, drop_start_on_question_date=False)
    assert days(extractor.extract("What did I do today?", Q)) == ("2023-05-17", "2023-05-17")
    assert [m["role"] for m in canned.asked[0]] == ["system", "user"]
    assert extractor.extract("What did I do today?", None) is None and len(canned.asked) == 1
    with pytest.raises(ValueError, match="2 questions but 1"):
        extractor(["a", "b"], [Q])


def test_llm_extractor_from_config_puts_the_response_cache_in_front(tmp_path, monkeypatch):
    canned = CannedLLM(lambda q: '{"start": "2023-04-01", "end": "2023-04-30"}')
    monkeypatch.setitem(llm_build.BACKENDS, "local", lambda cfg, root: canned)
    extractor = LLMTimeRangeExtractor.from_config({"backend": "local", "model": "canned"}, tmp_path)
    assert isinstance(extractor.llm, CachedLLM)
    assert days(extractor.extract("What did I do last month?", Q)) == ("2023-04-01", "2023-04-30")
    assert len(list((tmp_path / "responses").glob("??/*.json"))) == 1


@pytest.mark.parametrize("text, status, expected", [
    ('{"start": "2023-04-01", "end": "2023-04-30"}', "range", ("2023-04-01", "2023-04-30")),
    ('  {"end": "2023-04-30", "start": null} ', "range", (None, "2023-04-30")),
    ('```\n{"start": "2023-04-01", "end": null}\n```', "range", ("2023-04-01", None)),
    ('<think>hmm</think>\n{"start": "2023-04-01", "end": "2023-04-01"}', "range", ("2023-04-01", "2023-04-01")),
    ('{"start": null, "end": null}', "no_range", None),
    ("N/A", "no_range", None),
    ("n/a.", "no_range", None),
    ('{"start": "2023-05-17", "end": "2023-05-20"}', "dropped", None),             # starts on the question date
    ('{"start": "2023/04/01", "end": "2023/04/30"}', "unparseable", None),         # not ISO
    ('{"start": "2023-02-30", "end": "2023-03-01"}', "unparseable", None),         # no such day
    ('{"start": "2023-04-30", "end": "2023-04-01"}', "unparseable", None),         # ends before it starts
    ('{"start": "2023-04-01"}', "unparseable", None),                              # a field missing
    ('{"start": "2023-04-01", "end": "2023-04-30", "why": "x"}', "unparseable", None),  # a field too many
    ('["2023-04-01", "2023-04-30"]', "unparseable", None),
    ('{"start": 20230401, "end": null}', "unparseable", None),
    ('The range is {"start": "2023-04-01", "end": "2023-04-30"}.', "unparseable", None),  # prose around it
    ("<think>unfinished", "unparseable", None),
    ("", "unparseable", None),
])
def test_parse_time_range_is_strict(text, status, expected):
    got_status, r = parse_time_range(text, Q)
    assert (got_status, days(r)) == (status, expected)


def test_question_date_text():
    assert question_date_text(datetime(2023, 7, 1, 23, 13)) == "2023-07-01 (Sat) 23:13"


# --- weights ----------------------------------------------------------------------------------------------------

MAY = TimeRange(datetime(2023, 5, 1), datetime(2023, 5, 31), "in May")
STAMPS = [datetime(2023, 5, 10, 9), datetime(2023, 4, 30), datetime(2023, 4, 28), None, date(2023, 6, 9),
          datetime(2023, 5, 31, 23, 59)]


@pytest.mark.parametrize("slack, expected", [
    (0, [0.0, -math.inf, -math.inf, 0.0, -math.inf, 0.0]),
    (2, [0.0, 0.0, -math.inf, 0.0, -math.inf, 0.0]),       # LongMemEval's widening: April 30 is in, April 28 out
])
def test_filter_prunes_dated_items_outside_and_keeps_undated_ones(slack, expected):
    w = time_weights(STAMPS, MAY, "filter", slack_days=slack)
    assert w.shape == (6,) and w.tolist() == expected


def test_filter_applies_no_range_that_would_prune_every_dated_item():
    future = TimeRange(datetime(2023, 5, 22), datetime(2023, 5, 28), "next week")
    assert time_weights([datetime(2023, 5, 1), None, datetime(2023, 5, 10)], future, "filter").tolist() == [0, 0, 0]


def test_boost_decays_with_the_distance_outside_the_range():
    w = time_weights(STAMPS, MAY, "boost", boost=0.2, scale_days=7.0, slack_days=0)
    assert w.shape == (6,)
    np.testing.assert_allclose(w, [0.2, 0.2 * math.exp(-1 / 7), 0.2 * math.exp(-3 / 7), 0.0,
                                   0.2 * math.exp(-9 / 7), 0.2])
    default = time_weights(STAMPS, MAY, "boost")                   # boost 0.1, a week's scale, 2 days' slack
    np.testing.assert_allclose(default[[1, 2, 4]], [0.1, 0.1 * math.exp(-1 / 7), 0.1 * math.exp(-7 / 7)])
    open_range = TimeRange(None, datetime(2023, 4, 30))
    np.testing.assert_allclose(time_weights(STAMPS, open_range, "boost", slack_days=0)[[0, 2]],
                               [0.1 * math.exp(-10 / 7), 0.1])


@pytest.mark.parametrize("mode", ["filter", "boost"])
def test_no_range_is_neutral(mode):
    assert time_weights(STAMPS, None, mode).tolist() == [0.0] * 6
    assert time_weights([], MAY, mode).shape == (0,)


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "multiply"}, "mode must be one of filter, boost"),
    ({"boost": -0.1}, "boost must be a finite number >= 0"),
    ({"scale_days": 0}, "scale_days must be a finite number > 0"),
    ({"slack_days": math.inf}, "slack_days must be a finite number >= 0"),
    ({"boost": True}, "boost"),
])
def test_weight_settings_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        time_weights(STAMPS, MAY, **{"mode": "boost", **kwargs})


def test_time_order_with_filter_is_longmemevals_move_to_the_end():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])        # the retriever's ranking: 0, 1, 2, 3, 4, 5
    order = time_order(scores, time_weights(STAMPS, MAY, "filter", slack_days=0))
    assert order.tolist() == [0, 3, 5, 1, 2, 4]               # in range (and undated) first, each in its order
    boosted = time_order(scores, time_weights(STAMPS, MAY, "boost", boost=0.25, slack_days=0))
    assert boosted.tolist()[:2] == [0, 1] and boosted.tolist().index(5) < boosted.tolist().index(3)
    with pytest.raises(ValueError, match="one score and one weight per item"):
        time_order(scores, np.zeros(3))
