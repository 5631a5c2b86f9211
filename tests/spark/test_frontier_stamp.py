"""The frontier lives in the stream table's own commits: what happens when that record is missing,
belongs to another query, or must move without any row changing; and AUTO's read-cost fallback."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dbt_ivm.lifecycle import fingerprint
from dbt_ivm.spark import registry, source_changes
from dbt_ivm.spark.commit import current_stamp
from dbt_ivm.spark.iceberg import current_snapshot_id
from tests.spark.oracle import make_spec, refresh_and_check

pytestmark = pytest.mark.spark


def _orders(spark: Any, s: str) -> None:
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10),(2,'a',20),(3,'b',30)")


TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY customer"


def test_every_commit_carries_the_sources_snapshots(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    _orders(spark, s)
    refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "create")
    _, stamp = current_stamp(spark, (s, "totals"))
    assert stamp is not None
    assert stamp.frontier == {f"{s}.orders": current_snapshot_id(spark, (s, "orders"))}
    spark.sql(f"UPDATE {s}.orders SET amount = 11 WHERE id = 1")
    result = refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "update", full_refresh_threshold=100.0)
    assert result.action == "DIFFERENTIAL", result.summary()
    _, stamp = current_stamp(spark, (s, "totals"))
    assert stamp is not None
    assert stamp.frontier == {f"{s}.orders": current_snapshot_id(spark, (s, "orders"))}


def test_dml_on_the_stream_table_makes_the_next_refresh_full(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    _orders(spark, s)
    # DIFFERENTIAL, not AUTO: on a slow machine AUTO may rightly pick FULL for a table of 3 rows.
    mode = {"refresh_mode": "differential"}
    refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "create", **mode)
    # A stream table reads this one: FULL stays a diff against the stored rows (test_full_rewrite.py
    # has the overwrite, which replaces rows written by hand without looking at them).
    refresh_and_check(spark, s, "reader", f"SELECT customer, total FROM {s}.totals", "create", **mode)
    spark.sql(f"DELETE FROM {s}.totals WHERE customer = 'a'")  # by hand: no stamp on this commit
    spark.sql(f"INSERT INTO {s}.orders VALUES (4,'c',40)")
    result = refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "after DML by hand", **mode)
    assert result.action == "FULL", result.summary()
    assert result.reason is not None and "written outside dbt-ivm" in result.reason
    spark.sql(f"INSERT INTO {s}.orders VALUES (5,'c',50)")
    again = refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "stamped again", **mode)
    assert again.action == "DIFFERENTIAL", again.summary()
    # Copies by hand: the FULL refresh's MERGE failed on every run (MERGE_CARDINALITY_VIOLATION).
    spark.sql(f"INSERT INTO {s}.totals SELECT * FROM {s}.totals")
    spark.sql(f"INSERT INTO {s}.orders VALUES (6,'c',60)")
    rebuilt = refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "after copies by hand", **mode)
    assert rebuilt.action == "REBUILD" and "written outside dbt-ivm" in str(rebuilt.reason), rebuilt.summary()
    spark.sql(f"INSERT INTO {s}.orders VALUES (7,'a',70)")
    after = refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "after the rebuild", **mode)
    assert after.action == "DIFFERENTIAL", after.summary()


def test_a_table_stamped_by_another_query_is_rebuilt(spark: Any, spark_schema: str) -> None:
    """A rebuild that died after registering the new query but before re-creating the table."""
    s = spark_schema
    _orders(spark, s)
    old = TOTALS.format(s=s)
    new = f"SELECT customer, MAX(amount) AS top FROM {s}.orders GROUP BY customer"
    refresh_and_check(spark, s, "totals", old, "create")
    spec = make_spec(s, "totals", new)
    registered = registry.lookup(spark, spec.catalog_schema, f"{s}.totals")
    assert registered is not None
    registered.defining_query = new
    registered.fingerprint = fingerprint(new)
    registry.save(spark, spec.catalog_schema, registered)
    result = refresh_and_check(spark, s, "totals", new, "after the interrupted rebuild")
    assert result.action == "REBUILD", result.summary()
    assert result.reason is not None and "another definition" in result.reason


def test_a_batch_that_changes_no_row_still_moves_the_frontier(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    _orders(spark, s)
    big = f"SELECT id, amount FROM {s}.orders WHERE amount > 100"
    refresh_and_check(spark, s, "big", big, "create")
    spark.sql(f"INSERT INTO {s}.orders VALUES (9,'z',5)")
    result = refresh_and_check(spark, s, "big", big, "filtered out")
    assert result.action == "DIFFERENTIAL" and result.rows_changed == 0, result.summary()
    _, stamp = current_stamp(spark, (s, "big"))
    assert stamp is not None
    assert stamp.frontier[f"{s}.orders"] == current_snapshot_id(spark, (s, "orders"))
    skipped = refresh_and_check(spark, s, "big", big, "nothing new")
    assert skipped.action == "SKIP", skipped.summary()


def test_auto_recomputes_when_the_changelog_outweighs_the_table(
    spark: Any, spark_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy-on-write UPDATE of one row rewrites its whole file: the changelog holds every row twice."""
    monkeypatch.setattr(source_changes, "MIN_IMAGES_WORTH_WEIGHING", 10)  # the rule, at test size
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.items (id int, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.items SELECT CAST(id AS INT), CAST(id AS INT) FROM range(0, 20, 1, 1)")
    sql = f"SELECT SUM(amount) AS total, COUNT(*) AS n FROM {s}.items"
    refresh_and_check(spark, s, "auto_total", sql, "create")
    refresh_and_check(spark, s, "diff_total", sql, "create", refresh_mode="differential")
    spark.sql(f"UPDATE {s}.items SET amount = 100 WHERE id = 3")
    auto = refresh_and_check(spark, s, "auto_total", sql, "auto")
    assert auto.action == "FULL", auto.summary()
    assert auto.reason is not None and "40 row images" in auto.reason and "20 rows" in auto.reason
    forced = refresh_and_check(spark, s, "diff_total", sql, "differential", refresh_mode="differential")
    assert forced.action == "DIFFERENTIAL", forced.summary()


def test_iceberg_metadata_from_a_thread_without_an_active_session(spark: Any, spark_schema: str) -> None:
    """dbt runs models on worker threads; the one that built the session may not be among them."""
    s = spark_schema
    _orders(spark, s)
    expected = current_snapshot_id(spark, (s, "orders"))
    found: list[int | None] = []

    def worker() -> None:
        spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
        found.append(current_snapshot_id(spark, (s, "orders")))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert found == [expected]


def test_a_redefined_view_rebuilds_the_stream_table(spark: Any, spark_schema: str) -> None:
    """Same model SQL, same base table, another view body: the stored rows mean something else now."""
    s = spark_schema
    _orders(spark, s)
    spark.sql(f"CREATE VIEW {s}.big_orders AS SELECT id, customer, amount FROM {s}.orders WHERE amount > 15")
    sql = f"SELECT customer, SUM(amount) AS total FROM {s}.big_orders GROUP BY customer"
    refresh_and_check(spark, s, "big_totals", sql, "create", full_refresh_threshold=100.0)
    spark.sql(f"DROP VIEW {s}.big_orders")
    spark.sql(f"CREATE VIEW {s}.big_orders AS SELECT id, customer, amount FROM {s}.orders WHERE amount > 5")
    spark.sql(f"INSERT INTO {s}.orders VALUES (4,'b',8)")
    result = refresh_and_check(spark, s, "big_totals", sql, "view redefined", full_refresh_threshold=100.0)
    assert result.action == "REBUILD", result.summary()
    assert result.reason == "a view the defining query reads was redefined"
    spark.sql(f"INSERT INTO {s}.orders VALUES (5,'c',9)")
    later = refresh_and_check(spark, s, "big_totals", sql, "later", full_refresh_threshold=100.0)
    assert later.action == "DIFFERENTIAL", later.summary()
