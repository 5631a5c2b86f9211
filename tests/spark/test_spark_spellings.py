"""Spark's own spellings, planned as the query means them and maintained differentially through
writes. Each was wrong or failed before, in every mode:

- `first_value(v) IGNORE NULLS OVER (…)` (and `last_value(v, true)`): the call was planned as an
  aggregate below the window, and the CREATE failed to parse;
- `grouping_id()` without arguments (over every grouping key): 0 in every row of a ROLLUP;
- a join hint, `/*+ BROADCAST(u) */`: its relation was looked up as a source ("does not exist");
- `LATERAL VIEW explode(p.tags) t AS tag`: refused (now `explode` in a SELECT list over `p`).

Iceberg's metadata columns (`_file`, `_pos`) change when a compaction moves rows, which no changelog
shows: refused by name, and AUTO refreshes them FULL (they failed to plan before). Refusals show the
construct in Spark's SQL (`uuid()` was shown as PostgreSQL's `GEN_RANDOM_UUID()`).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import follow_writes, make_spec, refresh_and_check

pytestmark = pytest.mark.spark


def test_spark_spellings_are_maintained(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.t (id int, g string, v int) USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(
        f"CREATE TABLE {s}.u (id int, k string) USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"INSERT INTO {s}.t VALUES (1, 'a', NULL), (2, 'a', 2), (3, 'b', 3), (5, 'c', NULL)")
    spark.sql(f"INSERT INTO {s}.u VALUES (1, 'x'), (3, 'y')")
    streams = {
        "first_seen": (
            f"SELECT id, g, first_value(v) IGNORE NULLS OVER (PARTITION BY g ORDER BY id) AS f, "
            f"last_value(v, true) OVER (PARTITION BY g ORDER BY id) AS l FROM {s}.t"
        ),
        "rolled_up": (
            f"SELECT g, v, COUNT(*) AS n, grouping_id() AS level FROM {s}.t GROUP BY g, v WITH ROLLUP"
        ),
        "hinted": f"SELECT /*+ BROADCAST(u) */ t.id, t.v, u.k FROM {s}.t JOIN {s}.u ON t.id = u.id",
    }
    follow_writes(
        spark,
        s,
        streams,
        [
            f"UPDATE {s}.t SET v = 7 WHERE id = 1",
            f"INSERT INTO {s}.t VALUES (4, 'b', NULL), (6, 'a', 1)",
            f"DELETE FROM {s}.t WHERE id IN (2, 3)",
            f"INSERT INTO {s}.u VALUES (4, 'z')",
        ],
        ("DIFFERENTIAL", "SKIP"),
    )


def test_lateral_view_explode_is_maintained(spark: Any, spark_schema: str) -> None:
    """`LATERAL VIEW explode(p.tags) t AS tag` is `explode` in a SELECT list over `p` (refused before);
    `LATERAL VIEW OUTER` is refused by name, and AUTO refreshes it FULL."""
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.posts (id int, tags array<string>, author string) USING iceberg "
        "TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(
        f"INSERT INTO {s}.posts VALUES (1, array('a', 'b'), 'x'), (2, array('b'), 'y'), (3, NULL, 'x'), "
        "(4, array(), NULL), (5, array('a', 'a', NULL), 'z')"
    )
    exploded = f"FROM {s}.posts p LATERAL VIEW explode(p.tags) t AS tag"
    streams = {
        "tagged": f"SELECT p.id, t.tag {exploded}",
        "tagged_filtered": f"SELECT p.id, p.author, tag {exploded} WHERE tag <> 'b'",
        "tag_counts": f"SELECT t.tag, COUNT(*) AS n {exploded} GROUP BY t.tag",
    }
    follow_writes(
        spark,
        s,
        streams,
        [
            f"INSERT INTO {s}.posts VALUES (6, array('c', 'a'), 'x')",
            f"UPDATE {s}.posts SET tags = array_append(coalesce(tags, array()), 'q') WHERE id IN (1, 3)",
            f"DELETE FROM {s}.posts WHERE id IN (2, 5)",
        ],
        ("DIFFERENTIAL", "SKIP"),
    )
    outer = f"SELECT p.id, t.tag FROM {s}.posts p LATERAL VIEW OUTER explode(p.tags) t AS tag"
    with pytest.raises(UnsupportedQuery, match="outer generator `"):
        run_stream_table(spark, make_spec(s, "kept", outer, refresh_mode="differential"))
    refresh_and_check(spark, s, "kept", outer, "create")
    spark.sql(f"INSERT INTO {s}.posts VALUES (7, NULL, 'w')")
    assert refresh_and_check(spark, s, "kept", outer, "auto").action == "FULL"


def test_inline_tables_are_maintained(spark: Any, spark_schema: str) -> None:
    """Spark's inline table spellings, `JOIN VALUES … AS t(a, b)` without parentheses and a bare
    `VALUES` branch (refused as "FROM item" before); a LATERAL subquery stays refused by name."""
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1, 'a', 10), (2, 'b', 20), (3, NULL, 30)")
    streams = {
        "named": (
            f"SELECT o.id, t.region FROM {s}.orders o JOIN VALUES ('a', 'north'), ('b', 'south') AS t(customer, region) "
            "ON o.customer = t.customer"
        ),
        "with_defaults": f"SELECT customer, amount FROM {s}.orders UNION ALL VALUES ('none', 0), ('none', 0)",
        "per_region": (
            "SELECT t.region, COUNT(o.id) AS n, SUM(o.amount) AS total "
            "FROM VALUES ('a', 'north'), ('b', 'south'), ('c', 'south') AS t(customer, region) "
            f"LEFT JOIN {s}.orders o ON o.customer = t.customer GROUP BY t.region"
        ),
    }
    follow_writes(
        spark,
        s,
        streams,
        [
            f"INSERT INTO {s}.orders VALUES (4, 'c', 5), (5, 'a', 1)",
            f"UPDATE {s}.orders SET customer = 'b' WHERE id IN (1, 3)",
            f"DELETE FROM {s}.orders WHERE id IN (2, 4)",
        ],
        ("DIFFERENTIAL", "SKIP"),
    )
    lateral = f"SELECT o.id, v.x FROM {s}.orders o, LATERAL (SELECT o.amount + 1 AS x) AS v"
    with pytest.raises(UnsupportedQuery, match="`LATERAL` subquery"):
        run_stream_table(spark, make_spec(s, "lateral", lateral, refresh_mode="differential"))


def test_metadata_columns_and_volatile_calls_are_refused_by_spark_names(
    spark: Any, spark_schema: str
) -> None:
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.t (id int, v int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.t VALUES (1, 1), (2, 2)")
    sql = f"SELECT id, _pos AS position FROM {s}.t"
    with pytest.raises(UnsupportedQuery, match=re.escape("system column `_pos`") + ".*a compaction moves"):
        run_stream_table(spark, make_spec(s, "placed", sql, refresh_mode="differential"))
    # Named as Spark spells it, not as PostgreSQL would (GEN_RANDOM_UUID()).
    with pytest.raises(UnsupportedQuery, match=re.escape("non-deterministic function `UUID()`")):
        run_stream_table(
            spark, make_spec(s, "tagged", f"SELECT id, uuid() AS u FROM {s}.t", refresh_mode="differential")
        )
    refresh_and_check(spark, s, "placed", sql, "create")
    spark.sql(f"INSERT INTO {s}.t VALUES (3, 3)")
    spark.sql(
        f"CALL spark_catalog.system.rewrite_data_files(table => '{s}.t', options => map('rewrite-all', 'true'))"
    )
    result = refresh_and_check(spark, s, "placed", sql, "after a compaction")
    assert result.action == "FULL" and "system column" in str(result.reason), result.summary()
