"""What one unit of PostgreSQL's planner cost takes here, in seconds: the ground for AUTO's cap
(`dbt_ivm.cost.MAX_SECONDS_PER_UNIT`) on the seconds a FULL refresh's time lends each unit. Each
query is planned (EXPLAIN) and then run into a temp table, its best of three timed, over orders
tables of several sizes; on a tiny table the time is fixed cost, not work per unit.

    python benchmarks/bench_planner_units.py [--sizes 100,10000,1000000] [--png FILE]

Prints a markdown table; nothing here is a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_postgres import load  # noqa: E402
from benchmarks.pg_support import fresh_database, start_server  # noqa: E402

from dbt_ivm.embedded import postgres_server  # noqa: E402

QUERIES = {
    "aggregate": "SELECT customer_id, SUM(amount), COUNT(*) FROM orders GROUP BY customer_id",
    "join": "SELECT c.*, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id",
    "window": (
        "SELECT * FROM (SELECT o.*, ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY id DESC) AS rn "
        "FROM orders o) t WHERE rn = 1"
    ),
}


def measure(cur: object, query: str) -> tuple[float, float]:
    """The planner's total cost of `query` and the best of three runs' seconds."""
    cur.execute(f"EXPLAIN (FORMAT JSON) {query}")  # type: ignore[attr-defined]
    cost = float(cur.fetchone()[0][0]["Plan"]["Total Cost"])  # type: ignore[attr-defined]
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        cur.execute(f"CREATE TEMP TABLE timed AS {query}")  # type: ignore[attr-defined]
        best = min(best, time.perf_counter() - started)
        cur.execute("DROP TABLE timed")  # type: ignore[attr-defined]
    return cost, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,10000,1000000")
    parser.add_argument("--png", default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[tuple[int, str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "pg"
        server = start_server(data_dir)
        try:
            for size in sizes:
                conn = fresh_database(server, f"units_{size}")
                load(conn, size, max(size // 100, 10))
                conn.autocommit = True
                with conn.cursor() as cur:
                    for name, query in QUERIES.items():
                        cost, seconds = measure(cur, query)
                        rows.append((size, name, cost, seconds))
                conn.close()
        finally:
            postgres_server.stop(data_dir)
    print("| orders | query | planner cost | seconds | us per unit |")
    print("|---:|---|---:|---:|---:|")
    for size, name, cost, seconds in rows:
        print(f"| {size:,} | {name} | {cost:,.0f} | {seconds:.4f} | {seconds / cost * 1e6:.1f} |")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(7, 4))
        for name in QUERIES:
            points = [(s, sec / c * 1e6) for s, n, c, sec in rows if n == name]
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        axes.axhline(100, color="grey", linestyle="--", label="AUTO's cap (100 us)")
        axes.set(xscale="log", yscale="log", xlabel="orders rows", ylabel="us per planner unit")
        axes.legend()
        figure.tight_layout()
        figure.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
