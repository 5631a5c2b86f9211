"""Whether `auto` is right to recompute the queries whose differential refresh reads a whole input
anyway (issue #64.2): `ORDER BY … LIMIT` by columns the query does not select, and a window without
PARTITION BY. Each query is kept twice, `differential` and `full`, over one orders table; each round
applies one small batch (inserts, updates, deletes) and refreshes both copies in alternating order.
A query `auto` keeps differential (the same top by a shown column) is the control.

    python benchmarks/bench_whole_input.py [--orders 1000000] [--changes 10] [--rounds 5] [--png FILE]

Prints a Markdown table of medians (DIFFERENTIAL, FULL, their ratio); nothing here is a test.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pg_support import (
    fmt_seconds,
    machine_description,
    markdown_table,
    median,
    scratch_database,
    timed,
)
from tests.oracle import differences

from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import StreamTableSpec

QUERIES = {
    # Hidden order: the top ten orders by time, showing only their ids and amounts.
    "latest_hidden": "SELECT id, amount FROM orders ORDER BY created DESC, id DESC LIMIT 10",
    # Control: the same top, its order shown (maintained from the stored rows).
    "latest_shown": "SELECT id, amount, created FROM orders ORDER BY created DESC, id DESC LIMIT 10",
    # A window over the whole table: one insertion can move every rank.
    "ranked": "SELECT id, RANK() OVER (ORDER BY amount DESC) AS r FROM orders",
    # A window over a small input: the rank of each customer's total.
    "customer_rank": (
        "SELECT customer_id, RANK() OVER (ORDER BY total DESC) AS r FROM "
        "(SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id) t"
    ),
}
MODES = ("differential", "full")


def load(conn: Any, orders: int) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, amount int NOT NULL, "
            "created timestamp NOT NULL);"
            f"INSERT INTO orders SELECT g, g % 1000, (g::bigint * 7919) % 100003, timestamp '2024-01-01' "
            f"+ g * interval '1 second' FROM generate_series(1, {orders}) g;"
            "CREATE INDEX ON orders (created); ANALYZE orders"
        )


def batch(conn: Any, rng: random.Random, orders: int, changes: int, round_no: int) -> None:
    """A third inserted (newest), a third updated, a third deleted."""
    third = max(changes // 3, 1)
    start = orders + round_no * third + 1
    with conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO orders SELECT g, g % 1000, (g::bigint * 7919) % 100003, timestamp '2030-01-01' "
            f"+ g * interval '1 second' FROM generate_series({start}, {start + third - 1}) g"
        )
        for _ in range(third):
            cur.execute("UPDATE orders SET amount = amount + 1 WHERE id = %s", (rng.randint(1, orders),))
            cur.execute("DELETE FROM orders WHERE id = %s", (rng.randint(1, orders),))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--png", help="draw the medians into this PNG")
    args = parser.parse_args()
    with scratch_database("whole_input") as (server, conn):
        load(conn, args.orders)
        specs = {
            (name, mode): StreamTableSpec(
                model=f"{name}_{mode}", schema="public", name=f"{name}_{mode}", sql=sql, refresh_mode=mode
            )
            for name, sql in QUERIES.items()
            for mode in MODES
        }
        for spec in specs.values():
            run_stream_table(conn, spec)
        seconds: dict[tuple[str, str], list[float]] = {key: [] for key in specs}
        rng = random.Random(7)
        for round_no in range(args.rounds):
            batch(conn, rng, args.orders, args.changes, round_no)
            for name in QUERIES:
                for mode in MODES if round_no % 2 == 0 else reversed(MODES):
                    took, result = timed(lambda spec=specs[(name, mode)]: run_stream_table(conn, spec))
                    assert result.action == mode.upper(), (name, mode, result.summary())
                    seconds[(name, mode)].append(took)
        wrong = [
            spec.name for spec in specs.values() if any(differences(conn, "public", spec.name, spec.sql))
        ]
        rows = []
        for name in QUERIES:
            diff, full = median(seconds[(name, "differential")]), median(seconds[(name, "full")])
            rows.append([name, fmt_seconds(diff), fmt_seconds(full), f"{full / diff:.2f}×"])
        print(f"{args.orders:,} orders, {args.changes} changes a round, medians of {args.rounds} rounds")
        print(machine_description(server))
        print()
        print(markdown_table(["query", "DIFFERENTIAL", "FULL", "FULL ÷ DIFF"], rows))
        print(f"\nstream tables differing from their query: {', '.join(wrong) or 'none'}")
        if args.png:
            _plot(args.png, seconds)
        return 1 if wrong else 0


def _plot(path: str, seconds: dict[tuple[str, str], list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(QUERIES)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.38
    for offset, mode in ((-width / 2, "differential"), (width / 2, "full")):
        values = [median(seconds[(n, mode)]) * 1000 for n in names]
        ax.bar([i + offset for i in range(len(names))], values, width, label=mode.upper())
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("ms per refresh (median)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Queries whose differential refresh reads a whole input")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
