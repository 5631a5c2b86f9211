"""Constructs no rule maintains on Spark, each refused by name in differential mode and refreshed FULL
with that reason by AUTO, staying equal to its query (each was planned without them before, or
summed in a way that drifts): a running SUM or AVG over double (1e16 + 1 − 1e16 is 0), time travel
(a fixed snapshot never changes), TABLESAMPLE, PIVOT and LATERAL VIEW OUTER (dropped from the plan), a
struct's fields as `st.*` (whose fix names Spark's way, not PostgreSQL's), aggregates sqlglot
parses as plain calls (`every`, `some`, `any`), and IN (subquery) as a value, which Spark shows as
false where SQL has NULL."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import make_spec, refresh_and_check

pytestmark = pytest.mark.spark


def test_unmaintained_constructs_are_refused_by_name_and_refreshed_full(
    spark: Any, spark_schema: str
) -> None:
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.d (id int, g string, v double, arr array<int>, st struct<a:int,b:string>) USING iceberg"
    )
    spark.sql(
        f"INSERT INTO {s}.d VALUES (1, 'a', 1e16, array(1, 2), named_struct('a', 1, 'b', 'x')), "
        "(2, 'b', 1.0, array(), NULL), (3, 'a', 2.0, array(3), named_struct('a', 3, 'b', NULL))"
    )
    snapshot = spark.sql(
        f"SELECT snapshot_id FROM {s}.d.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]
    queries = {
        "drifting": (f"SELECT g, SUM(v) AS total, AVG(v) AS mean FROM {s}.d GROUP BY g", "aggregate `SUM("),
        "then": (f"SELECT id, v FROM {s}.d VERSION AS OF {snapshot}", "time travel"),
        "sampled": (f"SELECT id FROM {s}.d TABLESAMPLE (1 ROWS)", "TABLESAMPLE"),
        "pivoted": (
            f"SELECT * FROM (SELECT g, id FROM {s}.d) PIVOT (COUNT(id) FOR g IN ('a', 'b'))",
            "PIVOT",
        ),
        # (an inner LATERAL VIEW is maintained: tests/spark/test_spark_spellings.py)
        "exploded": (f"SELECT id, x FROM {s}.d LATERAL VIEW OUTER explode(arr) t AS x", "outer generator `"),
        "fields": (f"SELECT id, st.* FROM {s}.d", "whole-row reference"),
        # Aggregates sqlglot takes for per-row calls: each group was split by their value.
        "all_big": (f"SELECT g, every(v > 1) AS e FROM {s}.d GROUP BY g", "aggregate `EVERY("),
        "some_big": (f"SELECT g, some(v > 1) AS e FROM {s}.d GROUP BY g", "aggregate `SOME("),
        "any_big": (f"SELECT g, any(v > 1) AS e FROM {s}.d GROUP BY g", "aggregate `ANY("),
        # Not in dbt-ivm's list of names: Spark's function registry says it is an aggregate.
        "tried": (f"SELECT g, try_sum(id) AS t FROM {s}.d GROUP BY g", "aggregate `TRY_SUM("),
        # Maintained on PostgreSQL; Spark's own answer is false where SQL's is NULL (SPARK-58442).
        "in_value": (
            f"SELECT id, g IN (SELECT g FROM {s}.d WHERE v > 1) AS known FROM {s}.d",
            "`IN (subquery)` as a value `",
        ),
        # A set operation's first rows are maintained when ordered by its output columns (shapes);
        # Spark also orders one by an expression, which is refused by name.
        "union_top": (
            f"SELECT g FROM {s}.d UNION SELECT v FROM {s}.d ORDER BY g + 1 DESC LIMIT 2",
            "LIMIT / OFFSET on `SELECT",
        ),
    }
    with pytest.raises(UnsupportedQuery, match=re.escape("(`v.a, v.b`)") + ".*named_struct on Spark"):
        run_stream_table(spark, make_spec(s, "fields", queries["fields"][0], refresh_mode="differential"))
    for name, (sql, construct) in queries.items():
        with pytest.raises(UnsupportedQuery, match=re.escape(construct) + f".*in model {name}"):
            run_stream_table(spark, make_spec(s, name, sql, refresh_mode="differential"))
        if name != "sampled":  # a sample is not deterministic: no oracle
            refresh_and_check(spark, s, name, sql, "create")
    spark.sql(f"DELETE FROM {s}.d WHERE id = 1")
    spark.sql(f"INSERT INTO {s}.d VALUES (4, 'b', 3.0, array(4, 4), named_struct('a', 4, 'b', 'y'))")
    for name, (sql, construct) in queries.items():
        if name != "sampled":
            result = refresh_and_check(spark, s, name, sql, "after writes")
            assert result.action == "FULL" and construct.split("`")[0] in str(result.reason), result.summary()
