"""Child process for the kill tests, on a warehouse of their own (its own SparkSession and JVM).

    python -m tests.spark.kill_child prepare WAREHOUSE SCHEMA...  # in each SCHEMA: sources, stream
                                    # tables, a batch of DML, the first stream table refreshed
    python -m tests.spark.kill_child kill WAREHOUSE SCHEMA POINT  # the last stream table's refresh,
                                    # killed at POINT (dbt_ivm.spark.crash_points)
    python -m tests.spark.kill_child recover WAREHOUSE SCHEMA...  # the next refreshes of each
                                    # schema must be correct: prints "recovered SCHEMA" or the error

The test process never opens this warehouse, so each phase can use the tests' own session builder.
One process prepares every schema and one recovers them: a cold JVM makes a process's first
refreshes slow, so only the refresh that dies runs in a process of its own.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from typing import Any

from dbt_ivm.spark import crash_points
from tests.spark.oracle import refresh_and_check
from tests.spark.sessions import build_session

# during_merge: killed by a timer this far into the MERGE, which takes seconds on Spark.
MERGE_KILL_DELAY = 0.2


def streams(s: str) -> dict[str, str]:
    return {
        "kept": f"SELECT kind, v FROM {s}.events WHERE v IS NULL OR v > 0",
        # An aggregate shows a batch applied twice in its sums and counts.
        "totals": (
            f"SELECT customer, SUM(amount) AS total, COUNT(*) AS n, AVG(amount) AS mean "
            f"FROM {s}.orders GROUP BY customer"
        ),
    }


def prepare(spark: Any, s: str) -> None:
    sql = spark.sql
    sql(f"CREATE DATABASE IF NOT EXISTS {s}")
    sql(f"CREATE TABLE {s}.orders (id int NOT NULL, customer string, amount decimal(10,2)) USING iceberg")
    sql(f"ALTER TABLE {s}.orders SET IDENTIFIER FIELDS id")
    sql(f"CREATE TABLE {s}.events (kind string, v int) USING iceberg")
    sql(f"INSERT INTO {s}.orders VALUES (1,'alice',10),(2,'alice',20),(3,'bob',30)")
    sql(f"INSERT INTO {s}.events VALUES ('a',1),('a',1),('b',2)")
    for name, query in streams(s).items():
        refresh_and_check(spark, s, name, query, "create", refresh_mode="differential")
    sql(f"INSERT INTO {s}.orders VALUES (4,'bob',40),(5,'carol',5)")
    sql(f"UPDATE {s}.orders SET amount = amount + 1 WHERE id = 1")
    sql(f"INSERT INTO {s}.events VALUES ('a',1),('c',3)")
    sql(f"DELETE FROM {s}.events WHERE kind = 'b'")
    # 'kept' refreshes normally; 'totals' (last) dies at the kill point, in a process of its own.
    *first, _ = streams(s).items()
    for name, query in first:
        refresh_and_check(spark, s, name, query, "before the kill", refresh_mode="differential")


def die() -> None:
    """Like a crashed machine: the process group (this process and its JVM) is SIGKILLed."""
    os.killpg(os.getpgid(0), signal.SIGKILL)


def kill(spark: Any, s: str, kill_at: str) -> None:
    def hook(point: str) -> None:
        if point == kill_at == "during_merge":
            threading.Timer(MERGE_KILL_DELAY, die).start()
        elif point == kill_at:
            die()

    name, query = list(streams(s).items())[-1]
    crash_points.install(hook)
    refresh_and_check(spark, s, name, query, "killed", refresh_mode="differential")


def recover(spark: Any, s: str) -> None:
    sql = spark.sql
    for name, query in streams(s).items():
        first = refresh_and_check(spark, s, name, query, "after the kill", refresh_mode="differential")
        assert first.action in ("DIFFERENTIAL", "SKIP"), first.summary()
        again = refresh_and_check(spark, s, name, query, "no changes", refresh_mode="differential")
        assert again.action == "SKIP", again.summary()
    sql(f"DELETE FROM {s}.orders WHERE id = 2")
    sql(f"INSERT INTO {s}.events VALUES ('c',3)")
    for name, query in streams(s).items():
        later = refresh_and_check(spark, s, name, query, "later batch", refresh_mode="differential")
        assert later.action == "DIFFERENTIAL", later.summary()
    print(f"recovered {s}", flush=True)


def main() -> None:
    phase, warehouse, *schemas = sys.argv[1:]
    spark = build_session(warehouse)
    if phase == "prepare":
        for schema in schemas:
            prepare(spark, schema)
        return
    if phase == "kill":
        schema, kill_at = schemas
        kill(spark, schema, kill_at)
        return
    for schema in schemas:
        try:
            recover(spark, schema)
        except Exception:
            print(f"failed {schema}\n{traceback.format_exc()}", flush=True)


if __name__ == "__main__":
    main()
