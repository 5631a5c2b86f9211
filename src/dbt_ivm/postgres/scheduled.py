"""Refreshes without dbt on PostgreSQL (`dbt-ivm refresh`): the registered stream tables as their last
`dbt run` stored them (defining query, refresh mode, the model's run settings), refreshed by
``dbt_ivm.scheduling`` in dependency order. IMMEDIATE stream tables are always current and are left out.
A stream table with nothing to do, or a differential batch, is refreshed by its function in the
database (`in_database`): such a pass never loads the planner.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast, get_args

from dbt_ivm import run_settings
from dbt_ivm.errors import IvmError
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.in_database import refresh_by_function
from dbt_ivm.quoting import qn
from dbt_ivm.scheduling import Outcome, Registered, refresh_in_order, unknown_names
from dbt_ivm.spec import RefreshMode, RefreshResult, StreamTableSpec

INITIATED_BY = "dbt-ivm refresh"


def registered(db: Db, catalog: str, names: Iterable[str] = ()) -> list[Registered]:
    """The registered stream tables (those in `names`, when given) whose table exists, IMMEDIATE ones
    aside; an unknown name raises IvmError naming it."""
    rows = db.rows(
        "SELECT stream_table, schema_name, table_name, defining_query, refresh_mode, sources, refreshed_at, "
        "run_settings, to_regclass(format('%I.%I', schema_name, table_name)) IS NOT NULL "
        f"FROM {qn(catalog, 'stream_tables')} ORDER BY stream_table"
    )
    wanted = set(names)
    refusal = unknown_names(sorted(wanted), [str(r[0]) for r in rows], catalog)
    if refusal:
        raise IvmError(refusal)
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
    return found


def refresh_due(connection: Any, catalog: str, names: Iterable[str] = ()) -> list[Outcome]:
    """Refresh the due stream tables (all of `names`, when given, whatever their lag) in dependency
    order; one that fails is reported and the others go on."""
    db = Db(connection)
    named = list(names)
    if not db.value("SELECT to_regclass(%s) IS NOT NULL", (qn(catalog, "stream_tables"),)):
        if named:
            raise IvmError(f"no dbt-ivm catalog schema {catalog!r} here: nothing is registered")
        return []
    tables = registered(db, catalog, named)
    keys = {id(t.spec): t.stream_table for t in tables}

    def run(spec: StreamTableSpec) -> RefreshResult:
        done = refresh_by_function(db, catalog, keys[id(spec)], spec.refresh_mode, INITIATED_BY)
        if done is not None:
            return done
        from dbt_ivm.postgres.runner import run_stream_table  # the planner: only when there is work

        return run_stream_table(connection, spec)

    return refresh_in_order(tables, db.value("SELECT now()"), bool(named), run)
