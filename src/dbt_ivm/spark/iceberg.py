"""Iceberg table metadata and time travel, in PySpark and Spark SQL.

A table is named by its parts (``("sales", "orders")``, or with a catalog first), or by a dotted
string whose parts contain no dots (``"sales.orders"``). Every identifier this module writes into SQL
is backtick-quoted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dbt_ivm.errors import IvmError
from dbt_ivm.spark.jvm import java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TableName = str | Sequence[str]

# Snapshot summary counters that mean "this snapshot has delete files" (merge-on-read).
DELETE_FILE_COUNTERS = ("total-delete-files", "added-delete-files", "removed-delete-files")
# Row images a snapshot added and removed: its changelog's size (copy-on-write: whole files).
RECORD_COUNTERS = ("added-records", "deleted-records")
# The operation of a snapshot that only moved rows between files (compaction, manifest rewrites).
REPLACE = "replace"


class NotAnIcebergTable(IvmError):
    """The relation exists but is not an Iceberg table (a view, a Parquet or Hive table, ...)."""


def name_parts(table: TableName) -> tuple[str, ...]:
    parts = tuple(table.split(".")) if isinstance(table, str) else tuple(table)
    if not parts or any(not p for p in parts):
        raise ValueError(f"not a table name: {table!r}")
    return parts


def quote_identifier(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


def quoted_name(table: TableName) -> str:
    """`schema`.`table` (or `catalog`.`schema`.`table`)."""
    return ".".join(quote_identifier(p) for p in name_parts(table))


def sql_string(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class TableVersion:
    """Which table (its uuid survives renames, changes when it is dropped and re-created) and which
    of its snapshots. ``snapshot_id`` is None while nothing was ever committed to the table."""

    table_uuid: str
    snapshot_id: int | None


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: int | None
    operation: str | None
    committed_at: datetime | None
    summary: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_delete_files(self) -> bool:
        """Delete files are live in (or were added or removed by) this snapshot: merge-on-read."""
        return any(count(self.summary.get(k)) > 0 for k in DELETE_FILE_COUNTERS)

    @property
    def rewrites_only(self) -> bool:
        """A `replace` snapshot (rewrite_data_files, rewrite_manifests, compaction): the same rows in
        other files. Iceberg's changelog scan skips it, and no row changed."""
        return self.operation == REPLACE

    @property
    def changed_records(self) -> int:
        """Row images this snapshot added plus those it removed (0 when the summary lacks them, and
        for a rewrite, which the changelog does not read)."""
        if self.rewrites_only:
            return 0
        return sum(count(self.summary.get(k)) for k in RECORD_COUNTERS)


def count(value: str | None) -> int:
    """A snapshot summary's counter (0 when absent or not a number)."""
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def load_table(spark: SparkSession, table: TableName) -> Any:
    """Iceberg's Java Table object, freshly loaded (another process may have committed)."""
    name = quoted_name(table)
    # Without an active session on this JVM thread (a dbt worker thread that did not create the
    # session), the session catalog answers with a plain V1 table instead of the Iceberg one.
    java_class(spark, "org.apache.spark.sql.SparkSession").setActiveSession(spark._jsparkSession)
    try:
        loaded = java_class(spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(
            spark._jsparkSession, name
        )
    except Exception as error:
        text = str(error)
        if "is not an Iceberg table" in text or "not an Iceberg table" in text.lower():
            raise NotAnIcebergTable(f"{'.'.join(name_parts(table))} is not an Iceberg table") from error
        raise
    loaded.refresh()
    return loaded


def is_iceberg_table(spark: SparkSession, table: TableName) -> bool:
    """Whether `table` exists and is an Iceberg table."""
    if not spark.catalog.tableExists(quoted_name(table)):
        return False
    try:
        load_table(spark, table)
    except NotAnIcebergTable:
        return False
    return True


def current_version(spark: SparkSession, table: TableName) -> TableVersion:
    """The table's uuid and current snapshot id, read together from its latest metadata."""
    loaded = load_table(spark, table)
    snapshot = loaded.currentSnapshot()
    return TableVersion(
        table_uuid=str(loaded.uuid().toString()),
        snapshot_id=None if snapshot is None else int(snapshot.snapshotId()),
    )


def current_snapshot_id(spark: SparkSession, table: TableName) -> int | None:
    """The table's current snapshot id; None while nothing was ever committed."""
    return current_version(spark, table).snapshot_id


def snapshots(spark: SparkSession, table: TableName) -> dict[int, Snapshot]:
    """Every snapshot still in the table's metadata (expired ones are gone), by id."""
    rows = spark.sql(
        "SELECT snapshot_id, parent_id, operation, committed_at, summary "
        f"FROM {quoted_name(table)}.`snapshots`"
    ).collect()
    found: dict[int, Snapshot] = {}
    for snapshot_id, parent_id, operation, committed_at, summary in rows:
        found[int(snapshot_id)] = Snapshot(
            snapshot_id=int(snapshot_id),
            parent_id=None if parent_id is None else int(parent_id),
            operation=operation,
            committed_at=committed_at,
            summary=dict(summary or {}),
        )
    return found


def snapshots_after(known: Mapping[int, Snapshot], start: int, end: int) -> list[Snapshot] | None:
    """The snapshots after `start` up to and including `end`, oldest first, following parent links
    back from `end`; None when `start` is not an ancestor of `end` (the table was replaced or rolled
    back, or a snapshot in between expired). Empty when start == end."""
    chain: list[Snapshot] = []
    current: int | None = end
    while current is not None and current != start:
        snapshot = known.get(current)
        if snapshot is None:
            return None
        chain.append(snapshot)
        current = snapshot.parent_id
    if current is None:
        return None
    chain.reverse()
    return chain


@dataclass(frozen=True)
class Lineage:
    """What a table's metadata says about a snapshot range, read through Iceberg's Java API (no Spark
    job): whether both ends still exist, and the snapshots after `start` up to `end` (None when
    `start` is not an ancestor of `end`)."""

    start_exists: bool
    end_exists: bool
    chain: list[Snapshot] | None
    same_schema: bool  # both ends have the same schema id


def lineage(spark: SparkSession, table: TableName, start: int, end: int) -> Lineage:
    """Follow parent links back from `end` to `start` (usually a few snapshots)."""
    loaded = load_table(spark, table)
    first, last = loaded.snapshot(int(start)), loaded.snapshot(int(end))
    if first is None or last is None:
        return Lineage(first is not None, last is not None, None, False)
    known: dict[int, Snapshot] = {}
    current = last
    while current is not None and int(current.snapshotId()) != int(start):
        snapshot = _snapshot_of(current)
        known[snapshot.snapshot_id] = snapshot
        current = None if snapshot.parent_id is None else loaded.snapshot(snapshot.parent_id)
    same_schema = first.schemaId() is not None and first.schemaId() == last.schemaId()
    return Lineage(True, True, snapshots_after(known, int(start), int(end)), same_schema)


def _snapshot_of(java_snapshot: Any) -> Snapshot:
    """Our Snapshot from Iceberg's Java one, keeping only the summary counters the engine reads."""
    summary = java_snapshot.summary()
    parent = java_snapshot.parentId()
    return Snapshot(
        snapshot_id=int(java_snapshot.snapshotId()),
        parent_id=None if parent is None else int(parent),
        operation=java_snapshot.operation(),
        committed_at=None,
        summary={
            k: str(summary.get(k))
            for k in (*DELETE_FILE_COUNTERS, *RECORD_COUNTERS)
            if summary.get(k) is not None
        },
    )


def columns_at(spark: SparkSession, table: TableName, snapshot_id: int | None) -> list[tuple[str, str]]:
    """(name, type) of the table's columns as of a snapshot (the current schema when None)."""
    version = "" if snapshot_id is None else f" VERSION AS OF {int(snapshot_id)}"
    fields = spark.sql(f"SELECT * FROM {quoted_name(table)}{version}").schema.fields
    return [(f.name, f.dataType.simpleString()) for f in fields]


def state_sql(table: TableName, snapshot_id: int | None, columns: Sequence[str] | None = None) -> str:
    """A SELECT of the table's rows as of a snapshot; no rows when `snapshot_id` is None (the table
    before its first commit)."""
    selected = "*" if columns is None else ", ".join(quote_identifier(c) for c in columns)
    if snapshot_id is None:
        return f"SELECT {selected} FROM {quoted_name(table)} WHERE false"
    return f"SELECT {selected} FROM {quoted_name(table)} VERSION AS OF {int(snapshot_id)}"


def create_state_view(
    spark: SparkSession,
    table: TableName,
    snapshot_id: int | None,
    view_name: str,
    columns: Sequence[str] | None = None,
) -> None:
    """A session temp view `view_name` of the table as of `snapshot_id` (time travel)."""
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {quote_identifier(view_name)} AS "
        + state_sql(table, snapshot_id, columns)
    )


def current_records(spark: SparkSession, table: TableName) -> int:
    """Rows in the table now, from its current snapshot's summary (0 when unknown or empty)."""
    snapshot = load_table(spark, table).currentSnapshot()
    return 0 if snapshot is None else count(snapshot.summary().get("total-records"))


def total_records(spark: SparkSession, table: TableName, snapshot_id: int) -> int:
    """Rows in the table at a snapshot, from its summary (0 when unknown)."""
    snapshot = load_table(spark, table).snapshot(int(snapshot_id))
    return 0 if snapshot is None else count(snapshot.summary().get("total-records"))
