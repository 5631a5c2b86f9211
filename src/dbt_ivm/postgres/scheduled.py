"""Refreshes without dbt: `dbt-ivm refresh` brings the registered stream tables up to date from what
`dbt run` stored (defining query, refresh mode, and the model's run settings), in dependency order, so
a stream table over another sees the other's new rows in the same pass.

A stream table with a `target_lag` is refreshed only once its last refresh is older than that; one
without is refreshed on every call. IMMEDIATE stream tables are always current and are left out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast, get_args

from dbt_ivm import run_settings
from dbt_ivm.errors import IvmError
from dbt_ivm.postgres.db import Db
from dbt_ivm.spec import RefreshMode, RefreshResult, StreamTableSpec
from dbt_ivm.sqltext import qn

INITIATED_BY = "dbt-ivm refresh"


@dataclass(frozen=True)
class Registered:
    """One registered stream table as `dbt-ivm refresh` sees it."""

    stream_table: str
    spec: StreamTableSpec
    sources: tuple[str, ...]
    refreshed_at: dt.datetime | None

    def due(self, now: dt.datetime) -> bool:
        lag = self.spec.target_lag_seconds
        if lag is None or self.refreshed_at is None:
            return True
        return (now - self.refreshed_at).total_seconds() >= lag


def dependency_order(tables: list[Registered]) -> list[Registered]:
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


def registered(db: Db, catalog: str, names: Iterable[str] = ()) -> list[Registered]:
    """The registered stream tables (those in `names`, when given) whose table exists, IMMEDIATE ones
    aside; an unknown name raises IvmError naming it."""
    rows = db.rows(
        "SELECT stream_table, schema_name, table_name, defining_query, refresh_mode, sources, refreshed_at, "
        "run_settings, to_regclass(format('%I.%I', schema_name, table_name)) IS NOT NULL "
        f"FROM {qn(catalog, 'stream_tables')} ORDER BY stream_table"
    )
    wanted = set(names)
    unknown = wanted - {str(r[0]) for r in rows}
    if unknown:
        raise IvmError(
            f"not stream tables registered in {catalog}.stream_tables: {', '.join(sorted(unknown))} "
            "(name them schema.table, as `dbt-ivm list` shows them)"
        )
    found = []
    for key, schema, table, query, mode, sources, refreshed_at, settings, exists in rows:
        if (wanted and key not in wanted) or not exists or mode == "immediate":
            continue
        spec = StreamTableSpec(
            model=str(table),
            schema=str(schema),
            name=str(table),
            sql=str(query),
            refresh_mode=cast(RefreshMode, mode if mode in get_args(RefreshMode) else "auto"),
            catalog_schema=catalog,
            initiated_by=INITIATED_BY,
        )
        spec = run_settings.applied(spec, settings)
        found.append(Registered(str(key), spec, tuple(str(s) for s in sources or ()), refreshed_at))
    return dependency_order(found)


@dataclass
class Outcome:
    stream_table: str
    result: RefreshResult | None = None  # None: not due, or failed
    error: str | None = None


def refresh_due(connection: Any, catalog: str, names: Iterable[str] = ()) -> list[Outcome]:
    """Refresh the due stream tables (all of `names`, when given, whatever their lag) in dependency
    order; one that fails is reported and the others go on."""
    from dbt_ivm.postgres.registrations import catalog_exists
    from dbt_ivm.postgres.runner import run_stream_table

    db = Db(connection)
    named = list(names)
    if not catalog_exists(db, catalog):
        if named:
            raise IvmError(f"no dbt-ivm catalog schema {catalog!r} here: nothing is registered")
        return []
    now = db.value("SELECT now()")
    outcomes = []
    for table in registered(db, catalog, named):
        if not named and not table.due(now):
            outcomes.append(Outcome(table.stream_table))
            continue
        try:
            outcomes.append(Outcome(table.stream_table, run_stream_table(connection, table.spec)))
        except Exception as error:  # reported per stream table; the pass goes on
            outcomes.append(Outcome(table.stream_table, error=f"{type(error).__name__}: {error}".strip()))
    return outcomes
