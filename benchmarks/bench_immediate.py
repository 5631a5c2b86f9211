"""PostgreSQL benchmark: what a writer pays for an IMMEDIATE stream table, next to a plain table and to a
differential stream table's change capture, with pg_ivm's published figures beside them.

    python benchmarks/bench_immediate.py                    # 1M orders, 10k customers, 10 s per run
    python benchmarks/bench_immediate.py --seconds 3        # quicker
    python benchmarks/bench_immediate.py --pg-bin /usr/lib/postgresql/15/bin
    python benchmarks/bench_immediate.py --durable          # fsync and synchronous_commit on

Run by hand; prints a Markdown table (kept in docs/benchmarks.md), draws
docs/img/bench_immediate.png, and reports progress on stderr.

Sources: ``orders`` (1M rows over 10k customers) and ``customers``. Stream tables:
``customer_totals`` (SUM/COUNT per customer over orders) and ``order_details`` (orders ⋈ customers).
Each configuration is measured on the same database, one after the other:

* ``plain`` — no stream table;
* ``immediate`` — the stream table maintained in the writer's transaction (refresh_mode='immediate');
* ``capture`` — a differential stream table: what its writers pay is the change capture alone.

Single-row statements and the 4 concurrent writers run under pgbench (shipped with the server
binaries): latency is pgbench's average per statement, one client; the concurrent writers each
insert orders of their own 2,500 customers. The 10,000-row ``INSERT … SELECT`` (one row into each of
10,000 groups) is timed on the client, median of 5.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pg_support import (
    fresh_database,
    machine_description,
    markdown_table,
    median,
    start_server,
    timed,
)

from dbt_ivm.embedded import postgres_server
from dbt_ivm.postgres.runner import drop_stream_table, run_stream_table
from dbt_ivm.spec import StreamTableSpec

DATABASE = "bench_immediate"
CUSTOMER_TOTALS = "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer_id"
ORDER_DETAILS = "SELECT o.id, o.amount, c.name FROM orders o JOIN customers c ON o.customer_id = c.id"
MODES = ("plain", "immediate", "capture")
# pg_ivm's own measurements (PostgreSQL 15, 1M orders, 10k customers): plain table → IMMV.
PG_IVM = {
    "single-row INSERT": ("0.51 ms", "1.09 ms"),
    "single-row UPDATE": ("0.61 ms", "1.74 ms"),
    "single-row DELETE": ("0.54 ms", "1.11 ms"),
    "10,000-row INSERT … SELECT": ("26 ms", "4,458 ms"),
    "4 concurrent writers": ("1,879 TPS", "388 TPS"),
    "join view, single-row INSERT": ("0.94 ms", "1.62 ms"),
}
SCRIPTS = {
    "single-row INSERT": "\\set c random(0, 9999)\nINSERT INTO orders VALUES (nextval('ids'), :c, 12.50);\n",
    "single-row UPDATE": "\\set i random(1, {orders})\nUPDATE orders SET amount = amount + 1 WHERE id = :i;\n",
    "single-row DELETE": "\\set i random(1, {orders})\nDELETE FROM orders WHERE id = :i;\n",
    "4 concurrent writers": (
        "\\set c (:client_id % 4) * 2500 + random(0, 2499)\nINSERT INTO orders VALUES (nextval('ids'), :c, 1);\n"
    ),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load(conn: Any, orders: int, customers: int) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);"
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2));"
            f"INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(0, {customers - 1}) i;"
            f"INSERT INTO orders SELECT i, i % {customers}, (i % 1000) / 10.0 FROM generate_series(1, {orders}) i;"
            f"CREATE SEQUENCE ids START {orders + 1};"
        )
        cur.execute("VACUUM ANALYZE customers")
        cur.execute("VACUUM ANALYZE orders")


def pgbench(
    server: postgres_server.PgServer, bin_dir: Path, script: str, clients: int, seconds: int
) -> dict[str, float]:
    """pgbench's average latency (ms) and throughput (TPS) for `script`."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as file:
        file.write(script)
    command = [
        str(bin_dir / "pgbench"), "-n", "-f", file.name, "-T", str(seconds), "-c", str(clients),
        "-j", str(clients), "-h", server.host, "-p", str(server.port), "-U", server.user, DATABASE,
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    latency = re.search(r"latency average = ([\d.]+) ms", out)
    tps = re.search(r"tps = ([\d.]+)", out)
    assert latency and tps, out
    return {"ms": float(latency.group(1)), "tps": float(tps.group(1))}


def batch_insert(conn: Any, customers: int) -> float:
    """Median seconds of a 10,000-row INSERT … SELECT, one row into each of 10,000 groups."""
    samples = []
    for _ in range(5):
        with conn.cursor() as cur:
            statement = f"INSERT INTO orders SELECT nextval('ids'), g % {customers}, 1 FROM generate_series(0, 9999) g"
            seconds, _ = timed(lambda: cur.execute(statement))  # noqa: B023 - run at once
        samples.append(seconds)
    return median(samples)


def with_streams(conn: Any, mode: str, streams: dict[str, str], action: Callable[[], Any]) -> Any:
    """Run `action` while `streams` exist as stream tables of `mode` ('plain': none)."""
    if mode != "plain":
        refresh_mode = "immediate" if mode == "immediate" else "differential"
        for name, sql in streams.items():
            run_stream_table(
                conn,
                StreamTableSpec(model=name, schema="public", name=name, sql=sql, refresh_mode=refresh_mode),
            )
    try:
        return action()
    finally:
        if mode != "plain":
            for name in streams:
                with conn.cursor() as cur:
                    cur.execute(f"DROP TABLE IF EXISTS {name}")
                drop_stream_table(conn, "public", name)


def run(args: argparse.Namespace) -> str:
    data_dir = Path(args.data_dir or f"/tmp/dbt_ivm_bench_immediate{'_durable' if args.durable else ''}")
    server = start_server(data_dir, bin_dir=args.pg_bin, fast=not args.durable)
    bin_dir = Path(args.pg_bin) if args.pg_bin else postgres_server.embedded_bin_dir()
    conn = fresh_database(server, DATABASE)
    log(f"loading {args.orders} orders, {args.customers} customers")
    load(conn, args.orders, args.customers)
    results: dict[str, dict[str, float]] = {mode: {} for mode in MODES}
    for mode in MODES:
        log(f"{mode}: customer_totals")

        def aggregate_runs(mode: str = mode) -> None:
            for label, script in SCRIPTS.items():
                clients = 4 if label == "4 concurrent writers" else 1
                measured = pgbench(server, bin_dir, script.format(orders=args.orders), clients, args.seconds)
                results[mode][label] = measured["tps"] if clients > 1 else measured["ms"]
                log(f"  {label}: {measured}")
            results[mode]["10,000-row INSERT … SELECT"] = batch_insert(conn, args.customers) * 1000
            log(f"  batch: {results[mode]['10,000-row INSERT … SELECT']:.1f} ms")

        with_streams(conn, mode, {"customer_totals": CUSTOMER_TOTALS}, aggregate_runs)
        log(f"{mode}: order_details")

        def join_run(mode: str = mode) -> None:
            measured = pgbench(server, bin_dir, SCRIPTS["single-row INSERT"], 1, args.seconds)
            results[mode]["join view, single-row INSERT"] = measured["ms"]
            log(f"  join insert: {measured}")

        with_streams(conn, mode, {"order_details": ORDER_DETAILS}, join_run)
    description = machine_description(server)
    conn.close()
    if not args.keep_server:
        postgres_server.stop(data_dir)
    Path(args.json).write_text(json.dumps({"results": results, "description": description}, indent=1))
    log(f"measurements in {args.json}")
    return finish(results, args, description)


def finish(results: dict[str, dict[str, float]], args: argparse.Namespace, description: str) -> str:
    plot(results, Path(args.plot))
    return report(results, args, description)


TARGETS = {
    "single-row INSERT": "≤ +0.3 ms",
    "single-row UPDATE": "≤ +0.3 ms",
    "single-row DELETE": "≤ +0.3 ms",
    "10,000-row INSERT … SELECT": "≤ 2× plain",
    "4 concurrent writers": "≥ 50 % of plain",
    "join view, single-row INSERT": "≤ +0.3 ms",
}


def _met(label: str, plain: float, immediate: float) -> bool:
    if label == "4 concurrent writers":
        return immediate >= 0.5 * plain
    if label.startswith("10,000"):
        return immediate <= 2 * plain
    return immediate - plain <= 0.3


def _shown(label: str, value: float) -> str:
    return f"{value:,.0f} TPS" if label == "4 concurrent writers" else f"{value:,.2f} ms"


def report(results: dict[str, dict[str, float]], args: argparse.Namespace, description: str) -> str:
    rows = []
    for label in PG_IVM:
        plain, immediate, capture = (results[m][label] for m in MODES)
        if label == "4 concurrent writers":
            added = f"{immediate / plain:.0%} of plain"
        elif label.startswith("10,000"):
            added = f"{immediate / plain:.1f}× plain"
        else:
            added = f"+{immediate - plain:.2f} ms"
        met = "met" if _met(label, plain, immediate) else "**not met**"
        ivm_plain, ivm_immv = PG_IVM[label]
        rows.append(
            [label, _shown(label, plain), _shown(label, immediate), added, _shown(label, capture),
             f"{ivm_plain} → {ivm_immv}", f"{TARGETS[label]}: {met}"]
        )  # fmt: skip
    header = ["write", "plain table", "immediate", "immediate vs plain", "capture (differential)",
              "pg_ivm (its figures)", "target"]  # fmt: skip
    return (
        f"{args.orders:,} orders, {args.customers:,} customers, {args.seconds} s per pgbench run; {description}\n\n"
        + markdown_table(header, rows)
    )


def plot(results: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label for label in PG_IVM if label != "4 concurrent writers"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.27
    for offset, mode in enumerate(MODES):
        values = [results[mode][label] / results["plain"][label] for label in labels]
        left.bar([i + (offset - 1) * width for i in range(len(labels))], values, width, label=mode)
    left.set_xticks(range(len(labels)), [label.replace(", ", ",\n") for label in labels], fontsize=8)
    left.set_ylabel("time ÷ plain table")
    left.axhline(1, color="grey", linewidth=0.5)
    left.legend()
    tps = [results[mode]["4 concurrent writers"] for mode in MODES]
    right.bar(list(MODES), tps, color=["C0", "C1", "C2"])
    right.set_title("4 concurrent writers (TPS)", fontsize=9)
    figure.suptitle("What a writer pays: plain table vs IMMEDIATE stream table vs differential capture")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--pg-bin", default=None, help="another server build's bin directory")
    parser.add_argument("--data-dir", default=None, help="the cluster's directory (one per --durable)")
    parser.add_argument(
        "--durable",
        action="store_true",
        help="the server's default durability (fsync, synchronous_commit) instead of the fast settings",
    )
    parser.add_argument(
        "--plot", default=str(Path(__file__).resolve().parent.parent / "docs/img/bench_immediate.png")
    )
    parser.add_argument("--keep-server", action="store_true", help="leave the server running afterwards")
    parser.add_argument("--json", default="bench_immediate.json", help="where the measurements are written")
    parser.add_argument(
        "--from-json", help="table and plot from an earlier run's measurements, measuring nothing"
    )
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        print(finish(saved["results"], args, saved["description"]))
        return
    print(run(args))


if __name__ == "__main__":
    main()
