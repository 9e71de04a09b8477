"""Turn a dated utterance into the date it talks about: "I went there yesterday" said on 8 May 2023 → 7 May 2023.

The offline generator answers "when" questions with the date of the unit that best matches the question; people
rarely say the date itself, they say "last week", "two weekends ago", "next month". This module resolves those
expressions against the unit's date and writes the result the way LoCoMo's gold answers are written
("7 May 2023", "The week before 9 June 2023", "The Friday before 15 July 2023", "June 2023", "2022"), which is
also what the LLM prompt asks for ("resolve relative dates with the log entry's date").

Expressions are tried in a fixed priority order (most specific first); the first that occurs in the text wins.
Text with none of them resolves to the unit's own date.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

from allmem.text import CARDINALS
from allmem.types import format_date

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_RE = r"(mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)(?:day|nesday|rsday|urday|sday)?\.?"
# How many units "<count> <unit> ago" means: the shared cardinals plus the vague counts people say ("a week ago",
# "a couple of days ago", "a few months ago").
COUNTS: dict[str, int] = {
    **CARDINALS,
    "a": 1,
    "an": 1,
    "couple of": 2,
    "a couple of": 2,
    "few": 3,
    "a few": 3,
}
_NUM_RE = "(\\d+|" + "|".join(sorted(COUNTS, key=lambda w: (-len(w), w))) + ")"
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11), "winter": (12, 2)}


def month_year(ts: datetime, delta_months: int = 0) -> str:
    """``June 2023`` for the month ``delta_months`` away from ``ts``."""
    index = ts.year * 12 + ts.month - 1 + delta_months
    year, month0 = divmod(index, 12)
    return f"{datetime(year, month0 + 1, 1):%B} {year}"


def _weekday(token: str) -> str:
    token = token.lower().rstrip(".")
    return next(d for d in WEEKDAYS if d.startswith(token[:3]))


def _number(token: str) -> int:
    token = token.lower()
    return int(token) if token.isdigit() else COUNTS[token]


def _ago(m: re.Match[str], ts: datetime) -> str:
    n, unit = _number(m.group(1)), m.group(2).lower().rstrip("s")
    if unit == "year":
        return str(ts.year - n)
    if unit == "month":
        return month_year(ts, -n)
    if unit == "day":
        return format_date(ts - timedelta(days=n))
    word = m.group(1) if not m.group(1).isdigit() else str(n)
    return (
        f"{word.capitalize()} {unit}s before {format_date(ts)}"
        if n != 1
        else f"The {unit} before {format_date(ts)}"
    )


def _season(m: re.Match[str], ts: datetime) -> str:
    which, season = m.group(1).lower(), m.group(2).lower()
    start, _end = _SEASONS[season]
    year = ts.year
    if which == "last":
        # "last summer" said in August means the previous year's summer; said in December, this year's
        year = ts.year if ts.month > _SEASONS[season][1] and season != "winter" else ts.year - 1
    elif which == "next":
        year = ts.year if ts.month < start else ts.year + 1
    return f"{season} {year}"


_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str], datetime], str]]] = [
    (re.compile(r"\bday before yesterday\b"), lambda m, ts: format_date(ts - timedelta(days=2))),
    (re.compile(r"\b(yesterday|last night)\b"), lambda m, ts: format_date(ts - timedelta(days=1))),
    (re.compile(r"\btomorrow\b"), lambda m, ts: format_date(ts + timedelta(days=1))),
    (re.compile(rf"\b{_NUM_RE} (day|week|weekend|month|year)s? ago\b"), _ago),
    (re.compile(rf"\b(?:last|past|previous) {_WEEKDAY_RE}(?!\w)"),
     lambda m, ts: f"The {_weekday(m.group(1)).capitalize()} before {format_date(ts)}"),
    (re.compile(rf"\bon {_WEEKDAY_RE}(?!\w)"),
     lambda m, ts: f"The {_weekday(m.group(1)).capitalize()} before {format_date(ts)}"),
    (re.compile(r"\b(?:last|past|previous) weekend\b"), lambda m, ts: f"The weekend before {format_date(ts)}"),
    (re.compile(r"\bthis (?:past )?weekend\b"), lambda m, ts: f"The weekend of {format_date(ts)}"),
    (re.compile(r"\bnext weekend\b"), lambda m, ts: f"The weekend after {format_date(ts)}"),
    (re.compile(r"\b(?:last|past|previous) week\b"), lambda m, ts: f"The week before {format_date(ts)}"),
    (re.compile(r"\bthis week\b"), lambda m, ts: f"The week of {format_date(ts)}"),
    (re.compile(r"\bnext week\b"), lambda m, ts: f"The week after {format_date(ts)}"),
    (re.compile(r"\b(last|this|next) (spring|summer|fall|autumn|winter)\b"), _season),
    (re.compile(r"\b(?:last|past|previous) month\b"), lambda m, ts: month_year(ts, -1)),
    (re.compile(r"\bthis month\b"), lambda m, ts: month_year(ts)),
    (re.compile(r"\bnext month\b"), lambda m, ts: month_year(ts, 1)),
    (re.compile(r"\b(?:last|past|previous) year\b"), lambda m, ts: str(ts.year - 1)),
    (re.compile(r"\bthis year\b"), lambda m, ts: str(ts.year)),
    (re.compile(r"\bnext year\b"), lambda m, ts: str(ts.year + 1)),
    (re.compile(r"\b(?:in|since|back in) ((?:19|20)\d\d)\b"), lambda m, ts: m.group(1)),
]  # fmt: skip


def resolve(text: str, ts: datetime) -> tuple[str, bool]:
    """The date ``text`` (said at ``ts``) refers to, and whether a relative expression was found."""
    low = text.lower()
    for pattern, render in _RULES:
        m = pattern.search(low)
        if m:
            return render(m, ts), True
    return format_date(ts), False
