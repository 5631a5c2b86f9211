"""Cron schedules for refreshes without dbt: `schedule='0 6 * * *'` makes `dbt-ivm refresh` refresh a
stream table once a fire time of the expression has passed since its last refresh.

Five fields — minute, hour, day of month, month, day of week — each `*`, a number, a range `a-b`, a
step `*/n` or `a-b/n`, or a list of those; months and weekdays also by name (`jan`, `mon`); weekday 0
and 7 are Sunday. As in cron, when both day fields are restricted a day matching either one fires.
`@hourly`, `@daily`, `@weekly`, `@monthly` and `@yearly` stand for their usual expressions. An IANA
time zone may follow the fields (`0 6 * * mon-fri Europe/Paris`); the default is UTC.

>>> import datetime as dt
>>> weekdays = parse("0 6 * * mon-fri")
>>> weekdays.text
'0 6 * * mon-fri UTC'
>>> friday_noon = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.timezone.utc)
>>> weekdays.next_after(friday_noon).isoformat()  # the weekend is skipped
'2026-11-30T06:00:00+00:00'
>>> parse("*/15 * * * *").next_after(friday_noon).isoformat()  # strictly after
'2026-11-27T12:15:00+00:00'
>>> parse("0 0 31 2 *")
Traceback (most recent call last):
...
ValueError: '0 0 31 2 *' never fires: no month it names has that day
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names for lowest..): the five fields in order.
FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, MONTH_NAMES),
    ("day of week", 0, 7, DAY_NAMES),
)
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # at most, leap years included
# A schedule fires at least every 8 years (29 February across a skipped leap year): search no longer.
SEARCH_DAYS = 366 * 8


@dataclass(frozen=True)
class Cron:
    text: str  # as written, the macro expanded and the time zone named
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    either_day: bool  # both day fields restricted: a day matching one of them fires
    zone: str

    def fires_on(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        by_date, by_weekday = day.day in self.days, day.isoweekday() % 7 in self.weekdays
        return (by_date or by_weekday) if self.either_day else (by_date and by_weekday)

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first fire time strictly after `moment` (naive: the process's local time)."""
        zone = _zone(self.zone)
        local = aware(moment).astimezone(zone)
        start = local.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        day = start.date()
        for _ in range(SEARCH_DAYS):
            if self.fires_on(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        fire = dt.datetime.combine(day, dt.time(hour, minute), tzinfo=zone)
                        if fire >= start:
                            return fire
            day += dt.timedelta(days=1)
        raise AssertionError(f"{self.text!r}: no fire time in {SEARCH_DAYS} days (parse checks it fires)")


def aware(moment: dt.datetime) -> dt.datetime:
    """`moment`, a naive one taken as the process's local time (Spark returns those)."""
    return moment if moment.tzinfo else moment.astimezone()


def parse(text: str) -> Cron:
    """A cron expression, or ValueError saying what is wrong with it."""
    words = text.split()
    if words and words[0].lower() in MACROS:
        words = MACROS[words[0].lower()].split() + words[1:]
    if len(words) not in (5, 6):
        raise ValueError(
            f"{text!r} is not a cron expression: it needs five fields (minute hour day-of-month month "
            "day-of-week) and may end with a time zone, e.g. '0 6 * * mon-fri Europe/Paris'"
        )
    zone = words[5] if len(words) == 6 else "UTC"
    _zone(zone)
    fields = [_field(word.lower(), *spec) for word, spec in zip(words[:5], FIELDS, strict=True)]
    minutes, hours, days, months, weekdays = (values for values, _ in fields)
    either_day = fields[2][1] and fields[4][1]
    if not either_day and not any(d <= DAYS_IN_MONTH[m - 1] for m in months for d in days):
        raise ValueError(f"{text!r} never fires: no month it names has that day")
    return Cron(
        " ".join([*words[:5], zone]),
        minutes,
        hours,
        days,
        months,
        frozenset(d % 7 for d in weekdays),
        either_day,
        zone,
    )


def _field(word: str, name: str, low: int, high: int, names: tuple[str, ...]) -> tuple[frozenset[int], bool]:
    """The values one field allows, and whether it restricts them (is not `*`)."""
    values: set[int] = set()
    for part in word.split(","):
        span, _, step_text = part.partition("/")
        step = _number(step_text, name, names, low) if step_text else 1
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first_text, last_text = span.split("-", 1)
            first, last = _number(first_text, name, names, low), _number(last_text, name, names, low)
        else:
            first = _number(span, name, names, low)
            last = high if step_text else first
        if not low <= first <= last <= high or step < 1:
            raise ValueError(f"cron {name} field {word!r}: values run from {low} to {high}")
        values.update(range(first, last + 1, step))
    return frozenset(values), not word.startswith("*")


def _number(text: str, name: str, names: tuple[str, ...], low: int) -> int:
    if text in names:
        return names.index(text) + low
    if not text.isdigit():
        raise ValueError(
            f"cron {name} field: {text!r} is not a number"
            + (f" or one of {', '.join(names)}" if names else "")
        )
    return int(text)


def _zone(name: str) -> dt.tzinfo:
    if name.upper() == "UTC":
        return dt.timezone.utc  # needs no time zone database
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(
            f"unknown time zone {name!r} in a cron schedule (use an IANA name, e.g. Europe/Paris)"
        ) from error
