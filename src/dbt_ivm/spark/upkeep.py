"""Keeping the Iceberg tables a refresh commits to from growing with every refresh.

Each refresh commits to its stream table and appends one row to ``refresh_history``. Iceberg keeps
every snapshot, every earlier ``metadata.json`` and every small file until someone expires and
compacts them, and each ``metadata.json`` lists every live snapshot. Following the history table
through 2,000 refreshes without upkeep: 2,000 one-row data files (a cold read of AUTO's recent
refreshes went from 0.4 to 5.1 s) and 12,000 metadata files, 1.8 GB on disk.

So, after each run (`after_run`), and never failing it (a failure is a warning; the next run tries
again):

* **the catalog tables** (``stream_tables``, ``refresh_history``: ours alone) are compacted into one
  file once they hold `COMPACT_AT_FILES` data and delete files, and then lose their snapshots older
  than `CATALOG_SNAPSHOT_SECONDS` beyond the newest `CATALOG_SNAPSHOTS_KEPT` (a reader that looked up
  the current snapshot a moment ago still finds it);
* **the stream table** loses the snapshots its own Iceberg retention properties let go
  (``history.expire.max-snapshot-age-ms``, 5 days unless the model sets it;
  ``history.expire.min-snapshots-to-keep``), but never the one whose stamp holds the frontier
  (`commit.current_stamp`), and only once the oldest is a tenth of that age past it, so expiry is
  one commit now and then, not one per refresh;
* **all of them** delete each ``metadata.json`` once `METADATA_VERSIONS` newer ones exist
  (`METADATA_PROPERTIES`, set where missing; a model's own value is kept).
"""

from __future__ import annotations

import time
from typing import Any

from dbt_ivm.spark.commit import stamped_snapshot
from dbt_ivm.spark.iceberg import TableName, load_table

COMPACT_AT_FILES = 64
CATALOG_SNAPSHOT_SECONDS = 600
CATALOG_SNAPSHOTS_KEPT = 10
METADATA_VERSIONS = 10
METADATA_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(METADATA_VERSIONS),
}
# Iceberg's own defaults for a table that does not set them (TableProperties).
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_PROPERTY = "history.expire.min-snapshots-to-keep"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS = 1


def with_metadata_properties(loaded: Any) -> None:
    """Set `METADATA_PROPERTIES` the table does not hold (a table made before they were ours)."""
    held = loaded.properties()
    missing = {k: v for k, v in METADATA_PROPERTIES.items() if held.get(k) is None}
    if missing:
        update = loaded.updateProperties()
        for key, value in missing.items():
            update = update.set(key, value)
        update.commit()


def compact_catalog_table(spark: Any, table: TableName) -> bool:
    """Rewrite a catalog table into one file (deletes applied) once it holds `COMPACT_AT_FILES`
    files, then expire its old snapshots. The caller holds the registry's commit lock. Whether it
    compacted."""
    loaded = load_table(spark, table)
    with_metadata_properties(loaded)
    snapshot = loaded.currentSnapshot()
    if snapshot is None or _files(snapshot.summary()) < COMPACT_AT_FILES:
        return False
    actions = spark.sparkContext._jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    actions.rewriteDataFiles(loaded).option("rewrite-all", "true").execute()
    loaded.refresh()
    if _int(loaded.currentSnapshot().summary().get("total-delete-files"), 0):
        # The position deletes now name rows of files the rewrite replaced: this drops them.
        actions.rewritePositionDeletes(loaded).option("rewrite-all", "true").execute()
        loaded.refresh()
    cutoff = _now_ms() - CATALOG_SNAPSHOT_SECONDS * 1000
    loaded.expireSnapshots().expireOlderThan(cutoff).retainLast(CATALOG_SNAPSHOTS_KEPT).commit()
    return True


def expire_stream_table(spark: Any, table: TableName) -> int:
    """Expire the stream table's snapshots its retention properties let go, keeping the stamped one
    and everything after it. How many snapshots went (0: none was due)."""
    loaded = load_table(spark, table)
    with_metadata_properties(loaded)
    properties = loaded.properties()
    max_age = _int(properties.get(MAX_SNAPSHOT_AGE_PROPERTY), DEFAULT_MAX_SNAPSHOT_AGE_MS)
    keep = _int(properties.get(MIN_SNAPSHOTS_PROPERTY), DEFAULT_MIN_SNAPSHOTS)
    stamped = stamped_snapshot(loaded)
    history = loaded.history()
    if stamped is None or history.isEmpty():
        return 0
    # Never past the stamped snapshot: the frontier lives on it (a compaction after it has none).
    cutoff = min(_now_ms() - max_age, int(stamped.timestampMillis()))
    if int(history.get(0).timestampMillis()) >= cutoff - max_age // 10:
        return 0
    before = history.size()
    loaded.expireSnapshots().expireOlderThan(cutoff).retainLast(max(keep, 1)).commit()
    loaded.refresh()
    return int(before - loaded.history().size())


def _files(summary: Any) -> int:
    return sum(_int(summary.get(k), 0) for k in ("total-data-files", "total-delete-files"))


def _int(value: Any, default: int) -> int:
    try:
        return default if value is None else int(str(value))
    except ValueError:
        return default


def _now_ms() -> int:
    return int(time.time() * 1000)
