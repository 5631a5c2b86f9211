"""Changes of a merge-on-read table: what a snapshot range deleted or added, read from the files it touched.

Iceberg 1.9's changelog scan refuses delete files. A merge-on-read DELETE, UPDATE or MERGE names the
rows it removes in position delete files — (data file, row position) pairs — and writes the rows it
adds to new data files. Between two snapshots a data file's rows never change; only which of them
are deleted does. So the range's net change is read from three kinds of file:

* data files the range added or removed (appends, copy-on-write rewrites): read whole, at the end
  with +1 and at the start with −1 (a file present at one end only contributes to that end);
* data files present at both ends whose rows the range deleted: only the rows at positions that
  delete files added in the range name and delete files removed in it do not, read at the start
  with −1 (a DELETE that merges a file's earlier delete file into a new one removes the old file
  and adds the merged one: only the new positions count);
* the reverse, rows at positions that only the removed delete files named, read at the end with +1
  (a delete file dropped without a replacement brings its rows back; rare, so checked first).

Reading costs the changed rows and the files the range wrote, never the table: an UPDATE of one row
of a 100-file table reads the file it wrote and scans one file for one position.

A compaction (a ``replace`` snapshot) moves rows between files without changing any: the range is
split there and each segment read on its own, so the files it rewrote are never read. Equality
deletes name rows by value and may apply to any file: not read here (snapshot diff).

The reads are Iceberg scans of exactly those files with the deletes live at each end applied: the
file scan tasks planned at each snapshot are staged in Iceberg's ``ScanTaskSetManager`` and read
through the ``scan-task-set-id`` read option (what Iceberg's own rewrite procedures use), which also
serves the ``_file`` and ``_pos`` metadata columns the positions are matched on. Staged tasks stay
in the driver until ``Staged.release`` runs. The view's plan never names the table itself: a write or
REFRESH TABLE anywhere in the application re-plans cached plans that name it, and one that did so
just after the release would fail on the released tasks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dbt_ivm.spark.carried_columns import Carried
from dbt_ivm.spark.iceberg import Snapshot, TableName, load_table, quote_identifier, quoted_name, sql_string
from dbt_ivm.spark.jvm import java_class
from dbt_ivm.sqltext import SEQ, WEIGHT

# Formats whose position delete files Spark reads without Iceberg (Avro needs a package).
READABLE_DELETE_FORMATS = {"PARQUET": "parquet", "ORC": "orc"}
# The columns of a position delete file the reads need (the spec's optional `row` is left unread).
POSITION_DELETE_SCHEMA = "file_path STRING, pos BIGINT"


@dataclass(frozen=True)
class Staged:
    """The view is created; `row_images`: the rows it may read (its size before netting, bounded by
    file and delete-file record counts)."""

    row_images: int
    release: Callable[[], None]


@dataclass
class DeleteFiles:
    """Position delete files, by the format Spark reads them in; `named`: the data files they point
    at, as far as their metadata says (`unnamed`: some do not say)."""

    paths: dict[str, list[str]] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)
    unnamed: bool = False
    records: int = 0


@dataclass
class SegmentFiles:
    """What one segment's snapshots wrote (net: a file added and removed inside it is in neither)."""

    data_files: set[str] = field(default_factory=set)  # added or removed: read whole
    added_deletes: DeleteFiles = field(default_factory=DeleteFiles)
    removed_deletes: DeleteFiles = field(default_factory=DeleteFiles)


def segments(start: int, chain: Sequence[Snapshot]) -> list[tuple[int, list[int]]]:
    """The range split at its compactions, as (begin, snapshots after it): a ``replace`` snapshot
    holds the rows its parent held, so the range's change is the sum of its segments' changes, and
    the files a compaction rewrote are read by no segment.

    >>> from dbt_ivm.spark.iceberg import Snapshot
    >>> chain = [Snapshot(i, i - 1, op, None) for i, op in [(2, "delete"), (3, "replace"), (4, "overwrite")]]
    >>> segments(1, chain)
    [(1, [2]), (3, [4])]
    """
    found: list[tuple[int, list[int]]] = []
    begin, current = start, list[int]()
    for snapshot in chain:
        if snapshot.rewrites_only:
            if current:
                found.append((begin, current))
            begin, current = snapshot.snapshot_id, []
        else:
            current.append(snapshot.snapshot_id)
    if current:
        found.append((begin, current))
    return found


def create_touched_files_view(
    spark: Any,
    table: TableName,
    view_name: str,
    columns: Carried,
    start: int,
    chain: Sequence[Snapshot],
) -> Staged | str:
    """Create the temp view `view_name` (columns, weight, seq) of the changes after snapshot
    `start` made by the snapshots `chain`; or return why it cannot (equality deletes, delete files
    in a format Spark cannot read)."""
    loaded = load_table(spark, table)
    # (snapshot, weight, data files, positions to keep: None for every row)
    reads: list[tuple[int, int, frozenset[str], Any]] = []
    images = 0
    for begin, snapshots in segments(start, chain):
        found = segment_files(spark, loaded, snapshots)
        if isinstance(found, str):
            return found
        whole = frozenset(found.data_files)
        added, removed = (_positions(spark, d, whole) for d in (found.added_deletes, found.removed_deletes))
        deleted = _minus(added, removed)
        revived = _minus(removed, added)
        # The data files of the deleted positions, from the delete files' metadata when it names
        # them all; else, and for the revived ones, one job over the delete files for both.
        named = not found.added_deletes.unnamed
        deleted_in, revived_in = _data_files_of(None if named else deleted, revived)
        if named:
            deleted_in = frozenset(found.added_deletes.named - whole)
        reads += [
            (begin, -1, whole, None),
            (begin, -1, deleted_in, deleted),
            (snapshots[-1], 1, whole, None),
            (snapshots[-1], 1, revived_in, revived),
        ]
        images += found.added_deletes.records + found.removed_deletes.records
    manager = java_class(spark, "org.apache.iceberg.spark.ScanTaskSetManager").get()
    staged: list[str] = []

    def release() -> None:
        for set_id in staged:
            manager.removeTasks(loaded, set_id)
        staged.clear()

    # Each snapshot's scan is planned once, for every file any of its reads wants.
    wanted: dict[int, set[str]] = {}
    for snapshot, _weight, files, _positions_kept in reads:
        wanted.setdefault(snapshot, set()).update(files)
    planned: dict[int, dict[str, Any]] = {}

    def tasks_at(snapshot: int) -> dict[str, Any]:
        """The wanted files' scan tasks at `snapshot` (their deletes live there applied), by location."""
        if snapshot not in planned:
            planned[snapshot] = {}
            found = loaded.newScan().useSnapshot(int(snapshot)).planFiles()
            try:
                iterator = found.iterator()
                while iterator.hasNext():
                    task = iterator.next()
                    location = str(task.file().location())
                    if location in wanted[snapshot]:
                        planned[snapshot][location] = task
            finally:
                found.close()
        return planned[snapshot]

    def read_at(snapshot: int, files: frozenset[str], positions: Any) -> tuple[Any, int] | None:
        """The rows of `files` at `snapshot` (those at `positions`, when given), and how many the
        files hold; None when none of them is live there."""
        tasks = java_class(spark, "java.util.ArrayList")()
        records = 0
        for location, task in tasks_at(snapshot).items():
            if location in files:
                tasks.add(task)
                records += int(task.file().recordCount())
        if tasks.isEmpty():  # Iceberg stages no empty set
            return None
        set_id = f"dbt_ivm_{uuid.uuid4().hex}"
        manager.stageTasks(loaded, set_id, tasks)
        staged.append(set_id)
        frame = spark.read.format("iceberg").option("scan-task-set-id", set_id).table(quoted_name(table))
        if positions is None:
            return frame.selectExpr(*columns.select_list()), records
        # Metadata columns as plain ones first: Spark's join cannot resolve them in its condition.
        # The carried names keep them apart from a source column named like them.
        located = frame.selectExpr(
            *columns.select_list(), "_file AS __ivm_data_file", "_pos AS __ivm_data_pos"
        )
        kept = positions.selectExpr("file_path AS __ivm_data_file", "pos AS __ivm_data_pos")
        at = located.join(kept, ["__ivm_data_file", "__ivm_data_pos"], "left_semi")
        return at, 0

    def weighed(frame: Any, weight: int, seq: int) -> Any:
        return frame.selectExpr(
            *(quote_identifier(c) for c in columns.names),
            f"CAST({weight} AS INT) AS {quote_identifier(WEIGHT)}",
            f"CAST({seq} AS BIGINT) AS {quote_identifier(SEQ)}",
        )

    try:
        # An empty relation of the right columns, not the table filtered to nothing: a plan that
        # names the table is re-planned by any REFRESH TABLE or write to it in this application
        # (Spark's cache manager), which after `release` fails on the staged reads beside it.
        view = weighed(
            _no_rows_like(spark, spark.read.table(quoted_name(table)).selectExpr(*columns.select_list())),
            1,
            0,
        )
        for seq, (snapshot, weight, files, positions) in enumerate(reads):
            read = read_at(snapshot, files, positions) if files else None
            if read is not None:
                view, images = view.unionAll(weighed(read[0], weight, seq)), images + read[1]
        view.createOrReplaceTempView(quote_identifier(view_name))
    except Exception:
        release()
        raise
    return Staged(images, release)


def _no_rows_like(spark: Any, frame: Any) -> Any:
    """An empty local relation with `frame`'s columns (built in the JVM: no Python rows, no table)."""
    from pyspark.sql import DataFrame

    rows = java_class(spark, "java.util.ArrayList")()
    return DataFrame(spark._jsparkSession.createDataFrame(rows, frame._jdf.schema()), spark)


def segment_files(spark: Any, loaded: Any, chain: Sequence[int]) -> SegmentFiles | str:
    """The files the snapshots `chain` (one segment) added and removed, from their manifests alone;
    or why their changes cannot be read here."""
    io = loaded.io()
    # The one data file a delete file names: the file-scoped ones say so; a partition-scoped one
    # whose path column's lower and upper bounds are equal names it too (Iceberg keeps that
    # column's bounds whole).
    single_file_of = java_class(spark, "org.apache.iceberg.util.ContentFileUtil").referencedDataFileLocation
    data_added: dict[str, Any] = {}  # location: the file's metadata
    data_removed: dict[str, Any] = {}
    deletes_added: dict[str, Any] = {}
    deletes_removed: dict[str, Any] = {}
    for snapshot_id in chain:
        snapshot = loaded.snapshot(int(snapshot_id))
        for files, into, out in (
            (snapshot.addedDataFiles(io), data_added, data_removed),
            (snapshot.removedDataFiles(io), data_removed, data_added),
            (snapshot.addedDeleteFiles(io), deletes_added, deletes_removed),
            (snapshot.removedDeleteFiles(io), deletes_removed, deletes_added),
        ):
            for content_file in files:
                location = str(content_file.location())
                if out.pop(location, None) is None:  # added, then removed: at neither end
                    into[location] = content_file
    found = SegmentFiles()
    found.data_files.update((*data_added, *data_removed))
    for deletes, kept in ((deletes_added, found.added_deletes), (deletes_removed, found.removed_deletes)):
        for location, delete_file in deletes.items():
            if str(delete_file.content().toString()) != "POSITION_DELETES":
                return "the range has equality delete files, which name rows by value in any data file"
            file_format = str(delete_file.format().toString())
            if file_format not in READABLE_DELETE_FORMATS:
                return f"the range has position delete files in {file_format}"
            kept.paths.setdefault(READABLE_DELETE_FORMATS[file_format], []).append(location)
            kept.records += int(delete_file.recordCount())
            referenced = single_file_of(delete_file)
            if referenced is None:
                kept.unnamed = True
            else:
                kept.named.add(str(referenced))
    return found


def _positions(spark: Any, deletes: DeleteFiles, whole: frozenset[str]) -> Any:
    """The (file_path, pos) pairs `deletes` name, outside the files read whole; None if none."""
    frame = None
    for reader, paths in deletes.paths.items():
        # The schema given: inferring it from the files' footers would cost a Spark job per read. A
        # column it names that a file lacks would read as NULL and match no row: fail instead.
        read = (
            spark.read.format(reader)
            .schema(POSITION_DELETE_SCHEMA)
            .load(paths)
            .selectExpr(
                *(
                    f"coalesce({c}, raise_error('a position delete file without {c}')) AS {c}"
                    for c in ("file_path", "pos")
                )
            )
        )
        frame = read if frame is None else frame.unionAll(read)
    if frame is not None and whole:
        listed = ", ".join(sql_string(path) for path in sorted(whole))
        frame = frame.where(f"file_path NOT IN ({listed})")
    return frame


def _minus(positions: Any, other: Any) -> Any:
    if positions is None or other is None:
        return positions
    return positions.join(other, ["file_path", "pos"], "left_anti")


def _data_files_of(*positions: Any) -> list[frozenset[str]]:
    """The data files each of `positions` (None: no positions) falls in: one job over the delete
    files, whatever their number."""
    found: list[set[str]] = [set() for _ in positions]
    union = None
    for index, these in enumerate(positions):
        if these is not None:
            tagged = these.selectExpr(f"{index} AS __ivm_which", "file_path").distinct()
            union = tagged if union is None else union.unionAll(tagged)
    if union is not None:
        for which, path in union.collect():
            found[int(which)].add(str(path))
    return [frozenset(files) for files in found]
