"""A stored aggregate on Spark applies its batch's change per group: each touched group's stored row
is read once, and the MERGE inserts a group that appears, updates one whose values change, deletes
one that loses its last row, and leaves alone one whose values stay (its counts say so)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.shapes import SUM_IN_DOUBT_BATCHES, SUM_IN_DOUBT_ROWS, sum_in_doubt_streams
from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark


def test_groups_appear_change_vanish_and_stay(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10),(2,'a',20),(3,'b',5),(4,'c',7),(5,NULL,1)")
    queries = {
        "totals": f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n, AVG(amount) AS mean "
        f"FROM {s}.orders GROUP BY customer",
        "overall": f"SELECT COUNT(*) AS n, SUM(amount) AS total FROM {s}.orders",
    }

    def refresh(step: str) -> dict[str, tuple[str, int, int, int]]:
        done = {}
        for name, sql in queries.items():
            result = refresh_and_check(spark, s, name, sql, step, refresh_mode="differential")
            done[name] = (result.action, result.rows_inserted, result.rows_updated, result.rows_deleted)
        return done

    assert refresh("create")["totals"] == ("CREATE", 4, 0, 0)
    spark.sql(f"INSERT INTO {s}.orders VALUES (6,'e',4)")  # e appears
    spark.sql(f"UPDATE {s}.orders SET amount = 11 WHERE id = 1")  # a changes
    spark.sql(f"DELETE FROM {s}.orders WHERE id = 3")  # b vanishes
    spark.sql(f"UPDATE {s}.orders SET amount = 8 WHERE id = 4")
    spark.sql(f"UPDATE {s}.orders SET amount = 7 WHERE id = 4")  # c is touched, and stays
    spark.sql(f"UPDATE {s}.orders SET amount = 2 WHERE customer IS NULL")  # the NULL group changes
    assert refresh("batch") == {
        "totals": ("DIFFERENTIAL", 1, 2, 1),
        "overall": ("DIFFERENTIAL", 0, 1, 0),
    }
    spark.sql(f"DELETE FROM {s}.orders")
    # Every group goes; the aggregate without GROUP BY keeps its one row (count 0).
    assert refresh("emptied") == {
        "totals": ("DIFFERENTIAL", 0, 0, 4),
        "overall": ("DIFFERENTIAL", 0, 1, 0),
    }
    spark.sql(f"INSERT INTO {s}.orders VALUES (7,'a',1)")
    assert refresh("again")["totals"] == ("DIFFERENTIAL", 1, 0, 0)


def test_a_sums_non_null_count_is_recounted_only_in_doubt(spark: Any, spark_schema: str) -> None:
    """SUM over a column that may be NULL stores no non-NULL count (a group is recounted when a batch
    removes a value and leaves its sum at 0): only the query's columns, through sums going NULL,
    staying at 0 and coming back, and a hidden sum where the query shows none as it is."""
    s = spark_schema
    table = f"{s}.orders"
    spark.sql(f"CREATE TABLE {table} (id int, customer_id int, amount decimal(10,2)) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES {SUM_IN_DOUBT_ROWS}")
    streams = sum_in_doubt_streams(table)
    for name, sql in streams.items():
        refresh_and_check(spark, s, name, sql, "create", refresh_mode="differential")
    columns = {name: [f.name for f in spark.table(f"{s}.{name}").schema.fields] for name in streams}
    assert columns == {
        "totals": ["customer_id", "total", "n"],
        "doubled": ["customer_id", "twice", "ids", "n", "__ivm_a0_sum"],
        "sums": ["customer_id", "total"],
        "priced": ["customer_id", "priced"],
    }
    for number, batch in enumerate(SUM_IN_DOUBT_BATCHES):
        for statement in batch.format(t=table).split("; "):
            spark.sql(statement)
        for name, sql in streams.items():
            result = refresh_and_check(spark, s, name, sql, f"batch {number}", refresh_mode="differential")
            assert result.action == "DIFFERENTIAL", (name, result.summary())
