"""Randomized DML on Iceberg sources, every stream table checked against its query after each refresh.

The PostgreSQL suite's kinds of queries at small sizes (each Spark statement is an Iceberg commit):
per-customer SUM/COUNT, orders ⋈ customers, a filter, AVG, a global aggregate, a keyless source.
The seed is in every failure message; DBT_IVM_SPARK_SEED picks another. The same sources, workload
and streams run through dbt and a Thrift server on a cluster in test_cluster.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.depth import by_depth
from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark

NAMES = ["'alice'", "'bob'", "'carol'", "NULL"]
TIERS = ["'standard'", "'premium'", "NULL"]
AMOUNTS = ["NULL", "5", "10", "25.5", "49.99", "50", "80.01", "120"]
KINDS = ["'a'", "'b'", "NULL"]
CYCLES = by_depth(3, 8)
STEPS = 6


def stream_queries(s: str) -> dict[str, str]:
    return {
        "customer_totals": (
            f"SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM {s}.orders GROUP BY customer"
        ),
        "order_details": (
            f"SELECT c.name, c.tier, o.amount FROM {s}.orders o JOIN {s}.customers c ON o.customer_id = c.id"
        ),
        "big_orders": f"SELECT id, customer, amount FROM {s}.orders WHERE amount > 50",
        "customer_avgs": (
            f"SELECT customer_id, AVG(amount) AS mean, COUNT(amount) AS n_amount FROM {s}.orders GROUP BY customer_id"
        ),
        "order_stats": f"SELECT COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean FROM {s}.orders",
        "event_counts": f"SELECT kind, COUNT(*) AS n, SUM(v) AS total FROM {s}.events GROUP BY kind",
        "events_kept": f"SELECT kind, v FROM {s}.events WHERE v IS NULL OR v > 1",
    }


class Workload:
    """Random writes to the sources, each a statement `run` executes (through PySpark or Thrift)."""

    def __init__(self, run: Callable[[str], object], schema: str, rng: random.Random) -> None:
        self.run, self.s, self.rng = run, schema, rng
        self.next_order = 1

    def sql(self, text: str) -> str:
        self.run(text)
        return text

    def insert_orders(self, count: int) -> str:
        values = []
        for _ in range(count):
            values.append(
                f"({self.next_order}, {self.rng.choice(['1', '2', '3', '4', 'NULL'])}, "
                f"{self.rng.choice(NAMES)}, {self.rng.choice(AMOUNTS)})"
            )
            self.next_order += 1
        return self.sql(f"INSERT INTO {self.s}.orders VALUES {', '.join(values)}")

    def step(self) -> str:
        rng, s = self.rng, self.s
        target = rng.randint(1, max(self.next_order - 1, 1))
        kind = rng.choice(["insert", "amount", "group", "delete", "customer", "events", "events_delete"])
        if kind == "insert":
            return self.insert_orders(rng.randint(1, 4))
        if kind == "amount":
            return self.sql(f"UPDATE {s}.orders SET amount = {rng.choice(AMOUNTS)} WHERE id <= {target}")
        if kind == "group":
            return self.sql(
                f"UPDATE {s}.orders SET customer = {rng.choice(NAMES)}, customer_id = {rng.randint(1, 4)} "
                f"WHERE id = {target}"
            )
        if kind == "delete":
            return self.sql(
                f"DELETE FROM {s}.orders WHERE id = {target} OR amount < {rng.choice([5, 10, 26])}"
            )
        if kind == "customer":
            customer = rng.randint(1, 4)
            self.sql(f"DELETE FROM {s}.customers WHERE id = {customer}")
            if rng.random() < 0.7:
                self.sql(
                    f"INSERT INTO {s}.customers VALUES ({customer}, {rng.choice(NAMES[:3])}, {rng.choice(TIERS)})"
                )
            return f"customer {customer}"
        if kind == "events":
            rows = ", ".join(
                f"({rng.choice(KINDS)}, {rng.choice(['1', '2', '3', 'NULL'])})" for _ in range(3)
            )
            return self.sql(f"INSERT INTO {s}.events VALUES {rows}, {rows.split('), ')[0]})")
        return self.sql(f"DELETE FROM {s}.events WHERE v = {rng.randint(1, 3)}")


def test_randomized_refreshes_match_queries(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    seed = int(os.environ.get("DBT_IVM_SPARK_SEED", "20240611"))
    rng = random.Random(seed)
    workload = create_sources(spark.sql, s, rng)
    streams = stream_queries(s)
    seen: dict[str, set[str]] = {name: set() for name in streams}
    for name, sql in streams.items():
        result = refresh_and_check(spark, s, name, sql, f"seed {seed} create")
        assert result.action == "CREATE"
    for cycle in range(CYCLES):
        done = [workload.step() for _ in range(STEPS)]
        context = f"seed {seed} cycle {cycle}: {done}"
        for name, sql in streams.items():
            result = refresh_and_check(spark, s, name, sql, context, refresh_mode="differential")
            seen[name].add(result.action)
            assert "snapshot diff" not in (result.reason or ""), (context, name, result.summary())
    for name, actions in seen.items():
        assert "FULL" not in actions, (name, actions)
    assert any("DIFFERENTIAL" in actions for actions in seen.values())


def create_sources(run: Callable[[str], object], s: str, rng: random.Random) -> Workload:
    """The suite's sources in the empty schema `s`, with their first rows; the workload on them."""
    run(
        f"CREATE TABLE {s}.orders (id int NOT NULL, customer_id int, customer string, amount decimal(10,2)) "
        "USING iceberg"
    )
    run(f"ALTER TABLE {s}.orders SET IDENTIFIER FIELDS id")
    # customers and events are merge-on-read: their changes are read from the files writes touched
    merge_on_read = ", ".join(f"'write.{op}.mode'='merge-on-read'" for op in ("delete", "update", "merge"))
    run(
        f"CREATE TABLE {s}.customers (id int, name string, tier string) USING iceberg "
        f"TBLPROPERTIES ('dbt_ivm.primary_key'='id', {merge_on_read})"
    )
    run(f"CREATE TABLE {s}.events (kind string, v int) USING iceberg TBLPROPERTIES ({merge_on_read})")
    workload = Workload(run, s, rng)
    workload.insert_orders(6)
    run(f"INSERT INTO {s}.customers VALUES (1,'alice','premium'),(2,'bob','standard'),(3,'carol',NULL)")
    run(f"INSERT INTO {s}.events VALUES ('a',1),('a',1),('b',2),(NULL,3)")
    return workload
