"""The Iceberg tables a refresh commits to do not grow with every refresh, and upkeep never costs a
refresh its correctness or its frontier (spark/upkeep.py).

Upkeep's thresholds are lowered here (a handful of refreshes instead of 64 files or ten minutes),
so the tests see what a long-running schedule would. Every refresh is checked against its query.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dbt_ivm.spark import registry, upkeep
from dbt_ivm.spark.iceberg import load_table
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import make_spec, refresh_and_check

pytestmark = pytest.mark.spark

RUNS = 8


@pytest.fixture
def quick_upkeep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upkeep, "COMPACT_AT_FILES", 4)
    monkeypatch.setattr(upkeep, "CATALOG_SNAPSHOT_SECONDS", 0)
    monkeypatch.setattr(upkeep, "CATALOG_SNAPSHOTS_KEPT", 2)


def _orders(spark: Any, schema: str, properties: str = "") -> str:
    table = f"{schema}.orders"
    spark.sql(
        f"CREATE TABLE {table} (id int NOT NULL, customer int, amount int) USING iceberg "
        f"TBLPROPERTIES ('dbt_ivm.primary_key'='id'{properties})"
    )
    spark.sql(f"INSERT INTO {table} SELECT id, id % 7, id FROM range(100) AS r(id)")
    return table


def _write(spark: Any, table: str, run: int) -> None:
    spark.sql(f"UPDATE {table} SET amount = amount + 1 WHERE id % 10 = {run % 10}")
    spark.sql(f"INSERT INTO {table} VALUES ({1000 + run}, {run % 7}, {run})")


def _metadata_files(spark: Any, table: tuple[str, str]) -> list[str]:
    location = str(load_table(spark, table).location()).removeprefix("file:")
    return os.listdir(Path(location) / "metadata")


def _summary(spark: Any, table: tuple[str, str]) -> dict[str, str]:
    return dict(load_table(spark, table).currentSnapshot().summary())


def test_catalog_tables_stay_small(spark: Any, spark_schema: str, quick_upkeep: None) -> None:
    s = spark_schema
    orders = _orders(spark, s)
    sql = f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {orders} GROUP BY customer"
    refresh_and_check(spark, s, "totals", sql, "create", refresh_mode="differential")
    for run in range(RUNS):
        _write(spark, orders, run)
        result = refresh_and_check(spark, s, "totals", sql, f"run {run}", refresh_mode="differential")
        assert result.action == "DIFFERENTIAL", result.summary()
        assert not result.warnings, result.warnings
    history = (f"{s}_ivm", "refresh_history")
    summary = _summary(spark, history)
    # Compacted at 4 files: at most 3 appended since.
    assert int(summary["total-data-files"]) < upkeep.COMPACT_AT_FILES, summary
    assert len(list(load_table(spark, history).snapshots())) <= upkeep.COMPACT_AT_FILES + 2
    # Each table keeps its newest metadata.json files only.
    versions = [f for f in _metadata_files(spark, history) if f.endswith(".metadata.json")]
    assert len(versions) <= upkeep.METADATA_VERSIONS + 1, versions
    # No history row lost: the create and every refresh, in order.
    rows = spark.sql(f"SELECT action FROM {s}_ivm.refresh_history ORDER BY refresh_id").collect()
    assert [r.action for r in rows] == ["CREATE"] + ["DIFFERENTIAL"] * RUNS
    # What this process kept of the history is what a fresh read finds.
    kept = registry.recent_refreshes(spark, f"{s}_ivm", f"{s}.totals")
    registry._RECENT.forget()
    assert registry.recent_refreshes(spark, f"{s}_ivm", f"{s}.totals") == kept


def test_what_was_read_survives_a_compaction(spark: Any, spark_schema: str) -> None:
    """A compaction of a catalog table (ours, or anyone's) changes no row: what this process read
    of it is answered again without a Spark job."""
    s = spark_schema
    orders = _orders(spark, s)
    refresh_and_check(spark, s, "big", f"SELECT id, amount FROM {orders} WHERE amount > 50", "create")
    kept = registry.recent_refreshes(spark, f"{s}_ivm", f"{s}.big")
    for _ in range(2):  # two files, then one
        registry.record(spark, f"{s}_ivm", f"{s}.other", {"action": "SKIP", "status": "OK"})
    spark.sql(
        f"CALL spark_catalog.system.rewrite_data_files(table => '{s}_ivm.refresh_history', "
        "options => map('rewrite-all', 'true'))"
    )
    context = spark.sparkContext
    context.setJobGroup("after-compaction", "recent refreshes")
    try:
        assert registry.recent_refreshes(spark, f"{s}_ivm", f"{s}.big") == kept
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    assert list(context.statusTracker().getJobIdsForGroup("after-compaction")) == []


def test_registry_with_deletes_is_compacted(spark: Any, spark_schema: str, quick_upkeep: None) -> None:
    """Re-registering (a changed query) deletes and inserts registry rows: merge-on-read delete files,
    which compaction applies and then drops."""
    s = spark_schema
    orders = _orders(spark, s)
    for run in range(RUNS // 2):
        threshold = run * 10
        sql = f"SELECT id, amount FROM {orders} WHERE amount >= {threshold}"
        result = refresh_and_check(spark, s, "big", sql, f"query {run}")
        assert result.action in ("CREATE", "REBUILD"), result.summary()
    registrations = (f"{s}_ivm", "stream_tables")
    summary = _summary(spark, registrations)
    assert int(summary.get("total-data-files", 0)) + int(summary.get("total-delete-files", 0)) < 4, summary
    registry._REGISTRATIONS.forget()
    found = registry.lookup(spark, f"{s}_ivm", f"{s}.big")
    assert found is not None and f">= {(RUNS // 2 - 1) * 10}" in found.defining_query


def test_stream_table_snapshots_expire_but_not_the_frontier(spark: Any, spark_schema: str) -> None:
    """With the model's `history.expire.max-snapshot-age-ms` at 1 ms every earlier snapshot may go,
    but never the stamped one, even when a compaction of the stream table came after it."""
    s = spark_schema
    orders = _orders(spark, s)
    sql = f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {orders} GROUP BY customer"
    retention = {"history.expire.max-snapshot-age-ms": "1"}
    refresh_and_check(
        spark, s, "totals", sql, "create", table_properties=retention, refresh_mode="differential"
    )
    stream_table = (s, "totals")
    for run in range(4):
        _write(spark, orders, run)
        result = refresh_and_check(
            spark, s, "totals", sql, f"run {run}", table_properties=retention, refresh_mode="differential"
        )
        assert result.action == "DIFFERENTIAL" and not result.warnings, result.summary()
        assert len(list(load_table(spark, stream_table).snapshots())) <= 2
    # A compaction of the stream table carries no stamp: its parent must survive the next expiry.
    spark.sql(
        f"CALL spark_catalog.system.rewrite_data_files(table => '{s}.totals', options => map('rewrite-all', 'true'))"
    )
    quiet = refresh_and_check(
        spark, s, "totals", sql, "nothing changed", table_properties=retention, refresh_mode="differential"
    )
    assert quiet.action == "SKIP", quiet.summary()  # its upkeep saw the compaction as newest
    for run in range(4, 7):
        _write(spark, orders, run)
        result = refresh_and_check(
            spark,
            s,
            "totals",
            sql,
            f"after compaction {run}",
            table_properties=retention,
            refresh_mode="differential",
        )
        assert result.action == "DIFFERENTIAL" and not result.warnings, result.summary()
    properties = dict(load_table(spark, stream_table).properties())
    assert properties["write.metadata.delete-after-commit.enabled"] == "true"


def test_a_stream_table_read_by_another_keeps_its_start(spark: Any, spark_schema: str) -> None:
    """`totals` expires every snapshot it may, but not the one `rich` (a stream table over it, not
    refreshed meanwhile) starts its next batch from: that refresh stays differential."""
    s = spark_schema
    orders = _orders(spark, s)
    totals = f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {orders} GROUP BY customer"
    rich = f"SELECT customer, total FROM {s}.totals WHERE total > 800"
    retention = {"history.expire.max-snapshot-age-ms": "1"}
    refresh_and_check(
        spark, s, "totals", totals, "create", table_properties=retention, refresh_mode="differential"
    )
    refresh_and_check(spark, s, "rich", rich, "create", refresh_mode="differential")
    for run in range(4):
        _write(spark, orders, run)
        result = refresh_and_check(
            spark, s, "totals", totals, f"run {run}", table_properties=retention, refresh_mode="differential"
        )
        assert result.action == "DIFFERENTIAL" and not result.warnings, result.summary()
    assert len(list(load_table(spark, (s, "totals")).snapshots())) == 5  # rich's start and after
    result = refresh_and_check(spark, s, "rich", rich, "downstream", refresh_mode="differential")
    assert result.action in ("DIFFERENTIAL", "SKIP"), result.summary()
    # rich moved on: the next run of totals lets the older snapshots go.
    _write(spark, orders, 4)
    refresh_and_check(
        spark, s, "totals", totals, "after rich", table_properties=retention, refresh_mode="differential"
    )
    assert len(list(load_table(spark, (s, "totals")).snapshots())) <= 2


def test_default_retention_keeps_recent_snapshots(spark: Any, spark_schema: str) -> None:
    """Without retention properties (Iceberg's 5 days) recent refreshes keep every snapshot: time
    travel on the stream table works as Iceberg's defaults promise (the 1 ms tests above show the
    same runs do expire when the age allows)."""
    s = spark_schema
    orders = _orders(spark, s)
    sql = f"SELECT id, amount FROM {orders} WHERE amount > 50"
    refresh_and_check(spark, s, "big", sql, "create")
    for run in range(3):
        _write(spark, orders, run)
        refresh_and_check(spark, s, "big", sql, f"run {run}")
    assert len(list(load_table(spark, (s, "big")).snapshots())) == 4


def test_gc_disabled_stream_table_is_left_alone(spark: Any, spark_schema: str) -> None:
    """`gc.enabled=false` (files shared with another table): Iceberg refuses to expire, so upkeep
    does not try, and says nothing."""
    s = spark_schema
    orders = _orders(spark, s)
    sql = f"SELECT id, amount FROM {orders} WHERE amount > 50"
    properties = {"history.expire.max-snapshot-age-ms": "1", "gc.enabled": "false"}
    refresh_and_check(spark, s, "big", sql, "create", table_properties=properties)
    for run in range(3):
        _write(spark, orders, run)
        result = refresh_and_check(spark, s, "big", sql, f"run {run}", table_properties=properties)
        assert not result.warnings, result.warnings
    assert len(list(load_table(spark, (s, "big")).snapshots())) == 4


def test_catalog_tables_of_an_earlier_version_get_the_properties(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(f"CREATE DATABASE {s}_ivm")
    for name, columns in (
        ("stream_tables", registry.STREAM_TABLES_COLUMNS),
        ("refresh_history", registry.HISTORY_COLUMNS),
    ):
        spark.sql(
            f"CREATE TABLE {s}_ivm.{name} ({columns}) USING iceberg TBLPROPERTIES ('format-version'='2')"
        )
    orders = _orders(spark, s)
    refresh_and_check(spark, s, "big", f"SELECT id, amount FROM {orders} WHERE amount > 50", "create")
    for name in ("stream_tables", "refresh_history"):
        held = dict(load_table(spark, (f"{s}_ivm", name)).properties())
        assert {k: held.get(k) for k in upkeep.METADATA_PROPERTIES} == upkeep.METADATA_PROPERTIES, name


def test_failed_upkeep_is_a_warning(spark: Any, spark_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step fails on its own: the run is still the refresh it was, with a warning per failure
    (an error without a message named by its type)."""
    s = spark_schema
    orders = _orders(spark, s)
    sql = f"SELECT customer, COUNT(*) AS n FROM {orders} GROUP BY customer"
    refresh_and_check(spark, s, "counts", sql, "create", refresh_mode="differential")

    def no_catalog(spark: Any, table: Any) -> bool:
        raise RuntimeError()

    def no_expiry(spark: Any, table: Any, still_read: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(upkeep, "catalog_upkeep_due", no_catalog)
    monkeypatch.setattr(upkeep, "expire_stream_table", no_expiry)
    _write(spark, orders, 1)
    result = run_stream_table(spark, make_spec(s, "counts", sql, refresh_mode="differential"))
    assert result.action == "DIFFERENTIAL", result.summary()
    assert sorted(result.warnings) == [
        "model counts: upkeep failed, the next run tries again: its snapshots: disk full",
        "model counts: upkeep failed, the next run tries again: refresh_history: RuntimeError",
        "model counts: upkeep failed, the next run tries again: stream_tables: RuntimeError",
    ]
