"""Spark benchmark: DIFFERENTIAL refresh of stream tables vs dbt's `table` materialization, by size.

    python benchmarks/bench_spark.py                         # orders at 10M rows, recent changes
    python benchmarks/bench_spark.py --rows 1000000          # a quick check at 1M rows
    python benchmarks/bench_spark.py --changes uniform       # changes spread over every partition
    python benchmarks/bench_spark.py --writes merge-on-read  # the changes written as delete files
    python benchmarks/bench_spark.py --streams customer_totals --batch 1000

    # issue 13's sweep (run once per --changes): sizes, both source write modes, plotted
    python benchmarks/bench_spark.py --rows 1000000,10000000,100000000 \\
        --writes copy-on-write,merge-on-read --changes recent --plot docs/img/bench_spark_sizes.png

    # a run stopped before its table (its progress log kept): the table, targets and plot from the log
    python benchmarks/bench_spark.py --from-log sweep.err --stream-writes merge-on-read --plot out.png

Run by hand; prints a Markdown table (kept in docs/benchmarks.md) and progress on stderr.

One embedded Spark + Iceberg session (its working directory a temporary one, so no `metastore_db`
or `derby.log` lands in the caller's) over a fresh warehouse directory runs one case per source size
(`--rows`, a comma list) and write mode of `orders` (`--writes`, a comma list: copy-on-write and/or
merge-on-read, how its UPDATE, DELETE and MERGE write), in that order. Each case starts from an empty
schema `bench` (the previous case's tables are dropped with PURGE, so the disk holds one case) with
`customers` (100k rows, primary key `id`) and `orders` (N rows, primary key `id`, customer ids
spread over the 100k customers, partitioned by `order_day`: 100 days of N/100 orders, ids in time
order), and the stream tables (`--streams`, default both), written `--stream-writes` (their own
write.delete/update/merge.mode table properties):

    customer_totals:  SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count
                      FROM bench.orders GROUP BY customer_id
    order_customers:  SELECT o.id, o.amount, c.name, c.region
                      FROM bench.orders o JOIN bench.customers c ON o.customer_id = c.id

Each repeat changes a fixed batch of `--batch` orders whatever the size (half updates through MERGE
INTO, a tenth of them moving the order to another customer; 30 % inserts; 20 % deletes; one
statement each): `--changes recent` updates and deletes orders of the last day and inserts new ones
there (orders are corrected soon after they are placed); `--changes uniform` picks them from all of
history, so every partition's file is rewritten (copy-on-write). Then, for each stream in turn, it
times side by side (a) `run_stream_table`, which must do a DIFFERENTIAL refresh (with `--mode
differential`), and (b) what dbt's `table` materialization runs for the same model: `CREATE OR
REPLACE TABLE ... USING iceberg AS <query>` (into `<stream>_rebuild`). Times are wall clock around
each call, median of the repeats. At the end of each case every stream table is checked against its
query (EXCEPT ALL both ways). The table has a row per (rows, source writes, stream); below it, issue
13's targets and whether they were met: the refresh grows < 2× from the smallest to the largest size
(the rebuild ~100× from 1M to 100M), the rebuild takes ≥ 10× the refresh at 100M rows and ≥ 3× at
10M, a merge-on-read source refreshes no slower than a copy-on-write one. `--plot PATH` draws refresh
(solid) and rebuild (dashed) time against the source rows, log-log, as a PNG. The exit status is 1
when a stream table differs from its query or (`--mode differential`) a refresh was not DIFFERENTIAL;
the last case's tables stay in a `--warehouse` given (a temporary one is removed unless `--keep`).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

from dbt_ivm.spark.runner import drop_stream_table, run_stream_table
from dbt_ivm.spark.session import SessionSettings, get_or_create_session
from dbt_ivm.spec import RefreshMode, StreamTableSpec

SCHEMA = "bench"
CUSTOMERS = 100_000
DAYS = 100
WRITE_MODES = ("copy-on-write", "merge-on-read")
REGIONS = ("north", "south", "east", "west")
# issue 13's targets
GROWTH_TARGET = 2.0  # refresh(largest) ÷ refresh(smallest) below this
RATIO_TARGETS = {100_000_000: 10.0, 10_000_000: 3.0}  # rebuild ÷ refresh at least this, at that size


@dataclass(frozen=True)
class Stream:
    name: str
    query: str
    columns: str  # the user columns compared by the EXCEPT ALL check

    @property
    def rebuild_table(self) -> str:
        return f"{self.name}_rebuild"


STREAMS = {
    stream.name: stream
    for stream in (
        Stream(
            "customer_totals",
            "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count "
            f"FROM {SCHEMA}.orders GROUP BY customer_id",
            "customer_id, total, order_count",
        ),
        Stream(
            "order_customers",
            "SELECT o.id, o.amount, c.name, c.region "
            f"FROM {SCHEMA}.orders o JOIN {SCHEMA}.customers c ON o.customer_id = c.id",
            "id, amount, name, region",
        ),
    )
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.monotonic()
    value = action()
    return time.monotonic() - started, value


def write_modes(writes: str) -> str:
    """Iceberg's write.delete/update/merge.mode table properties, as TBLPROPERTIES entries."""
    return ", ".join(f"'write.{op}.mode'='{writes}'" for op in ("delete", "update", "merge"))


# --------------------------------------------------------------------------------------------------
# Data


def reset_schema(spark: Any) -> None:
    """Drop the previous case: unregister its stream tables, drop every table with PURGE (its files
    go too), then the schema."""
    for name in STREAMS:
        drop_stream_table(spark, SCHEMA, name)
    if not spark.catalog.databaseExists(SCHEMA):
        return
    for table in spark.sql(f"SHOW TABLES IN {SCHEMA}").collect():
        if not table.isTemporary:
            spark.sql(f"DROP TABLE IF EXISTS {SCHEMA}.{table.tableName} PURGE")
    spark.sql(f"DROP SCHEMA {SCHEMA}")


def create_customers(spark: Any) -> None:
    regions = ", ".join(f"'{region}'" for region in REGIONS)
    spark.sql(
        f"CREATE TABLE {SCHEMA}.customers USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id') "
        f"AS SELECT id, concat('customer ', id) AS name, "
        f"element_at(array({regions}), CAST(pmod(id, {len(REGIONS)}) + 1 AS INT)) AS region "
        f"FROM range({CUSTOMERS})"
    )


def create_orders(spark: Any, rows: int, writes: str) -> None:
    spark.range(rows).selectExpr(
        "id",
        f"pmod(hash(id), {CUSTOMERS}) AS customer_id",
        "CAST(pmod(hash(id, 7), 100000) / 100.0 AS DECIMAL(10,2)) AS amount",
        f"CAST(id * {DAYS} DIV {rows} AS INT) AS order_day",
    ).createOrReplaceTempView("bench_orders_source")
    spark.sql(
        f"CREATE TABLE {SCHEMA}.orders USING iceberg PARTITIONED BY (order_day) "
        f"TBLPROPERTIES ('dbt_ivm.primary_key'='id', {write_modes(writes)}) "
        "AS SELECT * FROM bench_orders_source ORDER BY order_day"
    )
    spark.catalog.dropTempView("bench_orders_source")


class ChangeBatches:
    """`size` changed orders per batch; never touches a deleted id twice, inserts fresh ids."""

    def __init__(self, rows: int, changes: str, size: int, seed: int = 42) -> None:
        self.rows = rows
        self.size = size
        # recent: the last day's orders (and the new ones, inserted there); uniform: all of them
        self.first_changed = rows - rows // DAYS if changes == "recent" else 0
        self.next_id = rows
        self.deleted: set[int] = set()
        self.random = random.Random(seed)

    def _existing_ids(self, count: int, taken: set[int]) -> list[int]:
        chosen: list[int] = []
        while len(chosen) < count:
            candidate = self.random.randrange(self.first_changed, self.next_id)
            if candidate not in self.deleted and candidate not in taken:
                taken.add(candidate)
                chosen.append(candidate)
        return chosen

    def _row(self, order_id: int) -> tuple[int, int, Decimal, int]:
        amount = Decimal(self.random.randrange(1, 100_000)) / 100
        day = min(order_id * DAYS // self.rows, DAYS - 1)  # new orders: the last day
        return (order_id, self.random.randrange(CUSTOMERS), amount, day)

    def apply(self, spark: Any) -> int:
        updates, inserts = self.size // 2, self.size * 3 // 10
        deletes = self.size - updates - inserts
        live = self.next_id - self.first_changed - len(self.deleted)
        if updates + deletes > live:
            raise SystemExit(
                f"a batch of {self.size:,} changes updates and deletes {updates + deletes:,} orders, "
                f"but only {live:,} can be changed: use a smaller --batch or --changes uniform"
            )
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
        return self.size


def differences(spark: Any, stream: Stream) -> tuple[int, int]:
    """Rows the stream table holds beyond its query's, and rows of the query it lacks (multisets)."""
    stored = f"SELECT {stream.columns} FROM {SCHEMA}.{stream.name}"
    query = f"SELECT {stream.columns} FROM ({stream.query})"
    extra = spark.sql(f"{stored} EXCEPT ALL {query}").count()
    missing = spark.sql(f"{query} EXCEPT ALL {stored}").count()
    return extra, missing


# --------------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Options:
    repeats: int
    batch: int
    changes: str
    mode: RefreshMode
    stream_writes: str


@dataclass
class Result:
    """One (source rows, source writes, stream): its refreshes and rebuilds."""

    rows: int
    writes: str
    stream: str
    create: float = 0.0  # the stream table's first build
    first_rebuild: float = 0.0
    refresh: list[float] = field(default_factory=list)
    rebuild: list[float] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    extra: int | None = None  # None: the check did not run (a run recovered from its log)
    missing: int | None = None

    @property
    def refresh_median(self) -> float:
        return statistics.median(self.refresh)

    @property
    def rebuild_median(self) -> float:
        return statistics.median(self.rebuild)

    @property
    def ratio(self) -> float:
        return self.rebuild_median / self.refresh_median

    @property
    def correct(self) -> bool:
        return self.extra == self.missing == 0


def spec_for(stream: Stream, options: Options) -> StreamTableSpec:
    return StreamTableSpec(
        model=stream.name,
        schema=SCHEMA,
        name=stream.name,
        sql=stream.query,
        refresh_mode=options.mode,
        initiated_by="benchmark",
        table_properties={f"write.{op}.mode": options.stream_writes for op in ("delete", "update", "merge")},
    )


def run_case(spark: Any, rows: int, writes: str, streams: Sequence[Stream], options: Options) -> list[Result]:
    """One source size and write mode: fresh tables, the repeats, the check."""
    log(f"== {rows:,} rows, orders written {writes}")
    reset_schema(spark)
    spark.sql(f"CREATE SCHEMA {SCHEMA}")
    create_customers(spark)
    build_seconds, _ = timed(lambda: create_orders(spark, rows, writes))
    log(f"orders: {rows:,} rows in {build_seconds:.1f}s")
    specs = {stream.name: spec_for(stream, options) for stream in streams}
    results = {stream.name: Result(rows, writes, stream.name) for stream in streams}
    rebuilds = {
        stream.name: f"CREATE OR REPLACE TABLE {SCHEMA}.{stream.rebuild_table} USING iceberg AS {stream.query}"
        for stream in streams
    }
    for stream in streams:
        result = results[stream.name]
        result.create, created = timed(partial(run_stream_table, spark, specs[stream.name]))
        result.first_rebuild, _ = timed(partial(spark.sql, rebuilds[stream.name]))
        log(
            f"{stream.name}: {created.summary()} ({result.create:.1f}s), "
            f"first {stream.rebuild_table} build {result.first_rebuild:.1f}s"
        )

    batches = ChangeBatches(rows, options.changes, options.batch)
    for repeat in range(1, options.repeats + 1):
        change_seconds, size = timed(lambda: batches.apply(spark))
        log(f"repeat {repeat}: changed {size:,} rows in {change_seconds:.1f}s")
        for stream in streams:
            result = results[stream.name]
            refresh_seconds, refreshed = timed(partial(run_stream_table, spark, specs[stream.name]))
            if options.mode == "differential" and refreshed.action != "DIFFERENTIAL":
                log(f"{stream.name}: expected a DIFFERENTIAL refresh, got {refreshed.summary()}")
            rebuild_seconds, _ = timed(partial(spark.sql, rebuilds[stream.name]))
            log(
                f"repeat {repeat}: {stream.name} refresh {refresh_seconds:.2f}s ({refreshed.summary()}), "
                f"rebuild {rebuild_seconds:.2f}s"
            )
            result.refresh.append(refresh_seconds)
            result.rebuild.append(rebuild_seconds)
            result.actions.append(refreshed.action)

    for stream in streams:
        result = results[stream.name]
        check_seconds, (result.extra, result.missing) = timed(partial(differences, spark, stream))
        log(
            f"{stream.name} vs its query: {result.extra} extra, {result.missing} missing rows "
            f"({check_seconds:.1f}s)"
        )
    return list(results.values())


# --------------------------------------------------------------------------------------------------
# A run recovered from its progress log

CASE_LINE = re.compile(r"== (?P<rows>[\d,]+) rows, orders written (?P<writes>[\w-]+)")
REPEAT_LINE = re.compile(
    r"repeat \d+: (?P<stream>\w+) refresh (?P<refresh>[\d.]+)s \((?P<action>[A-Z]+)\b.*\), "
    r"rebuild (?P<rebuild>[\d.]+)s"
)
CHECK_LINE = re.compile(r"(?P<stream>\w+) vs its query: (?P<extra>\d+) extra, (?P<missing>\d+) missing")


def results_from_log(lines: Sequence[str]) -> list[Result]:
    """The results a run logged on stderr, for a run stopped before its table (a check not reached
    stays unchecked; a case without a single repeat is left out)."""
    results: dict[tuple[int, str, str], Result] = {}
    case: tuple[int, str] | None = None
    for line in lines:
        if found := CASE_LINE.search(line):
            case = (int(found["rows"].replace(",", "")), found["writes"])
        elif case and (found := REPEAT_LINE.search(line)):
            result = results.setdefault((*case, found["stream"]), Result(*case, found["stream"]))
            result.refresh.append(float(found["refresh"]))
            result.rebuild.append(float(found["rebuild"]))
            result.actions.append(found["action"])
        elif case and (found := CHECK_LINE.search(line)) and (key := (*case, found["stream"])) in results:
            results[key].extra, results[key].missing = int(found["extra"]), int(found["missing"])
    return list(results.values())


# --------------------------------------------------------------------------------------------------
# Report


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def size_label(rows: int) -> str:
    return f"{rows / 1e6:g}M" if rows >= 1_000_000 else f"{rows / 1e3:g}k"


def results_table(results: Sequence[Result]) -> str:
    lines = [
        "| source rows | source writes | stream | refresh (median) | rebuild (median) "
        "| rebuild ÷ refresh | extra / missing |",
        "|---:|---|---|---:|---:|---:|---|",
    ]
    for result in results:
        refresh = seconds(result.refresh_median)
        if set(result.actions) != {"DIFFERENTIAL"}:  # --mode auto, or not the refresh asked for
            refresh += f" ({'/'.join(sorted(set(result.actions)))})"
        lines.append(
            f"| {result.rows:,} | {result.writes} | {result.stream} | {refresh} | "
            f"{seconds(result.rebuild_median)} | {result.ratio:.1f}× | {checked(result)} |"
        )
    return "\n".join(lines)


def checked(result: Result) -> str:
    return "not checked" if result.extra is None else f"{result.extra} / {result.missing}"


def verdict(met: bool) -> str:
    return "met" if met else "**NOT met**"


def targets(results: Sequence[Result], sizes: Sequence[int], writes: Sequence[str]) -> list[str]:
    """Issue 13's targets, one line each, for whatever this run measured."""
    by_case = {(r.rows, r.writes, r.stream): r for r in results}
    streams = list(dict.fromkeys(r.stream for r in results))
    lines: list[str] = []
    smallest, largest = min(sizes), max(sizes)
    if smallest == largest:
        lines.append(f"- refresh growth < {GROWTH_TARGET:g}×: needs two sizes (only {smallest:,} ran)")
    else:
        for stream in streams:
            for mode in writes:
                low, high = by_case[smallest, mode, stream], by_case[largest, mode, stream]
                growth = high.refresh_median / low.refresh_median
                lines.append(
                    f"- refresh growth < {GROWTH_TARGET:g}× from {size_label(smallest)} to "
                    f"{size_label(largest)} rows, {stream}, {mode} source: "
                    f"{seconds(low.refresh_median)} → {seconds(high.refresh_median)} = {growth:.2f}× "
                    f"(rebuild {high.rebuild_median / low.rebuild_median:.1f}×): {verdict(growth < GROWTH_TARGET)}"
                )
    for size, target in sorted(RATIO_TARGETS.items()):
        if size not in sizes:
            lines.append(f"- rebuild ÷ refresh ≥ {target:g}× at {size_label(size)} rows: not run")
            continue
        for stream in streams:
            for mode in writes:
                result = by_case[size, mode, stream]
                lines.append(
                    f"- rebuild ÷ refresh ≥ {target:g}× at {size_label(size)} rows, {stream}, {mode} "
                    f"source: {result.ratio:.1f}×: {verdict(result.ratio >= target)}"
                )
    if set(WRITE_MODES) <= set(writes):
        for size in sizes:
            for stream in streams:
                cow, mor = (by_case[size, mode, stream] for mode in WRITE_MODES)
                share = mor.refresh_median / cow.refresh_median
                lines.append(
                    f"- merge-on-read source no slower than copy-on-write, {size_label(size)} rows, "
                    f"{stream}: {seconds(mor.refresh_median)} vs {seconds(cow.refresh_median)} "
                    f"= {share:.2f}×: {verdict(share <= 1.0)}"
                )
    else:
        lines.append("- merge-on-read source no slower than copy-on-write: needs both --writes")
    return lines


PALETTE = {  # (stream, source writes): a hue per stream, darker for copy-on-write
    ("customer_totals", "copy-on-write"): "#3182bd",
    ("customer_totals", "merge-on-read"): "#9ecae1",
    ("order_customers", "copy-on-write"): "#e6550d",
    ("order_customers", "merge-on-read"): "#fdae6b",
}
MARKERS = {"copy-on-write": "o", "merge-on-read": "^"}


def plot(path: Path, results: Sequence[Result], options: Options) -> None:
    """Refresh (solid) and rebuild (dashed) median seconds against the source rows, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(8, 6))
    refresh_lines, rebuild_lines = [], []
    for stream, writes in dict.fromkeys((r.stream, r.writes) for r in results):
        points = sorted(
            (r for r in results if (r.stream, r.writes) == (stream, writes)), key=lambda r: r.rows
        )
        sizes = [r.rows for r in points]
        color = PALETTE.get((stream, writes), "#636363")
        marker = MARKERS.get(writes, "o")
        label = f"{stream}, {writes} source"
        refresh_lines += ax.plot(
            sizes, [r.refresh_median for r in points], color=color, marker=marker, label=f"{label}: refresh"
        )
        rebuild_lines += ax.plot(
            sizes,
            [r.rebuild_median for r in points],
            color=color,
            marker=marker,
            linestyle="--",
            label=f"{label}: rebuild",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = sorted({r.rows for r in results})
    ax.set_xticks(sizes, [size_label(size) for size in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    # plain numbers of seconds; the minor ticks labelled only when the axis spans little more than a decade
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.5)))
    ax.set_xlabel("source rows (orders, log scale)")
    ax.set_ylabel("wall time, median (s, log scale)")
    ax.set_title(
        f"Spark + Iceberg, {options.batch:,} {options.changes} changes: "
        "differential refresh vs CREATE OR REPLACE TABLE … AS",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    # two columns: the refreshes (solid), then the rebuilds (dashed)
    ax.legend(
        handles=refresh_lines + rebuild_lines,
        fontsize=7,
        ncol=2,
        handlelength=3.5,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------
# Command line


def comma_list(
    parse: Callable[[str], Any], choices: Sequence[str] | None = None
) -> Callable[[str], list[Any]]:
    def parse_list(text: str) -> list[Any]:
        values = [parse(item.strip()) for item in text.split(",") if item.strip()]
        if not values:
            raise argparse.ArgumentTypeError("an empty list")
        for value in values:
            if choices is not None and value not in choices:
                raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(choices)}")
        return list(dict.fromkeys(values))

    return parse_list


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=comma_list(int), default=[10_000_000], help="orders rows, a comma list of sizes"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10_000, help="changed orders per repeat, at every size")
    parser.add_argument("--changes", choices=("recent", "uniform"), default="recent")
    parser.add_argument(
        "--mode",
        choices=("differential", "auto"),
        default="differential",
        help="refresh_mode: differential (always the delta path) or auto (may choose FULL)",
    )
    parser.add_argument(
        "--writes",
        type=comma_list(str, WRITE_MODES),
        default=["copy-on-write"],
        help="how orders' UPDATE, DELETE and MERGE write (merge-on-read: position delete files); "
        "a comma list, a case each",
    )
    parser.add_argument(
        "--streams",
        type=comma_list(str, tuple(STREAMS)),
        default=list(STREAMS),
        help=f"stream tables, a comma list of {', '.join(STREAMS)}",
    )
    parser.add_argument(
        "--stream-writes",
        choices=WRITE_MODES,
        default="copy-on-write",
        help="how the stream tables' own MERGE writes (their write.*.mode table properties)",
    )
    parser.add_argument("--plot", type=Path, help="draw refresh and rebuild time against rows (PNG)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--warehouse", help="warehouse directory (default: a temporary one)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary warehouse and working directory"
    )
    parser.add_argument(
        "--from-log",
        type=Path,
        help="no Spark: the table, targets and plot of an earlier run from its stderr log "
        "(give that run's --batch, --changes, --mode and --stream-writes)",
    )
    args = parser.parse_args()
    if args.batch < 10:
        parser.error("--batch: at least 10 changes")
    options = Options(args.repeats, args.batch, args.changes, args.mode, args.stream_writes)
    plot_path = args.plot.resolve() if args.plot else None
    if args.from_log:
        results = results_from_log(args.from_log.read_text().splitlines())
        if not results:
            parser.error(f"--from-log: no repeats in {args.from_log}")
        return report(results, options, f"recovered from {args.from_log}", plot_path)

    # Spark runs in a scratch directory: nothing it writes to its working directory is left behind.
    caller = Path.cwd()
    scratch = Path(tempfile.mkdtemp(prefix="bench_spark_"))
    warehouse = Path(args.warehouse).resolve() if args.warehouse else scratch / "warehouse"
    settings = SessionSettings(
        warehouse=warehouse,
        master=args.master,
        app_name="bench-spark",
        driver_memory=args.driver_memory,
        fast_start=False,  # long, heavy queries: full JIT and the default GC
    )
    os.chdir(scratch)
    try:
        streams = [STREAMS[name] for name in args.streams]
        return run(settings, sorted(args.rows), args.writes, streams, options, plot_path)
    finally:
        os.chdir(caller)
        if args.keep:
            log(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def run(
    settings: SessionSettings,
    sizes: list[int],
    writes: list[str],
    streams: list[Stream],
    options: Options,
    plot_path: Path | None,
) -> int:
    log(f"starting Spark ({settings.master}) over {settings.warehouse}")
    spark = get_or_create_session(settings)
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    results: list[Result] = []
    for rows in sizes:
        for mode in writes:
            results += run_case(spark, rows, mode, streams, options)
    elapsed = time.monotonic() - started
    status = report(results, options, f"master {settings.master}; total {elapsed / 60:.1f} min", plot_path)
    spark.stop()
    return status


def report(results: list[Result], options: Options, run: str, plot_path: Path | None) -> int:
    """The Markdown table, the targets and the plot; the exit status."""
    sizes = sorted({r.rows for r in results})
    writes = list(dict.fromkeys(r.writes for r in results))
    print(
        f"\norders: {', '.join(f'{rows:,}' for rows in sizes)} rows, {CUSTOMERS:,} customers, "
        f"{DAYS} daily partitions, written {' and '.join(writes)}; batch: {options.batch:,} changed "
        f"rows per repeat (50 % updates, 30 % inserts, 20 % deletes), {options.changes} changes; "
        f"stream tables written {options.stream_writes}, refresh_mode='{options.mode}'; median of "
        f"{max(len(r.refresh) for r in results)} repeats, {run}\n"
    )
    print(results_table(results))
    print("\nTargets (issue 13):")
    for line in targets(results, sizes, writes):
        print(line)
    unexpected = [r for r in results if options.mode == "differential" and set(r.actions) != {"DIFFERENTIAL"}]
    for result in unexpected:
        print(f"\n{result.stream} at {result.rows:,} rows ({result.writes}): refreshes {result.actions}")
    if plot_path is not None:
        plot(plot_path, results, options)
        log(f"plot written to {plot_path}")
    return 0 if all(r.correct for r in results) and not unexpected else 1


if __name__ == "__main__":
    sys.exit(main())
