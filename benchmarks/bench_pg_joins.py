"""PostgreSQL benchmark for outer joins and anti-joins (issue #10): DIFFERENTIAL vs FULL refresh.

    python benchmarks/bench_pg_joins.py                      # 10M orders, 3 batches of 1,000 changes
    python benchmarks/bench_pg_joins.py --quick              # 1M orders
    python benchmarks/bench_pg_joins.py --explain plans.txt  # plus one EXPLAINed DIFF refresh per stream

Run by hand; prints Markdown tables, progress on stderr, and draws docs/img/bench_pg_joins.png.

Data: `orders` (N rows) and `customers` (N/10 rows). Customers fall in four ranges: the first 80 %
have orders at random; the next 10 % have exactly one order each (deleting it makes the customer
orderless); the last 10 % have none. A tenth of the random orders reference customer ids above the
last customer (no such customer: the LEFT JOIN pads them with NULLs). Two stream tables, each kept
once with refresh_mode='differential' and once with refresh_mode='full':

    order_customer:  SELECT o.id, o.amount, c.name, c.tier
                     FROM orders o LEFT JOIN customers c ON c.id = o.customer_id
    orderless:       SELECT c.id, c.name FROM customers c
                     WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)

Each repeat: a refresh with nothing to do (SKIP), a one-row change (one order's amount) refreshed
DIFFERENTIAL, then one batch of --changes source rows in one transaction — order inserts, updates
(some moving the order to another customer) and deletes, customer updates, inserts and deletes,
among them changes that flip NOT EXISTS answers (an order for an orderless customer, the deletion
of a customer's only order, a customer inserted for orders that had none) — refreshed DIFFERENTIAL
and FULL side by side. Times are client wall clock around `run_stream_table`, median of the repeats.
At the end each DIFFERENTIAL table must equal its defining query (EXCEPT ALL both ways).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_postgres import engine_version, log, ratio, refresh
from pg_support import (
    drop_database,
    fmt_seconds,
    fresh_database,
    machine_description,
    markdown_table,
    median,
    start_server,
)
from profile_refresh import Recorder, one_line

from dbt_ivm.embedded import postgres_server
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.sqltext import HIDDEN_PREFIX, q

QUERIES = {
    "order_customer": (
        "SELECT o.id, o.amount, c.name, c.tier FROM orders o LEFT JOIN customers c ON c.id = o.customer_id"
    ),
    "orderless": (
        "SELECT c.id, c.name FROM customers c "
        "WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"
    ),
}
TARGET = 100.0  # FULL ÷ DIFF at 1,000 changes (issue #10)
NO_FALLBACK = 1e9
PLOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "bench_pg_joins.png"
AMOUNT = "round((random() * 500)::numeric, 2)"


# --------------------------------------------------------------------------------------------------
# Data


@dataclass
class World:
    """The customer ranges (see the module docstring) and what the batches did to them so far."""

    orders: int
    customers: int
    next_order: int = 0
    next_customer: int = 0
    deleted_orders: set[int] = field(default_factory=set)
    deleted_customers: set[int] = field(default_factory=set)
    single: list[int] = field(default_factory=list)  # customers whose only order is order (id - offset)
    orderless: list[int] = field(default_factory=list)  # existing customers without orders
    phantom_free: list[int] = field(default_factory=list)  # referenced by orders, no customer row yet

    def __post_init__(self) -> None:
        c = self.customers
        self.random_top = c * 8 // 10  # customers 1..random_top get the random orders
        self.single_top = c * 9 // 10  # random_top+1..single_top: one order each
        self.phantom_top = c + c // 10  # customer ids c+1..phantom_top: orders without a customer
        self.single_orders = self.single_top - self.random_top  # order ids 1..single_orders
        self.next_order = self.orders + 1
        self.next_customer = self.phantom_top + 1
        self.single = list(range(self.random_top + 1, self.single_top + 1))
        self.orderless = list(range(self.single_top + 1, c + 1))
        self.phantom_free = list(range(c + 1, self.phantom_top + 1))

    def random_customer_sql(self) -> str:
        """A customer id for a random order: one in ten has no customer row (yet)."""
        return (
            f"CASE WHEN random() < 0.1 THEN {self.customers + 1} + floor(random() * {self.phantom_top - self.customers})::int "
            f"ELSE 1 + floor(random() * {self.random_top})::int END"
        )


def load(conn: Any, world: World) -> float:
    """Create and fill customers and orders (indexes after the load), then VACUUM ANALYZE."""
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute("SELECT setseed(0.42)")
        cur.execute("CREATE TABLE customers (id int NOT NULL, name text NOT NULL, tier text NOT NULL)")
        cur.execute(
            "INSERT INTO customers SELECT g, 'customer ' || g, "
            "(ARRAY['standard', 'standard', 'premium', 'gold'])[1 + g %% 4] FROM generate_series(1, %s) g",
            (world.customers,),
        )
        cur.execute("ALTER TABLE customers ADD PRIMARY KEY (id)")
        cur.execute(
            "CREATE TABLE orders (id bigint NOT NULL, customer_id int, amount numeric(12,2), "
            "status text NOT NULL, created_at timestamptz NOT NULL)"
        )
        cur.execute(
            f"INSERT INTO orders SELECT g, CASE WHEN g <= %s THEN %s + g::int ELSE {world.random_customer_sql()} END, "
            f"{AMOUNT}, (ARRAY['open', 'paid', 'shipped'])[1 + g %% 3], "
            "timestamptz '2024-01-01' + g * interval '1 second' FROM generate_series(1, %s) g",
            (world.single_orders, world.random_top, world.orders),
        )
        cur.execute("ALTER TABLE orders ADD PRIMARY KEY (id)")
        cur.execute("CREATE INDEX orders_customer_id ON orders (customer_id)")
        cur.execute("VACUUM ANALYZE customers")
        cur.execute("VACUUM ANALYZE orders")
    return time.perf_counter() - started


@dataclass
class Batch:
    """How many source rows of each kind one batch changes (their sum is the batch size)."""

    order_inserts: int
    orderless_inserts: int  # an order for an orderless customer: NOT EXISTS flips to false
    order_updates: int
    order_moves: int  # updates that change customer_id (the join key)
    order_deletes: int
    single_deletes: int  # a customer's only order: NOT EXISTS flips to true
    customer_updates: int  # customers with orders (every one of their orders' joined rows changes)
    orderless_updates: int
    phantom_inserts: int  # a customer for orders that had none: the LEFT JOIN's padded rows match
    fresh_inserts: int  # a customer without orders
    customer_deletes: int  # customers with orders: their orders become padded
    orderless_deletes: int

    @staticmethod
    def of(size: int) -> Batch:
        shares = {
            "orderless_inserts": 0.02,
            "order_updates": 0.20,
            "order_moves": 0.05,
            "order_deletes": 0.13,
            "single_deletes": 0.02,
            "customer_updates": 0.08,
            "orderless_updates": 0.02,
            "phantom_inserts": 0.025,
            "fresh_inserts": 0.025,
            "customer_deletes": 0.04,
            "orderless_deletes": 0.01,
        }
        counts = {name: int(size * share) for name, share in shares.items()}
        return Batch(order_inserts=size - sum(counts.values()), **counts)

    @property
    def total(self) -> int:
        return sum(self.__dict__.values())

    def describe(self) -> str:
        orders = (
            f"orders {self.order_inserts + self.orderless_inserts} ins / "
            f"{self.order_updates + self.order_moves} upd / {self.order_deletes + self.single_deletes} del"
        )
        customers = (
            f"customers {self.phantom_inserts + self.fresh_inserts} ins / "
            f"{self.customer_updates + self.orderless_updates} upd / "
            f"{self.customer_deletes + self.orderless_deletes} del"
        )
        return f"{orders}; {customers}"


def _take(rng: random.Random, pool: list[int], count: int) -> list[int]:
    """Remove and return `count` random members of `pool`."""
    taken: list[int] = []
    for _ in range(min(count, len(pool))):
        index = rng.randrange(len(pool))
        pool[index], pool[-1] = pool[-1], pool[index]
        taken.append(pool.pop())
    return taken


def _pick_orders(rng: random.Random, world: World, count: int) -> list[int]:
    """Existing random orders (never the single orders, whose customers the batches track)."""
    chosen: set[int] = set()
    while len(chosen) < count:
        candidate = rng.randrange(world.single_orders + 1, world.next_order)
        if candidate not in world.deleted_orders:
            chosen.add(candidate)
    return sorted(chosen)


def _pick_customers(rng: random.Random, world: World, count: int) -> list[int]:
    """Existing customers that have random orders."""
    chosen: set[int] = set()
    while len(chosen) < count:
        candidate = rng.randint(1, world.random_top)
        if candidate not in world.deleted_customers:
            chosen.add(candidate)
    return sorted(chosen)


def apply_batch(conn: Any, rng: random.Random, world: World, batch: Batch, tag: int) -> float:
    """Apply one batch in one transaction; returns its wall-clock seconds."""
    updates = _pick_orders(rng, world, batch.order_updates + batch.order_moves + batch.order_deletes)
    rng.shuffle(updates)
    moves = updates[batch.order_updates : batch.order_updates + batch.order_moves]
    deletes = updates[batch.order_updates + batch.order_moves :]
    updates = updates[: batch.order_updates]
    flipped_on = _take(rng, world.single, batch.single_deletes)  # their only order goes
    deletes += [c - world.random_top for c in flipped_on]
    flipped_off = _take(rng, world.orderless, batch.orderless_inserts + batch.orderless_updates)
    orderless_updated = flipped_off[batch.orderless_inserts :]
    flipped_off = flipped_off[: batch.orderless_inserts]
    touched = _pick_customers(rng, world, batch.customer_updates + batch.customer_deletes)
    rng.shuffle(touched)
    customer_updates, customer_deletes = touched[: batch.customer_updates], touched[batch.customer_updates :]
    orderless_deletes = _take(rng, world.orderless, batch.orderless_deletes)
    phantoms = _take(rng, world.phantom_free, batch.phantom_inserts)
    fresh = list(range(world.next_customer, world.next_customer + batch.fresh_inserts))
    first = world.next_order
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        if batch.order_inserts:
            cur.execute(
                f"INSERT INTO orders SELECT g, {world.random_customer_sql()}, {AMOUNT}, 'open', now() "
                "FROM generate_series(%s, %s) g",
                (first, first + batch.order_inserts - 1),
            )
        if flipped_off:
            cur.execute(
                f"INSERT INTO orders SELECT %s + n - 1, c, {AMOUNT}, 'open', now() "
                "FROM unnest(%s::int[]) WITH ORDINALITY AS u(c, n)",
                (first + batch.order_inserts, flipped_off),
            )
        if updates:
            cur.execute(
                f"UPDATE orders SET amount = {AMOUNT}, status = 'paid' WHERE id = ANY(%s::bigint[])",
                (updates,),
            )
        if moves:
            cur.execute(
                f"UPDATE orders SET customer_id = {world.random_customer_sql()}, amount = {AMOUNT} "
                "WHERE id = ANY(%s::bigint[])",
                (moves,),
            )
        if deletes:
            cur.execute("DELETE FROM orders WHERE id = ANY(%s::bigint[])", (deletes,))
        if customer_updates or orderless_updated:
            cur.execute(
                "UPDATE customers SET name = 'customer ' || id || ' v' || %s, "
                "tier = (ARRAY['standard', 'premium', 'gold'])[1 + (id + %s) %% 3] WHERE id = ANY(%s::int[])",
                (tag, tag, customer_updates + orderless_updated),
            )
        if phantoms or fresh:
            cur.execute(
                "INSERT INTO customers SELECT c, 'customer ' || c, 'standard' FROM unnest(%s::int[]) c",
                (phantoms + fresh,),
            )
        if customer_deletes or orderless_deletes:
            cur.execute(
                "DELETE FROM customers WHERE id = ANY(%s::int[])", (customer_deletes + orderless_deletes,)
            )
        cur.execute("COMMIT")
    seconds = time.perf_counter() - started
    world.next_order += batch.order_inserts + len(flipped_off)
    world.next_customer += len(fresh)
    world.deleted_orders.update(deletes)
    world.deleted_customers.update(customer_deletes)
    world.orderless += flipped_on + fresh + orderless_updated
    return seconds


def touch_one_order(conn: Any, rng: random.Random, world: World) -> None:
    """The smallest change: one order's amount."""
    [order] = _pick_orders(rng, world, 1)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE orders SET amount = {AMOUNT} WHERE id = %s", (order,))


# --------------------------------------------------------------------------------------------------
# Refreshes


def spec_for(name: str, full: bool) -> StreamTableSpec:
    return StreamTableSpec(
        model=name + ("_full" if full else ""),
        schema="public",
        name=name + ("_full" if full else ""),
        sql=QUERIES[name],
        refresh_mode="full" if full else "differential",
        full_refresh_threshold=NO_FALLBACK,
        initiated_by="benchmark",
    )


@dataclass
class StreamRow:
    name: str
    rows: int = 0  # the stream table's rows after the load
    create: float = 0.0
    skip: list[float] = field(default_factory=list)  # nothing to do
    one: list[float] = field(default_factory=list)  # one changed order
    one_sql: list[float] = field(default_factory=list)  # of which in SQL statements
    diff: list[float] = field(default_factory=list)
    diff_sql: list[float] = field(default_factory=list)
    full: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)
    full_written: list[int] = field(default_factory=list)
    slowest: list[tuple[float, str]] = field(default_factory=list)  # of the last batch refresh


def traced(conn: Any, spec: StreamTableSpec, expected: str) -> tuple[float, float, RefreshResult, Recorder]:
    """A refresh with every statement timed: wall seconds, seconds in SQL, result, the recorder."""
    with Recorder(explain=False) as recorder:
        seconds, result = refresh(conn, spec, expected)
    return seconds, sum(s for s, _ in recorder.log), result, recorder


def check_equal(conn: Any, name: str) -> None:
    """The DIFFERENTIAL table's user columns hold exactly its query's rows (as multisets)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            (name,),
        )
        columns = ", ".join(q(c) for (c,) in cur.fetchall() if not c.startswith(HIDDEN_PREFIX))
        cur.execute("SET work_mem = '512MB'")
        query = f"SELECT {columns} FROM ({QUERIES[name]}) AS defining"
        stored = f"SELECT {columns} FROM {q(name)}"
        cur.execute(
            f"SELECT (SELECT count(*) FROM ({stored} EXCEPT ALL {query}) AS extra), "
            f"(SELECT count(*) FROM ({query} EXCEPT ALL {stored}) AS missing), "
            f"(SELECT count(*) FROM {q(name)})"
        )
        extra, missing, total = cur.fetchone()
        cur.execute("RESET work_mem")
    if extra or missing:
        raise SystemExit(
            f"{name}: the DIFFERENTIAL table differs from its query: {extra} rows too many, {missing} missing"
        )
    log(f"  {name}: DIFFERENTIAL table equals its query ({total:,} rows)")


def bench(
    server: postgres_server.PgServer,
    rows: int,
    changes: int,
    repeats: int,
    full_repeats: int,
    explain: Path | None,
    keep: bool,
) -> tuple[float, dict[str, StreamRow], Batch]:
    dbname = f"bench_joins_{rows}"
    conn = fresh_database(server, dbname)
    world = World(orders=rows, customers=max(rows // 10, 100))
    log(f"{rows:,} orders, {world.customers:,} customers: loading")
    load_seconds = load(conn, world)
    log(f"  loaded in {load_seconds:.1f}s")
    streams = {name: StreamRow(name) for name in QUERIES}
    for name, stream in streams.items():
        for full in (False, True):
            spec = spec_for(name, full)
            seconds, result = refresh(conn, spec, "CREATE")
            stream.create, stream.rows = (stream.create or seconds), result.rows_inserted
            log(f"  CREATE {spec.name}: {result.rows_inserted:,} rows in {seconds:.2f}s")
            with conn.cursor() as cur:
                cur.execute(f"VACUUM ANALYZE {q(spec.name)}")

    rng = random.Random(rows)
    batch = Batch.of(changes)
    log(f"  batch: {batch.total:,} changes ({batch.describe()})")
    for repeat in range(repeats):
        line = f"  #{repeat + 1}:"
        for name, stream in streams.items():
            seconds, _ = refresh(conn, spec_for(name, False), "SKIP")
            stream.skip.append(seconds)
        touch_one_order(conn, rng, world)
        for name, stream in streams.items():
            seconds, in_sql, _, _ = traced(conn, spec_for(name, False), "DIFFERENTIAL")
            stream.one.append(seconds)
            stream.one_sql.append(in_sql)
        dml = apply_batch(conn, rng, world, batch, repeat + 1)
        line += f" DML {dml:.3f}s;"
        for name, stream in streams.items():
            seconds, in_sql, result, recorder = traced(conn, spec_for(name, False), "DIFFERENTIAL")
            stream.diff.append(seconds)
            stream.diff_sql.append(in_sql)
            stream.written.append(result.rows_changed)
            stream.slowest = sorted(recorder.log, key=lambda item: -item[0])[:3]
            line += (
                f" {name} SKIP {stream.skip[-1] * 1e3:.0f}ms, 1 change {stream.one[-1] * 1e3:.0f}ms, "
                f"DIFF {seconds:.3f}s ({result.rows_changed} rows);"
            )
        if repeat >= repeats - full_repeats:  # the last ones
            for name, stream in streams.items():
                seconds, result = refresh(conn, spec_for(name, True), "FULL")
                stream.full.append(seconds)
                stream.full_written.append(result.rows_changed)
                line += f" {name} FULL {seconds:.2f}s ({result.rows_changed} rows);"
        log(line)
    for stream in streams.values():
        log(f"  {stream.name}: slowest statements of the last DIFF refresh:")
        for seconds, sql in stream.slowest:
            log(f"    {seconds * 1e3:8.1f} ms  {one_line(sql, 200)}")

    if explain is not None:
        log(f"  one more batch, refreshed DIFFERENTIAL under EXPLAIN (ANALYZE, BUFFERS) -> {explain}")
        apply_batch(conn, rng, world, batch, repeats + 1)
        with explain.open("w") as out:
            for name in streams:
                print(f"\n===== {name}: {QUERIES[name]}", file=out)
                with contextlib.redirect_stdout(out), Recorder(explain=True) as recorder:
                    seconds, result = refresh(conn, spec_for(name, False), "DIFFERENTIAL")
                print(f"\n===== {name}: {result.summary()}, wall {seconds:.3f}s; statements:", file=out)
                for stmt_seconds, sql in sorted(recorder.log, key=lambda item: -item[0])[:15]:
                    print(f"  {stmt_seconds * 1e3:9.2f} ms  {one_line(sql, 300)}", file=out)

    log("  checking the DIFFERENTIAL tables against their queries")
    for name in streams:
        check_equal(conn, name)
    conn.close()
    if not keep:
        drop_database(server, dbname)
    return load_seconds, streams, batch


# --------------------------------------------------------------------------------------------------
# Report


def results_table(rows: int, changes: int, streams: dict[str, StreamRow]) -> str:
    header = [
        "stream",
        "rows",
        "changes",
        "DIFF median",
        "FULL median",
        "FULL ÷ DIFF",
        f"target ≥ {TARGET:g}×?",
    ]
    lines = []
    for stream in streams.values():
        diff, full = median(stream.diff), median(stream.full)
        value = full / diff
        lines.append(
            [
                f"{stream.name} ({stream.rows / 1e6:.3g}M rows)",
                f"{rows / 1e6:g}M orders",
                f"{changes:,}",
                fmt_seconds(diff),
                f"{fmt_seconds(full)} (n={len(stream.full)})",
                ratio(value),
                "yes" if value >= TARGET else "**no**",
            ]
        )
    return markdown_table(header, lines)


def overhead_table(streams: dict[str, StreamRow]) -> str:
    header = [
        "stream",
        "no changes (SKIP)",
        "1 changed order (DIFF)",
        "batch (DIFF)",
        "batch: in SQL",
        "fixed share (1 change ÷ batch)",
        "rows written (DIFF / FULL)",
    ]
    lines = []
    for stream in streams.values():
        diff = median(stream.diff)
        lines.append(
            [
                stream.name,
                fmt_seconds(median(stream.skip)),
                f"{fmt_seconds(median(stream.one))} (SQL {fmt_seconds(median(stream.one_sql))})",
                fmt_seconds(diff),
                fmt_seconds(median(stream.diff_sql)),
                f"{median(stream.one) / diff:.0%}",
                f"{stream.written} / {stream.full_written}",
            ]
        )
    return markdown_table(header, lines)


def plot(path: Path, rows: int, changes: int, streams: dict[str, StreamRow]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [
        ("no changes (SKIP)", "skip", "#bbbbbb"),
        ("DIFF, 1 change", "one", "#9ecae1"),
        (f"DIFF, {changes:,} changes", "diff", "#3182bd"),
        ("FULL", "full", "#e6550d"),
    ]
    names = list(streams)
    width = 0.2
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for index, (label, attribute, color) in enumerate(series):
        values = [median(getattr(streams[n], attribute)) for n in names]
        positions = [i + (index - 1.5) * width for i in range(len(names))]
        bars = ax.bar(positions, values, width, label=label, color=color)
        ax.bar_label(bars, labels=[fmt_seconds(v) for v in values], fontsize=7, padding=2)
    for i, name in enumerate(names):
        value = median(streams[name].full) / median(streams[name].diff)
        ax.annotate(
            f"FULL ÷ DIFF = {ratio(value)}",
            (i, 1.0),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="top",
            fontsize=9,
        )
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("refresh wall time (s, log scale)")
    ax.set_title(f"PostgreSQL, {rows / 1e6:g}M orders: DIFFERENTIAL vs FULL refresh (median)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, 0.93))
    ax.set_ylim(top=ax.get_ylim()[1] * 10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000, help="orders (customers: a tenth)")
    parser.add_argument("--quick", action="store_true", help="1M orders")
    parser.add_argument("--repeats", type=int, default=3, help="batches (median reported)")
    parser.add_argument("--full-repeats", type=int, default=None, help="FULL refreshes (default: --repeats)")
    parser.add_argument("--changes", type=int, default=1_000, help="source rows changed per batch")
    parser.add_argument("--explain", type=Path, default=None, help="write EXPLAINs of one more batch here")
    parser.add_argument("--plot", type=Path, default=PLOT)
    parser.add_argument("--data-dir", default="/tmp/dbt_ivm_bench/pg_joins")
    parser.add_argument("--pg-bin", default=None, help="another PostgreSQL build's bin directory")
    parser.add_argument("--keep", action="store_true", help="leave the cluster and the database behind")
    args = parser.parse_args()
    rows = 1_000_000 if args.quick else args.rows
    full_repeats = min(args.full_repeats or args.repeats, args.repeats)

    data_dir = Path(args.data_dir)
    server = start_server(data_dir, args.pg_bin)
    machine = machine_description(server)
    engine = engine_version()
    log(f"{machine}; engine {engine}")
    started = time.perf_counter()
    try:
        load_seconds, streams, batch = bench(
            server, rows, args.changes, args.repeats, full_repeats, args.explain, args.keep
        )
    finally:
        if not args.keep:
            postgres_server.stop(data_dir)
    elapsed = time.perf_counter() - started

    print(f"Machine: {machine}\n\nEngine: git {engine}\n")
    print(
        f"Total run time: {elapsed / 60:.1f} min; load {fmt_seconds(load_seconds)}; "
        f"median of {args.repeats} batches (FULL: {full_repeats}); batch: {batch.describe()}.\n"
    )
    print(results_table(rows, args.changes, streams) + "\n")
    print("Fixed overhead of a DIFFERENTIAL refresh:\n")
    print(overhead_table(streams) + "\n")
    plot(args.plot, rows, args.changes, streams)
    log(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
