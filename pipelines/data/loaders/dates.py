"""Date strings and relative time gaps as the published datasets write them.

Absolute dates (one parser, tried format by format; None when nothing matches):

| source       | example                      | format                          |
| ------------ | ---------------------------- | ------------------------------- |
| LoCoMo       | ``1:56 pm on 8 May, 2023``   | ``%I:%M %p on %d %B, %Y``       |
| LongMemEval  | ``2023/05/20 (Sat) 02:21``   | weekday dropped, ``%Y/%m/%d %H:%M`` |
| RealMem      | ``current_time``             | ISO 8601 and the usual ``Y-m-d H:M[:S]`` variants |

Relative gaps (Conversation Chronicles ``time_interval``, MSC ``time_num``/``time_unit``):
``"A few hours after"``, ``"A couple of days after"``, ``"2 weeks later"``, ``(7, "days")``.
The vague quantities read as: "a"/"an"/"one" = 1, "a couple of" = 2, "a few" = 3,
"several" = 5. A month is 30 days and a year 365 days. These sources give no calendar
dates, so a loader places session 1 at :data:`EPOCH` and adds the gaps in order; the
timestamps are therefore only meaningful relative to each other (their order and the
gaps between them), which is what the temporal protocol and recency scores use.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

# Fixed origin for sources that only publish gaps between sessions (CC, MSC).
EPOCH = datetime(2000, 1, 1)

_ABSOLUTE_FORMATS = (
    "%I:%M %p on %d %B, %Y",   # LoCoMo
    "%I:%M %p on %d %B %Y",
    "%I:%M %p on %d %b, %Y",
    "%Y/%m/%d %H:%M",          # LongMemEval (weekday removed first)
    "%Y/%m/%d",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
    "%d %B, %Y",               # LoCoMo event_summary dates
    "%d %B %Y",
    "%B %d, %Y",
)
_WEEKDAY = re.compile(r"\s*\((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*\)\s*", re.IGNORECASE)


def parse_datetime(text: object) -> datetime | None:
    """Parse one published date string; None when it matches no known format.

    Time-zone-aware ISO values are converted to naive UTC so that every timestamp of
    the project compares with every other.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    s = " ".join(_WEEKDAY.sub(" ", text).split())
    try:
        value = datetime.fromisoformat(s)
    except ValueError:
        value = None
    if value is not None:
        if value.tzinfo is not None:
            value = (value - value.utcoffset()).replace(tzinfo=None)
        return value
    for fmt in _ABSOLUTE_FORMATS:
        try:
            return datetime.strptime(s, fmt)
        except ValueError:
            continue
    return None


_UNIT_DAYS = {
    "second": 1 / 86400, "minute": 1 / 1440, "hour": 1 / 24, "day": 1.0, "week": 7.0,
    "month": 30.0, "year": 365.0,
}
_QUANTITY = {
    "a": 1, "an": 1, "one": 1, "a couple of": 2, "a couple": 2, "couple of": 2, "two": 2,
    "a few": 3, "few": 3, "three": 3, "four": 4, "five": 5, "several": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}
_GAP = re.compile(
    r"^(?P<qty>\d+(?:\.\d+)?|a couple of|a couple|couple of|a few|few|several|an|a|one|two|three|"
    r"four|five|six|seven|eight|nine|ten)\s+(?P<unit>second|minute|hour|day|week|month|year)s?"
    r"(?:\s+(?:after|later|ago|passed|have passed|has passed))?\.?$"
)
_ZERO_GAP = {"start", "first session", "same day", "", "none", "n/a"}


def parse_gap(text: object, unit: object = None) -> timedelta | None:
    """A relative gap as a timedelta; None when it cannot be read.

    ``parse_gap("A few hours after")`` = 3 h; ``parse_gap(7, "days")`` (MSC's
    ``time_num``/``time_unit``) = 7 days; ``parse_gap("Start")`` = 0 (CC's first session).
    """
    if unit is not None:
        if isinstance(text, bool) or not isinstance(text, (int, float)) or not isinstance(unit, str):
            return None
        name = unit.strip().lower().rstrip("s")
        if name not in _UNIT_DAYS or text < 0:
            return None
        return timedelta(days=float(text) * _UNIT_DAYS[name])
    if not isinstance(text, str):
        return None
    s = " ".join(text.strip().lower().split())
    if s in _ZERO_GAP:
        return timedelta(0)
    m = _GAP.match(s)
    if m is None:
        return None
    qty = m.group("qty")
    number = float(qty) if qty[0].isdigit() else _QUANTITY[qty]
    return timedelta(days=number * _UNIT_DAYS[m.group("unit")])
