"""Refreshes without dbt, the part every backend shares: which registered stream tables are due, and
refreshing them in dependency order so a stream table over another sees the other's new rows in the
same pass (`dbt-ivm refresh`; each backend lists its registrations and runs one refresh).

A stream table with a `target_lag` is refreshed only once its last refresh is older than that; one
with a cron `schedule` once one of its fire times has passed since its last refresh; one with neither
on every call; named ones whatever their lag or schedule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dbt_ivm import cron
from dbt_ivm.spec import RefreshResult, StreamTableSpec


@dataclass(frozen=True)
class Registered:
    """One registered stream table, as a refresh without dbt sees it."""

    stream_table: str
    spec: StreamTableSpec  # as its last dbt run defined and configured it
    sources: tuple[str, ...]
    refreshed_at: dt.datetime | None

    def due(self, now: dt.datetime) -> bool:
        """Whether a refresh at `now` is due.

        >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1", schedule="0 6 * * *")
        >>> last = dt.datetime(2026, 11, 25, 6, 0, 1, tzinfo=dt.timezone.utc)
        >>> table = Registered("s.m", spec, (), last)
        >>> table.due(last + dt.timedelta(hours=23)), table.due(last + dt.timedelta(hours=24))
        (False, True)
        """
        if self.refreshed_at is None:
            return True
        if self.spec.schedule is not None:
            return cron.parse(self.spec.schedule).next_after(self.refreshed_at) <= cron.aware(now)
        lag = self.spec.target_lag_seconds
        return lag is None or (now - self.refreshed_at).total_seconds() >= lag

    def waiting(self) -> str:
        """Why a table that is not due waits."""
        if self.spec.schedule is not None and self.refreshed_at is not None:
            schedule = cron.parse(self.spec.schedule)
            fire = schedule.next_after(self.refreshed_at)
            return f"its schedule ({schedule.text}) next fires at {fire:%Y-%m-%d %H:%M %Z}"
        return f"its target_lag ({self.spec.target_lag_seconds:g} s) has not passed"


def dependency_order(tables: Sequence[Registered]) -> list[Registered]:
    """Each stream table after the stream tables it reads; otherwise in name order.

    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1")
    >>> a = Registered("s.a", spec, ("s.b",), None)
    >>> b = Registered("s.b", spec, ("s.orders",), None)
    >>> [t.stream_table for t in dependency_order([a, b])]
    ['s.b', 's.a']
    """
    by_name = {t.stream_table: t for t in tables}
    ordered: list[Registered] = []
    placed: set[str] = set()

    def place(table: Registered, path: tuple[str, ...]) -> None:
        if table.stream_table in placed or table.stream_table in path:
            return  # placed already, or a cycle (not one dbt can build): name order decides
        for source in table.sources:
            if source in by_name:
                place(by_name[source], (*path, table.stream_table))
        placed.add(table.stream_table)
        ordered.append(table)

    for table in sorted(tables, key=lambda t: t.stream_table):
        place(table, ())
    return ordered


@dataclass
class Outcome:
    stream_table: str
    result: RefreshResult | None = None  # None: not due, or failed
    error: str | None = None
    waiting: str | None = None  # not due: why


def refresh_in_order(
    tables: Sequence[Registered],
    now: dt.datetime,
    named: bool,
    run: Callable[[StreamTableSpec], RefreshResult],
) -> list[Outcome]:
    """Refresh the due ones of `tables` (all, when they were `named`) in dependency order with `run`;
    one that fails is reported and the others go on."""
    outcomes = []
    for table in dependency_order(tables):
        if not named and not table.due(now):
            outcomes.append(Outcome(table.stream_table, waiting=table.waiting()))
            continue
        try:
            outcomes.append(Outcome(table.stream_table, run(table.spec)))
        except Exception as error:  # reported per stream table; the pass goes on
            outcomes.append(Outcome(table.stream_table, error=f"{type(error).__name__}: {error}".strip()))
    return outcomes


def unknown_names(named: Sequence[str], registered: Sequence[str], catalog: str) -> str | None:
    """The refusal for names that are not registered stream tables, None when all are.

    >>> unknown_names(["s.a", "s.x"], ["s.a"], "dbt_ivm")
    'not stream tables registered in dbt_ivm.stream_tables: s.x (name them schema.table, as `dbt-ivm status` shows them)'
    """
    unknown = set(named) - set(registered)
    if not unknown:
        return None
    return (
        f"not stream tables registered in {catalog}.stream_tables: {', '.join(sorted(unknown))} "
        "(name them schema.table, as `dbt-ivm status` shows them)"
    )
