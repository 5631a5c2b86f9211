"""The Spark oracle: a stream table's user columns must equal its defining query (EXCEPT ALL both ways)."""

from __future__ import annotations

from typing import Any

from dbt_ivm.spark.runner import run_stream_table
from dbt_ivm.spec import RefreshResult, StreamTableSpec

HIDDEN_PREFIX = "__ivm_"


def bt(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def user_columns(spark: Any, relation: str) -> list[str]:
    return [f.name for f in spark.table(relation).schema.fields if not f.name.startswith(HIDDEN_PREFIX)]


def assert_matches_query(spark: Any, schema: str, name: str, sql: str, context: str = "") -> None:
    relation = f"{bt(schema)}.{bt(name)}"
    spark.sql(f"REFRESH TABLE {relation}")
    columns = user_columns(spark, relation)
    expected = [f.name for f in spark.sql(sql).schema.fields]
    assert columns == expected, f"{relation}: columns {columns} != query columns {expected}"
    stored = f"SELECT {', '.join(bt(c) for c in columns)} FROM {relation}"
    # The query's rows are computed once, on their own: Spark 3.5's optimizer fails ("key not found")
    # on EXCEPT ALL over a query whose correlated scalar subquery it has decorrelated.
    spark.sql(sql).localCheckpoint().createOrReplaceTempView("oracle_query_rows")
    query = "SELECT * FROM oracle_query_rows"
    # Both differences in one Spark job (each job costs a small session a tenth of a second).
    side = "__oracle_side"
    differences = spark.sql(
        f"SELECT 'extra' AS {side}, d.* FROM ({stored} EXCEPT ALL {query}) d "
        f"UNION ALL SELECT 'missing' AS {side}, d.* FROM ({query} EXCEPT ALL {stored}) d"
    ).collect()
    extra = [row[1:] for row in differences if row[0] == "extra"]
    missing = [row[1:] for row in differences if row[0] == "missing"]
    if extra or missing:
        raise AssertionError(
            f"stream table {relation} ({context}) differs from its query:\n"
            f"  stored but not in the query: {extra[:20]}\n  in the query but not stored: {missing[:20]}"
        )


def make_spec(schema: str, name: str, sql: str, **options: Any) -> StreamTableSpec:
    settings = {"catalog_schema": f"{schema}_ivm", **options}  # a test may name another catalog
    return StreamTableSpec(model=name, schema=schema, name=name, sql=sql, **settings)


def refresh_and_check(
    spark: Any, schema: str, name: str, sql: str, context: str = "", **options: Any
) -> RefreshResult:
    result = run_stream_table(spark, make_spec(schema, name, sql, **options))
    assert_matches_query(spark, schema, name, sql, f"{context}; {result.summary()}")
    return result


def follow_writes(
    spark: Any, schema: str, streams: dict[str, str], writes: list[str], allowed: tuple[str, ...]
) -> None:
    """Create each stream table differentially, then after each write refresh and check them all;
    each refresh's action must be one of `allowed`."""
    for name, sql in streams.items():
        refresh_and_check(spark, schema, name, sql, "create", refresh_mode="differential")
    for write in writes:
        spark.sql(write)
        for name, sql in streams.items():
            result = refresh_and_check(spark, schema, name, sql, write, refresh_mode="differential")
            assert result.action in allowed, (name, result.summary())
