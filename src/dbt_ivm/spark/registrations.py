"""The registered stream tables of a Spark warehouse: list them with their pending changes, read their
refresh history, remove them, refresh the due ones without dbt (`dbt-ivm status|history|drop|gc|refresh`
with `--spark-warehouse`, or these functions from a PySpark program).

Spark keeps no change buffers: a source's pending changes are the row images of its snapshots after
the frontier stamped on the stream table's current commit, read from Iceberg's metadata (no Spark
job). A registration whose table is gone costs nothing but a row, so nothing removes it by itself;
`forget_missing` (`dbt-ivm gc`) does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast, get_args

from dbt_ivm import run_settings
from dbt_ivm.catalog import split_qualified
from dbt_ivm.errors import IvmError
from dbt_ivm.scheduling import Outcome, Registered, refresh_in_order, unknown_names
from dbt_ivm.spark import iceberg, registry
from dbt_ivm.spark.catalog import NO_SNAPSHOT
from dbt_ivm.spark.changelog import start_gone, unavailable
from dbt_ivm.spark.commit import INTERRUPTED_REBUILD, UNSTAMPED, current_stamp
from dbt_ivm.spec import RefreshMode, StreamTableSpec
from dbt_ivm.status import HistoryRow, StreamTableStatus
from dbt_ivm.unused import RegisteredTable

INITIATED_BY = "dbt-ivm refresh"


def catalog_exists(spark: Any, catalog: str) -> bool:
    return bool(spark.catalog.tableExists(registry.table(catalog, "stream_tables")))


def spec_of(found: registry.Registration, catalog: str, initiated_by: str) -> StreamTableSpec:
    """The stream table as its last `dbt run` defined and configured it."""
    mode = found.refresh_mode if found.refresh_mode in get_args(RefreshMode) else "auto"
    spec = StreamTableSpec(
        model=found.table_name,
        schema=found.schema_name,
        name=found.table_name,
        sql=found.defining_query,
        refresh_mode=cast(RefreshMode, mode),
        catalog_schema=catalog,
        initiated_by=initiated_by,
    )
    return run_settings.applied(spec, found.run_settings)


def _registrations(spark: Any, catalog: str) -> list[registry.Registration]:
    relation = registry.table(catalog, "stream_tables")
    spark.sql(f"REFRESH TABLE {relation}")  # another process may have committed since we looked
    found = []
    for row in spark.table(relation).orderBy("stream_table").collect():
        values = row.asDict()
        values["sources"] = list(values["sources"] or [])
        found.append(registry.Registration(**values))
    return found


def _exists(spark: Any, found: registry.Registration) -> bool:
    return bool(spark.catalog.tableExists(iceberg.quoted_name((found.schema_name, found.table_name))))


def _last_refreshes(spark: Any, catalog: str) -> dict[str, tuple[str, str, Any, float | None]]:
    """Per stream table: the newest refresh's action and status, and when the newest successful one
    started reading its sources (the data it reflects) and how many seconds ago that was."""
    relation = registry.table(catalog, "refresh_history")
    registry.flush_deferred(spark, catalog)  # a refresh that found nothing new says how fresh it is
    spark.sql(f"REFRESH TABLE {relation}")
    rows = spark.sql(
        "SELECT stream_table, max_by(action, refresh_id), max_by(status, refresh_id), "
        "max(CASE WHEN status = 'OK' THEN started_at END), "
        "CAST(current_timestamp() AS DOUBLE) - CAST(max(CASE WHEN status = 'OK' THEN started_at END) AS DOUBLE) "
        f"FROM {relation} GROUP BY stream_table"
    ).collect()
    return {str(r[0]): (str(r[1]), str(r[2]), r[3], None if r[4] is None else float(r[4])) for r in rows}


@dataclass
class Looked:
    """What the metadata says of a stream table: each source's pending row images (None: unknown),
    and whether and why the next refresh recomputes it (the runner's reasons that need no planning)."""

    pending: dict[str, int | None]
    next_action: str | None = None
    next_reason: str | None = None

    def recompute(self, action: str, reason: str) -> None:
        if self.next_reason is None:
            self.next_action, self.next_reason = action, reason


def _look(spark: Any, found: registry.Registration) -> Looked:
    """Row images of each source's snapshots after the stream table's frontier, read from Iceberg's
    metadata (no Spark job), and what forces its next refresh to recompute."""
    current, stamp = current_stamp(spark, (found.schema_name, found.table_name))
    looked = Looked({})
    incremental = found.refresh_mode != "full"  # else every refresh recomputes: nothing to tell
    if incremental and stamp is None:
        looked.recompute("FULL", UNSTAMPED if current is not None else "the stream table has no snapshot")
    elif incremental and stamp is not None and stamp.fingerprint != found.fingerprint:
        looked.recompute("REBUILD", INTERRUPTED_REBUILD)
    for source in found.sources:
        start = None if stamp is None else stamp.frontier.get(source)
        parts = split_qualified(source)
        looked.pending[source] = None
        if not iceberg.is_iceberg_table(spark, parts):
            if incremental:
                looked.recompute("FULL", f"{source} is not an Iceberg table (or is gone): no change history")
            continue
        if start is None:
            if incremental and stamp is not None:
                looked.recompute("FULL", f"no frontier recorded for {source}")
            continue
        end = iceberg.current_snapshot_id(spark, parts)
        end = NO_SNAPSHOT if end is None else end
        if start == end:
            looked.pending[source] = 0
        elif start != NO_SNAPSHOT:  # else everything since the table was empty: not counted here
            known = iceberg.lineage(spark, parts, start, end)
            if known.chain is not None:
                looked.pending[source] = sum(s.changed_records for s in known.chain)
            if incremental and not known.start_exists:
                looked.recompute("FULL", unavailable(source, start_gone(source, start)))
    return looked


def registered_relations(spark: Any, catalog: str) -> list[RegisteredTable]:
    """Every registration: its stream table, schema, table and the dbt project that last kept it; read
    between this process's registry commits (dbt's other threads may be committing while this runs)."""
    with registry.COMMIT_LOCK:
        if not catalog_exists(spark, catalog):
            return []
        return [
            RegisteredTable(
                r.stream_table, r.schema_name, r.table_name, run_settings.kept_project(r.run_settings)
            )
            for r in _registrations(spark, catalog)
        ]


def list_registrations(spark: Any, catalog: str) -> list[StreamTableStatus]:
    """Every registered stream table, whether its table exists, and the changes waiting for it."""
    if not catalog_exists(spark, catalog):
        return []
    last = _last_refreshes(spark, catalog)
    found = []
    for registration in _registrations(spark, catalog):
        exists = _exists(spark, registration)
        looked = _look(spark, registration) if exists else Looked({s: None for s in registration.sources})
        action, status, refreshed_at, stale = last.get(registration.stream_table, (None, None, None, None))
        settings = spec_of(registration, catalog, INITIATED_BY)
        found.append(
            StreamTableStatus(
                registration.stream_table,
                exists,
                registration.refresh_mode,
                list(registration.sources),
                looked.pending,
                refreshed_at,
                stale,
                settings.target_lag_seconds,
                action,
                status,
                settings.schedule,
                looked.next_action,
                looked.next_reason,
            )
        )
    return found


def history(spark: Any, catalog: str, stream_table: str | None, limit: int) -> list[HistoryRow]:
    """The newest `limit` refreshes (of `stream_table` only, when given), newest first."""
    if not catalog_exists(spark, catalog):
        return []
    relation = registry.table(catalog, "refresh_history")
    registry.flush_deferred(spark, catalog)
    spark.sql(f"REFRESH TABLE {relation}")
    frame = spark.table(relation)
    if stream_table:
        frame = frame.where(frame["stream_table"] == stream_table)
    rows = (
        frame.orderBy("refresh_id", ascending=False)
        .limit(limit)
        .selectExpr(
            "refresh_id",
            "stream_table",
            "action",
            "status",
            "rows_inserted",
            "rows_updated",
            "rows_deleted",
            "changes_read",
            "duration_seconds",
            "finished_at",
            "initiated_by",
            "COALESCE(error_text, reason)",
        )
        .collect()
    )
    return [HistoryRow(*row) for row in rows]


def drop_registration(spark: Any, catalog: str, stream_table: str, drop_table: bool) -> bool:
    """Unregister `stream_table` ("schema.table"), and drop its table when `drop_table`. Returns whether
    it was registered."""
    if not catalog_exists(spark, catalog):
        return False
    found = registry.lookup(spark, catalog, stream_table)
    if found is None:
        return False
    if drop_table:
        spark.sql(f"DROP TABLE IF EXISTS {iceberg.quoted_name((found.schema_name, found.table_name))}")
    registry.unregister(spark, catalog, stream_table)
    return True


def forget_missing(spark: Any, catalog: str) -> list[str]:
    """Unregister every stream table whose table no longer exists; returns their names."""
    if not catalog_exists(spark, catalog):
        return []
    missing = [r.stream_table for r in _registrations(spark, catalog) if not _exists(spark, r)]
    for name in missing:
        registry.unregister(spark, catalog, name)
    return missing


def registered(spark: Any, catalog: str, names: Iterable[str] = ()) -> list[Registered]:
    """The registered stream tables (those in `names`, when given) whose table exists; an unknown name
    raises IvmError naming it."""
    found = _registrations(spark, catalog)
    wanted = set(names)
    refusal = unknown_names(sorted(wanted), [r.stream_table for r in found], catalog)
    if refusal:
        raise IvmError(refusal)
    last = _last_refreshes(spark, catalog)
    return [
        Registered(
            r.stream_table,
            spec_of(r, catalog, INITIATED_BY),
            tuple(r.sources),
            last.get(r.stream_table, (None, None, None, None))[2],
        )
        for r in found
        if (not wanted or r.stream_table in wanted) and _exists(spark, r)
    ]


def refresh_due(spark: Any, catalog: str, names: Iterable[str] = ()) -> list[Outcome]:
    """Refresh the due stream tables (all of `names`, when given, whatever their lag) in dependency
    order; one that fails is reported and the others go on."""
    from dbt_ivm.spark.runner import run_stream_table

    named = list(names)
    if not catalog_exists(spark, catalog):
        if named:
            raise IvmError(f"no dbt-ivm catalog schema {catalog!r} in this warehouse: nothing is registered")
        return []
    tables = registered(spark, catalog, named)
    now = spark.sql("SELECT current_timestamp()").first()[0]  # the history's clock and time zone
    return refresh_in_order(tables, now, bool(named), lambda spec: run_stream_table(spark, spec))
