"""A star of nine dimensions joined twice through one CTE (TPC-DS Q64's form, 20 inputs) on Spark:
Spark reads each changed source as it was at the frontier, so a delta telescopes to one term per
changed input, however many change at once; it is created in seconds and every batch, one that
changes every source too, refreshes differentially (tests/postgres/test_planning_budget.py is the
PostgreSQL side, where such a batch is past the planning budget and recomputed)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark

DIMENSIONS = 9


def test_a_star_joined_twice_refreshes_every_batch_differentially(spark: Any, spark_schema: str) -> None:
    s, dims = spark_schema, range(DIMENSIONS)
    # One commit per table (CREATE … AS SELECT): this test is about planning, not loading.
    keys = ", ".join(f"CAST(1 + id % 5 AS int) AS d{i}" for i in dims)
    spark.sql(
        f"CREATE TABLE {s}.fact USING iceberg AS SELECT CAST(id AS int) AS id, {keys}, CAST(id AS int) AS v FROM range(1, 41)"
    )
    for i in dims:
        spark.sql(
            f"CREATE TABLE {s}.dim{i} USING iceberg AS SELECT CAST(id AS int) AS k, concat('n', id) AS name FROM range(1, 6)"
        )
    joins = " ".join(f"JOIN {s}.dim{i} ON dim{i}.k = fact.d{i}" for i in dims)
    names = ", ".join(f"dim{i}.name AS n{i}" for i in dims)
    sql = (
        f"WITH cs AS (SELECT fact.id, fact.v, {names} FROM {s}.fact {joins}) "
        "SELECT c1.id, c1.v + c2.v AS v2, c1.n0, c2.n8 FROM cs c1 JOIN cs c2 ON c1.id = c2.id + 1"
    )
    started = time.monotonic()
    created = refresh_and_check(spark, s, "pairs", sql, "create")
    assert created.action == "CREATE" and time.monotonic() - started < 120, created.summary()
    for i in dims:
        spark.sql(f"UPDATE {s}.dim{i} SET name = concat(name, 'y') WHERE k = 2")
    spark.sql(f"UPDATE {s}.fact SET v = v + 1 WHERE id < 5")
    every = refresh_and_check(spark, s, "pairs", sql, "every source changed", refresh_mode="differential")
    assert every.action == "DIFFERENTIAL", every.summary()
