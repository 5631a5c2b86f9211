"""Keeping the Iceberg tables a refresh commits to from growing with every refresh.

Each refresh commits to its stream table and appends one row to ``refresh_history``. Iceberg keeps
every snapshot, every earlier ``metadata.json`` and every small file until someone expires and
compacts them, and each ``metadata.json`` lists every live snapshot. 2,000 history rows appended
without upkeep left 2,000 one-row data files (a cold read of AUTO's recent refreshes went from 0.4 to
5.1 s) and 12,000 metadata files, 1.8 GB on disk (docs/benchmarks.md).

So, after each run (``runner._upkeep``), and never failing it (a failure is a warning; the next run
tries again):

* **the catalog tables** (``stream_tables``, ``refresh_history``: ours alone) are compacted into one
  file once they hold `COMPACT_AT_FILES` data and delete files, and then lose their snapshots older
  than `CATALOG_SNAPSHOT_SECONDS` beyond the newest `CATALOG_SNAPSHOTS_KEPT` (a reader that looked up
  the current snapshot a moment ago still finds it, unless ten commits came in between);
* **the stream table** loses the snapshots its own Iceberg retention properties let go
  (``history.expire.max-snapshot-age-ms``, 5 days unless the model sets it;
  ``history.expire.min-snapshots-to-keep``), but never the one whose stamp holds the frontier
  (`commit.current_stamp`) nor those where stream tables over it start their next batch, and only
  once the oldest is a tenth of that age past it, so expiry is one commit now and then, not one per
  refresh; a table with ``gc.enabled=false`` is left alone, as Iceberg would;
* **all of them** delete each ``metadata.json`` once `METADATA_VERSIONS` newer ones exist
  (`METADATA_PROPERTIES`, set where missing; a model's own value is kept).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from dbt_ivm.spark.commit import stamped_snapshot
from dbt_ivm.spark.iceberg import TableName, count, load_table, quoted_name
from dbt_ivm.spark.jvm import java_class

COMPACT_AT_FILES = 64
CATALOG_SNAPSHOT_SECONDS = 600
CATALOG_SNAPSHOTS_KEPT = 10
METADATA_VERSIONS = 10
METADATA_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(METADATA_VERSIONS),
}
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000  # Iceberg's, for a table that does not set it
# Catalog tables this process has given `METADATA_PROPERTIES` (they are never taken away).
_PROPERTIES_SET: set[str] = set()


def with_metadata_properties(loaded: Any) -> None:
    """Set `METADATA_PROPERTIES` the table does not hold (a table made before they were ours)."""
    held = loaded.properties()
    missing = {k: v for k, v in METADATA_PROPERTIES.items() if held.get(k) is None}
    if missing:
        update = loaded.updateProperties()
        for key, value in missing.items():
            update = update.set(key, value)
        update.commit()


def catalog_upkeep_due(spark: Any, table: TableName) -> bool:
    """Whether a catalog table needs `tidy_catalog_table`: this process has not yet checked its
    metadata properties, or it holds `COMPACT_AT_FILES` data and delete files."""
    if quoted_name(table) not in _PROPERTIES_SET:
        return True
    snapshot = load_table(spark, table).currentSnapshot()
    return snapshot is not None and files(snapshot.summary()) >= COMPACT_AT_FILES


def tidy_catalog_table(spark: Any, table: TableName) -> None:
    """Give a catalog table its metadata properties (once per process), and once it holds
    `COMPACT_AT_FILES` files rewrite it into one (deletes applied) and expire its old snapshots.
    The caller holds the registry's commit lock: each step is a commit."""
    loaded = load_table(spark, table)
    if quoted_name(table) not in _PROPERTIES_SET:
        with_metadata_properties(loaded)
        _PROPERTIES_SET.add(quoted_name(table))
    snapshot = loaded.currentSnapshot()
    if snapshot is None or files(snapshot.summary()) < COMPACT_AT_FILES:
        return
    actions = java_class(spark, "org.apache.iceberg.spark.actions.SparkActions").get(spark._jsparkSession)
    actions.rewriteDataFiles(loaded).option("rewrite-all", "true").execute()
    loaded.refresh()
    if count(loaded.currentSnapshot().summary().get("total-delete-files")):
        # The position deletes now name rows of files the rewrite replaced: this drops them.
        actions.rewritePositionDeletes(loaded).option("rewrite-all", "true").execute()
        loaded.refresh()
    cutoff = _now_ms() - CATALOG_SNAPSHOT_SECONDS * 1000
    loaded.expireSnapshots().expireOlderThan(cutoff).retainLast(CATALOG_SNAPSHOTS_KEPT).commit()


def expire_stream_table(
    spark: Any, table: TableName, still_read: Callable[[], Iterable[int]] = tuple
) -> None:
    """Expire the stream table's snapshots its retention properties let go, keeping the stamped one,
    those `still_read` names (where stream tables over it start their next batch: asked only when
    expiry is due) and everything after them; set its metadata properties where missing (a table
    made before they were ours). The caller holds the table's refresh lock: each is a commit."""
    loaded = load_table(spark, table)
    with_metadata_properties(loaded)
    properties = loaded.properties()
    if str(properties.get("gc.enabled", "true")).lower() == "false":
        return  # Iceberg refuses to expire such a table: its files may be shared
    max_age = count(properties.get(MAX_SNAPSHOT_AGE_PROPERTY)) or DEFAULT_MAX_SNAPSHOT_AGE_MS
    stamped = stamped_snapshot(loaded)
    history = loaded.history()
    if stamped is None or history.isEmpty():
        return
    # Never past the stamped snapshot: the frontier lives on it (a compaction after it has none).
    cutoff = min(_now_ms() - max_age, int(stamped.timestampMillis()))
    oldest = int(history.get(0).timestampMillis())
    if oldest >= cutoff - max_age // 10:
        return
    for snapshot_id in still_read():
        start = loaded.snapshot(snapshot_id)
        if start is not None:
            cutoff = min(cutoff, int(start.timestampMillis()))
    if oldest >= cutoff:
        return
    # How many to keep whatever their age: the table's history.expire.min-snapshots-to-keep.
    loaded.expireSnapshots().expireOlderThan(cutoff).commit()


def files(summary: Any) -> int:
    """Live data and delete files, from a snapshot's summary."""
    return count(summary.get("total-data-files")) + count(summary.get("total-delete-files"))


def _now_ms() -> int:
    return int(time.time() * 1000)
