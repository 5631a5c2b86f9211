"""The floor of a Spark refresh: seconds and Spark jobs of a no-op and a one-row refresh.

    python benchmarks/profile_spark_refresh.py              # 3 repeats of each case
    python benchmarks/profile_spark_refresh.py --jobs       # also list every job of the last repeat
    python benchmarks/profile_spark_refresh.py --mode auto  # as dbt runs by default (AUTO weighs)

An embedded Spark + Iceberg session holds `orders` (10,000 rows, keyed by `id`) in copy-on-write and
in merge-on-read form, with three stream tables over each: an aggregate, a keyed projection and a
join with `customers`. Each case changes one row of `orders` (or nothing) and refreshes every stream
table, counting the Spark jobs the refresh started (its job group) and timing it. Run by hand; prints
a Markdown table (kept in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from dbt_ivm.spark.runner import run_stream_table
from dbt_ivm.spark.session import SessionSettings, get_or_create_session
from dbt_ivm.spec import RefreshResult, StreamTableSpec

SCHEMA = "floor"
MERGE_ON_READ = ", ".join(f"'write.{op}.mode'='merge-on-read'" for op in ("delete", "update", "merge"))
CASES = {
    "no change": None,
    "1-row UPDATE": "UPDATE {t} SET amount = amount + 1 WHERE id = {i}",
    "1-row INSERT": "INSERT INTO {t} VALUES ({i} + 1000000, {i} % 100, 5)",
    "1-row DELETE": "DELETE FROM {t} WHERE id = {i} + 1000000",
}


def queries(orders: str) -> dict[str, str]:
    return {
        "aggregate": f"SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM {orders} GROUP BY customer_id",
        "projection": f"SELECT id, amount FROM {orders} WHERE amount > 10",
        "join": f"SELECT o.id, c.name FROM {orders} o JOIN {SCHEMA}.customers c ON o.customer_id = c.id",
    }


def create(spark: Any) -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    spark.sql(
        f"CREATE TABLE {SCHEMA}.customers USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id') "
        "AS SELECT id, concat('c', id) AS name FROM range(100)"
    )
    for name, extra in (("orders_cow", ""), ("orders_mor", f", {MERGE_ON_READ}")):
        spark.sql(
            f"CREATE TABLE {SCHEMA}.{name} USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id'{extra}) "
            "AS SELECT id, id % 100 AS customer_id, CAST(id % 50 AS INT) AS amount FROM range(10000)"
        )


def refresh(spark: Any, spec: StreamTableSpec) -> tuple[float, list[str], RefreshResult]:
    """Seconds, the names of the Spark jobs it ran, and the result."""
    context = spark.sparkContext
    group = f"floor-{uuid.uuid4().hex[:8]}"
    context.setJobGroup(group, spec.name)
    try:
        started = time.perf_counter()
        result = run_stream_table(spark, spec)
        seconds = time.perf_counter() - started
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    jobs = sorted(tracker.getJobIdsForGroup(group))
    store = context._jsc.sc().statusStore()
    names = [str(store.job(job).name()) for job in jobs]
    return seconds, names, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", action="store_true", help="list the jobs of each case's last repeat")
    parser.add_argument("--mode", choices=("differential", "auto"), default="differential")
    args = parser.parse_args()
    warehouse = tempfile.mkdtemp(prefix="floor_")
    try:
        spark = get_or_create_session(SessionSettings(warehouse=warehouse, app_name="floor"))
        spark.sparkContext.setLogLevel("ERROR")
        create(spark)
        specs = [
            StreamTableSpec(
                model=f"{st}_{kind}", schema=SCHEMA, name=f"{st}_{kind}", sql=sql, refresh_mode=args.mode
            )
            for kind in ("cow", "mor")
            for st, sql in queries(f"{SCHEMA}.orders_{kind}").items()
        ]
        for spec in specs:
            run_stream_table(spark, spec)
        rows: list[tuple[str, str, float, float, str]] = []
        for case, statement in CASES.items():
            timings: dict[str, list[tuple[float, list[str], RefreshResult]]] = {s.name: [] for s in specs}
            for repeat in range(args.repeats):
                for kind in ("cow", "mor"):
                    if statement is not None:
                        spark.sql(statement.format(t=f"{SCHEMA}.orders_{kind}", i=repeat * 7 + 1))
                for spec in specs:
                    timings[spec.name].append(refresh(spark, spec))
            for spec in specs:
                runs = timings[spec.name]
                last = runs[-1]
                jobs = statistics.median(len(r[1]) for r in runs)
                rows.append((case, spec.name, statistics.median(r[0] for r in runs), jobs, last[2].action))
                if args.jobs:
                    print(f"{case} / {spec.name}: {last[2].summary()}", file=sys.stderr)
                    for name in last[1]:
                        print(f"    {name}", file=sys.stderr)
        print("| case | stream table | action | seconds (median) | Spark jobs |")
        print("|---|---|---|---|---|")
        for case, name, seconds, jobs, action in rows:
            print(f"| {case} | {name} | {action} | {seconds:.2f} | {jobs:g} |")
        spark.stop()
        return 0
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
