"""FULL on Spark rewrites the table in one overwrite when no stream table reads its changes (as a
table model is rebuilt), and stays a diff against the stored rows when one does (#63 item 1).

Either way the commit carries the new frontier: the next batch is differential; the table's
properties and its snapshots stay; a reader the registry cannot see (another catalog schema) still
ends equal to its query after the rewrite, through the changelog of an overwrite."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.spark import refresh_steps
from dbt_ivm.spark.refresh_steps import REWRITTEN
from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY customer"
BIG = "SELECT customer, total FROM {s}.totals WHERE total > 25"


def _orders(spark: Any, s: str) -> None:
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10),(2,'a',20),(3,'b',30),(4,'c',40)")


def test_a_full_refresh_nobody_reads_rewrites_every_row(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    _orders(spark, s)
    totals = TOTALS.format(s=s)
    refresh_and_check(
        spark, s, "totals", totals, "create", refresh_mode="full", table_properties={"team": "x"}
    )
    snapshots = spark.sql(f"SELECT count(*) FROM {s}.totals.snapshots").collect()[0][0]
    spark.sql(f"UPDATE {s}.orders SET amount = 11 WHERE id = 1")
    full = refresh_and_check(
        spark, s, "totals", totals, "rewritten", refresh_mode="full", table_properties={"team": "x"}
    )
    assert full.action == "FULL" and REWRITTEN in (full.reason or ""), full.summary()
    assert (full.rows_inserted, full.rows_updated, full.rows_deleted) == (3, 0, 3), full.summary()
    assert spark.sql(f"SELECT count(*) FROM {s}.totals.snapshots").collect()[0][0] == snapshots + 1
    properties = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {s}.totals").collect()}
    assert properties.get("team") == "x"
    # The overwrite carried the frontier: the next batch is differential, applied once.
    spark.sql(f"INSERT INTO {s}.orders VALUES (5,'b',1)")
    later = refresh_and_check(spark, s, "totals", totals, "after the rewrite", refresh_mode="differential")
    assert later.action == "DIFFERENTIAL" and later.rows_updated == 1, later.summary()
    # Copies written by hand (a MERGE would match each key twice): the overwrite replaces them.
    spark.sql(f"INSERT INTO {s}.totals SELECT * FROM {s}.totals")
    spark.sql(f"INSERT INTO {s}.orders VALUES (6,'c',1)")
    fixed = refresh_and_check(spark, s, "totals", totals, "after copies by hand", refresh_mode="differential")
    assert fixed.action == "FULL" and "written outside dbt-ivm" in (fixed.reason or ""), fixed.summary()
    assert (fixed.rows_inserted, fixed.rows_deleted) == (3, 6), fixed.summary()


def test_a_full_refresh_read_by_another_stream_table_applies_the_difference(
    spark: Any, spark_schema: str
) -> None:
    s = spark_schema
    _orders(spark, s)
    totals, big = TOTALS.format(s=s), BIG.format(s=s)
    refresh_and_check(spark, s, "totals", totals, "create", refresh_mode="full")
    refresh_and_check(spark, s, "big", big, "create", refresh_mode="differential")
    spark.sql(f"UPDATE {s}.orders SET amount = 50 WHERE id = 1")
    full = refresh_and_check(spark, s, "totals", totals, "diffed", refresh_mode="full")
    assert full.action == "FULL" and REWRITTEN not in (full.reason or ""), full.summary()
    assert (full.rows_inserted, full.rows_updated, full.rows_deleted) == (0, 1, 0), full.summary()
    # The reader gets the one changed row.
    read = refresh_and_check(spark, s, "big", big, "after the upstream FULL", refresh_mode="differential")
    assert read.action == "DIFFERENTIAL", read.summary()


def test_a_reader_in_another_catalog_follows_a_rewrite(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    _orders(spark, s)
    totals, big = TOTALS.format(s=s), BIG.format(s=s)
    refresh_and_check(spark, s, "totals", totals, "create", refresh_mode="full")
    refresh_and_check(spark, s, "big", big, "create", refresh_mode="auto", catalog_schema=f"{s}_other")
    spark.sql(f"UPDATE {s}.orders SET amount = 50 WHERE id = 1")
    spark.sql(f"DELETE FROM {s}.orders WHERE id = 3")
    full = refresh_and_check(spark, s, "totals", totals, "rewritten", refresh_mode="full")
    assert REWRITTEN in (full.reason or ""), full.summary()  # the other catalog's reader is not seen
    refresh_and_check(
        spark, s, "big", big, "after the rewrite", refresh_mode="auto", catalog_schema=f"{s}_other"
    )


def test_a_large_table_few_of_whose_rows_change_is_diffed(
    spark: Any, spark_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size rule with a small bound (the real one is 100,000 rows): 3 stored rows are over it;
    a batch of one change (FULL by a tiny threshold) is under half of them, so FULL MERGEs; a
    batch of two rewrites every row."""
    monkeypatch.setattr(refresh_steps, "OVERWRITE_AT_MOST", 2)
    s = spark_schema
    _orders(spark, s)
    totals = TOTALS.format(s=s)
    auto = {"refresh_mode": "auto", "full_refresh_threshold": 0.01}
    refresh_and_check(spark, s, "totals", totals, "create", **auto)
    spark.sql(f"INSERT INTO {s}.orders VALUES (5,'a',1)")
    diffed = refresh_and_check(spark, s, "totals", totals, "one change", **auto)
    assert diffed.action == "FULL" and REWRITTEN not in (diffed.reason or ""), diffed.summary()
    assert diffed.rows_updated == 1, diffed.summary()
    spark.sql(f"INSERT INTO {s}.orders VALUES (6,'a',1), (7,'b',1)")
    rewritten = refresh_and_check(spark, s, "totals", totals, "two changes", **auto)
    assert rewritten.action == "FULL" and REWRITTEN in (rewritten.reason or ""), rewritten.summary()
