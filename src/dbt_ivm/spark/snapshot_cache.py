"""What this process read from a small Iceberg table, kept while the table's snapshot stays the same.

The registry and the refresh history are read on every refresh (which query, how recent refreshes
went), each read a Spark job of its own. An Iceberg table's current snapshot id is one metadata
lookup (no job) and changes with every commit, so a value read from the table as of a snapshot holds
for as long as that snapshot is current: the next read with the same snapshot returns the value kept.
Any commit, from this process or another, moves the snapshot and the value is read again, unless it
only rewrote files (a compaction: Iceberg's ``replace`` snapshot, the same rows).

A commit this process makes itself (a history row appended) need not cost the next read: when it is
the only commit since the value was read (its parent is that snapshot), `after_commit` changes the
kept value the same way and keeps it for the new snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dbt_ivm.spark.iceberg import REPLACE, TableName, load_table, quoted_name

T = TypeVar("T")


@dataclass
class _Kept(Generic[T]):
    snapshot_id: int | None
    value: T


class SnapshotCache(Generic[T]):
    """One value per table (and Spark application), valid at one snapshot of it."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], _Kept[T]] = {}
        self._lock = threading.Lock()

    def get(self, spark: Any, table: TableName, read: Callable[[int | None], T]) -> T:
        """The value for `table`'s current snapshot: kept, or `read(snapshot_id)` (which must read the
        table as of that snapshot; None: the table has none yet, it is empty)."""
        key = _key(spark, table)
        loaded = load_table(spark, table)
        snapshot = loaded.currentSnapshot()
        snapshot_id = None if snapshot is None else int(snapshot.snapshotId())
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and (
            kept.snapshot_id == snapshot_id or _rewritten_since(loaded, kept.snapshot_id)
        ):
            with self._lock:
                self._kept[key] = _Kept(snapshot_id, kept.value)
            return kept.value
        value = read(snapshot_id)
        with self._lock:
            self._kept[key] = _Kept(snapshot_id, value)
        return value

    def after_commit(self, spark: Any, table: TableName, change: Callable[[T], None]) -> None:
        """This process just committed to `table` (under a lock that keeps its other commits out):
        `change` the kept value the same way if no other commit came between, else forget it."""
        key = _key(spark, table)
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is None:
            return
        try:
            snapshot = load_table(spark, table).currentSnapshot()
        except Exception:  # the commit is made: a failed lookup must not fail (or repeat) it
            return
        with self._lock:
            if snapshot is None:
                return
            parent = snapshot.parentId()
            if parent is None or int(parent) != kept.snapshot_id:
                return
            change(kept.value)
            self._kept[key] = _Kept(int(snapshot.snapshotId()), kept.value)

    def forget(self) -> None:
        with self._lock:
            self._kept.clear()


def _rewritten_since(loaded: Any, snapshot_id: int | None, most: int = 8) -> bool:
    """Whether every commit since `snapshot_id` only rewrote files (a compaction: the same rows)."""
    snapshot = loaded.currentSnapshot()
    for _ in range(most):
        if snapshot is None or snapshot_id is None or snapshot.operation() != REPLACE:
            return False
        parent = snapshot.parentId()
        if parent is None:
            return False
        if int(parent) == snapshot_id:
            return True
        snapshot = loaded.snapshot(parent)
    return False


def _key(spark: Any, table: TableName) -> tuple[str, str]:
    return (str(spark.sparkContext.applicationId), quoted_name(table))
