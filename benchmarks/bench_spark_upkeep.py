"""What many refreshes leave behind on Spark, with and without upkeep (spark/upkeep.py).

    python benchmarks/bench_spark_upkeep.py --refreshes 500 --every 100 --png docs/img/bench_spark_upkeep.png

One embedded Spark + Iceberg session; a source `orders` (10,000 rows) and two copies of one
aggregate stream table over it, each with its own catalog schema: `without` runs with upkeep switched
off (its catalog tables created with the properties they had before upkeep, and the steps patched
out, as the engine behaved before), `with` runs the engine as it is. Each round changes one row of
`orders` and refreshes both (AUTO, in alternating order), forgetting what the process read of the
catalog first, as a new `dbt run` or `dbt-ivm refresh` process would. Both stream tables set
`history.expire.max-snapshot-age-ms` to one minute, so the stream table's own expiry shows within
the run (Iceberg's default is five days). Every `--every` rounds it prints, per side, the median
refresh of the last rounds, a cold read of AUTO's recent refreshes, and the files and bytes under
the history table's and the stream table's `metadata/`. Run by hand; the table goes to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dbt_ivm.spark import registry, upkeep
from dbt_ivm.spark.iceberg import load_table
from dbt_ivm.spark.runner import run_stream_table
from dbt_ivm.spec import StreamTableSpec

SIDES = ("without", "with")
SQL = "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM bench.orders GROUP BY customer_id"
RETENTION = {"history.expire.max-snapshot-age-ms": "60000"}
# The catalog tables' properties before upkeep (no metadata.json deleted after commits).
OLD_CATALOG_PROPERTIES = registry.REGISTRY_PROPERTIES.split(", 'write.metadata.")[0]


@contextlib.contextmanager
def upkeep_off() -> Iterator[None]:
    """The engine as it was before upkeep: no metadata properties, no compaction, no expiry."""
    saved = (upkeep.METADATA_PROPERTIES, upkeep.COMPACT_AT_FILES, upkeep.expire_stream_table)
    upkeep.METADATA_PROPERTIES = {}
    upkeep.COMPACT_AT_FILES = sys.maxsize
    upkeep.expire_stream_table = lambda spark, table, still_read=tuple: None
    try:
        yield
    finally:
        upkeep.METADATA_PROPERTIES, upkeep.COMPACT_AT_FILES, upkeep.expire_stream_table = saved


def spec(side: str) -> StreamTableSpec:
    return StreamTableSpec(
        model=f"totals_{side}",
        schema="bench",
        name=f"totals_{side}",
        sql=SQL,
        refresh_mode="auto",
        catalog_schema=f"ivm_{side}",
        table_properties=RETENTION,
    )


def side_context(side: str) -> contextlib.AbstractContextManager[None]:
    return upkeep_off() if side == "without" else contextlib.nullcontext()


def metadata(spark: Any, table: tuple[str, str]) -> tuple[int, int]:
    """Files and bytes under the table's metadata directory."""
    folder = Path(str(load_table(spark, table).location()).removeprefix("file:")) / "metadata"
    sizes = [entry.stat().st_size for entry in os.scandir(folder)]
    return len(sizes), sum(sizes)


def cold_recent_read(spark: Any, side: str) -> float:
    registry._RECENT.forget()
    started = time.perf_counter()
    registry.recent_refreshes(spark, f"ivm_{side}", f"bench.totals_{side}")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=500)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--png", help="draw the plot to this file")
    parser.add_argument("--json", help="also save the rows here")
    args = parser.parse_args()
    from dbt_ivm.spark.session import SessionSettings, get_or_create_session

    warehouse = tempfile.mkdtemp(prefix="upkeep_")
    try:
        spark = get_or_create_session(SessionSettings(warehouse=warehouse, app_name="upkeep"))
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql("CREATE SCHEMA bench")
        spark.sql(
            "CREATE TABLE bench.orders USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id') "
            "AS SELECT id, id % 100 AS customer_id, CAST(id % 50 AS INT) AS amount FROM range(10000)"
        )
        spark.sql("CREATE SCHEMA ivm_without")
        for name, columns in (
            ("stream_tables", registry.STREAM_TABLES_COLUMNS),
            ("refresh_history", registry.HISTORY_COLUMNS),
        ):
            spark.sql(
                f"CREATE TABLE ivm_without.{name} ({columns}) USING iceberg TBLPROPERTIES ({OLD_CATALOG_PROPERTIES})"
            )
        for side in SIDES:
            with side_context(side):
                run_stream_table(spark, spec(side))
        seconds: dict[str, list[float]] = {side: [] for side in SIDES}
        rows: list[dict[str, Any]] = []
        print(
            "| refreshes | upkeep | refresh s (median of the last rounds) | mean | cold read of recent refreshes s "
            "| history metadata files | history metadata MB | stream table metadata files | stream table metadata MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for round_number in range(1, args.refreshes + 1):
            spark.sql(f"UPDATE bench.orders SET amount = amount + 1 WHERE id = {round_number * 37 % 10000}")
            order = SIDES if round_number % 2 else SIDES[::-1]
            for side in order:
                registry._REGISTRATIONS.forget()
                registry._RECENT.forget()
                with side_context(side):
                    started = time.perf_counter()
                    result = run_stream_table(spark, spec(side))
                    seconds[side].append(time.perf_counter() - started)
                assert not result.warnings, result.warnings
            if round_number % args.every:
                continue
            for side in SIDES:
                last = seconds[side][-args.every :]
                history_files, history_bytes = metadata(spark, (f"ivm_{side}", "refresh_history"))
                table_files, table_bytes = metadata(spark, ("bench", f"totals_{side}"))
                row = {
                    "refreshes": round_number,
                    "side": side,
                    "median": statistics.median(last),
                    "mean": statistics.fmean(last),
                    "recent_read": cold_recent_read(spark, side),
                    "history_files": history_files,
                    "history_mb": history_bytes / 1e6,
                    "table_files": table_files,
                    "table_mb": table_bytes / 1e6,
                }
                rows.append(row)
                print(
                    f"| {round_number} | {side} | {row['median']:.2f} | {row['mean']:.2f} | {row['recent_read']:.2f} "
                    f"| {history_files} | {row['history_mb']:.1f} | {table_files} | {row['table_mb']:.1f} |",
                    flush=True,
                )
        for side in SIDES:
            count = spark.sql(f"SELECT count(*) FROM ivm_{side}.refresh_history").collect()[0][0]
            print(f"{side}: {count} history rows", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        if args.png:
            plot(rows, args.png)
        spark.stop()
        return 0
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("median", "refresh, s (median)"),
        ("recent_read", "cold read of AUTO's history, s"),
        ("history_mb", "history table metadata, MB"),
        ("table_mb", "stream table metadata, MB"),
    )
    figure, axes = plt.subplots(1, len(panels), figsize=(16, 3.8))
    for axis, (key, title) in zip(axes, panels, strict=True):
        for side in SIDES:
            points = [(r["refreshes"], r[key]) for r in rows if r["side"] == side]
            axis.plot(*zip(*points, strict=True), marker="o", label=f"{side} upkeep")
        axis.set_title(title)
        axis.set_xlabel("refreshes")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
