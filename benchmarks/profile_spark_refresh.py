"""The floor of a Spark refresh: seconds and Spark jobs of a no-op and a one-row refresh.

    python benchmarks/profile_spark_refresh.py              # 3 repeats of each case
    python benchmarks/profile_spark_refresh.py --jobs       # also list every job of the last repeat
    python benchmarks/profile_spark_refresh.py --mode auto  # as dbt runs by default (AUTO weighs)
    python benchmarks/profile_spark_refresh.py --mode full --rows 1000000 --against 8730aa3  # FULL's cost
    python benchmarks/profile_spark_refresh.py --against decd45d --png floor.png  # side by side

An embedded Spark + Iceberg session holds `orders` (10,000 rows by default, `--rows`, keyed by `id`) in copy-on-write and
in merge-on-read form, with three stream tables over each: an aggregate, a keyed projection and a
join with `customers`. Each case changes one row of `orders` (or nothing) and refreshes every stream
table, counting the Spark jobs the refresh started (its job group) and timing it. Run by hand; prints
a Markdown table (kept in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
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


def create(spark: Any, rows: int) -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    spark.sql(
        f"CREATE TABLE {SCHEMA}.customers USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id') "
        "AS SELECT id, concat('c', id) AS name FROM range(100)"
    )
    for name, extra in (("orders_cow", ""), ("orders_mor", f", {MERGE_ON_READ}")):
        spark.sql(
            f"CREATE TABLE {SCHEMA}.{name} USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id'{extra}) "
            f"AS SELECT id, id % 100 AS customer_id, CAST(id % 50 AS INT) AS amount FROM range({int(rows)})"
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


def measure(repeats: int, mode: str, jobs: bool, rows: int) -> list[tuple[str, str, float, float, str]]:
    """(case, stream table, median seconds, median Spark jobs, action) of every case, "create" first."""
    warehouse = tempfile.mkdtemp(prefix="floor_")
    try:
        spark = get_or_create_session(SessionSettings(warehouse=warehouse, app_name="floor"))
        spark.sparkContext.setLogLevel("ERROR")
        create(spark, rows)
        specs = [
            StreamTableSpec(
                model=f"{st}_{kind}", schema=SCHEMA, name=f"{st}_{kind}", sql=sql, refresh_mode=mode
            )
            for kind in ("cow", "mor")
            for st, sql in queries(f"{SCHEMA}.orders_{kind}").items()
        ]
        rows: list[tuple[str, str, float, float, str]] = []
        for spec in specs:
            seconds, names, result = refresh(spark, spec)
            rows.append(("create", spec.name, seconds, len(names), result.action))
        for case, statement in CASES.items():
            timings: dict[str, list[tuple[float, list[str], RefreshResult]]] = {s.name: [] for s in specs}
            for repeat in range(repeats):
                for kind in ("cow", "mor"):
                    if statement is not None:
                        spark.sql(statement.format(t=f"{SCHEMA}.orders_{kind}", i=repeat * 7 + 1))
                for spec in specs:
                    timings[spec.name].append(refresh(spark, spec))
            for spec in specs:
                runs = timings[spec.name]
                last = runs[-1]
                median_jobs = statistics.median(len(r[1]) for r in runs)
                rows.append(
                    (case, spec.name, statistics.median(r[0] for r in runs), median_jobs, last[2].action)
                )
                if jobs:
                    print(f"{case} / {spec.name}: {last[2].summary()}", file=sys.stderr)
                    for name in last[1]:
                        print(f"    {name}", file=sys.stderr)
        spark.stop()
        return rows
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


def side_by_side(against: str, repeats: int, mode: str, png: str | None, rows: int) -> None:
    """Each tree in a child process of its own (its own JVM), `against` first, one after the other."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "against"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(other), against], check=True, cwd=root
        )
        try:
            measured = {}
            for label, src in ((against, other / "src"), ("this tree", root / "src")):
                out = subprocess.run(
                    [
                        *(sys.executable, __file__, "--child", "--repeats", str(repeats)),
                        *("--mode", mode, "--rows", str(rows)),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(src)},
                    cwd=root,
                ).stdout
                found = json.loads(out.strip().splitlines()[-1])
                assert found["source"].startswith(str(src)), f"{src} was not the tree measured"
                measured[label] = {(r[0], r[1]): r for r in found["rows"]}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=root)
    before, after = measured[against], measured["this tree"]
    print(f"| case | stream table | {against} s | this tree s | ratio | Spark jobs ({against} → this) |")
    print("|---|---|---:|---:|---:|---|")
    for key, row in after.items():
        old = before[key]
        print(
            f"| {key[0]} | {key[1]} | {old[2]:.2f} | {row[2]:.2f} | {old[2] / max(row[2], 1e-9):.2f}× "
            f"| {old[3]:g} → {row[3]:g} |"
        )
    if png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        cases = ["create", *CASES]
        figure, axis = plt.subplots(figsize=(7, 4))
        for offset, (label, rows) in enumerate(((against, before), ("this tree", after))):
            medians = [statistics.median(r[2] for k, r in rows.items() if k[0] == case) for case in cases]
            axis.bar([i + offset * 0.4 for i in range(len(cases))], medians, 0.4, label=label)
        axis.set_xticks([i + 0.2 for i in range(len(cases))], cases, fontsize=8)
        axis.set_ylabel("seconds (median over the six stream tables)")
        axis.set_title("Spark: creating a stream table and its refresh floor")
        axis.legend()
        figure.tight_layout()
        figure.savefig(png)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", action="store_true", help="list the jobs of each case's last repeat")
    parser.add_argument("--mode", choices=("differential", "auto", "full"), default="differential")
    parser.add_argument("--rows", type=int, default=10_000, help="rows of each orders table")
    parser.add_argument("--against", default=None, help="another commit, measured after it in one run")
    parser.add_argument("--png", default=None, help="with --against: draw the medians side by side")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.against:
        side_by_side(args.against, args.repeats, args.mode, args.png, args.rows)
        return 0
    rows = measure(args.repeats, args.mode, args.jobs, args.rows)
    if args.child:
        import dbt_ivm

        print(json.dumps({"source": dbt_ivm.__file__, "rows": rows}))
        return 0
    print("| case | stream table | action | seconds (median) | Spark jobs |")
    print("|---|---|---|---|---|")
    for case, name, seconds, jobs, action in rows:
        print(f"| {case} | {name} | {action} | {seconds:.2f} | {jobs:g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
