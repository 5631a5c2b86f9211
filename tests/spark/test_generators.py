"""Generators in a SELECT list (explode, explode_outer) yield several rows per source row: no source
key identifies them, so the stream table holds them as a multiset, and every refresh equals the query
through writes that change how many rows a source row yields. One that yields several columns
(`posexplode(tags) AS (p, tag)`, `inline`, or without names: `json_tuple(j, 'a', 'b')`) is refused
by name, and AUTO refreshes it FULL."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import follow_writes, make_spec, refresh_and_check

pytestmark = pytest.mark.spark


def test_generators_multiply_rows(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.o (id int, tags array<string>) USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"INSERT INTO {s}.o VALUES (1, array('a', 'b')), (2, array('c')), (3, array())")
    streams = {
        "tagged": f"SELECT id, explode(tags) AS tag FROM {s}.o",
        "tagged_or_not": f"SELECT id, explode_outer(tags) AS tag FROM {s}.o",
    }
    follow_writes(
        spark,
        s,
        streams,
        [
            f"UPDATE {s}.o SET tags = array('x', 'y', 'y') WHERE id = 1",
            f"DELETE FROM {s}.o WHERE id = 2",
            f"INSERT INTO {s}.o VALUES (4, array('a', 'a')), (5, NULL)",
        ],
        ("DIFFERENTIAL",),
    )
    several = {
        "positioned": (f"SELECT id, posexplode(tags) AS (p, tag) FROM {s}.o", "posexplode"),
        # Without names, Spark calls the columns pos/col and c0/c1: more columns than SELECT items.
        "positioned_unnamed": (f"SELECT id, posexplode(tags) FROM {s}.o", "posexplode"),
        "parsed": (
            # The call named is the generator, not the per-row call before it.
            f"SELECT id, upper(string(id)) AS u, json_tuple(to_json(named_struct('a', id, 'b', tags)), 'a', 'b') "
            f"FROM {s}.o",
            "json_tuple",
        ),
    }
    for name, (sql, call) in several.items():
        with pytest.raises(UnsupportedQuery, match=f"(?i)a call that yields several columns `{call}"):
            run_stream_table(spark, make_spec(s, name, sql, refresh_mode="differential"))
        refresh_and_check(spark, s, name, sql, "auto", refresh_mode="auto")
    spark.sql(f"UPDATE {s}.o SET tags = array('q') WHERE id = 4")
    for name, (sql, _call) in several.items():
        result = refresh_and_check(spark, s, name, sql, "auto, a write", refresh_mode="auto")
        assert result.action == "FULL" and "several columns" in str(result.reason), result.summary()
