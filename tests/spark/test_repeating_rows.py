"""Rows no key identifies are stored on Spark as identical copies, with only the query's columns: a
value that loses copies is rewritten whole by the MERGE (its copies deleted, those that stay inserted
again), one that gains copies gets them inserted. A table an earlier dbt-ivm stored with an ordinal
column (``__ivm_dup``) is rebuilt once, saying why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.shapes import REPEATING_BATCHES, REPEATING_EVENTS, REPEATING_ORDERS, repeating_streams
from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark


def test_rows_that_repeat_are_stored_as_copies(spark: Any, spark_schema: str) -> None:
    """Over 60 s (about 1.5 min in CI): several stream tables whose rows repeat, refreshed through
    rounds of writes that add and remove copies, each refresh a MERGE that rewrites whole values."""
    s = spark_schema
    iceberg = "USING iceberg TBLPROPERTIES ('format-version'='2'"
    spark.sql(
        f"CREATE TABLE {s}.orders (id int, customer_id int, amount int) {iceberg}, 'dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"CREATE TABLE {s}.events (kind string, v int) {iceberg})")
    spark.sql(f"INSERT INTO {s}.orders VALUES {REPEATING_ORDERS}")
    spark.sql(f"INSERT INTO {s}.events VALUES {REPEATING_EVENTS}")
    streams = repeating_streams(s)
    for name, sql in streams.items():
        refresh_and_check(spark, s, name, sql, "create", refresh_mode="differential")
        columns = [f.name for f in spark.table(f"{s}.{name}").schema.fields]
        assert not [c for c in columns if c.startswith("__ivm_")], (name, columns)
    # Two of three identical rows leaving, in numbers the refresh reports.
    first = REPEATING_BATCHES[0].format(s=s).split("; ")
    for statement in first:
        spark.sql(statement)
    result = refresh_and_check(spark, s, "notes", streams["notes"], "batch 0", refresh_mode="differential")
    assert (result.action, result.rows_inserted, result.rows_deleted) == ("DIFFERENTIAL", 3, 2), (
        result.summary()
    )
    for number, batch in enumerate(REPEATING_BATCHES):
        if number:
            for statement in batch.format(s=s).split("; "):
                spark.sql(statement)
        for name, sql in streams.items():
            result = refresh_and_check(spark, s, name, sql, f"batch {number}", refresh_mode="differential")
            assert result.action in ("DIFFERENTIAL", "SKIP"), (name, result.summary())

    # As an earlier dbt-ivm left it: an ordinal beside the query's columns.
    spark.sql(f"ALTER TABLE {s}.notes ADD COLUMNS (__ivm_dup int)")
    spark.sql(f"INSERT INTO {s}.events VALUES ('d', 4)")
    result = refresh_and_check(spark, s, "notes", streams["notes"], "upgrade", refresh_mode="differential")
    assert result.action == "REBUILD" and "__ivm_dup" in str(result.reason), result.summary()
    assert [f.name for f in spark.table(f"{s}.notes").schema.fields] == ["kind", "v"]
