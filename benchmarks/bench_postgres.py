"""PostgreSQL benchmark: DIFFERENTIAL vs FULL refresh, and what change capture costs writers.

    python benchmarks/bench_postgres.py              # orders at 1M and 10M rows (~25 min)
    python benchmarks/bench_postgres.py --quick      # orders at 1M only, fewer repeats
    python benchmarks/bench_postgres.py --rows 2000000 --repeats 5 --json out.json

Run by hand; prints Markdown tables (kept in docs/benchmarks.md) and progress on stderr.

Refresh part, per table size: `orders` (N rows) and `customers` (100k rows), and four stream tables
over them — customer_totals and order_details, each once refreshed DIFFERENTIAL (refresh_mode
'differential': 'auto' may choose to recompute a large batch, by its threshold or by cost) and once
with refresh_mode='full' (our FULL refresh: recompute, then write only the rows that differ). Each
repeat applies one batch of order changes (half inserts, 30 % updates — a tenth of them moving the
order to another customer — and 20 % deletes) in one transaction, then refreshes all four, so DIFF
and FULL are timed side by side on the same data. A plain CREATE TABLE AS of each defining query is
timed for reference. Times are client wall clock around `run_stream_table` (everything a `dbt run`
would wait for), median of the repeats.

Capture part: two identical tables, one with capture triggers (a stream table reads it), one without;
the same bulk INSERT / UPDATE / DELETE of 100k rows and the same single-row INSERT loops run on both,
alternately, and the medians are compared.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pg_support import (
    drop_database,
    fmt_seconds,
    fresh_database,
    machine_description,
    markdown_table,
    median,
    start_server,
    timed,
)

from dbt_ivm.embedded import postgres_server
from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import RefreshResult, StreamTableSpec

CUSTOMER_TOTALS = (
    "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer_id"
)
ORDER_DETAILS = "SELECT c.name, c.tier, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id"
QUERIES = {"customer_totals": CUSTOMER_TOTALS, "order_details": ORDER_DETAILS}
# AUTO would fall back to FULL above this fraction of the source; far out of reach, so DIFF is measured.
NO_FALLBACK = 1e9
BATCH_SIZES = (1, 1_000, 100_000)


def engine_version() -> str:
    """The checkout's commit, flagged when src/ has uncommitted changes (results depend on both)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "src"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + (" + uncommitted changes in src/" if dirty else "")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Data


def load(conn: Any, orders: int, customers: int) -> float:
    """Create and fill customers and orders (set-based, indexes after the load), then VACUUM ANALYZE."""
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute("SELECT setseed(0.42)")
        cur.execute("CREATE TABLE customers (id int NOT NULL, name text NOT NULL, tier text NOT NULL)")
        cur.execute(
            "INSERT INTO customers SELECT g, 'customer ' || g, "
            "(ARRAY['standard', 'standard', 'premium', 'gold'])[1 + g %% 4] FROM generate_series(1, %s) g",
            (customers,),
        )
        cur.execute("ALTER TABLE customers ADD PRIMARY KEY (id)")
        cur.execute("CREATE TABLE orders (id bigint NOT NULL, customer_id int, amount numeric(10,2))")
        cur.execute(
            "INSERT INTO orders SELECT g, 1 + floor(random() * %s)::int, round((random() * 500)::numeric, 2) "
            "FROM generate_series(1, %s) g",
            (customers, orders),
        )
        cur.execute("ALTER TABLE orders ADD PRIMARY KEY (id)")
        cur.execute("VACUUM ANALYZE customers")
        cur.execute("VACUUM ANALYZE orders")
    return time.perf_counter() - started


@dataclass
class OrderIds:
    """Which order ids exist, so updates and deletes hit real rows."""

    next_id: int
    deleted: set[int] = field(default_factory=set)

    def pick(self, rng: random.Random, count: int) -> list[int]:
        chosen: list[int] = []
        taken: set[int] = set()
        while len(chosen) < count:
            for candidate in rng.sample(range(1, self.next_id), min(self.next_id - 1, 2 * count + 10)):
                if candidate not in self.deleted and candidate not in taken:
                    taken.add(candidate)
                    chosen.append(candidate)
                    if len(chosen) == count:
                        break
        return chosen


@dataclass
class Batch:
    inserts: int
    updates: int
    moves: int  # updates that also change customer_id (the group key / join key)
    deletes: int

    @property
    def total(self) -> int:
        return self.inserts + self.updates + self.moves + self.deletes

    def describe(self) -> str:
        return f"{self.inserts} ins / {self.updates + self.moves} upd / {self.deletes} del"


def batch_mix(size: int, repeat: int) -> Batch:
    """Half inserts, 30 % updates (a tenth of them move the order to another customer), 20 % deletes.

    A single change rotates through insert, update and delete across repeats.
    """
    if size == 1:
        return [Batch(1, 0, 0, 0), Batch(0, 1, 0, 0), Batch(0, 0, 0, 1)][repeat % 3]
    inserts = size // 2
    all_updates = size * 3 // 10
    moves = all_updates // 10
    return Batch(inserts, all_updates - moves, moves, size - inserts - all_updates)


def apply_batch(conn: Any, rng: random.Random, ids: OrderIds, batch: Batch, customers: int) -> float:
    """Apply one batch of order changes in one transaction; returns its wall-clock seconds."""
    changed = ids.pick(rng, batch.updates + batch.moves + batch.deletes)
    updates = changed[: batch.updates]
    moves = changed[batch.updates : batch.updates + batch.moves]
    deletes = changed[batch.updates + batch.moves :]
    amount = "round((random() * 500)::numeric, 2)"
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        if batch.inserts:
            cur.execute(
                f"INSERT INTO orders SELECT g, 1 + floor(random() * %s)::int, {amount} "
                "FROM generate_series(%s, %s) g",
                (customers, ids.next_id, ids.next_id + batch.inserts - 1),
            )
        if updates:
            cur.execute(f"UPDATE orders SET amount = {amount} WHERE id = ANY(%s::bigint[])", (updates,))
        if moves:
            cur.execute(
                f"UPDATE orders SET customer_id = 1 + floor(random() * %s)::int, amount = {amount} "
                "WHERE id = ANY(%s::bigint[])",
                (customers, moves),
            )
        if deletes:
            cur.execute("DELETE FROM orders WHERE id = ANY(%s::bigint[])", (deletes,))
        cur.execute("COMMIT")
    ids.next_id += batch.inserts
    ids.deleted.update(deletes)
    return time.perf_counter() - started


# --------------------------------------------------------------------------------------------------
# Refresh benchmark


def spec_for(name: str, full: bool) -> StreamTableSpec:
    return StreamTableSpec(
        model=name + ("_full" if full else ""),
        schema="public",
        name=name + ("_full" if full else ""),
        sql=QUERIES[name],
        refresh_mode="full" if full else "differential",
        initiated_by="benchmark",
    )


def refresh(conn: Any, spec: StreamTableSpec, expected: str) -> tuple[float, RefreshResult]:
    seconds, result = timed(lambda: run_stream_table(conn, spec))
    if result.action != expected:
        raise SystemExit(f"{spec.name}: expected a {expected} refresh, got {result.summary()}")
    return seconds, result


def create_table_as(conn: Any, sql: str) -> float:
    def run() -> None:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE bench_recompute AS " + sql)

    seconds, _ = timed(run)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE bench_recompute")
    return seconds


def fingerprint(conn: Any, table: str) -> tuple[Any, ...]:
    """Cheap content check between the DIFF- and FULL-maintained copies (correctness is the tests' job)."""
    columns = {
        "customer_totals": "customer_id, total, order_count",
        "order_details": "name, tier, amount",
    }[table.removesuffix("_full")]
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*), sum(hashtext(ROW({columns})::text)::bigint) FROM {table}")
        return tuple(cur.fetchone())


@dataclass
class RefreshRow:
    rows: int
    table: str
    batch: int
    mix: str
    dml: list[float] = field(default_factory=list)
    diff: list[float] = field(default_factory=list)
    full: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)


@dataclass
class ScaleResult:
    rows: int
    load_seconds: float
    create: dict[str, float]
    recompute: dict[str, list[float]]
    refreshes: list[RefreshRow]


def bench_scale(
    server: postgres_server.PgServer,
    rows: int,
    customers: int,
    repeats: int,
    full_repeats: int,
    recompute_repeats: int,
    batch_sizes: tuple[int, ...],
) -> ScaleResult:
    dbname = f"bench_{rows}"
    conn = fresh_database(server, dbname)
    log(f"{rows:,} orders: loading")
    load_seconds = load(conn, rows, customers)
    log(f"{rows:,} orders: loaded in {load_seconds:.1f}s")

    create: dict[str, float] = {}
    for name in QUERIES:
        for full in (False, True):
            spec = spec_for(name, full)
            seconds, _ = refresh(conn, spec, "CREATE")
            create[spec.name] = seconds
            log(f"  CREATE {spec.name}: {seconds:.2f}s")
    with conn.cursor() as cur:
        for name in QUERIES:
            cur.execute(f"VACUUM ANALYZE {name}")
            cur.execute(f"VACUUM ANALYZE {name}_full")

    recompute: dict[str, list[float]] = {name: [] for name in QUERIES}
    for _ in range(recompute_repeats):
        for name, sql in QUERIES.items():
            recompute[name].append(create_table_as(conn, sql))
    log(f"  CREATE TABLE AS: { {n: [round(s, 2) for s in v] for n, v in recompute.items()} }")

    rng = random.Random(rows)
    ids = OrderIds(next_id=rows + 1)
    results: list[RefreshRow] = []
    for size in batch_sizes:
        by_table = {
            name: RefreshRow(rows, name, size, batch_mix(size, 0).describe() if size > 1 else "1 ins/upd/del")
            for name in QUERIES
        }
        for repeat in range(repeats):
            batch = batch_mix(size, repeat)
            dml = apply_batch(conn, rng, ids, batch, customers)
            for name in QUERIES:
                seconds, result = refresh(conn, spec_for(name, False), "DIFFERENTIAL")
                by_table[name].diff.append(seconds)
                by_table[name].dml.append(dml)
                by_table[name].written.append(result.rows_changed)
            line = f"  batch {size:>7,} #{repeat + 1}: DML {dml:.3f}s; DIFF " + ", ".join(
                f"{n} {by_table[n].diff[-1]:.3f}s" for n in QUERIES
            )
            if repeat >= repeats - full_repeats:  # the last ones, so the FULL copy ends current
                for name in QUERIES:
                    seconds, _ = refresh(conn, spec_for(name, True), "FULL")
                    by_table[name].full.append(seconds)
                line += "; FULL " + ", ".join(f"{n} {by_table[n].full[-1]:.2f}s" for n in QUERIES)
            log(line)
        results.extend(by_table.values())
    for name in QUERIES:
        # The FULL copy saw the same batches (its last refresh came after the last batch): both must agree.
        if fingerprint(conn, name) != fingerprint(conn, name + "_full"):
            raise SystemExit(f"{name}: the DIFFERENTIAL and FULL copies differ")
    log(f"  {rows:,} orders: DIFFERENTIAL and FULL copies agree")
    conn.close()
    drop_database(server, dbname)
    return ScaleResult(rows, load_seconds, create, recompute, results)


# --------------------------------------------------------------------------------------------------
# Capture overhead


@dataclass
class CaptureResult:
    label: str
    plain: list[float] = field(default_factory=list)
    captured: list[float] = field(default_factory=list)
    per_row: int = 1  # divide by this for a per-row figure


PROBE_COLUMNS = "id bigint PRIMARY KEY, customer_id int, amount numeric(10,2)"
LOOP_CHUNK = 100  # single-row statements timed back to back before switching tables


def bench_capture(
    server: postgres_server.PgServer, preload: int, bulk_rows: int, loop_rows: int, rounds: int
) -> list[CaptureResult]:
    """Same statements on an uncaptured and a captured copy of orders, alternating which goes first."""
    dbname = "bench_capture"
    conn = fresh_database(server, dbname)
    tables = {"plain": "orders_plain", "captured": "orders_captured"}
    with conn.cursor() as cur:
        cur.execute("SELECT setseed(0.42)")
        for table in tables.values():
            cur.execute(f"CREATE TABLE {table} ({PROBE_COLUMNS})")
            cur.execute(
                f"INSERT INTO {table} SELECT g, 1 + floor(random() * 100000)::int, "
                "round((random() * 500)::numeric, 2) FROM generate_series(1, %s) g",
                (preload,),
            )
            cur.execute(f"VACUUM ANALYZE {table}")
    consumer = StreamTableSpec(
        model="captured_totals",
        schema="public",
        name="captured_totals",
        sql="SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count FROM orders_captured "
        "GROUP BY customer_id",
        full_refresh_threshold=NO_FALLBACK,
        initiated_by="benchmark",
    )
    run_stream_table(conn, consumer)  # installs the capture triggers on orders_captured only
    with conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders_captured'::regclass AND NOT tgisinternal"
        )
        assert cur.fetchone()[0] == 4, "capture triggers missing"
        cur.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders_plain'::regclass AND NOT tgisinternal"
        )
        assert cur.fetchone()[0] == 0

    amount = "round((random() * 500)::numeric, 2)"
    bulk_insert = CaptureResult(f"bulk INSERT … SELECT of {bulk_rows:,} rows (one statement)")
    bulk_update = CaptureResult(f"bulk UPDATE of {bulk_rows:,} rows")
    bulk_delete = CaptureResult(f"bulk DELETE of {bulk_rows:,} rows")
    client_loop = CaptureResult(
        f"single-row INSERT, {loop_rows:,} statements from the client, one transaction each",
        per_row=loop_rows,
    )
    server_loop = CaptureResult(
        f"single-row INSERT, {loop_rows * 5:,} statements in PL/pgSQL loops ({LOOP_CHUNK} per transaction)",
        per_row=loop_rows * 5,
    )
    next_id = preload + 1

    def run(sql: str, params: tuple[Any, ...] | None = None) -> Callable[[], None]:
        def action() -> None:
            with conn.cursor() as cur:
                cur.execute(sql, params)

        return action

    def client_rows(table: str, first: int, count: int) -> Callable[[], None]:
        def action() -> None:
            with conn.cursor() as cur:
                for i in range(first, first + count):
                    cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", (i, i % 100000 + 1, 9.99))

        return action

    def server_rows(table: str, first: int, count: int) -> Callable[[], None]:
        return run(
            f"DO $$ BEGIN FOR i IN {first}..{first + count - 1} LOOP "
            f"INSERT INTO {table} VALUES (i, i % 100000 + 1, 9.99); END LOOP; END $$"
        )

    def paired(result: CaptureResult, step: Callable[[str, int, int], Callable[[], None]], first: int) -> int:
        """Alternate small chunks between the two tables so both see the same background noise."""
        totals = {"plain": 0.0, "captured": 0.0}
        for chunk in range(result.per_row // LOOP_CHUNK):
            for kind in ("plain", "captured") if chunk % 2 == 0 else ("captured", "plain"):
                seconds, _ = timed(step(tables[kind], first, LOOP_CHUNK))
                totals[kind] += seconds
                first += LOOP_CHUNK
        result.plain.append(totals["plain"])
        result.captured.append(totals["captured"])
        return first

    for round_no in range(rounds):
        order = ["plain", "captured"] if round_no % 2 == 0 else ["captured", "plain"]
        low, high = next_id, next_id + bulk_rows - 1
        statements = [
            (
                bulk_insert,
                "INSERT INTO {table} SELECT g, 1 + floor(random() * 100000)::int, "
                f"{amount} FROM generate_series(%s, %s) g",
            ),
            (bulk_update, "UPDATE {table} SET amount = amount + 1 WHERE id BETWEEN %s AND %s"),
            (bulk_delete, "DELETE FROM {table} WHERE id BETWEEN %s AND %s"),
        ]
        for result, sql in statements:
            for kind in order:
                seconds, _ = timed(run(sql.format(table=tables[kind]), (low, high)))
                getattr(result, kind).append(seconds)
        first = paired(client_loop, client_rows, high + 1)
        next_id = paired(server_loop, server_rows, first)
        # Consume the buffer as a scheduled refresh would, outside the timings.
        run_stream_table(conn, consumer)
        with conn.cursor() as cur:
            cur.execute("VACUUM orders_plain")
            cur.execute("VACUUM orders_captured")
        log(
            f"  capture round {round_no + 1}: "
            + "; ".join(
                f"{r.label.split(',')[0][:22]} {r.plain[-1] / r.per_row * (1e6 if r.per_row > 1 else 1):.4g}"
                f"→{r.captured[-1] / r.per_row * (1e6 if r.per_row > 1 else 1):.4g}"
                for r in (bulk_insert, bulk_update, bulk_delete, client_loop, server_loop)
            )
        )
    conn.close()
    drop_database(server, dbname)
    return [bulk_insert, bulk_update, bulk_delete, client_loop, server_loop]


# --------------------------------------------------------------------------------------------------
# Report


def ratio(value: float) -> str:
    return f"{value:,.0f}×" if value >= 10 else f"{value:.1f}×"


def refresh_table(scales: list[ScaleResult]) -> str:
    header = [
        "orders",
        "stream table",
        "batch: changes",
        "DIFFERENTIAL",
        "FULL",
        "FULL ÷ DIFF",
        "CREATE TABLE AS",
        "CTAS ÷ DIFF",
    ]
    rows = []
    for scale in scales:
        for row in scale.refreshes:
            diff = median(row.diff)
            ctas = median(scale.recompute[row.table])
            full_cells = ["–", "–"]
            if row.full:
                full = median(row.full)
                full_cells = [f"{fmt_seconds(full)} (n={len(row.full)})", ratio(full / diff)]
            rows.append(
                [
                    f"{scale.rows / 1e6:g}M",
                    row.table,
                    f"{row.batch:,}: {row.mix}",
                    fmt_seconds(diff),
                    *full_cells,
                    fmt_seconds(ctas),
                    ratio(ctas / diff),
                ]
            )
    return markdown_table(header, rows)


def setup_table(scales: list[ScaleResult]) -> str:
    header = ["orders", "load + index + ANALYZE", *[f"CREATE {n}" for n in QUERIES]]
    rows = [
        [f"{s.rows / 1e6:g}M", fmt_seconds(s.load_seconds), *[fmt_seconds(s.create[n]) for n in QUERIES]]
        for s in scales
    ]
    return markdown_table(header, rows)


def capture_table(results: list[CaptureResult]) -> str:
    header = ["statement", "without capture", "with capture", "ratio", "added"]
    rows = []
    for r in results:
        plain, captured = median(r.plain), median(r.captured)
        if r.per_row > 1:
            plain_text = f"{plain / r.per_row * 1e6:.1f} µs/row"
            captured_text = f"{captured / r.per_row * 1e6:.1f} µs/row"
            added = f"{(captured - plain) / r.per_row * 1e6:+.1f} µs/row"
        else:
            plain_text, captured_text = fmt_seconds(plain), fmt_seconds(captured)
            added = f"{(captured - plain) * 1e3:+.0f} ms"
        rows.append([r.label, plain_text, captured_text, f"{captured / plain:.2f}×", added])
    return markdown_table(header, rows)


def targets(scales: list[ScaleResult], captures: list[CaptureResult]) -> str:
    """The issue's three targets, checked against this run."""
    lines = []
    if scales:
        largest = max(scales, key=lambda s: s.rows)
        for row in largest.refreshes:
            if row.batch == 1_000 and row.full:
                value = median(row.full) / median(row.diff)
                verdict = "met" if value >= 500 else "NOT met"
                lines.append(
                    f"- 1,000 changes on {largest.rows / 1e6:g}M orders, {row.table}: FULL ÷ DIFF = "
                    f"{ratio(value)} (target ≥ 500×): {verdict}"
                )
    by_label = {c.label.split(" ")[0] + " " + c.label.split(" ")[1]: c for c in captures}
    bulk = by_label.get("bulk INSERT")
    if bulk:
        value = median(bulk.captured) / median(bulk.plain)
        verdict = "met" if value <= 1.5 else "NOT met"
        lines.append(
            f"- bulk INSERT with capture: {value:.2f}× the uncaptured time (target ≤ 1.5×): {verdict}"
        )
    for capture in captures:
        if capture.per_row > 1:
            added = (median(capture.captured) - median(capture.plain)) / capture.per_row * 1e6
            verdict = "met" if added <= 40 else "NOT met"
            lines.append(f"- {capture.label}: {added:+.1f} µs per row (target ≤ 40 µs): {verdict}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated orders sizes")
    parser.add_argument("--quick", action="store_true", help="1M orders only, 3 repeats")
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="batches per batch size (median reported)")
    parser.add_argument(
        "--full-repeats",
        default="",
        help="FULL refreshes (and CREATE TABLE AS runs) per batch size, per table size, e.g. '3,2' "
        "(default: --repeats up to 2M orders, 2 above)",
    )
    parser.add_argument("--batches", default=",".join(str(b) for b in BATCH_SIZES))
    parser.add_argument("--capture-rounds", type=int, default=5)
    parser.add_argument("--no-refresh", action="store_true", help="only the capture-overhead part")
    parser.add_argument("--no-capture", action="store_true", help="only the refresh part")
    parser.add_argument("--durable", action="store_true", help="fsync=on, synchronous_commit=on (fast=False)")
    parser.add_argument("--data-dir", default="/tmp/dbt_ivm_bench/pg")
    parser.add_argument("--pg-bin", default=None, help="another PostgreSQL build's bin directory")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    parser.add_argument("--json", default=None, help="also write every sample to this file")
    args = parser.parse_args()

    sizes = [int(s) for s in args.rows.split(",")]
    repeats = args.repeats
    if args.quick:
        sizes, repeats = [1_000_000], 3
    if args.full_repeats:
        full_repeats = [int(x) for x in args.full_repeats.split(",")]
        full_repeats += [full_repeats[-1]] * (len(sizes) - len(full_repeats))
    else:  # a FULL refresh of 10M-row order_details takes minutes on 2 cores
        full_repeats = [repeats if size <= 2_000_000 else min(repeats, 2) for size in sizes]
    batch_sizes = tuple(int(b) for b in args.batches.split(","))

    data_dir = Path(args.data_dir + ("_durable" if args.durable else ""))
    server = start_server(data_dir, args.pg_bin, fast=not args.durable)
    machine = machine_description(server)
    engine = engine_version()
    log(f"{machine}; engine {engine}")
    started = time.perf_counter()
    scales: list[ScaleResult] = []
    captures: list[CaptureResult] = []
    try:
        if not args.no_capture:
            log("capture overhead")
            captures = bench_capture(server, 1_000_000, 100_000, 2_000, args.capture_rounds)
        if not args.no_refresh:
            for size, fulls in zip(sizes, full_repeats, strict=True):
                scales.append(
                    bench_scale(
                        server, size, args.customers, repeats, min(fulls, repeats), fulls, batch_sizes
                    )
                )
    finally:
        if not args.keep:
            postgres_server.stop(data_dir)
    elapsed = time.perf_counter() - started

    print(f"Machine: {machine}\n\nEngine: git {engine}\n")
    print(f"Total run time: {elapsed / 60:.1f} min; DIFFERENTIAL: median of {repeats} batches.\n")
    if scales:
        print(setup_table(scales) + "\n")
        print(refresh_table(scales) + "\n")
    if captures:
        print(f"Capture overhead: median of {args.capture_rounds} alternating rounds.\n")
        print(capture_table(captures) + "\n")
    print(targets(scales, captures))
    if args.json:
        payload = {
            "machine": machine,
            "engine": engine,
            "scales": [
                scale.__dict__ | {"refreshes": [r.__dict__ for r in scale.refreshes]} for scale in scales
            ],
            "capture": [c.__dict__ for c in captures],
        }
        Path(args.json).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
