"""What the stream tables' leaner layout costs (issue 14, item 1): the key's hash as an index on an
expression instead of a stored ``__ivm_hash`` column, a key the query selects no longer stored
twice as ``__ivm_k*``, no key at all for a table joined on its whole key, a join to a derived
aggregate keyed by its group keys instead of stored as a multiset, aggregate state kept in the
columns (or one hidden column) that hold the same quantity, and a window keyed by its input's key.
It also shows what the touched groups and set-operation values cost to find over a key that may be
NULL (`latest_order`, `named_totals`, `ordering_customers`), and rows that repeat stored as copies
(`paid_twice`, `customer_ranks`). The engine at a baseline commit and the
engine of this tree run side by side on one PostgreSQL server, each in its own database cloned from
one loaded template, each in a Python process of its own; every batch of changes is the same for
both, and the two alternate.

    python benchmarks/bench_layout.py --baseline 8d59678 [--orders 1000000] [--repeats 5] [--png FILE]
        [--streams order_names,named_totals] [--sizes 100,1000,10000] [--customer-index]

Prints a markdown table (sizes, CREATE, refreshes of 1,000 and 10,000 changes); nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STREAMS = {
    "customer_totals": "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer_id",
    "customer_sums": "SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id",
    "big_orders": "SELECT id, customer_id, amount FROM orders WHERE amount > 100",
    "order_names": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id",
    "order_customer": (
        "SELECT o.id, c.name, o.amount FROM orders o LEFT JOIN customers c ON c.id = o.customer_id"
    ),
    "named_totals": (
        "SELECT c.id, c.name, t.total FROM customers c JOIN (SELECT customer_id, SUM(amount) AS total "
        "FROM orders GROUP BY customer_id) t ON t.customer_id = c.id"
    ),
    "order_extremes": (
        "SELECT customer_id, MIN(amount) AS lo, MAX(amount) AS hi FROM orders GROUP BY customer_id"
    ),
    "customer_stats": (
        "SELECT customer_id, AVG(amount) AS mean, SUM(amount) AS total, COUNT(amount) AS n "
        "FROM orders GROUP BY customer_id"
    ),
    "latest_order": (
        "SELECT id, customer_id, amount FROM (SELECT o.*, ROW_NUMBER() OVER (PARTITION BY customer_id "
        "ORDER BY id DESC) AS rn FROM orders o) latest WHERE rn = 1"
    ),
    "ordering_customers": "SELECT customer_id FROM orders INTERSECT SELECT id FROM customers",
    # Rows that repeat, stored as copies (before: with an ordinal __ivm_dup).
    "paid_twice": "SELECT customer_id, amount FROM orders UNION ALL "
    "SELECT customer_id, amount FROM orders WHERE amount > 250",
    "customer_ranks": "SELECT customer_id, RANK() OVER (PARTITION BY customer_id ORDER BY amount) AS r FROM orders",
}
CUSTOMERS = 10_000


def child(dsn: str) -> None:
    """One engine (whichever `dbt_ivm` PYTHONPATH finds): commands on stdin, JSON lines on stdout."""
    import time

    import psycopg2

    from dbt_ivm.postgres.runner import run_stream_table
    from dbt_ivm.spec import StreamTableSpec

    conn = psycopg2.connect(dsn)
    conn.autocommit = True

    def run(name: str) -> tuple[float, str]:
        spec = StreamTableSpec(
            model=name, schema="public", name=name, sql=STREAMS[name], refresh_mode="differential"
        )
        started = time.perf_counter()
        result = run_stream_table(conn, spec)
        return time.perf_counter() - started, result.action

    for line in sys.stdin:
        command = json.loads(line)
        out: dict[str, Any] = {}
        if command["do"] == "create":
            for name in STREAMS:
                out[name] = run(name)[0]
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT pg_total_relation_size(%s::regclass), array_agg(attname::text ORDER BY attnum) "
                        "FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0",
                        (name, name),
                    )
                    size, columns = cur.fetchone()
                out[f"{name} size"] = size
                out[f"{name} columns"] = [c for c in columns if c.startswith("__ivm_")]
        else:
            with conn.cursor() as cur:
                for statement in command["statements"]:
                    cur.execute(statement)
            for name in STREAMS:
                seconds, action = run(name)
                assert action == "DIFFERENTIAL", (name, action)
                out[name] = seconds
        print(json.dumps(out), flush=True)


def batch(rng: random.Random, count: int, next_id: int, live: list[int]) -> tuple[list[str], int]:
    """`count` changes to orders, a third each inserted, updated, deleted."""
    third = count // 3
    picked = rng.sample(range(len(live)), 2 * third)
    updated = [live[i] for i in picked[:third]]
    deleted = [live[i] for i in picked[third:]]
    for i in sorted(picked[third:], reverse=True):
        live.pop(i)
    inserted = count - 2 * third
    new_ids = list(range(next_id, next_id + inserted))
    live.extend(new_ids)
    statements = [
        f"INSERT INTO orders SELECT g, 1 + (g::bigint * 7919) % {CUSTOMERS}, (g % 500)::numeric(10,2) "
        f"FROM generate_series({next_id}, {next_id + inserted - 1}) g",
        f"UPDATE orders SET amount = amount + 1 WHERE id = ANY(ARRAY{updated}::bigint[])",
        f"DELETE FROM orders WHERE id = ANY(ARRAY{deleted}::bigint[])",
    ]
    return statements, next_id + inserted


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", required=True, help="the commit whose engine is compared")
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "dbt_ivm_bench_layout")
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--streams", default=",".join(STREAMS), help="comma-separated stream tables to run")
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated changes per batch")
    parser.add_argument(
        "--customer-index", action="store_true", help="index orders.customer_id, as a foreign key often is"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in set(STREAMS) - set(args.streams.split(",")):
        del STREAMS[name]
    if args.child:
        child(args.child)
        return 0

    from benchmarks.bench_postgres import load, log
    from benchmarks.pg_support import connect, fresh_database, markdown_table, median, start_server

    from dbt_ivm.embedded import postgres_server

    worktree = Path(tempfile.gettempdir()) / "dbt_ivm_layout_baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True
    )
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.baseline], check=True
    )
    server = start_server(args.data_dir)
    template = fresh_database(server, "layout_template")
    log(f"loading {args.orders:,} orders")
    load(template, args.orders, CUSTOMERS)
    if args.customer_index:
        with template.cursor() as cur:
            cur.execute("CREATE INDEX ON orders (customer_id)")
    template.close()
    sizes = [int(size) for size in args.sizes.split(",")]
    engines = {"baseline": worktree, "this tree": ROOT}
    children = {}
    for label, tree in engines.items():
        database = f"layout_{label.replace(' ', '_')}"
        admin = connect(server.dsn())
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{database}" TEMPLATE layout_template')
        admin.close()
        children[label] = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--baseline",
                args.baseline,
                "--streams",
                args.streams,
                "--child",
                server.dsn(database),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={"PYTHONPATH": str(tree / "src"), "PATH": "/usr/bin:/bin"},
        )

    def ask(label: str, command: dict[str, Any]) -> dict[str, Any]:
        process = children[label]
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(command) + "\n")
        process.stdin.flush()
        answer = process.stdout.readline()
        if not answer:
            raise SystemExit(f"the {label} engine stopped")
        return dict(json.loads(answer))

    created = {label: ask(label, {"do": "create"}) for label in engines}
    rng = random.Random(42)
    live = list(range(1, args.orders + 1))
    next_id = args.orders + 1
    timings: dict[tuple[str, int, str], list[float]] = {}
    for size in sizes:
        for repeat in range(args.repeats):
            statements, next_id = batch(rng, size, next_id, live)
            order = list(engines) if repeat % 2 == 0 else list(reversed(engines))
            for label in order:
                for name, seconds in ask(label, {"do": "batch", "statements": statements}).items():
                    timings.setdefault((label, size, name), []).append(seconds)
            log(f"{size:,} changes, repeat {repeat + 1}")

    rows = []
    for name in STREAMS:
        base, new = created["baseline"], created["this tree"]
        row = [
            name,
            ", ".join(base[f"{name} columns"]) or "none",
            ", ".join(new[f"{name} columns"]) or "none",
            f"{base[f'{name} size'] / 2**20:.1f} → {new[f'{name} size'] / 2**20:.1f} MiB",
            f"{base[name]:.2f} → {new[name]:.2f} s",
        ]
        for size in sizes:
            old_s, new_s = (median(timings[(label, size, name)]) for label in engines)
            row.append(f"{old_s * 1000:.0f} → {new_s * 1000:.0f} ms ({new_s / old_s:.2f}×)")
        rows.append(row)
    header = ["stream table", "hidden before", "hidden now", "size (table + indexes)", "CREATE",
              *[f"refresh, {size:,} changes" for size in sizes]]  # fmt: skip
    print(markdown_table(header, rows))
    if args.png:
        _plot(args.png, timings, created, list(engines), sizes[-1])
    for process in children.values():
        process.terminate()
    postgres_server.stop(args.data_dir)
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True
    )
    return 0


def _plot(
    path: Path,
    timings: dict[tuple[str, int, str], list[float]],
    created: dict[str, Any],
    labels: list[str],
    size: int,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from benchmarks.pg_support import median

    figure, (sizes, refreshes) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(STREAMS)
    width = 0.38
    for offset, label in ((-width / 2, labels[0]), (width / 2, labels[1])):
        xs = [i + offset for i in range(len(names))]
        sizes.bar(xs, [created[label][f"{n} size"] / 2**20 for n in names], width, label=label)
        refreshes.bar(xs, [median(timings[(label, size, n)]) for n in names], width, label=label)
    refreshes.set_yscale("log")  # before and after may differ by orders of magnitude
    for axis, title in (
        (sizes, "stream table size, MiB"),
        (refreshes, f"refresh of {size:,} changes, s (log)"),
    ):
        axis.set_xticks(range(len(names)), names, rotation=25, ha="right")
        axis.set_title(title)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
