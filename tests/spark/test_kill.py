"""Atomicity: SIGKILL a refresh at points around the MERGE commit and the frontier write.

The next refresh must leave the stream table equal to its query and never apply a batch twice
(an aggregate's sums and counts would show a double application).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dbt_ivm.spark.runner import KILL_POINTS
from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _totals(schema: str) -> str:
    return (
        f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n, AVG(amount) AS mean "
        f"FROM {schema}.orders GROUP BY customer"
    )


def _events(schema: str) -> str:
    return f"SELECT kind, v FROM {schema}.events WHERE v IS NULL OR v > 0"


@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_refresh_recovers(spark: Any, spark_warehouse: str, spark_schema: str, point: str) -> None:
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.orders (id int NOT NULL, customer string, amount decimal(10,2)) USING iceberg"
    )
    spark.sql(f"ALTER TABLE {s}.orders SET IDENTIFIER FIELDS id")
    spark.sql(f"CREATE TABLE {s}.events (kind string, v int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'alice',10),(2,'alice',20),(3,'bob',30)")
    spark.sql(f"INSERT INTO {s}.events VALUES ('a',1),('a',1),('b',2)")
    streams = {"totals": _totals(s), "kept": _events(s)}
    for name, sql in streams.items():
        refresh_and_check(spark, s, name, sql, "create", full_refresh_threshold=100.0)

    spark.sql(f"INSERT INTO {s}.orders VALUES (4,'bob',40),(5,'carol',5)")
    spark.sql(f"UPDATE {s}.orders SET amount = amount + 1 WHERE id = 1")
    spark.sql(f"INSERT INTO {s}.events VALUES ('a',1),('c',3)")
    spark.sql(f"DELETE FROM {s}.events WHERE kind = 'b'")

    env = {**os.environ, "DBT_IVM_SPARK_KILL_AT": point, "DBT_IVM_SPARK_KILL_DELAY": "1.0"}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    for name, sql in streams.items():
        child = subprocess.run(
            [sys.executable, "-m", "tests.spark.kill_child", spark_warehouse, s, name, sql],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        # during_merge may finish before its timer fires; every other point must kill the child.
        if point != "during_merge":
            assert child.returncode == -9, (child.returncode, child.stdout, child.stderr[-3000:])

    for name, sql in streams.items():
        first = refresh_and_check(spark, s, name, sql, f"after kill at {point}", full_refresh_threshold=100.0)
        assert first.action in ("DIFFERENTIAL", "SKIP"), first.summary()
        again = refresh_and_check(spark, s, name, sql, "no changes", full_refresh_threshold=100.0)
        assert again.action == "SKIP", again.summary()

    spark.sql(f"DELETE FROM {s}.orders WHERE id = 2")
    spark.sql(f"INSERT INTO {s}.events VALUES ('c',3)")
    for name, sql in streams.items():
        later = refresh_and_check(spark, s, name, sql, "later batch", full_refresh_threshold=100.0)
        assert later.action == "DIFFERENTIAL", later.summary()
