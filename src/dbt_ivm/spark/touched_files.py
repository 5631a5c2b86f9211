"""Changes of a merge-on-read table: the data files a snapshot range touched, read at both its ends.

Iceberg 1.9's changelog scan refuses delete files. A merge-on-read DELETE, UPDATE or MERGE names the
rows it removes in position delete files, each pointing at data files, and writes the rows it adds
to new data files. Every other data file holds the same rows at both ends of the range, so the
range's net change is

    (rows of the touched files at the end) − (rows of the touched files at the start)

as +1 and −1 images, whose identical pairs cancel when the change set is compacted. Reading them
costs the touched files, not the table: an UPDATE of one row in a 100-file table reads one file at
each end.

Touched: data files that a snapshot in the range added or removed, and those that position delete
files added or removed in the range point at. A compaction (a ``replace`` snapshot) moves rows between
files without changing any: the range is split there and each segment read on its own, so the files
it rewrote are never read.
Equality deletes name rows by value and may apply to any file: not read here (snapshot diff).

The two reads are Iceberg scans of exactly those files with the deletes live at each end applied:
the file scan tasks planned at each snapshot are staged in Iceberg's ``ScanTaskSetManager`` and
read through the ``scan-task-set-id`` read option (what Iceberg's own rewrite procedures use).
Staged tasks stay in the driver until ``Staged.release`` runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dbt_ivm.spark.iceberg import Snapshot, TableName, load_table, quote_identifier, quoted_name
from dbt_ivm.sqltext import SEQ, WEIGHT

# Formats whose position delete files Spark reads without Iceberg (Avro needs a package).
READABLE_DELETE_FORMATS = {"PARQUET": "parquet", "ORC": "orc"}


@dataclass(frozen=True)
class Staged:
    """The view is created; `row_images`: the rows it reads at both ends (its size before netting)."""

    row_images: int
    release: Callable[[], None]


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
    columns: Sequence[str],
    start: int,
    chain: Sequence[Snapshot],
) -> Staged | str:
    """Create the temp view `view_name` (columns, weight, seq) of the changes after snapshot
    `start` made by the snapshots `chain`; or return why it cannot (equality deletes, delete files
    in a format Spark cannot read)."""
    loaded = load_table(spark, table)
    reads: list[tuple[int, int, frozenset[str]]] = []  # snapshot, weight, files
    for begin, snapshots in segments(start, chain):
        touched = touched_data_files(spark, loaded, snapshots)
        if isinstance(touched, str):
            return touched
        reads += [(begin, -1, touched), (snapshots[-1], 1, touched)]  # seq: their order in `reads`
    manager = spark.sparkContext._jvm.org.apache.iceberg.spark.ScanTaskSetManager.get()
    staged: list[str] = []

    def release() -> None:
        for set_id in staged:
            manager.removeTasks(loaded, set_id)
        staged.clear()

    def read_at(snapshot: int, touched: frozenset[str]) -> tuple[Any, int]:
        """The touched files' rows at `snapshot`, and their record count."""
        tasks = spark.sparkContext._jvm.java.util.ArrayList()
        images = 0
        if not touched:
            return spark.read.table(quoted_name(table)).where("false"), 0
        found = loaded.newScan().useSnapshot(int(snapshot)).planFiles()
        try:
            iterator = found.iterator()
            while iterator.hasNext():
                task = iterator.next()
                data_file = task.file()
                if str(data_file.location()) in touched:
                    tasks.add(task)
                    images += int(data_file.recordCount())
        finally:
            found.close()
        if tasks.isEmpty():  # Iceberg stages no empty set
            return spark.read.table(quoted_name(table)).where("false"), 0
        set_id = f"dbt_ivm_{uuid.uuid4().hex}"
        manager.stageTasks(loaded, set_id, tasks)
        staged.append(set_id)
        return spark.read.format("iceberg").option("scan-task-set-id", set_id).table(
            quoted_name(table)
        ), images

    def weighed(frame: Any, weight: int, seq: int) -> Any:
        return frame.selectExpr(
            *(quote_identifier(c) for c in columns),
            f"CAST({weight} AS INT) AS {quote_identifier(WEIGHT)}",
            f"CAST({seq} AS BIGINT) AS {quote_identifier(SEQ)}",
        )

    images = 0
    try:
        view = weighed(read_at(start, frozenset())[0], 1, 0)  # no rows: compactions only
        for seq, (snapshot, weight, touched) in enumerate(reads):
            frame, read = read_at(snapshot, touched)
            view, images = view.unionAll(weighed(frame, weight, seq)), images + read
        view.createOrReplaceTempView(quote_identifier(view_name))
    except Exception:
        release()
        raise
    return Staged(images, release)


def touched_data_files(spark: Any, loaded: Any, chain: Sequence[int]) -> frozenset[str] | str:
    """The data files whose rows the snapshots `chain` may have changed (see the module docstring),
    or why they cannot be named."""
    io = loaded.io()
    touched: set[str] = set()
    unreferenced: dict[str, list[str]] = {}  # delete files naming no single data file, by format
    for snapshot_id in chain:
        snapshot = loaded.snapshot(int(snapshot_id))
        for data_file in (*snapshot.addedDataFiles(io), *snapshot.removedDataFiles(io)):
            touched.add(str(data_file.location()))
        for delete_file in (*snapshot.addedDeleteFiles(io), *snapshot.removedDeleteFiles(io)):
            if str(delete_file.content().toString()) != "POSITION_DELETES":
                return (
                    f"snapshot {snapshot_id} has equality delete files, which name rows by value "
                    "in any data file"
                )
            referenced = delete_file.referencedDataFile()
            if referenced is not None:
                touched.add(str(referenced))
                continue
            file_format = str(delete_file.format().toString())
            if file_format not in READABLE_DELETE_FORMATS:
                return f"snapshot {snapshot_id} has position delete files in {file_format}"
            unreferenced.setdefault(READABLE_DELETE_FORMATS[file_format], []).append(
                str(delete_file.location())
            )
    for reader, paths in unreferenced.items():
        # A partition-scoped delete file may point at several data files: its file_path column says.
        rows = spark.read.format(reader).load(paths).select("file_path").distinct().collect()
        touched.update(str(row[0]) for row in rows)
    return frozenset(touched)
