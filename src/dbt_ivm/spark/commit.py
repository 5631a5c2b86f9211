"""A stream table's frontier travels inside its own Iceberg commits.

Every commit dbt-ivm makes to a stream table (the CREATE TABLE … AS, each MERGE, an empty append
when a batch changes no row) carries these snapshot-summary properties:

* ``dbt-ivm.frontier`` — JSON map source → snapshot id: the source states the table now reflects;
* ``dbt-ivm.fingerprint`` — which defining query produced it;
* ``dbt-ivm.views`` — a hash of the bodies of the views that query reads (empty: none), so a view
  redefined under the same name is noticed;
* ``dbt-ivm.columns`` — the Iceberg field id of each source column the query reads, so a column
  dropped and added again, or renamed, without a write since is noticed (``field_ids``);
* ``dbt-ivm.zone`` — the session time zone its values follow ("" when it reads and shows no date
  or timestamp), so a run in another time zone recomputes them.

So the data and its frontier move in one atomic commit: a refresh killed before the commit left
the old snapshot (and frontier) current, one killed after it left the new one. Nothing to recover,
no batch applied twice. A current snapshot *without* the properties was written by someone else
(DML by hand, a restore): its frontier is unknown and the next refresh is FULL — unless it only
compacted the table, which leaves the rows and so the frontier as they were.

Spark SQL has no syntax for snapshot properties on MERGE; Iceberg's ``CommitMetadata`` sets them
for every commit the calling JVM thread makes inside a callback. PySpark's pinned-thread mode (its
default) runs our Python callback's SQL on that same JVM thread; `commit_with` checks the result, so
a session that does not pin threads gets an error rather than a silently missing frontier.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dbt_ivm.errors import IvmError
from dbt_ivm.spark.iceberg import REPLACE, TableName, load_table
from dbt_ivm.spark.jvm import java_class

FRONTIER_PROPERTY = "dbt-ivm.frontier"
FINGERPRINT_PROPERTY = "dbt-ivm.fingerprint"
VIEWS_PROPERTY = "dbt-ivm.views"
COLUMNS_PROPERTY = "dbt-ivm.columns"
ZONE_PROPERTY = "dbt-ivm.zone"

# Why a stream table is recomputed, as the runner and `dbt-ivm status` say it.
UNSTAMPED = (
    "the stream table's current snapshot carries no dbt-ivm frontier (it was written outside dbt-ivm, "
    "or restored)"
)
INTERRUPTED_REBUILD = "the stream table was built from another definition (an interrupted rebuild)"


@dataclass(frozen=True)
class Stamp:
    """What a stream-table commit records: the frontier and the query it belongs to."""

    frontier: dict[str, int]
    fingerprint: str
    views: str = ""
    columns: str = ""  # empty: stamped before dbt-ivm recorded field ids
    zone: str | None = None  # None: stamped before dbt-ivm recorded the time zone

    def properties(self) -> dict[str, str]:
        return {
            FRONTIER_PROPERTY: json.dumps(self.frontier, sort_keys=True),
            FINGERPRINT_PROPERTY: self.fingerprint,
            VIEWS_PROPERTY: self.views,
            COLUMNS_PROPERTY: self.columns,
            **({} if self.zone is None else {ZONE_PROPERTY: self.zone}),
        }


def current_stamp(spark: Any, table: TableName) -> tuple[int | None, Stamp | None]:
    """The table's current snapshot id and the stamp its rows carry (None: not written by dbt-ivm).

    A compaction of the stream table (``rewrite_data_files``, ``rewrite_position_delete_files``,
    ``rewrite_manifests``: a ``replace`` snapshot, the same rows in other files) carries no stamp;
    the rows are still those of the snapshot it replaced, so that snapshot's stamp holds."""
    loaded = load_table(spark, table)
    current = loaded.currentSnapshot()
    if current is None:
        return None, None
    stamped = stamped_snapshot(loaded)
    return int(current.snapshotId()), None if stamped is None else _stamp_of(stamped.summary())


def stamped_snapshot(loaded: Any) -> Any | None:
    """The snapshot (Iceberg's Java object) whose stamp the loaded table's rows carry: the current
    one, or the one a chain of compactions replaced. None: the rows were written by someone else,
    or the stamped snapshot expired."""
    snapshot = loaded.currentSnapshot()
    while snapshot is not None:
        if _stamp_of(snapshot.summary()) is not None:
            return snapshot
        if snapshot.operation() != REPLACE or snapshot.parentId() is None:
            return None
        snapshot = loaded.snapshot(snapshot.parentId())
    return None


def _stamp_of(summary: Any) -> Stamp | None:
    frontier, fingerprint = summary.get(FRONTIER_PROPERTY), summary.get(FINGERPRINT_PROPERTY)
    if frontier is None or fingerprint is None:
        return None
    views, columns, zone = (summary.get(p) for p in (VIEWS_PROPERTY, COLUMNS_PROPERTY, ZONE_PROPERTY))
    return Stamp(
        {str(k): int(v) for k, v in json.loads(str(frontier)).items()},
        str(fingerprint),
        "" if views is None else str(views),
        "" if columns is None else str(columns),
        None if zone is None else str(zone),
    )


class _Callback:
    """A java.util.concurrent.Callable that runs a Python action and keeps its exception."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.action()
        except BaseException as error:  # re-raised in Python with its own message and type
            self.error = error
            raise

    class Java:
        implements = ["java.util.concurrent.Callable"]


def commit_with(spark: Any, table: TableName, stamp: Stamp, action: Callable[[], None]) -> int:
    """Run `action` (Spark SQL committing to `table`) so its commit carries `stamp`; returns the
    new snapshot id. Raises IvmError when the commit went through without the stamp."""
    from pyspark.java_gateway import ensure_callback_server_started

    context = spark.sparkContext
    ensure_callback_server_started(context._gateway)  # type: ignore[no-untyped-call]
    properties = java_class(spark, "java.util.HashMap")()
    for key, value in stamp.properties().items():
        properties.put(key, value)
    callback = _Callback(action)
    try:
        java_class(spark, "org.apache.iceberg.spark.CommitMetadata").withCommitProperties(
            properties, callback, java_class(spark, "java.lang.RuntimeException")().getClass()
        )
    except Exception:
        if callback.error is not None:
            raise callback.error from None
        raise
    snapshot_id, stored = current_stamp(spark, table)
    if stored != stamp or snapshot_id is None:
        raise IvmError(
            f"the commit to {table} did not record dbt-ivm's frontier (PySpark must run with pinned "
            "threads, its default: unset PYSPARK_PIN_THREAD); the next refresh will be FULL"
        )
    return snapshot_id


def stamp_without_data(spark: Any, table: TableName, stamp: Stamp) -> None:
    """Move the frontier when a batch changes no row: an empty append carrying only the stamp."""
    append = load_table(spark, table).newAppend()
    for key, value in stamp.properties().items():
        append = append.set(key, value)
    append.commit()
