"""An Iceberg table's raw changes between two snapshots, as a Z-set change relation.

    change = create_change_view(spark, "sales.orders", "orders_changes", start_snapshot_id=frontier)
    if change.needs_full_refresh:
        ...  # change.reason says why

The view has the table's columns (one named like ours, ``__ivm_…``, under its internal name
``__ivm_c<n>``: ``carried_columns``) plus

* ``__ivm_weight`` INT: +1 for a row image that appeared (INSERT, UPDATE_AFTER), −1 for one that
  went away (DELETE, UPDATE_BEFORE);
* ``__ivm_seq`` BIGINT: the order of the changes, ``2 * changelog ordinal + (1 for +1, 0 for −1)``:
  commits in order, and within one commit the −1 images before the +1 images.

The range is exclusive of the start snapshot and inclusive of the end snapshot. Three ways to get
it, tried in this order:

``changelog``
    Iceberg's changelog scan (the ``changes`` metadata table): needs the start snapshot to be an
    ancestor of the end snapshot and no delete files. Rows a copy-on-write rewrite carried over
    unchanged appear as a −1 and a +1 of the same row in one commit; they cancel as weights, and
    ``compacted`` (weights summed per row image) drops them before the delta rules see them.
``touched_files``
    The range has merge-on-read delete files, which the changelog scan refuses: the data files it
    added or removed, read whole at each end, and the rows at the positions its delete files name
    (``touched_files``). Like the changelog, it costs what the range wrote, not the table.
``snapshot_diff``
    Both snapshots are still readable, but neither of the above can serve (equality deletes, the
    table was replaced by ``CREATE OR REPLACE``, a snapshot in between expired, or there is no
    start snapshot): ``new EXCEPT ALL old`` with +1, ``old EXCEPT ALL new`` with −1.
``full_refresh``
    The start state is gone (expired snapshot, the table was dropped and re-created), a column read
    changed (added, dropped, renamed or retyped; ``schema_changed``: the stream table's own columns
    may have to change too), or the relation is not an Iceberg table: no view is created; recompute
    from scratch. A ``replace`` snapshot (compaction) changes no row: the changelog skips it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dbt_ivm.reserved import internal_name
from dbt_ivm.spark.carried_columns import Carried
from dbt_ivm.spark.iceberg import (
    NotAnIcebergTable,
    Snapshot,
    TableName,
    columns_at,
    current_version,
    lineage,
    name_parts,
    quote_identifier,
    quoted_name,
    state_sql,
)
from dbt_ivm.spark.touched_files import Staged, create_touched_files_view
from dbt_ivm.sqltext import SEQ, WEIGHT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ChangePath = Literal["changelog", "touched_files", "snapshot_diff", "full_refresh"]
# Changelog rows whose image went away.
REMOVED_CHANGE_TYPES = ("DELETE", "UPDATE_BEFORE")


@dataclass(frozen=True)
class ChangeView:
    """What `create_change_view` did: which path, the temp view it made (None on full_refresh), the
    snapshot range, and why it did not use the changelog."""

    path: ChangePath
    view: str | None
    table: str
    start_snapshot_id: int | None
    end_snapshot_id: int | None
    columns: tuple[str, ...] = ()
    reason: str | None = None
    # Row images the snapshots in the range added and removed (their summaries), before reading any:
    # what the changelog will hold. 0 when the range's lineage is unknown.
    row_images: int = 0
    # The columns read changed name, type or order: rows read before and after do not line up.
    schema_changed: bool = False
    # Frees what the view holds in the driver (touched_files: staged scan tasks); call once done.
    release: Callable[[], None] | None = None

    @property
    def needs_full_refresh(self) -> bool:
        return self.path == "full_refresh"


def unavailable(label: str, reason: str | None) -> str:
    """Why a refresh recomputes: `label`'s changes cannot be read (`reason`, a ChangeView's)."""
    return f"changes of {label} are unavailable: {reason}"


def start_gone(label: str, start_snapshot_id: int) -> str:
    """Why a range whose start snapshot is gone is recomputed."""
    return f"snapshot {start_snapshot_id} of {label} is no longer in its history (expired, or the table was replaced)"


def create_change_view(
    spark: SparkSession,
    table: TableName,
    view_name: str,
    start_snapshot_id: int | None,
    end_snapshot_id: int | None = None,
    expected_table_uuid: str | None = None,
    read: Sequence[str] | None = None,
) -> ChangeView:
    """Create the session temp view `view_name` of `table`'s changes after `start_snapshot_id` up to
    `end_snapshot_id` (default: the current snapshot).

    `start_snapshot_id` None means the table had no snapshot at the start: every row at the end is an
    insert. `expected_table_uuid` (recorded with the start snapshot) detects a table that was dropped
    and re-created under the same name. `read`: the only columns the view carries (default: all);
    the others may hold values no set operation can compare (a map).
    """
    label = ".".join(name_parts(table))

    def full(reason: str, end: int | None = end_snapshot_id) -> ChangeView:
        return ChangeView("full_refresh", None, label, start_snapshot_id, end, reason=reason)

    try:
        version = current_version(spark, table)
    except NotAnIcebergTable as error:
        return full(f"{error}: it keeps no change history")
    if expected_table_uuid is not None and version.table_uuid != expected_table_uuid:
        return full(
            f"{label} was dropped and re-created (table uuid {expected_table_uuid} is now {version.table_uuid})"
        )
    end = version.snapshot_id if end_snapshot_id is None else end_snapshot_id
    if end is None:
        if start_snapshot_id is None:  # never written: nothing changed
            columns = _carried(tuple(name for name, _ in columns_at(spark, table, None)), read)
            _create_empty_view(spark, table, view_name, columns)
            return ChangeView("changelog", view_name, label, None, None, columns.names)
        return full(f"{label} has no current snapshot", end)
    known = lineage(spark, table, end if start_snapshot_id is None else start_snapshot_id, end)
    if not known.end_exists:
        return full(f"snapshot {end} of {label} does not exist (expired?)", end)
    end_columns = columns_at(spark, table, end)
    columns = _carried(tuple(name for name, _ in end_columns), read)
    if start_snapshot_id is None:
        _create_diff_view(spark, table, view_name, columns, None, end)
        return ChangeView(
            "snapshot_diff",
            view_name,
            label,
            None,
            end,
            columns.names,
            reason=f"{label} had no snapshot at the start: every row of snapshot {end} is new",
        )
    if not known.start_exists:
        return full(start_gone(label, start_snapshot_id), end)
    if not known.same_schema:
        start_columns = columns_at(spark, table, start_snapshot_id)
        if _read_of(start_columns, read) != _read_of(end_columns, read):
            return ChangeView(
                "full_refresh",
                None,
                label,
                start_snapshot_id,
                end,
                reason=f"the columns of {label} changed between snapshots {start_snapshot_id} and {end}",
                schema_changed=True,
            )
    images = sum(snapshot.changed_records for snapshot in known.chain or ())
    reason = _why_not_changelog(label, start_snapshot_id, end, known.chain)
    if reason is None:
        try:
            _create_changelog_view(spark, table, view_name, columns, start_snapshot_id, end)
        except Exception as error:  # an Iceberg limitation the checks above did not foresee
            reason = f"Iceberg's changelog failed: {str(error).strip().splitlines()[0][:300]}"
        else:
            return ChangeView(
                "changelog", view_name, label, start_snapshot_id, end, columns.names, None, images
            )
    elif known.chain is not None:  # merge-on-read: read the files the range touched
        staged = create_touched_files_view(spark, table, view_name, columns, start_snapshot_id, known.chain)
        if isinstance(staged, Staged):
            return ChangeView(
                "touched_files",
                view_name,
                label,
                start_snapshot_id,
                end,
                columns.names,
                row_images=staged.row_images,
                release=staged.release,
            )
        reason = f"{label} has merge-on-read changes the touched files cannot name: {staged}"
    _create_diff_view(spark, table, view_name, columns, start_snapshot_id, end)
    return ChangeView(
        "snapshot_diff", view_name, label, start_snapshot_id, end, columns.names, reason, images
    )


def _read_of(columns: list[tuple[str, str]], read: Sequence[str] | None) -> list[tuple[str, str]]:
    """The (name, type) pairs of the columns read, by name; a column nobody reads may come, go or
    change, any may move (the view carries columns by name; which field a name means, the stamp
    tells: `field_ids`)."""
    kept = set(_only(tuple(name for name, _ in columns), read))
    return sorted((name, kind) for name, kind in columns if name in kept)


def _carried(names: tuple[str, ...], read: Sequence[str] | None) -> Carried:
    """The columns read (all: `read` None) of a table whose columns are `names`, each under the name
    the view carries it by: its internal name (`reserved`), which no column of ours can take."""
    return Carried(tuple((name, internal_name(names, name)) for name in _only(names, read)))


def _only(columns: tuple[str, ...], read: Sequence[str] | None) -> tuple[str, ...]:
    if read is None:
        return columns
    wanted = {name.lower() for name in read}  # Spark resolves names without regard to case
    return tuple(name for name in columns if name.lower() in wanted)


def _why_not_changelog(label: str, start: int, end: int, chain: list[Snapshot] | None) -> str | None:
    if chain is None:
        return (
            f"snapshot {start} is not an ancestor of snapshot {end} of {label} (the table was "
            "replaced or rolled back, or a snapshot in between expired)"
        )
    with_deletes = [s.snapshot_id for s in chain if s.has_delete_files and not s.rewrites_only]
    if with_deletes:
        return (
            f"{label} has merge-on-read delete files (snapshot {with_deletes[0]}), which Iceberg's "
            "changelog cannot read"
        )
    return None


def _create_changelog_view(
    spark: SparkSession,
    table: TableName,
    view_name: str,
    columns: Carried,
    start: int,
    end: int,
) -> None:
    if start == end:  # Iceberg rejects an empty range
        _create_empty_view(spark, table, view_name, columns)
        return
    # The raw changelog scan: carried-over rows of copy-on-write rewrites are still in it, as a −1
    # and a +1 of the same row in one commit. They cancel in any Z-set sum; `compacted` drops
    # them in the one shuffle it makes anyway (the changelog procedure would add a second one).
    raw = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(int(start)))
        .option("end-snapshot-id", str(int(end)))
        .table(f"{quoted_name(table)}.`changes`")  # format(...).load(name) misses Hadoop catalogs
    )
    removed = ", ".join(f"'{t}'" for t in REMOVED_CHANGE_TYPES)
    raw.selectExpr(
        *columns.select_list(),
        f"CAST(CASE WHEN `_change_type` IN ({removed}) THEN -1 ELSE 1 END AS INT) AS {quote_identifier(WEIGHT)}",
        f"CAST(`_change_ordinal` AS BIGINT) * 2 + CASE WHEN `_change_type` IN ({removed}) THEN 0 ELSE 1 END "
        f"AS {quote_identifier(SEQ)}",
    ).createOrReplaceTempView(quote_identifier(view_name))  # parsed as an identifier


def _create_empty_view(spark: SparkSession, table: TableName, view_name: str, columns: Carried) -> None:
    selected = columns.renamed()
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {quote_identifier(view_name)} AS "
        f"SELECT {selected}, CAST(1 AS INT) AS {quote_identifier(WEIGHT)}, "
        f"CAST(0 AS BIGINT) AS {quote_identifier(SEQ)} FROM ({state_sql(table, None, columns.sources)}) AS `__ivm_none`"
    )


def _create_diff_view(
    spark: SparkSession,
    table: TableName,
    view_name: str,
    columns: Carried,
    start: int | None,
    end: int | None,
) -> None:
    """Changes as the difference of two time-travel reads (a start of None is the empty table)."""
    selected = columns.renamed()
    before = state_sql(table, start, columns.sources)
    after = state_sql(table, end, columns.sources)
    weight, seq = quote_identifier(WEIGHT), quote_identifier(SEQ)
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {quote_identifier(view_name)} AS "
        f"SELECT {selected}, CAST(-1 AS INT) AS {weight}, CAST(0 AS BIGINT) AS {seq} "
        f"FROM ({before} EXCEPT ALL {after}) AS `__ivm_removed` "
        f"UNION ALL "
        f"SELECT {selected}, CAST(1 AS INT) AS {weight}, CAST(1 AS BIGINT) AS {seq} "
        f"FROM ({after} EXCEPT ALL {before}) AS `__ivm_added`"
    )
