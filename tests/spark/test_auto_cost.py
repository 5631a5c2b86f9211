"""AUTO chooses by cost on Spark from the refresh history (dbt_ivm.cost): once a differential refresh
has been measured against a recompute, a batch whose differential refresh would take clearly longer is
recomputed, saying why; refresh_mode='differential' never switches."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.spark import registry
from tests.spark.oracle import make_spec, refresh_and_check

pytestmark = pytest.mark.spark


def test_auto_follows_the_refresh_history(spark: Any, spark_schema: str) -> None:
    """Over 60 s (about 1.4 min in CI): AUTO learns only from measured refreshes, so the test runs
    enough differential and full refreshes for the history to decide."""
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10),(2,'a',20),(3,'b',30)")
    sql = f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY customer"
    catalog = make_spec(s, "totals", sql).catalog_schema
    refresh_and_check(spark, s, "totals", sql, "create")
    # The create stands for FULL's cost by the seconds its contents took, not its planning and setup.
    created = spark.sql(
        f"SELECT duration_seconds, contents_seconds FROM {catalog}.refresh_history WHERE stream_table = '{s}.totals'"
    ).collect()
    assert len(created) == 1 and 0 < created[0][1] < created[0][0], created
    assert [p.seconds for p in registry.recent_refreshes(spark, catalog, f"{s}.totals")] == [created[0][1]]
    # A top by a column it does not show reads its input's top again: weighed as any other query.
    top = f"SELECT id, amount FROM {s}.orders ORDER BY customer DESC, id LIMIT 2"
    refresh_and_check(spark, s, "top", top, "create the top")
    spark.sql(f"INSERT INTO {s}.orders VALUES (4,'c',40)")
    # Nothing measured of a differential refresh yet: the threshold rule alone decides.
    first = refresh_and_check(spark, s, "totals", sql, "first batch")
    assert (first.action, first.reason) == ("DIFFERENTIAL", None), first.summary()
    ranked = refresh_and_check(spark, s, "top", top, "the top's first batch")
    assert (ranked.action, ranked.reason) == ("DIFFERENTIAL", None), ranked.summary()
    # As if the next differential refresh, of 2 changes, had taken ten minutes: far beyond what the
    # create (the FULL in the history) takes even on a loaded machine (18 s seen under CI load).
    fields = {"action": "DIFFERENTIAL", "changes_read": 2, "duration_seconds": 600.0, "status": "OK"}
    registry.record(spark, catalog, f"{s}.totals", fields)
    spark.sql(f"INSERT INTO {s}.orders VALUES (5,'a',50)")
    second = refresh_and_check(spark, s, "totals", sql, "second batch")
    assert second.action == "FULL", second.summary()
    assert second.reason is not None and second.reason.startswith("differential estimated"), second.reason
    assert "history: differential" in second.reason and "medians of 2 and 1" in second.reason
    last = spark.sql(
        f"SELECT action, reason, changes_read FROM {catalog}.refresh_history "
        f"WHERE stream_table = '{s}.totals' ORDER BY refresh_id DESC LIMIT 1"
    ).collect()[0]
    assert tuple(last) == ("FULL", second.reason, 1)
    spark.sql(f"INSERT INTO {s}.orders VALUES (6,'b',60)")
    kept = refresh_and_check(spark, s, "totals", sql, "third batch", refresh_mode="differential")
    assert (kept.action, kept.reason) == ("DIFFERENTIAL", None), kept.summary()
    # The history counts a differential refresh's net changes (observed as its change sets are
    # pinned).
    spark.sql(f"UPDATE {s}.orders SET amount = amount + 1 WHERE id IN (1, 2)")
    spark.sql(f"DELETE FROM {s}.orders WHERE id = 3")
    counted = refresh_and_check(spark, s, "totals", sql, "fourth batch", refresh_mode="differential")
    assert counted.action == "DIFFERENTIAL", counted.summary()
    last = spark.sql(
        f"SELECT changes_read FROM {catalog}.refresh_history "
        f"WHERE stream_table = '{s}.totals' ORDER BY refresh_id DESC LIMIT 1"
    ).collect()[0]
    assert last[0] == 5  # two old and two new images of orders 1 and 2, and order 3 deleted


def test_the_threshold_counts_rows_changed_in_the_columns_read(spark: Any, spark_schema: str) -> None:
    """Changed rows, not row images: 40 of 100 keyed rows updated are 80 images, but 40 rows, under
    the default 0.5; every row's unread `note` updated changes no row the query reads. 60 rows are
    past it."""
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.orders (id int, customer string, amount int, note string) USING iceberg "
        "TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"INSERT INTO {s}.orders SELECT id, concat('c', id % 3), id, 'n' FROM range(100) AS r(id)")
    sql = f"SELECT customer, SUM(amount) AS total FROM {s}.orders GROUP BY customer"
    refresh_and_check(spark, s, "totals", sql, "create")
    for write in (
        f"UPDATE {s}.orders SET amount = amount + 1 WHERE id < 40",
        f"UPDATE {s}.orders SET note = 'm'",
    ):
        spark.sql(write)
        result = refresh_and_check(spark, s, "totals", sql, write)
        assert "full_refresh_threshold" not in (result.reason or ""), result.summary()
    spark.sql(f"UPDATE {s}.orders SET amount = amount + 1 WHERE id < 60")
    past = refresh_and_check(spark, s, "totals", sql, "60 rows")
    assert past.action == "FULL" and (past.reason or "").startswith("60 changes to"), past.summary()


def test_the_threshold_weighs_a_small_dimension_against_all_the_query_reads(
    spark: Any, spark_schema: str
) -> None:
    """Two of three customers renamed are 2 rows of the ~103 the join reads, not of 3: no FULL."""
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.customers (id int, name string) USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"INSERT INTO {s}.customers VALUES (0, 'a'), (1, 'b'), (2, 'c')")
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer_id int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders SELECT id, id % 3 FROM range(100) AS r(id)")
    sql = f"SELECT o.id, c.name FROM {s}.orders o JOIN {s}.customers c ON c.id = o.customer_id"
    refresh_and_check(spark, s, "named", sql, "create")
    spark.sql(f"UPDATE {s}.customers SET name = concat(name, '!') WHERE id < 2")
    result = refresh_and_check(spark, s, "named", sql, "renamed")
    assert "full_refresh_threshold" not in (result.reason or ""), result.summary()
