"""Sources as a suspicious user has them on Spark: a declared key the data breaks, map columns.

Iceberg enforces neither identifier fields nor ``dbt_ivm.primary_key``; a stream table keyed by one
must never silently lose a row to a repeated key. A ``map`` column has no equality in Spark: one the
query does not read must not matter, one it reads must be netted all the same, and one in the result
is refused by name.
"""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.errors import IncomparableColumn, KeyNotUnique, SparkFailed
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import assert_matches_query, make_spec, refresh_and_check

pytestmark = pytest.mark.spark


def _rows(spark: Any, relation: str, columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(f"SELECT {columns} FROM {relation}").collect())


def test_a_declared_key_the_data_breaks_is_named_never_lost(spark: Any, spark_schema: str) -> None:
    """`orders` declares its key by Iceberg identifier fields, `customers` by the table property."""
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.orders (id int NOT NULL, customer string, amount int) USING iceberg")
    spark.sql(f"ALTER TABLE {s}.orders SET IDENTIFIER FIELDS id")
    spark.sql(
        f"CREATE TABLE {s}.customers (name string, tier string) USING iceberg "
        "TBLPROPERTIES ('dbt_ivm.primary_key'='name')"
    )
    spark.sql(f"INSERT INTO {s}.orders VALUES (1, 'alice', 10), (2, 'bob', 20), (3, 'bob', 5)")
    spark.sql(f"INSERT INTO {s}.customers VALUES ('alice', 'gold'), ('bob', 'std')")
    keyed = {
        "big_orders": f"SELECT id, customer, amount FROM {s}.orders WHERE amount > 1",
        "order_tiers": f"SELECT o.id, c.tier FROM {s}.orders o JOIN {s}.customers c ON o.customer = c.name",
    }
    totals = f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY customer"
    for name, sql in keyed.items():
        assert refresh_and_check(spark, s, name, sql, refresh_mode="differential").action == "CREATE"
    refresh_and_check(spark, s, "totals", totals, refresh_mode="differential")
    before = {name: _rows(spark, f"{s}.{name}", "*") for name in keyed}

    # A second row with id 1 (and, joined, a second row with the join's key (1, 'alice')).
    spark.sql(f"INSERT INTO {s}.orders VALUES (1, 'alice', 7)")
    for name, sql in keyed.items():
        with pytest.raises(KeyNotUnique) as raised:
            run_stream_table(spark, make_spec(s, name, sql, refresh_mode="auto"))
        message = str(raised.value)
        assert f"model {name}" in message and f"{s}.orders" in message and "id=1" in message, message
        assert "2 of its rows" in message and "primary_key" in message, message
        spark.sql(f"REFRESH TABLE {s}.{name}")
        assert _rows(spark, f"{s}.{name}", "*") == before[name], "a refused batch must change nothing"
    # An aggregate keeps no source key: it stays exact.
    assert (
        refresh_and_check(spark, s, "totals", totals, "dup", refresh_mode="differential").action
        == "DIFFERENTIAL"
    )

    # A new stream table over the broken key is refused too, and leaves no table behind.
    with pytest.raises(KeyNotUnique):
        run_stream_table(spark, make_spec(s, "late", keyed["big_orders"], refresh_mode="differential"))
    assert not spark.catalog.tableExists(f"{s}.late")

    # Deleting one of the two rows mends it; the refused batch is applied with the mend.
    spark.sql(f"DELETE FROM {s}.orders WHERE id = 1 AND amount = 10")
    for name, sql in keyed.items():
        result = refresh_and_check(spark, s, name, sql, "mended", refresh_mode="differential")
        assert result.action == "DIFFERENTIAL", result.summary()
    refresh_and_check(spark, s, "late", keyed["big_orders"], "mended", refresh_mode="differential")

    # An order meets its customer by the customer's whole key: the order's key alone identifies its
    # row, and a second customer of one name is still named, not silently taken for the first.
    assert [f.name for f in spark.table(f"{s}.order_tiers").schema.fields] == ["id", "tier"]
    spark.sql(f"INSERT INTO {s}.customers VALUES ('alice', 'silver')")
    with pytest.raises(KeyNotUnique) as raised:
        run_stream_table(spark, make_spec(s, "order_tiers", keyed["order_tiers"], refresh_mode="auto"))
    message = str(raised.value)
    assert f"{s}.customers" in message and "name='alice'" in message, message
    spark.sql(f"DELETE FROM {s}.customers WHERE tier = 'silver'")
    result = refresh_and_check(
        spark, s, "order_tiers", keyed["order_tiers"], "one alice", refresh_mode="differential"
    )
    assert result.action in ("DIFFERENTIAL", "SKIP"), result.summary()

    # Dropping the declaration instead: the stream table is rebuilt without the key.
    spark.sql(f"INSERT INTO {s}.orders VALUES (2, 'alice', 3)")
    spark.sql(f"ALTER TABLE {s}.orders DROP IDENTIFIER FIELDS id")
    for name, sql in keyed.items():
        result = refresh_and_check(spark, s, name, sql, "undeclared", refresh_mode="differential")
        assert result.action == "REBUILD", result.summary()
        spark.sql(f"INSERT INTO {s}.orders VALUES (2, 'bob', 4)")
        refresh_and_check(spark, s, name, sql, "undeclared, more", refresh_mode="differential")


def test_map_columns(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.events (id int NOT NULL, kind string, props map<string, string>, "
        "tags array<map<string, int>>) USING iceberg"
    )
    spark.sql(
        f"INSERT INTO {s}.events VALUES (1, 'a', map('k', 'v'), array(map('x', 1))), "
        "(2, 'b', map(), array()), (3, 'a', map('k', 'w'), NULL)"
    )
    queries = {
        "kinds": f"SELECT kind, COUNT(*) AS n FROM {s}.events GROUP BY kind",  # maps unread
        "ids": f"SELECT id, kind FROM {s}.events WHERE id > 0",  # keyless: rows netted by value
        "by_k": f"SELECT props['k'] AS k, COUNT(*) AS n FROM {s}.events GROUP BY props['k']",
        "sizes": f"SELECT id, size(props) AS entries, to_json(props) AS props FROM {s}.events",
    }
    for name, sql in queries.items():
        assert refresh_and_check(spark, s, name, sql, refresh_mode="differential").action == "CREATE"
    spark.sql(f"INSERT INTO {s}.events VALUES (4, 'a', map('k', 'v', 'j', 'u'), array(map('y', 2)))")
    spark.sql(f"UPDATE {s}.events SET props = map('k', 'z') WHERE id = 2")
    spark.sql(f"UPDATE {s}.events SET kind = 'c' WHERE id = 3")
    spark.sql(f"DELETE FROM {s}.events WHERE id = 1")
    for name, sql in queries.items():
        result = refresh_and_check(spark, s, name, sql, "dml", refresh_mode="differential")
        assert result.action == "DIFFERENTIAL", (name, result.summary())

    # A map in the result cannot be matched by value: refused by name, whatever the refresh mode.
    for mode in ("differential", "auto", "full"):
        with pytest.raises(IncomparableColumn) as raised:
            run_stream_table(
                spark, make_spec(s, "raw", f"SELECT id, props FROM {s}.events", refresh_mode=mode)
            )
        message = str(raised.value)
        assert "model raw" in message and "props" in message and "to_json(props)" in message, message
    assert_matches_query(spark, s, "sizes", queries["sizes"])


def test_a_failing_spark_job_says_why(spark: Any, spark_schema: str) -> None:
    """py4j's wrapper ("An error occurred while calling o123.localCheckpoint") is replaced by the
    JVM's own message, naming the model."""
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.readings (id int NOT NULL, v int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.readings VALUES (1, 10)")
    sql = f"SELECT id, CASE WHEN v < 100 THEN v ELSE raise_error('reading out of range') END AS v FROM {s}.readings"
    refresh_and_check(spark, s, "checked", sql, refresh_mode="differential")
    spark.sql(f"INSERT INTO {s}.readings VALUES (2, 500)")
    with pytest.raises(SparkFailed) as raised:
        run_stream_table(spark, make_spec(s, "checked", sql, refresh_mode="differential"))
    message = str(raised.value)
    assert message.startswith("model checked: Spark failed: "), message
    assert "reading out of range" in message and "An error occurred while calling" not in message, message


@pytest.mark.parametrize("write_mode", ["copy-on-write", "merge-on-read"])
def test_source_with_columns_named_like_internals(spark: Any, spark_schema: str, write_mode: str) -> None:
    """A source whose columns are named like the change reader's own (`__ivm_data_file`,
    `__ivm_data_pos`, `__ivm_weight`), with a space, a backtick and Unicode: its changes are read
    from the changelog (copy-on-write) or by position (merge-on-read) all the same. (Columns named like Iceberg's metadata columns,
    `_file` or `_pos`, make Iceberg refuse any query that reads them: no stream table can have one.)"""
    s = spark_schema
    modes = ", ".join(f"'write.{op}.mode'='{write_mode}'" for op in ("delete", "update", "merge"))
    spark.sql(
        f"CREATE TABLE {s}.odd_events (`__ivm_data_file` string, `__ivm_data_pos` int, "
        f"`__ivm_weight` int, `k ``ind`` ü` string, v int) USING iceberg TBLPROPERTIES ({modes})"
    )
    rows = ", ".join(f"('f{i}', {i}, {i % 3}, '{'ab'[i % 2]}', {i})" for i in range(8))
    spark.sql(f"INSERT INTO {s}.odd_events VALUES {rows}")
    streams = {
        "odd_totals": (
            f"SELECT `k ``ind`` ü`, SUM(v) AS total, COUNT(*) AS n, MAX(`__ivm_data_pos`) AS top_pos "
            f"FROM {s}.odd_events GROUP BY `k ``ind`` ü`"
        ),
        "odd_kept": (
            f"SELECT `__ivm_data_file` AS data_file, `__ivm_data_pos` AS data_pos, `__ivm_weight` AS weight, v "
            f"FROM {s}.odd_events WHERE v > 1"
        ),
    }
    for name, sql in streams.items():
        refresh_and_check(spark, s, name, sql, refresh_mode="differential")
    spark.sql(f"DELETE FROM {s}.odd_events WHERE v IN (2, 5)")
    spark.sql(f"UPDATE {s}.odd_events SET v = v + 10, `__ivm_data_pos` = 0, `__ivm_weight` = -1 WHERE v = 3")
    spark.sql(f"DELETE FROM {s}.odd_events WHERE `__ivm_data_file` = 'f7'")
    for name, sql in streams.items():
        result = refresh_and_check(spark, s, name, sql, "after deletes", refresh_mode="differential")
        assert result.action == "DIFFERENTIAL", result.summary()
        assert "snapshot diff" not in (result.reason or ""), result.summary()
