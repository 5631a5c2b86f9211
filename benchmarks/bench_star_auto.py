"""How many star-schema queries `auto` refreshes differentially (issue #64): a sales fact with small
dimensions that change by a large fraction of themselves every batch (a store renamed, a promotion
repriced) while the facts stay large. Each query is kept once, `refresh_mode='auto'`; each round
applies one batch and refreshes every query; the table counts each query's actions per round.

    python benchmarks/bench_star_auto.py [--sales 200000] [--rounds 4]
    PYTHONPATH=/path/to/other/checkout/src python benchmarks/bench_star_auto.py   # another engine

Prints a Markdown table; every stream table is compared with its query at the end. Not a test.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pg_support import markdown_table, scratch_database
from tests.oracle import differences

from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import StreamTableSpec

QUERIES = {
    "sales_by_store": "SELECT st.name, SUM(s.amount) AS total, COUNT(*) AS n FROM sales s "
    "JOIN store st ON st.id = s.store_id GROUP BY st.name",
    "promoted_items": "SELECT i.category, p.name AS promotion, SUM(s.amount) AS total FROM sales s "
    "JOIN item i ON i.id = s.item_id JOIN promotion p ON p.id = s.promotion_id GROUP BY i.category, p.name",
    "customer_stores": "SELECT c.region, st.name, COUNT(*) AS n FROM sales s JOIN customer c ON c.id = s.customer_id "
    "JOIN store st ON st.id = s.store_id GROUP BY c.region, st.name",
    "monthly": "SELECT d.month, st.name, SUM(s.amount) AS total FROM sales s JOIN day d ON d.id = s.day_id "
    "JOIN store st ON st.id = s.store_id GROUP BY d.month, st.name",
    "top_items_hidden": "SELECT i.name, s.amount FROM sales s JOIN item i ON i.id = s.item_id "
    "ORDER BY s.day_id DESC, s.id DESC LIMIT 10",
    "rolled_top": "SELECT st.name, i.category, SUM(s.amount) AS total FROM sales s JOIN store st ON st.id = s.store_id "
    "JOIN item i ON i.id = s.item_id GROUP BY ROLLUP (st.name, i.category) ORDER BY total DESC LIMIT 5",
    "one_total_limited": "SELECT SUM(s.amount) AS total, COUNT(*) AS n FROM sales s "
    "JOIN promotion p ON p.id = s.promotion_id LIMIT 1",
    "items_sold_by_maker": "SELECT DISTINCT i1.name FROM item i1 WHERE i1.id <= 200 AND (SELECT COUNT(*) FROM item i "
    "WHERE (i.maker = i1.maker AND i.category = 'a') OR (i.maker = i1.maker AND i.category = 'b')) > 0",
    "store_promotions": "SELECT st.name, p.name AS promotion, AVG(s.amount) AS mean FROM sales s "
    "JOIN store st ON st.id = s.store_id JOIN promotion p ON p.id = s.promotion_id GROUP BY st.name, p.name",
    "region_share": "SELECT c.region, SUM(s.amount) AS total FROM sales s JOIN customer c ON c.id = s.customer_id "
    "JOIN store st ON st.id = s.store_id WHERE st.name <> 'closed' GROUP BY c.region",
}


def load(conn: Any, sales: int) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE store (id int PRIMARY KEY, name text NOT NULL);"
            "INSERT INTO store VALUES (1, 'north'), (2, 'south');"
            "CREATE TABLE promotion (id int PRIMARY KEY, name text NOT NULL);"
            "INSERT INTO promotion VALUES (1, 'none'), (2, 'spring'), (3, 'autumn');"
            "CREATE TABLE item (id int PRIMARY KEY, name text NOT NULL, category text NOT NULL, maker int NOT NULL);"
            "INSERT INTO item SELECT g, 'item' || g, chr(97 + g % 5), g % 50 FROM generate_series(1, 1000) g;"
            "CREATE TABLE customer (id int PRIMARY KEY, region text NOT NULL);"
            "INSERT INTO customer SELECT g, 'r' || g % 7 FROM generate_series(1, 5000) g;"
            "CREATE TABLE day (id int PRIMARY KEY, month int NOT NULL);"
            "INSERT INTO day SELECT g, 1 + g / 31 FROM generate_series(0, 364) g;"
            "CREATE TABLE sales (id bigint PRIMARY KEY, store_id int NOT NULL, promotion_id int NOT NULL, "
            "item_id int NOT NULL, customer_id int NOT NULL, day_id int NOT NULL, amount numeric(10,2) NOT NULL);"
            "INSERT INTO sales SELECT g, 1 + g % 2, 1 + g % 3, 1 + g % 1000, 1 + g % 5000, g % 365, "
            f"(g % 997) / 10.0 FROM generate_series(1, {sales}) g;"
            "ANALYZE"
        )


def batch(conn: Any, rng: random.Random, sales: int, round_no: int) -> None:
    """The small dimensions change by half or more; the facts by 0.1 %."""
    n = max(sales // 1000, 1)
    start = sales + round_no * n + 1
    with conn.cursor() as cur:
        cur.execute(f"UPDATE store SET name = name || '{round_no}' WHERE id = 1 + {round_no} % 2")
        cur.execute(f"UPDATE promotion SET name = name || '{round_no}' WHERE id <> 1")
        cur.execute(
            f"INSERT INTO sales SELECT g, 1 + g % 2, 1 + g % 3, 1 + g % 1000, 1 + g % 5000, 364, (g % 997) / 10.0 "
            f"FROM generate_series({start}, {start + n - 1}) g"
        )
        ids = [rng.randint(1, sales) for _ in range(n)]
        cur.execute("UPDATE sales SET amount = amount + 1 WHERE id = ANY(%s)", (ids[: n // 2],))
        cur.execute("DELETE FROM sales WHERE id = ANY(%s)", (ids[n // 2 :],))
        cur.execute(f"UPDATE item SET category = 'b' WHERE id = {1 + round_no}")


def engine() -> str:
    import dbt_ivm

    root = Path(dbt_ivm.__file__).resolve().parent.parent
    found = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return found.stdout.strip() or str(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sales", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with scratch_database("star") as (_, conn):
        load(conn, args.sales)
        actions: dict[str, list[str]] = {name: [] for name in QUERIES}
        specs = {
            name: StreamTableSpec(model=name, schema="public", name=name, sql=sql, refresh_mode="auto")
            for name, sql in QUERIES.items()
        }
        for name, spec in list(specs.items()):
            try:
                run_stream_table(conn, spec)
            except Exception as error:  # refused by this engine: reported, left out
                actions[name].append(f"refused: {type(error).__name__}")
                del specs[name]
        rng = random.Random(3)
        for round_no in range(args.rounds):
            batch(conn, rng, args.sales, round_no)
            for name, spec in specs.items():
                actions[name].append(run_stream_table(conn, spec).action)
        wrong = [name for name, spec in specs.items() if any(differences(conn, "public", name, spec.sql))]
        rows = [
            [name, " ".join(a[:4] for a in found), str(sum(a == "DIFFERENTIAL" for a in found))]
            for name, found in actions.items()
        ]
        print(f"engine {engine()}; {args.sales:,} sales, {args.rounds} rounds under refresh_mode='auto'\n")
        print(markdown_table(["query", "actions by round", "DIFFERENTIAL"], rows))
        always = sum(bool(found) and all(a == "DIFFERENTIAL" for a in found) for found in actions.values())
        print(f"\nqueries refreshed differentially in every round: {always} of {len(QUERIES)}")
        print(f"stream tables differing from their query: {', '.join(wrong) or 'none'}")
        return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
