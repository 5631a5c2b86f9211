"""Randomized DML against many stream tables at once, checked against the defining queries after every refresh.

Seeded generators (the seed is in every failure message) drive inserts, updates, deletes, the same row
changed many times in one batch, group-key and primary-key changes, NULL group keys and amounts,
duplicates in a keyless table, rolled-back work and multi-statement transactions, over several
refresh cycles. Some stream tables refresh only every other cycle, so their batches span cycles and
the shared change buffers must keep rows for them.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from tests.depth import by_depth
from tests.postgres.streams import buffer_count, execute, refresh, refresh_and_check, rows

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

SCHEMA_SQL = """
CREATE TABLE regions (id int PRIMARY KEY, name text);
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text, region_id int);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, customer text, amount numeric(10,2));
CREATE TABLE events (kind text, v int);
"""

STREAMS: dict[str, str] = {
    # the seeds' two running examples
    "customer_totals": (
        "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
    ),
    "order_details": (
        "SELECT c.name, c.tier, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id"
    ),
    "big_orders": "SELECT id, customer, amount FROM orders WHERE amount > 50",
    "order_regions": (
        "SELECT r.name AS region, c.name AS customer_name, o.id AS order_id, o.amount "
        "FROM orders o JOIN customers c ON o.customer_id = c.id JOIN regions r ON c.region_id = r.id"
    ),
    "region_totals": (
        "SELECT r.name AS region, SUM(o.amount) AS total, COUNT(*) AS n, COUNT(o.amount) AS n_amount "
        "FROM orders o JOIN customers c ON o.customer_id = c.id JOIN regions r ON c.region_id = r.id "
        "GROUP BY r.name"
    ),
    "order_pairs": (
        "SELECT a.id AS first_id, b.id AS second_id, a.customer_id "
        "FROM orders a JOIN orders b ON a.customer_id = b.customer_id AND a.id < b.id"
    ),
    "customer_avgs": (
        "SELECT customer_id, AVG(amount) AS mean, COUNT(amount) AS n_amount, SUM(amount) AS total, "
        "COUNT(*) AS n FROM orders GROUP BY customer_id"
    ),
    "order_stats": (
        "SELECT COUNT(*) AS n, COUNT(amount) AS n_amount, SUM(amount) AS total, AVG(amount) AS mean "
        "FROM orders"
    ),
    "big_order_stats": "SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders WHERE amount > 80",
    "customer_names": "SELECT DISTINCT customer, customer_id FROM orders",
    "tiers": "SELECT DISTINCT tier FROM customers",
    "events_kept": "SELECT kind, v FROM events WHERE v IS NULL OR v > 1",
    "event_counts": (
        "SELECT kind, COUNT(*) AS n, COUNT(v) AS n_v, SUM(v) AS total, AVG(v) AS mean FROM events GROUP BY kind"
    ),
    "event_customers": "SELECT e.kind, c.name FROM events e JOIN customers c ON e.v = c.id",
}
# These refresh only on odd cycles: their batches span two cycles of changes.
SLOW = {"order_pairs", "event_counts", "region_totals"}

NAMES = ["alice", "bob", "carol", "dave", None]
TIERS = ["standard", "premium", "gold", None]
AMOUNTS = [None, 5, 10, 25.5, 49.99, 50, 75, 80.01, 99.99, 120]
KINDS = ["a", "b", "c", None]


def seeded_shop(conn: Any, rng: random.Random) -> Workload:
    """The four tables, created and given a first dozen orders and customers and some events."""
    execute(conn, SCHEMA_SQL)
    workload = Workload(conn, rng)
    for _ in range(12):
        workload.insert_order()
        workload.customer_step()
    workload.events_step()
    return workload


class Workload:
    """Random DML over the four tables; keeps track of which keys exist so it can reuse them."""

    def __init__(self, conn: Any, rng: random.Random) -> None:
        self.conn = conn
        self.rng = rng
        self.next_order = 1
        self.next_customer = 1

    def order_ids(self) -> list[int]:
        return [r[0] for r in rows(self.conn, "SELECT id FROM orders ORDER BY id")]

    def customer_ids(self) -> list[int]:
        return [r[0] for r in rows(self.conn, "SELECT id FROM customers ORDER BY id")]

    def customer_ref(self) -> int | None:
        # Sometimes a customer that does not exist (yet), sometimes NULL: joins must drop those rows.
        return self.rng.choice([*range(1, self.next_customer + 2), None])

    def insert_order(self) -> str:
        order_id = self.next_order
        self.next_order += 1
        customer_id = self.customer_ref()
        name = self.rng.choice(NAMES)
        amount = self.rng.choice(AMOUNTS)
        execute(
            self.conn,
            "INSERT INTO orders VALUES (%s, %s, %s, %s)",
            (order_id, customer_id, name, amount),
        )
        return f"insert order {order_id}"

    def step(self) -> str:
        """One random statement (or a small transaction); returns what it did, for failure messages."""
        rng, conn = self.rng, self.conn
        orders = self.order_ids()
        kind = rng.choices(
            [
                "insert_order",
                "update_amount",
                "change_group",
                "many_updates",
                "delete_order",
                "insert_then_delete",
                "change_pk",
                "bulk_update",
                "bulk_delete",
                "customer",
                "region",
                "events",
                "transaction",
                "rolled_back",
            ],
            weights=[6, 4, 3, 2, 3, 1, 1, 1, 1, 3, 1, 4, 2, 1],
        )[0]
        if kind == "insert_order" or not orders:
            return self.insert_order()
        target = rng.choice(orders)
        if kind == "update_amount":
            execute(conn, "UPDATE orders SET amount = %s WHERE id = %s", (rng.choice(AMOUNTS), target))
        elif kind == "change_group":
            execute(
                conn,
                "UPDATE orders SET customer = %s, customer_id = %s WHERE id = %s",
                (rng.choice(NAMES), self.customer_ref(), target),
            )
        elif kind == "many_updates":
            for _ in range(rng.randint(2, 5)):
                execute(
                    conn,
                    "UPDATE orders SET amount = %s, customer = %s WHERE id = %s",
                    (rng.choice(AMOUNTS), rng.choice(NAMES), target),
                )
            if rng.random() < 0.3:
                execute(conn, "DELETE FROM orders WHERE id = %s", (target,))
        elif kind == "delete_order":
            execute(conn, "DELETE FROM orders WHERE id = %s", (target,))
        elif kind == "insert_then_delete":
            self.insert_order()
            execute(conn, "UPDATE orders SET amount = 1 WHERE id = %s", (self.next_order - 1,))
            execute(conn, "DELETE FROM orders WHERE id = %s", (self.next_order - 1,))
        elif kind == "change_pk":
            new_id = self.next_order
            self.next_order += 1
            execute(conn, "UPDATE orders SET id = %s WHERE id = %s", (new_id, target))
        elif kind == "bulk_update":
            execute(
                conn,
                "UPDATE orders SET amount = amount + 1 WHERE customer_id IS NOT DISTINCT FROM %s",
                (self.customer_ref(),),
            )
        elif kind == "bulk_delete":
            execute(conn, "DELETE FROM orders WHERE amount < %s", (rng.choice([5, 10, 26]),))
        elif kind == "customer":
            return self.customer_step()
        elif kind == "region":
            region = rng.randint(1, 4)
            if rng.random() < 0.5:
                execute(
                    conn,
                    "INSERT INTO regions VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name",
                    (region, rng.choice(["north", "south", "east", None])),
                )
            else:
                execute(conn, "DELETE FROM regions WHERE id = %s", (region,))
        elif kind == "events":
            return self.events_step()
        elif kind == "transaction":
            # Several statements in one transaction, with a rolled-back savepoint in the middle.
            execute(conn, "BEGIN")
            self.insert_order()
            execute(conn, "SAVEPOINT s")
            execute(conn, "DELETE FROM orders WHERE id = %s", (target,))
            self.events_step()
            execute(conn, "ROLLBACK TO SAVEPOINT s")
            execute(conn, "UPDATE orders SET amount = %s WHERE id = %s", (rng.choice(AMOUNTS), target))
            execute(conn, "COMMIT")
        elif kind == "rolled_back":
            execute(conn, "BEGIN")
            execute(conn, "DELETE FROM orders WHERE id = %s", (target,))
            self.insert_order()
            self.customer_step()
            execute(conn, "ROLLBACK")
        return f"{kind} {target}"

    def customer_step(self) -> str:
        rng, conn = self.rng, self.conn
        customers = self.customer_ids()
        action = rng.choice(["insert", "insert", "tier", "region", "rename", "delete"])
        if action == "insert" or not customers:
            customer_id = self.next_customer
            self.next_customer += 1
            execute(
                conn,
                "INSERT INTO customers VALUES (%s, %s, %s, %s)",
                (customer_id, rng.choice(NAMES[:-1]), rng.choice(TIERS), rng.choice([1, 2, 3, None])),
            )
            return f"insert customer {customer_id}"
        target = rng.choice(customers)
        if action == "tier":
            execute(conn, "UPDATE customers SET tier = %s WHERE id = %s", (rng.choice(TIERS), target))
        elif action == "region":
            execute(
                conn,
                "UPDATE customers SET region_id = %s WHERE id = %s",
                (rng.choice([1, 2, 3, None]), target),
            )
        elif action == "rename":
            execute(conn, "UPDATE customers SET name = %s WHERE id = %s", (rng.choice(NAMES[:-1]), target))
        else:
            execute(conn, "DELETE FROM customers WHERE id = %s", (target,))
        return f"customer {action} {target}"

    def events_step(self) -> str:
        rng, conn = self.rng, self.conn
        action = rng.choice(["insert_dups", "insert_dups", "delete_one", "delete_all", "update"])
        kind, v = rng.choice(KINDS), rng.choice([None, 1, 2, 3])
        if action == "insert_dups":
            copies = rng.randint(1, 3)
            execute(conn, "INSERT INTO events SELECT %s, %s FROM generate_series(1, %s)", (kind, v, copies))
        elif action == "delete_one":
            # One of several identical rows: the stream tables must drop exactly one copy.
            execute(
                conn,
                "DELETE FROM events WHERE ctid = (SELECT ctid FROM events WHERE kind IS NOT DISTINCT FROM %s "
                "AND v IS NOT DISTINCT FROM %s LIMIT 1)",
                (kind, v),
            )
        elif action == "delete_all":
            execute(conn, "DELETE FROM events WHERE kind IS NOT DISTINCT FROM %s", (kind,))
        else:
            execute(
                conn,
                "UPDATE events SET v = %s WHERE kind IS NOT DISTINCT FROM %s",
                (rng.choice([None, 1, 2, 3]), kind),
            )
        return f"events {action} {kind} {v}"


def _refresh_all(conn: Any, cycle: int, context: str) -> None:
    for name, sql in STREAMS.items():
        if name in SLOW and cycle % 2 == 0:
            continue
        result = refresh_and_check(conn, name, sql, context, refresh_mode="differential")
        assert result.action in ("DIFFERENTIAL", "SKIP", "CREATE"), f"{name}: {result.summary()}"


# DBT_IVM_RANDOM_SEEDS=100 runs seeds 1..100 (a long bug hunt); the default keeps the suite quick.
SEEDS = range(1, int(os.environ.get("DBT_IVM_RANDOM_SEEDS", by_depth("4", "16"))) + 1)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_dml_keeps_every_stream_table_equal_to_its_query(pg_conn: Any, seed: int) -> None:
    rng = random.Random(seed)
    workload = seeded_shop(pg_conn, rng)
    _refresh_all(pg_conn, 1, f"seed {seed}, initial build")
    for cycle in range(2, 8):
        done = [workload.step() for _ in range(rng.randint(5, 40))]
        _refresh_all(pg_conn, cycle, f"seed {seed}, cycle {cycle}, after {done}")
    # Once every consumer has caught up, nothing is left in the shared buffers.
    for name, sql in STREAMS.items():
        refresh(pg_conn, name, sql, refresh_mode="differential")
    for source in ("public.orders", "public.customers", "public.regions", "public.events"):
        assert buffer_count(pg_conn, source) == 0, source


def test_both_sides_of_a_join_change_in_one_batch(pg_conn: Any) -> None:
    execute(pg_conn, SCHEMA_SQL)
    execute(
        pg_conn,
        "INSERT INTO customers VALUES (1, 'alice', 'premium', 1), (2, 'bob', 'standard', 1);"
        "INSERT INTO orders VALUES (1, 1, 'alice', 50), (2, 1, 'alice', 30), (3, 2, 'bob', 75);",
    )
    sql = STREAMS["order_details"]
    refresh_and_check(pg_conn, "order_details", sql)
    # The same join row changes on both sides; a new pair appears from two new rows; a pair vanishes
    # because both its rows go.
    execute(
        pg_conn,
        "UPDATE customers SET tier = 'gold' WHERE id = 1; UPDATE orders SET amount = 55 WHERE id = 1;"
        "INSERT INTO customers VALUES (3, 'carol', 'standard', 2); INSERT INTO orders VALUES (4, 3, 'carol', 10);"
        "DELETE FROM orders WHERE id = 3; DELETE FROM customers WHERE id = 2;"
        "UPDATE orders SET customer_id = 3 WHERE id = 2; UPDATE customers SET name = 'carla' WHERE id = 3;",
    )
    result = refresh_and_check(pg_conn, "order_details", sql, refresh_mode="differential")
    assert result.action == "DIFFERENTIAL"
    assert sorted(rows(pg_conn, "SELECT name, tier, amount::text FROM order_details")) == [
        ("alice", "gold", "55.00"),
        ("carla", "standard", "10.00"),
        ("carla", "standard", "30.00"),
    ]
    for name in ("order_regions", "region_totals", "order_pairs"):
        refresh_and_check(pg_conn, name, STREAMS[name])
    execute(
        pg_conn,
        "INSERT INTO regions VALUES (1, 'north'), (2, 'south');"
        "UPDATE customers SET region_id = 2 WHERE id = 1; UPDATE orders SET customer_id = 1 WHERE id = 4;"
        "INSERT INTO orders VALUES (5, 1, 'alice', 5), (6, 3, 'carla', 6); UPDATE regions SET name = 'n' WHERE id = 2;",
    )
    for name in ("order_regions", "region_totals", "order_pairs"):
        result = refresh_and_check(pg_conn, name, STREAMS[name], refresh_mode="differential")
        assert result.action == "DIFFERENTIAL", name
