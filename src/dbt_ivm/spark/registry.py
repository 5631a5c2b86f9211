"""The catalog schema on Spark (default ``dbt_ivm``): Iceberg tables ``stream_tables`` and ``refresh_history``.

``stream_tables`` holds each stream table's definition (query, fingerprint, layout, sources) and is
written only when a table is created or rebuilt. The frontier is not here: it is a property of the
stream table's own commits (see ``commit``), so data and frontier cannot drift apart.

Rows are written whole from a DataFrame (no hand-escaped literals). The registry uses merge-on-read
deletes and snapshot isolation so refreshes of different stream tables can commit concurrently;
a commit that still conflicts is retried. A refresh reads its registration and AUTO's recent
refreshes from what this process last read of each table, while that table's snapshot is current
(``snapshot_cache``): a dbt run or a PySpark loop reads each table once, not once per refresh.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from dbt_ivm.cost import RECENT, PastRefresh
from dbt_ivm.spark import failures, upkeep
from dbt_ivm.spark.snapshot_cache import SnapshotCache

REGISTRY_PROPERTIES = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
    "'write.merge.mode'='merge-on-read', 'write.merge.isolation-level'='snapshot', "
    "'write.update.isolation-level'='snapshot', 'write.delete.isolation-level'='snapshot', "
    "'commit.retry.num-retries'='10', "
    + ", ".join(f"'{k}'='{v}'" for k, v in upkeep.METADATA_PROPERTIES.items())
)

STREAM_TABLES_COLUMNS = (
    "stream_table string, schema_name string, table_name string, defining_query string, "
    "fingerprint string, refresh_mode string, layout_kind string, differential_ok boolean, "
    "unsupported_reason string, sources array<string>, created_at timestamp, run_settings string"
)

HISTORY_COLUMNS = (
    "refresh_id bigint, stream_table string, action string, rows_inserted bigint, rows_updated bigint, "
    "rows_deleted bigint, changes_read bigint, duration_seconds double, status string, reason string, "
    "error_text string, initiated_by string, started_at timestamp, finished_at timestamp, "
    "invocation_id string, contents_seconds double"
)
# Columns added after the tables were first created, per table, and their types.
ADDED_COLUMNS = {
    "stream_tables": {"run_settings": "string"},
    "refresh_history": {"invocation_id": "string", "contents_seconds": "double"},
}
# Registry tables this process has seen with every column (a table never loses one).
_UPGRADED: set[str] = set()

T = TypeVar("T")


def _bt(name: str) -> str:
    """A Spark (backtick) identifier."""
    return "`" + name.replace("`", "``") + "`"


def table(catalog: str, name: str) -> str:
    return f"{_bt(catalog)}.{_bt(name)}"


def bootstrap(spark: Any, catalog: str) -> None:
    """Create the catalog schema and its tables if missing."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {_bt(catalog)}")
    for name, columns in (("stream_tables", STREAM_TABLES_COLUMNS), ("refresh_history", HISTORY_COLUMNS)):
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {table(catalog, name)} ({columns}) USING iceberg "
            f"TBLPROPERTIES ({REGISTRY_PROPERTIES})"
        )
    for name, added in ADDED_COLUMNS.items():
        relation = table(catalog, name)
        if relation in _UPGRADED:
            continue
        present = set(spark.table(relation).columns)
        missing = [f"{_bt(column)} {kind}" for column, kind in added.items() if column not in present]
        if missing:  # a table an earlier version created
            _retry(lambda: spark.sql(f"ALTER TABLE {relation} ADD COLUMNS ({', '.join(missing)})"))  # noqa: B023
        _UPGRADED.add(relation)  # columns are only ever added: no need to look again in this process


@dataclass
class Registration:
    stream_table: str
    schema_name: str
    table_name: str
    defining_query: str
    fingerprint: str
    refresh_mode: str
    layout_kind: str
    differential_ok: bool
    unsupported_reason: str | None
    sources: list[str]
    created_at: datetime = field(default_factory=datetime.now)
    run_settings: str | None = None  # the model's settings a refresh without dbt needs (run_settings)


# One registry commit at a time per process: dbt's threads share one session, and the embedded Hive
# catalog (no metastore locks) can let one of two concurrent commits to a table silently replace the
# other (a lost registration showed up as a second "first run" REBUILD). A read that must not race
# such a commit (the once-per-run scan of all registrations) takes it too.
COMMIT_LOCK = threading.Lock()


def _retry(action: Callable[[], T], attempts: int = 5) -> T:
    """Run an Iceberg write, retrying commit conflicts with other writers of the registry."""
    for attempt in range(attempts):
        try:
            with COMMIT_LOCK:
                return action()
        except Exception as error:  # py4j wraps the JVM's CommitFailedException / ValidationException
            text = str(error)
            conflict = "CommitFailedException" in text or "ValidationException" in text
            if not conflict or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


# Every registration, and every stream table's recent refreshes, as of the registry tables' current
# snapshots: one Spark job when a table changed, none while it did not (`SnapshotCache`).
_REGISTRATIONS: SnapshotCache[dict[str, Registration]] = SnapshotCache()
_RECENT: SnapshotCache[dict[str, list[PastRefresh]]] = SnapshotCache()
# What a refresh did that AUTO weighs (`recent_refreshes`): a successful refresh that did work.
WEIGHED_ACTIONS = ("DIFFERENTIAL", "FULL", "CREATE", "REBUILD")


def _as_of(relation: str, snapshot_id: int | None) -> str:
    """The registry table `relation` as of a snapshot (None: it has none yet)."""
    return relation if snapshot_id is None else f"{relation} VERSION AS OF {int(snapshot_id)}"


def _registrations(spark: Any, catalog: str) -> dict[str, Registration]:
    """Every registration, by stream table (kept while the table's snapshot stays the same)."""

    def read(snapshot_id: int | None) -> dict[str, Registration]:
        rows = spark.sql(f"SELECT * FROM {_as_of(table(catalog, 'stream_tables'), snapshot_id)}").collect()
        found = {}
        for row in rows:
            values = row.asDict()
            values["sources"] = list(values["sources"] or [])
            found[values["stream_table"]] = Registration(**values)
        return found

    return _REGISTRATIONS.get(spark, (catalog, "stream_tables"), read)


def lookup(spark: Any, catalog: str, stream_table: str) -> Registration | None:
    found = _registrations(spark, catalog).get(stream_table)
    # A copy: the caller may change it (a rebuild keeps the old creation time on a new one).
    return None if found is None else replace(found, sources=list(found.sources))


def readers_of(spark: Any, catalog: str, stream_table: str) -> list[tuple[str, str]]:
    """The stream tables whose query reads `stream_table` (schema, name)."""
    return [
        (found.schema_name, found.table_name)
        for found in _registrations(spark, catalog).values()
        if stream_table in found.sources
    ]


def _one_row(spark: Any, values: dict[str, Any], columns: str) -> Any:
    """A one-row DataFrame of `values` with the table's `columns` ("name type, ..."), built from
    literals in the JVM: no Python worker (createDataFrame's rows go through one), on any cluster."""
    from pyspark.sql import functions as F

    typed = [column.strip().split(" ", 1) for column in columns.split(",")]
    return spark.range(1).select(*[F.lit(values[name]).cast(kind).alias(name) for name, kind in typed])


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def save(spark: Any, catalog: str, registration: Registration, new: bool = False) -> None:
    """Insert or replace one registration (a single Iceberg commit). `new`: the registry held none
    for this stream table when the caller looked, so the row is appended (no join with the table)."""
    relation = table(catalog, "stream_tables")
    frame = _one_row(spark, asdict(registration), STREAM_TABLES_COLUMNS)
    kept = replace(registration, sources=list(registration.sources))

    def remember(found: dict[str, Registration]) -> None:
        found[registration.stream_table] = kept

    if new:

        def append() -> None:
            frame.writeTo(relation).append()
            _REGISTRATIONS.after_commit(spark, (catalog, "stream_tables"), remember)

        _retry(append)
        return
    view = f"__ivm_registration_{abs(hash((registration.stream_table, time.monotonic_ns())))}"
    frame.createOrReplaceTempView(view)

    def merge() -> None:
        spark.sql(
            f"MERGE INTO {relation} AS t USING {_bt(view)} AS r ON t.stream_table = r.stream_table "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        _REGISTRATIONS.after_commit(spark, (catalog, "stream_tables"), remember)

    try:
        _retry(merge)
    finally:
        spark.catalog.dropTempView(view)


def keep_run_settings(spark: Any, catalog: str, stream_table: str, settings: str, refresh_mode: str) -> None:
    """Store the model's run settings (JSON, dbt_ivm.run_settings) and refresh mode with its registration."""
    relation = table(catalog, "stream_tables")
    _retry(
        lambda: spark.sql(
            f"UPDATE {relation} SET run_settings = '{_escape(settings)}', "
            f"refresh_mode = '{_escape(refresh_mode)}' WHERE stream_table = '{_escape(stream_table)}'"
        )
    )


def unregister(spark: Any, catalog: str, stream_table: str) -> None:
    relation = table(catalog, "stream_tables")
    _retry(lambda: spark.sql(f"DELETE FROM {relation} WHERE stream_table = '{_escape(stream_table)}'"))


def record(spark: Any, catalog: str, stream_table: str, values: dict[str, Any], defer: bool = False) -> int:
    """Append one history row; returns its refresh id (microseconds since the epoch: unique enough,
    ordered). `defer`: keep it to append with the next row this process appends to the catalog's
    history, or at the end of the dbt run (`_DEFERRED`)."""
    refresh_id = time.time_ns() // 1000
    now = datetime.now()
    row: dict[str, Any] = {
        "refresh_id": refresh_id,
        "stream_table": stream_table,
        "action": None,
        "rows_inserted": 0,
        "rows_updated": 0,
        "rows_deleted": 0,
        "changes_read": 0,
        "duration_seconds": None,
        "status": None,
        "reason": None,
        "error_text": None,
        "initiated_by": None,
        "invocation_id": None,
        "contents_seconds": None,
        "started_at": now,
        "finished_at": now,
    }
    row.update(values)
    for count in ("rows_inserted", "rows_updated", "rows_deleted", "changes_read"):
        row[count] = int(row[count])
    if row["duration_seconds"] is not None:
        row["duration_seconds"] = float(row["duration_seconds"])
    if defer and _defer(spark, catalog, row):
        return refresh_id

    def kept(recent: dict[str, list[PastRefresh]]) -> None:
        if row["status"] == "OK" and row["duration_seconds"] is not None and row["action"] in WEIGHED_ACTIONS:
            seconds = (
                row["contents_seconds"] if row["contents_seconds"] is not None else row["duration_seconds"]
            )
            past = PastRefresh(row["action"], float(seconds), row["changes_read"])
            recent[stream_table] = [past, *recent.get(stream_table, [])][:RECENT]

    _append(spark, catalog, [row], kept)
    return refresh_id


# History rows of refreshes that found nothing to do (SKIP) in a dbt run, by (Spark application,
# catalog): one Iceberg commit of their own would cost more than the rest of such a refresh, so they
# ride along with the next row this process appends to the catalog's history, and the rest are
# appended when the dbt run ends (`flush_all`, from the adapter's cleanup) or the history is read here.
_DEFERRED: dict[tuple[str, str], list[dict[str, Any]]] = {}
_DEFERRED_LOCK = threading.Lock()
MOST_DEFERRED = 100  # then the next one appends them all: one commit, a plan of bounded size


def _defer(spark: Any, catalog: str, row: dict[str, Any]) -> bool:
    """Keep `row` for a later append; False when enough are waiting that it should append them now."""
    with _DEFERRED_LOCK:
        waiting = _DEFERRED.setdefault((str(spark.sparkContext.applicationId), catalog), [])
        if len(waiting) >= MOST_DEFERRED:
            return False
        waiting.append(row)
    return True


def _taken(spark: Any, catalog: str) -> list[dict[str, Any]]:
    with _DEFERRED_LOCK:
        return _DEFERRED.pop((str(spark.sparkContext.applicationId), catalog), [])


def _append(
    spark: Any,
    catalog: str,
    rows: list[dict[str, Any]],
    kept: Callable[[dict[str, list[PastRefresh]]], None] | None = None,
) -> None:
    """Append `rows` and the catalog's deferred rows in one commit (deferred rows go back if it fails)."""
    deferred = _taken(spark, catalog)
    every = [*deferred, *rows]
    if not every:  # another thread appended them since the caller looked
        return
    frame = _one_row(spark, every[0], HISTORY_COLUMNS)
    for other in every[1:]:
        frame = frame.unionByName(_one_row(spark, other, HISTORY_COLUMNS))

    def append() -> None:
        frame.writeTo(table(catalog, "refresh_history")).append()
        if kept is not None:
            _RECENT.after_commit(spark, (catalog, "refresh_history"), kept)

    try:
        _retry(append)
    except Exception:
        with _DEFERRED_LOCK:
            _DEFERRED.setdefault((str(spark.sparkContext.applicationId), catalog), [])[:0] = deferred
        raise


def flush_deferred(spark: Any, catalog: str) -> None:
    """Append the catalog's deferred history rows now (before reading the history back)."""
    with _DEFERRED_LOCK:
        waiting = bool(_DEFERRED.get((str(spark.sparkContext.applicationId), catalog)))
    if waiting:
        _append(spark, catalog, [])


def flush_all(spark: Any) -> None:
    """Append every catalog's deferred history rows (the end of a dbt run)."""
    application = str(spark.sparkContext.applicationId)
    with _DEFERRED_LOCK:
        catalogs = [catalog for (owner, catalog) in _DEFERRED if owner == application]
    for catalog in catalogs:
        flush_deferred(spark, catalog)


def recent_refreshes(spark: Any, catalog: str, stream_table: str) -> list[PastRefresh]:
    """The stream table's most recent successful refreshes that did work (SKIP aside), newest first:
    AUTO's measured evidence (dbt_ivm.cost), a CREATE or REBUILD by the seconds its contents took."""

    def read(snapshot_id: int | None) -> dict[str, list[PastRefresh]]:
        newest = "row_number() OVER (PARTITION BY stream_table ORDER BY refresh_id DESC)"
        actions = ", ".join(f"'{a}'" for a in WEIGHED_ACTIONS)
        rows = spark.sql(
            f"SELECT stream_table, action, COALESCE(contents_seconds, duration_seconds), changes_read FROM ("
            f"SELECT *, {newest} AS newest FROM {_as_of(table(catalog, 'refresh_history'), snapshot_id)} "
            f"WHERE status = 'OK' AND duration_seconds IS NOT NULL AND action IN ({actions})"
            f") WHERE newest <= {RECENT} ORDER BY stream_table, newest"
        ).collect()
        found: dict[str, list[PastRefresh]] = {}
        for name, action, seconds, changes in rows:
            found.setdefault(name, []).append(PastRefresh(action, float(seconds), int(changes or 0)))
        return found

    return list(_RECENT.get(spark, (catalog, "refresh_history"), read).get(stream_table, []))


def compact(spark: Any, catalog: str) -> list[str]:
    """Compact the catalog tables that outgrew `upkeep.COMPACT_AT_FILES` and expire their old
    snapshots; why a table could not be (each table on its own). Their rows stay the same, so what
    this process read of them stays valid (`SnapshotCache` sees through compactions)."""
    failed = []
    for name in ("stream_tables", "refresh_history"):
        try:
            # Asked outside the lock, which other threads' history appends wait on.
            if upkeep.catalog_upkeep_due(spark, (catalog, name)):
                with COMMIT_LOCK:
                    upkeep.tidy_catalog_table(spark, (catalog, name))
        except Exception as error:
            failed.append(f"{name}: {failures.summary(error)}")
    return failed
