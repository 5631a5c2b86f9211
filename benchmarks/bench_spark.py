"""Spark benchmark: DIFFERENTIAL refresh of a stream table vs dbt's `table` materialization.

    python benchmarks/bench_spark.py                    # orders at 10M rows, recent changes
    python benchmarks/bench_spark.py --changes uniform  # changes spread over every partition
    python benchmarks/bench_spark.py --rows 1000000     # a quick check at 1M rows
    python benchmarks/bench_spark.py --writes merge-on-read  # the changes written as delete files

Run by hand; prints a Markdown table (kept in docs/benchmarks.md) and progress on stderr.

An embedded Spark + Iceberg session over a fresh warehouse directory holds `orders` (N rows, 100k
customers, primary key `id`, partitioned by `order_day`: 100 days of N/100 orders, ids in time
order) and the stream table `customer_totals` (per-customer SUM and COUNT). Each repeat changes
0.1 % of the rows (half updates through MERGE INTO, 30 % inserts, 20 % deletes, one statement each):
`--changes recent` updates and deletes orders of the last day and inserts new ones there (orders are
corrected soon after they are placed); `--changes uniform` picks them from all of history, so every
partition's file is rewritten (copy-on-write). Then it times side by side (a) `run_stream_table`, which must do a DIFFERENTIAL
refresh, and (b) what dbt's `table` materialization runs for the same model: `CREATE OR REPLACE
TABLE ... USING iceberg AS <query>`. Times are wall clock around each call, median of the repeats.
At the end the stream table is checked against its query (EXCEPT ALL both ways).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from typing import Any

from dbt_ivm.spark.runner import run_stream_table
from dbt_ivm.spark.session import SessionSettings, get_or_create_session
from dbt_ivm.spec import StreamTableSpec

SCHEMA = "bench"
CUSTOMERS = 100_000
DAYS = 100
QUERY = (
    "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count "
    f"FROM {SCHEMA}.orders GROUP BY customer_id"
)
COLUMNS = "customer_id, total, order_count"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(action: Any) -> tuple[float, Any]:
    started = time.monotonic()
    value = action()
    return time.monotonic() - started, value


def create_orders(spark: Any, rows: int, writes: str = "copy-on-write") -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    spark.range(rows).selectExpr(
        "id",
        f"pmod(hash(id), {CUSTOMERS}) AS customer_id",
        "CAST(pmod(hash(id, 7), 100000) / 100.0 AS DECIMAL(10,2)) AS amount",
        f"CAST(id * {DAYS} DIV {rows} AS INT) AS order_day",
    ).createOrReplaceTempView("bench_orders_source")
    modes = "".join(f", 'write.{op}.mode'='{writes}'" for op in ("delete", "update", "merge"))
    spark.sql(
        f"CREATE TABLE {SCHEMA}.orders USING iceberg PARTITIONED BY (order_day) "
        f"TBLPROPERTIES ('dbt_ivm.primary_key'='id'{modes}) "
        "AS SELECT * FROM bench_orders_source ORDER BY order_day"
    )
    spark.catalog.dropTempView("bench_orders_source")


class ChangeBatches:
    """0.1 % of the rows per batch; never touches a deleted id twice, inserts fresh ids."""

    def __init__(self, rows: int, changes: str, seed: int = 42) -> None:
        self.rows = rows
        # recent: the last day's orders; uniform: all of them
        self.first_changed = rows - rows // DAYS if changes == "recent" else 0
        self.next_id = rows
        self.deleted: set[int] = set()
        self.random = random.Random(seed)

    def _existing_ids(self, count: int, taken: set[int]) -> list[int]:
        chosen: list[int] = []
        while len(chosen) < count:
            candidate = self.random.randrange(self.first_changed, self.rows)
            if candidate not in self.deleted and candidate not in taken:
                taken.add(candidate)
                chosen.append(candidate)
        return chosen

    def _row(self, order_id: int) -> tuple[int, int, Decimal, int]:
        amount = Decimal(self.random.randrange(1, 100_000)) / 100
        day = min(order_id * DAYS // self.rows, DAYS - 1)  # new orders: the last day
        return (order_id, self.random.randrange(CUSTOMERS), amount, day)

    def apply(self, spark: Any) -> int:
        size = max(self.rows // 1000, 10)
        updates, inserts = size // 2, size * 3 // 10
        deletes = size - updates - inserts
        taken: set[int] = set()
        update_ids = self._existing_ids(updates, taken)
        delete_ids = self._existing_ids(deletes, taken)
        self.deleted.update(delete_ids)
        insert_ids = list(range(self.next_id, self.next_id + inserts))
        self.next_id += inserts
        schema = "id BIGINT, customer_id BIGINT, amount DECIMAL(10,2), order_day INT"
        # a tenth of the updates move the order to another customer, the rest change the amount
        update_rows = [self._row(i) for i in update_ids]
        spark.createDataFrame(update_rows, schema).createOrReplaceTempView("bench_updates")
        spark.sql(
            f"MERGE INTO {SCHEMA}.orders AS t USING bench_updates AS s ON t.id = s.id "
            "WHEN MATCHED AND s.id % 10 = 0 THEN UPDATE SET t.customer_id = s.customer_id, "
            "t.amount = s.amount "
            "WHEN MATCHED THEN UPDATE SET t.amount = s.amount"
        )
        spark.createDataFrame([self._row(i) for i in insert_ids], schema).createOrReplaceTempView(
            "bench_inserts"
        )
        spark.sql(f"INSERT INTO {SCHEMA}.orders SELECT * FROM bench_inserts")
        spark.createDataFrame([(i,) for i in delete_ids], "id BIGINT").createOrReplaceTempView(
            "bench_deletes"
        )
        spark.sql(f"DELETE FROM {SCHEMA}.orders WHERE id IN (SELECT id FROM bench_deletes)")
        for view in ("bench_updates", "bench_inserts", "bench_deletes"):
            spark.catalog.dropTempView(view)
        return size


def differences(spark: Any, table: str) -> tuple[int, int]:
    extra = spark.sql(
        f"SELECT {COLUMNS} FROM {SCHEMA}.{table} EXCEPT ALL SELECT {COLUMNS} FROM ({QUERY})"
    ).count()
    missing = spark.sql(
        f"SELECT {COLUMNS} FROM ({QUERY}) EXCEPT ALL SELECT {COLUMNS} FROM {SCHEMA}.{table}"
    ).count()
    return extra, missing


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--changes", choices=("recent", "uniform"), default="recent")
    parser.add_argument(
        "--mode",
        choices=("differential", "auto"),
        default="differential",
        help="refresh_mode: differential (always the delta path) or auto (may choose FULL)",
    )
    parser.add_argument(
        "--writes",
        choices=("copy-on-write", "merge-on-read"),
        default="copy-on-write",
        help="how orders' UPDATE, DELETE and MERGE write (merge-on-read: position delete files)",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--warehouse", help="warehouse directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary warehouse")
    args = parser.parse_args()

    warehouse = args.warehouse or tempfile.mkdtemp(prefix="bench_spark_")
    settings = SessionSettings(
        warehouse=warehouse,
        master=args.master,
        app_name="bench-spark",
        driver_memory=args.driver_memory,
        fast_start=False,  # long, heavy queries: full JIT and the default GC
    )
    try:
        return run(settings, args.rows, args.repeats, args.changes, args.mode, args.writes)
    finally:
        if not args.warehouse and not args.keep:
            shutil.rmtree(warehouse, ignore_errors=True)


def run(settings: SessionSettings, rows: int, repeats: int, changes: str, mode: str, writes: str) -> int:
    log(f"starting Spark ({settings.master}) over {settings.warehouse}")
    spark = get_or_create_session(settings)
    spark.sparkContext.setLogLevel("ERROR")
    spec = StreamTableSpec(
        model="customer_totals",
        schema=SCHEMA,
        name="customer_totals",
        sql=QUERY,
        refresh_mode=mode,
    )
    build_seconds, _ = timed(lambda: create_orders(spark, rows, writes))
    log(f"orders: {rows:,} rows in {build_seconds:.1f}s")
    create_seconds, created = timed(lambda: run_stream_table(spark, spec))
    log(f"stream table: {created.summary()} ({create_seconds:.1f}s)")
    table_sql = f"CREATE OR REPLACE TABLE {SCHEMA}.ct_table USING iceberg AS {QUERY}"
    first_table_seconds, _ = timed(lambda: spark.sql(table_sql))
    log(f"ct_table first build: {first_table_seconds:.1f}s")

    batches = ChangeBatches(rows, changes)
    actions: set[str] = set()
    differential: list[float] = []
    rebuild: list[float] = []
    for repeat in range(1, repeats + 1):
        change_seconds, size = timed(lambda: batches.apply(spark))
        log(f"repeat {repeat}: changed {size:,} rows in {change_seconds:.1f}s")
        diff_seconds, result = timed(lambda: run_stream_table(spark, spec))
        if mode == "differential" and result.action != "DIFFERENTIAL":
            log(f"expected a DIFFERENTIAL refresh, got {result.summary()}")
            return 1
        actions.add(result.action)
        table_seconds, _ = timed(lambda: spark.sql(table_sql))
        log(
            f"repeat {repeat}: differential {diff_seconds:.2f}s ({result.summary()}), "
            f"table rebuild {table_seconds:.2f}s"
        )
        differential.append(diff_seconds)
        rebuild.append(table_seconds)

    extra, missing = differences(spark, "customer_totals")
    table_extra, table_missing = differences(spark, "ct_table")
    diff_median = statistics.median(differential)
    table_median = statistics.median(rebuild)
    ratio = table_median / diff_median
    batch = max(rows // 1000, 10)
    print(f"\norders: {rows:,} rows, {CUSTOMERS:,} customers, {DAYS} daily partitions; ", end="")
    print(f"batch: {batch:,} changed rows (0.1 %), {changes} changes, written {writes}")
    print(f"repeats: {repeats}, master {settings.master}; initial stream table build ", end="")
    print(f"{create_seconds:.1f}s, first ct_table build {first_table_seconds:.1f}s\n")
    print("| customer_totals | " + " | ".join(f"run {i}" for i in range(1, repeats + 1)), end="")
    print(" | median |")
    print("|---" * (repeats + 2) + "|")
    for label, times, median in (
        (f"refresh_mode='{mode}': {'/'.join(sorted(actions))}", differential, diff_median),
        ("dbt `table`: CREATE OR REPLACE TABLE … AS", rebuild, table_median),
    ):
        cells = " | ".join(seconds(t) for t in times)
        print(f"| {label} | {cells} | {seconds(median)} |")
    print(f"\nratio (table rebuild / differential): {ratio:.1f}× — target ≥10× ", end="")
    print("met" if ratio >= 10 else "NOT met")
    print(f"stream table vs query: {extra} extra, {missing} missing rows (EXCEPT ALL both ways)")
    print(f"ct_table vs query: {table_extra} extra, {table_missing} missing rows")
    spark.stop()
    return 0 if extra == missing == table_extra == table_missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
