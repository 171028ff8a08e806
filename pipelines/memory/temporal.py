"""Time-aware retrieval (issue #18, point 2): the time range a question names, and per-item weights that restrict
or tilt a ranking towards the items dated in it (an item's date: its session's, :attr:`Retrieved.timestamp`).

Reference: Wu et al., "LongMemEval: Benchmarking Chat Assistants on Long-Term Interactive Memory" (ICLR 2025,
arXiv 2410.10813), section 5.4, "time-aware query expansion": a language model reads the question and the question
date and proposes a time range, and retrieval is restricted to the items dated in it. Their code
(xiaowu0162/LongMemEval, ``src/index_expansion/temp_query_search_pruning.py``, ``infer_time_range``): a few-shot
prompt (the range as JSON, "N/A" for a question with no time); an answer whose start is the question date is
discarded; the range is widened by 2 days on each side; the items outside it are moved to the end of the ranking,
in their order. They date items by the events extracted from each session; here an item has its session's date.

- :func:`extract_time_range`: rules, no model (the table below); :class:`LLMTimeRangeExtractor`: the paper's way,
  through the project's LLM layer (and its response cache).
- :func:`time_weights`: what to add to each item's score, mode ``filter`` (LongMemEval's pruning) or ``boost``;
  :func:`time_order`: the ranking by score plus weight, which with ``filter`` is LongMemEval's exactly.

A range is a pair of days, both inclusive (a :class:`TimeRange` holds midnights; compare dates, not times). Rules,
with Q the question date and weeks from Monday to Sunday (ISO):

==========================================  ==================================================================
yesterday / today, tonight, this morning    Q-1 / Q; "last night": Q-1..Q; "the day before yesterday": Q-2
last / this / next week|month|year|weekend  the calendar period before / of / after Q's ("this past week" = last)
N days|weeks|months|years ago               the day / ISO week / calendar month / year N before Q
the past|last N days|weeks|months|years     Q - N units .. Q (rolling; "the past week": N = 1)
recently, lately                            Q - ``recent_days`` .. Q (:data:`RECENT_DAYS` = 30, a month)
in May, May 2023, on May 5, May 5th, 5 May  the month / day; without a year the latest one not after Q
in 2022                                     the year
last Monday / on Monday / this Monday       latest Monday before Q / latest on or before Q / Monday of Q's week
earlier this week|month|year, earlier today the period's first day .. Q
beginning|start / middle / end of X         first / middle / last third of X's days when X is a month or longer
early / mid / late X                        (a month: 1-10, 11-20, 21-end); a shorter X is kept whole
since X / after X / before X / until X      X's first day .. Q / the day after X .. Q / .. the day before X / .. X
from|between X and|to|through Y (months)    X's first day .. Y's last day
==========================================  ==================================================================

Numbers are digits or words up to twelve ("a", "an", "one"...); "a couple of" counts as 2 to 3 and "a few" as 2 to 4
(the range covers every count). Several expressions give the smallest range covering them all.

Conservative by design, a false range hurting more than a missed one: no range when an expression needs Q and there
is none, or when the question holds an anchor word (before, after, since, until, till, prior to) that no expression
took: the time is then relative to an event ("before I moved"), which rules cannot date (the LLM variant reads the
question alone and cannot date the event either; it needs the event's session first). "May" and "March" count only
capitalised and in a date context (a preposition before them, a day or a year with them): not "May I ask...", not "I
will march on"; a bare month or year needs a preposition ("in", "during", "of"...); "a few" needs a unit and
"ago" or "the past" ("a few of my friends" is nothing); "on Fridays" (a habit) and "Good Friday" are nothing.
Ambiguous readings chosen: "last Tuesday" is the latest Tuesday before Q (not the one of last week), "next weekend"
the weekend of next week, a month without a year never in the future (questions ask about the past). Not covered:
seasons, holidays, "the week before last", clock times, "next <weekday>".
"""

from __future__ import annotations

import calendar
import json
import re
import threading
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pipelines.llm import LLM, GenerationSettings, LLMConfig, Messages, build_llm
from pipelines.memory.writers import answer_text

RECENT_DAYS = 30                  # "recently" / "lately": the last month
LONGMEMEVAL_SLACK_DAYS = 2        # LongMemEval widens the range by 2 days on each side before pruning
MODES = ("filter", "boost")


@dataclass(frozen=True)
class TimeRange:
    """Days ``start`` .. ``end``, both inclusive, as midnights; None: open on that side (not both)."""

    start: datetime | None   # the first day of the range
    end: datetime | None     # the last day of the range (inclusive)
    expression: str = ""     # what it was read from: the question's words (rules) or the model's answer (LLM)

    def __post_init__(self) -> None:
        if self.start is None and self.end is None:
            raise ValueError("A TimeRange open at both ends restricts nothing; use None for 'no range'.")
        if self.start is not None and self.end is not None and self.start.date() > self.end.date():
            raise ValueError(f"A TimeRange must not end ({self.end.date()}) before it starts ({self.start.date()}).")

    def days_outside(self, when: datetime | date, slack_days: float = 0.0) -> float:
        """Days from ``when``'s date to the range widened by ``slack_days`` on each side (0: inside)."""
        day = when.toordinal()
        lo = self.start.toordinal() - slack_days if self.start is not None else -np.inf
        hi = self.end.toordinal() + slack_days if self.end is not None else np.inf
        return float(max(lo - day, day - hi, 0.0))

    def contains(self, when: datetime | date, slack_days: float = 0.0) -> bool:
        return self.days_outside(when, slack_days) == 0.0


# --- rules ------------------------------------------------------------------------------------------------------

class _NeedsDate(Exception):
    """A relative expression met a question without a date."""


WORDS = {w: n for n, w in enumerate("one two three four five six seven eight nine ten eleven twelve".split(), 1)}
NUM = r"\d{1,3}|(?:a\s+)?couple(?:\s+of)?|(?:a\s+)?few|an?|" + "|".join(WORDS)
UNIT = r"(?P<unit>day|week|month|year)s?"
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")   # not the locale's
WEEKDAYS = {d.lower(): i for i, d in enumerate(DAY_NAMES)}
WEEKDAY = "|".join(WEEKDAYS)
FULL_MONTHS = {m: i for i, m in enumerate("january february march april may june july august september october "
                                             "november december".split(), 1)}
SHORT_MONTHS = {"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sept": 9, "sep": 9,
                "oct": 10, "nov": 11, "dec": 12}
VERBS = {"may", "march", "mar"}                  # months that are also verbs: capitalised and in a date context
CAPITAL_ONLY = {*VERBS, *SHORT_MONTHS}           # capitalised only ("jan", "dec" are names or words too)
MONTH = "(?:" + "|".join([*FULL_MONTHS, *SHORT_MONTHS]) + r")(?![a-z])\.?"
YEAR = r"(?:19|20)\d\d(?![\w'])"
DAY = r"(?:[12]\d|3[01]|0?[1-9])"
ORD = r"(?:st|nd|rd|th)"
ANCHOR = re.compile(r"\b(?:before|after|since|until|till|prior\s+to)\b", re.I)
# What precedes an expression: a relation to it, a preposition, a part of it ("since the end of May").
PREFIX = re.compile(r"(?:\b(?P<rel>since|before|after|until|till|prior\s+to)\s+)?"
                    r"(?:\b(?P<prep>in|on|during|of|from|at|around|for|throughout|between)\s+)?(?:\bthe\s+)?"
                    r"(?:\b(?P<part>beginning|start|end|middle)\s+of\s+(?:the\s+)?"
                    r"|\b(?P<part2>early|late|mid)(?:-|\s+))?$", re.I)
PARTS = {"beginning": 0, "start": 0, "early": 0, "middle": 1, "mid": 1, "end": 2, "late": 2}


def _count(text: str) -> tuple[int, int]:
    """(fewest, most) a number word stands for: "3" (3, 3), "two" (2, 2), "a couple of" (2, 3), "a few" (2, 4)."""
    text = text.lower()
    if "couple" in text:
        return 2, 3
    if "few" in text:
        return 2, 4
    n = int(text) if text.isdigit() else WORDS.get(text, 1)   # "a", "an": 1
    return n, n


def _shift(day: date, unit: str, n: int) -> date:
    """``day`` moved ``n`` units back (forward when n < 0); a month's day past the target month's end: its last."""
    if unit in ("day", "week", "weekend"):
        return day - timedelta(days=n * (1 if unit == "day" else 7))
    year, month = divmod(day.year * 12 + day.month - 1 - n * (12 if unit == "year" else 1), 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _period(day: date, unit: str) -> tuple[date, date]:
    """The calendar day, ISO week, month, year or weekend (Saturday and Sunday of its week) holding ``day``."""
    if unit == "day":
        return day, day
    if unit in ("week", "weekend"):
        monday = day - timedelta(days=day.weekday())
        return (monday, monday + timedelta(days=6)) if unit == "week" else (monday + timedelta(days=5),
                                                                           monday + timedelta(days=6))
    if unit == "month":
        return day.replace(day=1), day.replace(day=calendar.monthrange(day.year, day.month)[1])
    return date(day.year, 1, 1), date(day.year, 12, 31)


def _month(word: str) -> int | None:
    """The month a matched word names, or None when the word must be capitalised and is not ("may")."""
    key = word.rstrip(".").lower()
    if key in CAPITAL_ONLY and not word[0].isupper():
        return None
    return FULL_MONTHS.get(key) or SHORT_MONTHS.get(key)


def _year_of(month: int, day: int, q: date | None, year: str | None) -> int:
    """The year of a (month, day): ``year`` when given, else that of the latest such day not after ``q``."""
    if year:
        return int(year)
    q = _need(q)
    return q.year - 1 if (month, day) > (q.month, q.day) else q.year


def _need(q: date | None) -> date:
    if q is None:
        raise _NeedsDate
    return q


Span = tuple[date | None, date | None]
Rule = Callable[[re.Match, dict, "date | None"], "Span | None"]   # (match, prefix groups, Q) -> range or decline


def _r_day_before_yesterday(m, ctx, q):
    q = _need(q)
    return q - timedelta(days=2), q - timedelta(days=2)


def _r_earlier(m, ctx, q):
    q = _need(q)
    unit = m["p"].split()[-1].lower()
    return (q if unit == "today" else _period(q, unit)[0]), q


def _r_rolling(m, ctx, q):                     # the past 3 days, the last week, past two months
    if not m["the"] and not m["num"]:
        return None                            # "last week": the calendar rule
    if not m["num"] and m.group(0).lower().endswith("s"):
        return None                            # "the past months": how many?
    q = _need(q)
    return _shift(q, m["unit"].lower(), _count(m["num"])[1] if m["num"] else 1), q


def _r_ago(m, ctx, q):                         # two weeks ago, a few days ago
    q, unit = _need(q), m["unit"].lower()
    fewest, most = _count(m["num"])
    return _period(_shift(q, unit, most), unit)[0], _period(_shift(q, unit, fewest), unit)[1]


def _r_calendar(m, ctx, q):                    # last week, this month, next year, this past weekend
    q, unit, which = _need(q), m["unit"].lower(), m["which"].lower().split()[-1]
    return _period(_shift(q, unit, {"last": 1, "past": 1, "this": 0, "next": -1}[which]), unit)


def _r_day_word(m, ctx, q):
    q, word = _need(q), " ".join(m.group(0).lower().split())
    if word == "yesterday":
        return q - timedelta(days=1), q - timedelta(days=1)
    return (q - timedelta(days=1) if word == "last night" else q), q


def _r_weekday(m, ctx, q):                     # last Monday, on Friday, this Sunday, since Tuesday
    which = (m["which"] or "").lower()
    if not which and "rel" not in ctx:
        return None                            # a bare "Friday" (Good Friday, Friday's meeting)
    q, wd = _need(q), WEEKDAYS[m["wd"].lower()]
    if which == "this":
        day = q - timedelta(days=q.weekday() - wd)
    else:
        back = (q.weekday() - wd) % 7
        day = q - timedelta(days=back or (7 if which == "last" else 0))
    return day, day


def _r_span(m, ctx, q):                        # from May to July, between March and June 2023
    first, last = _month(m["m1"]), _month(m["m2"])
    if first is None or last is None:
        return None
    y2 = _year_of(last, 1, q, m["y2"])
    y1 = int(m["y1"]) if m["y1"] else (y2 if first <= last else y2 - 1)
    return date(y1, first, 1), _period(date(y2, last, 1), "month")[1]


def _r_month_day(m, ctx, q):                   # May 5th, on May 5, May 5, 2023
    if (m["month"].rstrip(".").lower() in VERBS and not m["ord"] and not m["year"]
            and not ("rel" in ctx or "prep" in ctx)):
        return None                            # "May 5 of us come?"
    return _r_day_month(m, ctx, q)


def _r_day_month(m, ctx, q):                   # 5 May, the 5th of May 2023
    month = _month(m["month"])
    if month is None:
        return None
    day = int(m["day"])
    try:
        d = date(_year_of(month, day, q, m["year"]), month, day)
    except ValueError:
        return None                            # June 31
    return d, d


def _r_month_year(m, ctx, q):                  # May 2023, March of 2022
    month = _month(m["month"])
    return None if month is None else _period(date(int(m["year"]), month, 1), "month")


def _r_month(m, ctx, q):                       # in May, last March, since June, early July
    month = _month(m["month"])
    if month is None or not (m["last"] or any(ctx.values())):
        return None                            # "May I ask", "Ask June about it"
    if m["last"]:
        q = _need(q)
        year = q.year if month < q.month else q.year - 1
    else:
        year = _year_of(month, 1, q, None)
    return _period(date(year, month, 1), "month")


def _r_year(m, ctx, q):                        # in 2022, since 2019, early 2023
    return (date(int(m["year"]), 1, 1), date(int(m["year"]), 12, 31)) if any(ctx.values()) else None


def _r_recent(m, ctx, q, recent_days: int = RECENT_DAYS):
    q = _need(q)
    return q - timedelta(days=recent_days), q


_NOT_OF = r"(?!\s+of\b)"                       # "the last week of May" is about May
RULES: list[tuple[re.Pattern, Rule]] = [(re.compile(p, re.I), rule) for p, rule in [
    (r"\bthe\s+day\s+before\s+yesterday\b", _r_day_before_yesterday),
    (r"\bearlier\s+(?P<p>today|this\s+(?:week|month|year))\b", _r_earlier),
    (rf"(?:\b(?:from|between)\s+)(?P<m1>{MONTH})(?:\s+(?P<y1>{YEAR}))?\s+(?:to|and|until|till|through)\s+"
     rf"(?P<m2>{MONTH})(?:,?\s+(?P<y2>{YEAR}))?", _r_span),
    (rf"\b(?P<the>the\s+)?(?:past|last)\s+(?:(?P<num>{NUM})\s+)?{UNIT}\b{_NOT_OF}", _r_rolling),
    (rf"\b(?P<num>{NUM})\s+{UNIT}\s+ago\b", _r_ago),
    (rf"\b(?P<which>last|(?:this\s+)?past|this|next)\s+(?P<unit>weekend|week|month|year)\b{_NOT_OF}", _r_calendar),
    (r"\b(?:yesterday|today|tonight|last\s+night|this\s+(?:morning|afternoon|evening))\b", _r_day_word),
    (rf"\b(?:(?P<which>last|this|on)\s+)?(?P<wd>{WEEKDAY})\b", _r_weekday),
    (rf"\b(?:the\s+)?(?P<day>{DAY})(?P<ord>{ORD})?\s+(?:of\s+)?(?P<month>{MONTH})(?:,?\s+(?P<year>{YEAR}))?",
     _r_day_month),
    (rf"\b(?P<month>{MONTH})\s+(?P<day>{DAY})(?P<ord>{ORD})?(?![\d:])(?!\s*(?:am|pm)\b)"
     rf"(?:,?\s+(?P<year>{YEAR}))?", _r_month_day),
    (rf"\b(?P<month>{MONTH})\s+(?:of\s+)?(?P<year>{YEAR})", _r_month_year),
    (rf"\b(?P<last>last\s+)?(?P<month>{'|'.join(FULL_MONTHS)})\b(?!')", _r_month),
    (rf"\b(?P<year>{YEAR})", _r_year),
    (r"\b(?:recently|lately)\b", _r_recent),
]]


def _part(span: Span, part: str) -> Span:
    """The first, middle or last third of the days of a month or longer; a shorter range is kept whole ("I was late
    last week" is not the end of the week)."""
    start, end = span
    if start is None or end is None or (n := (end - start).days + 1) < 28:
        return span
    third, i = n // 3, PARTS[part]
    return (start + timedelta(days=i * third), end if i == 2 else start + timedelta(days=(i + 1) * third - 1))


def _relate(span: Span, rel: str, q: date | None) -> Span:
    start, end = span
    rel = rel.split()[0].lower()
    if rel == "since":
        return start, q
    if rel == "after":
        return end + timedelta(days=1), q
    if rel == "before" or rel == "prior":
        return None, start - timedelta(days=1)
    return None, end                           # until, till


def extract_time_range(question: str, question_date: datetime | None, *,
                       recent_days: int = RECENT_DAYS) -> TimeRange | None:
    """The range of days ``question`` names, by the rules of the module docstring, or None (no time named, an
    expression relative to an event, or one relative to a missing ``question_date``)."""
    if isinstance(recent_days, bool) or not isinstance(recent_days, int) or recent_days < 1:
        raise ValueError(f"recent_days must be a positive number of days, got {recent_days!r}.")
    q = question_date.date() if question_date is not None else None
    taken: list[tuple[int, int]] = []          # spans of the question already read
    spans: list[Span] = []                     # the range of each expression read
    try:
        for pattern, rule in RULES:
            for m in pattern.finditer(question):
                if any(m.start() < e and s < m.end() for s, e in taken):
                    continue
                before = PREFIX.search(question, 0, m.start())
                ctx = {k: v for k, v in before.groupdict().items() if v}
                span = (_r_recent(m, ctx, q, recent_days) if rule is _r_recent else rule(m, ctx, q))
                if span is None:
                    continue
                if "part" in ctx or "part2" in ctx:
                    span = _part(span, (ctx.get("part") or ctx["part2"]).lower())
                if "rel" in ctx:
                    span = _relate(span, ctx["rel"], q)
                if span[0] is not None and span[1] is not None and span[0] > span[1]:
                    return None                # "after May" asked in May
                first = before.start() if ctx else m.start()
                taken.append((first, m.end()))
                spans.append(span)
    except _NeedsDate:
        return None
    if not spans:
        return None
    unread = "".join(" " if any(s <= i < e for s, e in taken) else c for i, c in enumerate(question))
    if ANCHOR.search(unread):
        return None                            # "before I moved": relative to an event
    starts, ends = [s for s, _ in spans], [e for _, e in spans]
    start = None if None in starts else min(starts)
    end = None if None in ends else max(ends)
    if start is None and end is None:
        return None
    expression = "; ".join(question[f:e].strip() for f, e in sorted(taken))
    return TimeRange(_midnight(start), _midnight(end), expression)


def _midnight(day: date | None) -> datetime | None:
    return None if day is None else datetime.combine(day, time.min)


# --- the LLM variant ----------------------------------------------------------------------------------------------

# Modelled on LongMemEval's ``infer_time_range`` prompt (temp_query_search_pruning.py): the system instruction,
# few-shot (question date, question) -> range pairs as user / assistant turns, then the question. Changed: ISO dates,
# JSON null for an open end and {"start": null, "end": null} for no time (theirs: YYYY/MM/DD and "N/A"), our own
# examples.
SYSTEM_PROMPT = (
    "You will be given a question from a user about events of their earlier conversations with you, and the date "
    "the question is asked. If the question refers to a time (a date, a month, a year, 'last week', 'two months "
    "ago', 'recently'...), infer the range of dates in which the events it asks about happened, relative to the "
    "question date. Write a JSON object with two fields, \"start\" and \"end\", each a date written YYYY-MM-DD, or "
    "null for an open end. If the question does not refer to any time, do not guess a range: write "
    "{\"start\": null, \"end\": null}.")
USER_TEMPLATE = ("Question date: {date}\nQuestion:\n{question}\n\n"
                 "Relevant date range (a JSON object; do not write anything else):")
EXAMPLES: list[tuple[str, str, tuple[str | None, str | None]]] = [
    ("2023-08-14 (Mon) 10:20", "Which restaurant did I try in July?", ("2023-07-01", "2023-07-31")),
    ("2023-03-06 (Mon) 18:45", "What did I cook for my parents last weekend?", ("2023-03-04", "2023-03-05")),
    ("2023-06-21 (Wed) 09:02", "What book did I start reading three weeks ago?", ("2023-05-29", "2023-06-04")),
    ("2023-10-02 (Mon) 20:11", "Who did I have coffee with last Thursday?", ("2023-09-27", "2023-09-29")),
    ("2023-11-30 (Thu) 07:30", "Which concert did I go to last month?", ("2023-10-01", "2023-10-31")),
    ("2023-07-05 (Wed) 16:00", "How much have I spent on books since the beginning of the year?",
     ("2023-01-01", "2023-07-05")),
    ("2023-04-12 (Wed) 13:37", "How many plants have I bought so far?", (None, None)),
    ("2023-09-09 (Sat) 11:15", "How long have I been learning Spanish?", (None, None)),
    ("2023-02-17 (Fri) 22:05", "What did I order the day after my birthday party?", (None, None)),
]
ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.I)
NO_TIME = {"n/a", "na", "none", "null"}
STATUSES = ("range", "no_range", "dropped", "unparseable")


def question_date_text(when: datetime) -> str:
    """``2023-07-01 (Sat) 23:13``: the question date as the prompt writes it (LongMemEval's layout, ISO day)."""
    return f"{when:%Y-%m-%d} ({DAY_NAMES[when.weekday()][:3]}) {when:%H:%M}"


def parse_time_range(text: str, question_date: datetime | None,
                     drop_start_on_question_date: bool = True) -> tuple[str, TimeRange | None]:
    """(status, range) of a model's answer; status one of :data:`STATUSES`. Strict: after a ``<think>`` block and
    a code fence are cut, the answer must be exactly a JSON object with the fields ``start`` and ``end``, each
    null or a valid YYYY-MM-DD day, not ending before it starts ("N/A", the reference's form, and two nulls:
    ``no_range``); anything else is ``unparseable``. ``dropped``: a range starting on the question date, which
    LongMemEval's code discards (``if out_data['start'] in query_date: return {}``: a model that sees no time in
    the question tends to answer the question date)."""
    body = FENCE.sub("", answer_text(text)).strip()
    if body.rstrip(".").lower() in NO_TIME:
        return "no_range", None
    try:
        obj = json.loads(body)
    except ValueError:
        return "unparseable", None
    if not isinstance(obj, dict) or set(obj) != {"start", "end"}:
        return "unparseable", None
    days: list[date | None] = []
    for value in (obj["start"], obj["end"]):
        if value is not None and not (isinstance(value, str) and ISO_DAY.fullmatch(value)):
            return "unparseable", None
        try:
            days.append(None if value is None else date.fromisoformat(value))
        except ValueError:
            return "unparseable", None
    start, end = days
    if start is None and end is None:
        return "no_range", None
    if start is not None and end is not None and start > end:
        return "unparseable", None
    if drop_start_on_question_date and question_date is not None and start == question_date.date():
        return "dropped", None
    return "range", TimeRange(_midnight(start), _midnight(end), body)


class LLMTimeRangeExtractor:
    """LongMemEval's time-range extraction (section 5.4) by a model of the LLM layer: one batched call per list of
    questions, through whatever ``llm`` is (:func:`~pipelines.llm.build_llm` puts the response cache in front:
    :meth:`from_config`). A question without a date is not asked (no range). ``counts``: questions by outcome
    (:data:`STATUSES`, and ``no_question_date``)."""

    def __init__(self, llm: LLM, settings: GenerationSettings | None = None, *, examples: bool = True,
                 drop_start_on_question_date: bool = True):
        self.llm = llm
        self.settings = settings or GenerationSettings(max_new_tokens=64)   # greedy; {"start": ..., "end": ...}
        self.examples = examples                                            # few-shot (the reference) or zero-shot
        self.drop_start_on_question_date = drop_start_on_question_date      # LongMemEval's quirk (parse_time_range)
        self.counts = dict.fromkeys((*STATUSES, "no_question_date"), 0)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: LLMConfig | Mapping[str, Any], cache_dir: str | None = None,
                    **options: Any) -> "LLMTimeRangeExtractor":
        """The model ``config`` names (an LLMConfig or its params.yaml mapping) behind the response cache under
        ``cache_dir``, with the config's generation settings."""
        cfg = config if isinstance(config, LLMConfig) else LLMConfig.from_dict(config, "time_range_llm")
        return cls(build_llm(cfg, cache_dir), cfg.settings(), **options)

    def messages(self, question: str, question_date: datetime) -> Messages:
        """The system instruction, the few-shot pairs (when ``examples``), then the question."""
        out: Messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        for when, example, (start, end) in EXAMPLES if self.examples else ():
            out += [{"role": "user", "content": USER_TEMPLATE.format(date=when, question=example)},
                    {"role": "assistant", "content": json.dumps({"start": start, "end": end})}]
        return out + [{"role": "user", "content": USER_TEMPLATE.format(date=question_date_text(question_date),
                                                                       question=question)}]

    def __call__(self, questions: Sequence[str],
                 question_dates: Sequence[datetime | None]) -> list[TimeRange | None]:
        """One range (or None) per question, in order."""
        if len(questions) != len(question_dates):
            raise ValueError(f"{len(questions)} questions but {len(question_dates)} question dates.")
        asked = [i for i, d in enumerate(question_dates) if d is not None]
        completions = (self.llm.generate([self.messages(questions[i], question_dates[i]) for i in asked],
                                         self.settings) if asked else [])
        out: list[TimeRange | None] = [None] * len(questions)
        with self._lock:
            self.counts["no_question_date"] += len(questions) - len(asked)
            for i, completion in zip(asked, completions):
                status, out[i] = parse_time_range(completion.text, question_dates[i],
                                                  self.drop_start_on_question_date)
                self.counts[status] += 1
        return out

    def extract(self, question: str, question_date: datetime | None) -> TimeRange | None:
        return self([question], [question_date])[0]

    def report(self) -> dict[str, Any]:
        """The model, the counts by outcome and, behind a response cache, its stats (calls, hits, misses...)."""
        stats = self.llm.stats() if hasattr(self.llm, "stats") else {}
        return {"model": self.llm.label, **stats, **self.counts}


# --- weights --------------------------------------------------------------------------------------------------

def time_weights(timestamps: Sequence[datetime | date | None], time_range: TimeRange | None, mode: str, *,
                 boost: float = 0.1, scale_days: float = 7.0,
                 slack_days: float = LONGMEMEVAL_SLACK_DAYS) -> np.ndarray:
    """What to add to the score of each of N items dated ``timestamps`` (None: undated): (N,) float64.

    The range is first widened by ``slack_days`` on each side (LongMemEval's 2; 0 for the range as read); d is an
    item's distance in days to it (0 inside). An undated item always gets 0, and so does every item when
    ``time_range`` is None.

    - ``filter``: 0 inside, -inf outside (LongMemEval's pruning; :func:`time_order` keeps the pruned items after
      the others, in their order, as their code does). When no dated item is inside, all 0: a range that would
      prune every dated item (a misread, or a future range such as "next week", which the sessions that spoke of
      it precede) is not applied; with LongMemEval's move-to-the-end it would change nothing either.
    - ``boost``: ``boost * exp(-d / scale_days)``: + ``boost`` inside, e-times less every ``scale_days`` days
      outside (default: a week). ``boost`` is in the units of the scores it is added to, which must be calibrated
      to a common scale (cosines, probabilities, min-max normalised scores; not raw BM25): 0.1 lifts an in-range
      item over an out-of-range one up to 0.1 more similar.
    """
    days = np.array([np.nan if t is None else t.toordinal() for t in timestamps], dtype=float)   # (N,)
    return day_weights(days, time_range, mode, boost=boost, scale_days=scale_days, slack_days=slack_days)


def day_weights(days: np.ndarray, time_range: TimeRange | None, mode: str, *, boost: float = 0.1,
                scale_days: float = 7.0, slack_days: float = LONGMEMEVAL_SLACK_DAYS) -> np.ndarray:
    """:func:`time_weights` of items given by their days (N,) float: proleptic Gregorian ordinals, NaN undated
    (a store that keeps its items' days computes them once, not at every query)."""
    if mode not in MODES:
        raise ValueError(f"time_weights mode must be one of {', '.join(MODES)}, got {mode!r}.")
    for name, value, positive in (("boost", boost, False), ("scale_days", scale_days, True),
                                  ("slack_days", slack_days, False)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) \
                or value < 0 or (positive and value == 0):
            raise ValueError(f"time_weights {name} must be a finite number {'> 0' if positive else '>= 0'}, "
                             f"got {value!r}.")
    n = len(days)
    if time_range is None:
        return np.zeros(n)
    lo = time_range.start.toordinal() - slack_days if time_range.start is not None else -np.inf
    hi = time_range.end.toordinal() + slack_days if time_range.end is not None else np.inf
    distance = np.maximum(np.maximum(lo - days, days - hi), 0.0)                                 # (N,) NaN: undated
    dated = ~np.isnan(distance)
    if mode == "filter":
        if not (distance[dated] == 0).any():
            return np.zeros(n)
        return np.where(dated & (distance > 0), -np.inf, 0.0)
    return np.where(dated, boost * np.exp(-np.where(dated, distance, 0.0) / scale_days), 0.0)


def time_order(scores: Sequence[float] | np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Indices of the N items best first by score + weight: (N,) int. Ties (the pruned items of ``filter``, all at
    -inf) go to the higher score, then to the earlier item: LongMemEval's "in range first, the rest after, each in
    the order of the ranking"."""
    scores, weights = np.asarray(scores, dtype=float), np.asarray(weights, dtype=float)   # (N,), (N,)
    if scores.shape != weights.shape or scores.ndim != 1:
        raise ValueError(f"time_order takes one score and one weight per item, got shapes {scores.shape} and "
                         f"{weights.shape}.")
    return np.lexsort((np.arange(len(scores)), -scores, -(scores + weights)))
