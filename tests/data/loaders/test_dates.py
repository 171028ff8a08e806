"""pipelines/data/loaders/dates.py: the published date strings and relative gaps."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from pipelines.data.loaders.dates import parse_datetime, parse_gap


@pytest.mark.parametrize("text, expected", [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),         # LoCoMo
    ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9)),  # LoCoMo, after midnight
    ("2023/05/20 (Sat) 02:21", datetime(2023, 5, 20, 2, 21)),         # LongMemEval
    ("2024-03-08T18:30:00", datetime(2024, 3, 8, 18, 30)),            # ISO
    ("2024-03-08T18:30:00+02:00", datetime(2024, 3, 8, 16, 30)),      # aware -> naive UTC
    ("2024-03-08 18:30", datetime(2024, 3, 8, 18, 30)),
    ("8 May, 2023", datetime(2023, 5, 8)),
    ("sometime in spring", None),
    ("", None),
    (20230508, None),
])
def test_parse_datetime(text, expected):
    assert parse_datetime(text) == expected


@pytest.mark.parametrize("args, expected", [
    (("Start",), timedelta(0)),
    (("A few hours after",), timedelta(hours=3)),
    (("A couple of days after",), timedelta(days=2)),
    (("A few weeks after",), timedelta(weeks=3)),
    (("A few months after",), timedelta(days=90)),
    (("A couple of years after",), timedelta(days=730)),
    (("an hour later",), timedelta(hours=1)),
    (("2 weeks later",), timedelta(weeks=2)),
    (("7 days",), timedelta(days=7)),
    ((7, "days"), timedelta(days=7)),      # MSC time_num / time_unit
    ((3, "hours"), timedelta(hours=3)),
    ((1, "year"), timedelta(days=365)),
    (("Later",), None),
    ((7, "fortnights"), None),
    ((True, "days"), None),
    ((-1, "days"), None),
    ((None,), None),
])
def test_parse_gap(args, expected):
    assert parse_gap(*args) == expected
