"""The walkthroughs' DELETE cases 1–8 and UPDATE cases 1–7, with the expected contents spelled out.

Each test starts from the walkthrough's seed data, runs its statements, refreshes, and checks both the
exact rows and the oracle (the stream table equals its defining query).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.oracle import assert_matches_query, table_rows
from tests.postgres.streams import buffer_count, execute, history, refresh, rows

pytestmark = pytest.mark.postgres

CUSTOMER_TOTALS = (
    "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
)
ORDER_DETAILS = "SELECT c.name, c.tier, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id"

ORDERS = "CREATE TABLE orders (id serial PRIMARY KEY, customer text NOT NULL, amount numeric(10,2) NOT NULL)"
JOINED = (
    "CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL, tier text NOT NULL DEFAULT 'standard');"
    "CREATE TABLE orders (id serial PRIMARY KEY, customer_id int REFERENCES customers (id), amount numeric(10,2))"
)


def d(text: str) -> Decimal:
    return Decimal(text)


def totals(conn: Any) -> list[tuple[Any, ...]]:
    return table_rows(conn, "public", "customer_totals")


def step(conn: Any, statements: str, name: str = "customer_totals", sql: str = CUSTOMER_TOTALS) -> Any:
    """Run `statements`, refresh differentially, check the oracle; return the refresh result."""
    execute(conn, statements)
    result = refresh(conn, name, sql, refresh_mode="differential")
    assert_matches_query(conn, "public", name, sql, result.summary())
    return result


# ---------------------------------------------------------------------------------------------------
# DELETE walkthrough: orders alice 50.00, alice 30.00, bob 75.00, bob 25.00


@pytest.fixture
def delete_seed(pg_conn: Any) -> Any:
    execute(pg_conn, ORDERS)
    execute(
        pg_conn,
        "INSERT INTO orders (customer, amount) VALUES ('alice', 50.00), ('alice', 30.00), ('bob', 75.00), ('bob', 25.00)",
    )
    created = refresh(pg_conn, "customer_totals", CUSTOMER_TOTALS, refresh_mode="differential")
    assert created.action == "CREATE"
    assert totals(pg_conn) == [("alice", d("80.00"), 2), ("bob", d("100.00"), 2)]
    return pg_conn


def test_delete_case_1_one_row_group_survives(delete_seed: Any) -> None:
    result = step(delete_seed, "DELETE FROM orders WHERE id = 2")
    assert totals(delete_seed) == [("alice", d("50.00"), 1), ("bob", d("100.00"), 2)]
    assert (result.action, result.rows_inserted, result.rows_updated, result.rows_deleted) == (
        "DIFFERENTIAL",
        0,
        1,
        0,
    )


def test_delete_case_2_last_row_group_vanishes(delete_seed: Any) -> None:
    step(delete_seed, "DELETE FROM orders WHERE id = 2")
    result = step(delete_seed, "DELETE FROM orders WHERE id = 1")
    assert totals(delete_seed) == [("bob", d("100.00"), 2)]
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (0, 0, 1)


def test_delete_case_3_several_rows_of_one_group_in_one_batch(delete_seed: Any) -> None:
    result = step(delete_seed, "DELETE FROM orders WHERE id = 3; DELETE FROM orders WHERE id = 4")
    assert totals(delete_seed) == [("alice", d("80.00"), 2)]
    assert result.rows_deleted == 1
    # Cases 1 to 3 in sequence leave the stream table empty.
    step(delete_seed, "DELETE FROM orders WHERE id IN (1, 2)")
    assert totals(delete_seed) == []


def test_delete_case_4_insert_then_delete_cancels(delete_seed: Any) -> None:
    result = step(
        delete_seed,
        "INSERT INTO orders (customer, amount) VALUES ('charlie', 200.00); DELETE FROM orders WHERE customer = 'charlie'",
    )
    assert totals(delete_seed) == [("alice", d("80.00"), 2), ("bob", d("100.00"), 2)]
    assert result.rows_changed == 0


def test_delete_case_5_update_then_delete_removes_the_original_value(delete_seed: Any) -> None:
    step(delete_seed, "UPDATE orders SET amount = 999.99 WHERE id = 3; DELETE FROM orders WHERE id = 3")
    assert totals(delete_seed) == [("alice", d("80.00"), 2), ("bob", d("25.00"), 1)]


def test_delete_case_6_delete_through_a_join(pg_conn: Any) -> None:
    execute(pg_conn, JOINED)
    execute(
        pg_conn,
        "INSERT INTO customers VALUES (1, 'alice', 'premium'), (2, 'bob', 'standard');"
        "INSERT INTO orders VALUES (1, 1, 50.00), (2, 1, 30.00), (3, 2, 75.00)",
    )
    refresh(pg_conn, "order_details", ORDER_DETAILS)
    assert table_rows(pg_conn, "public", "order_details") == [
        ("alice", "premium", d("30.00")),
        ("alice", "premium", d("50.00")),
        ("bob", "standard", d("75.00")),
    ]
    step(pg_conn, "DELETE FROM orders WHERE id = 2", "order_details", ORDER_DETAILS)
    assert table_rows(pg_conn, "public", "order_details") == [
        ("alice", "premium", d("50.00")),
        ("bob", "standard", d("75.00")),
    ]
    # Deleting from the dimension side removes every joined row (the FK is dropped to allow it).
    execute(pg_conn, "ALTER TABLE orders DROP CONSTRAINT orders_customer_id_fkey")
    step(pg_conn, "DELETE FROM customers WHERE id = 2", "order_details", ORDER_DETAILS)
    assert table_rows(pg_conn, "public", "order_details") == [("alice", "premium", d("50.00"))]


def test_delete_case_7_bulk_delete_across_groups(delete_seed: Any) -> None:
    result = step(delete_seed, "DELETE FROM orders WHERE amount < 50.00")
    assert totals(delete_seed) == [("alice", d("50.00"), 1), ("bob", d("75.00"), 1)]
    assert result.rows_updated == 2


def test_delete_case_8_truncate_makes_the_next_refresh_full(delete_seed: Any) -> None:
    execute(delete_seed, "TRUNCATE orders")
    result = refresh(delete_seed, "customer_totals", CUSTOMER_TOTALS)
    assert result.action == "FULL"
    assert result.reason is not None and "truncated" in result.reason
    assert totals(delete_seed) == []
    last = history(delete_seed, "customer_totals")[-1]
    assert (last["action"], last["reason"], last["rows_deleted"]) == ("FULL", result.reason, 2)
    # Writes after the TRUNCATE flow differentially again.
    execute(delete_seed, "INSERT INTO orders (customer, amount) VALUES ('dave', 12.50)")
    after = refresh(delete_seed, "customer_totals", CUSTOMER_TOTALS)
    assert after.action == "DIFFERENTIAL"
    assert totals(delete_seed) == [("dave", d("12.50"), 1)]
    assert buffer_count(delete_seed, "public.orders") == 0


def test_truncate_then_insert_in_one_batch(delete_seed: Any) -> None:
    # The marker sits between writes of one batch: FULL recomputes, so order does not matter.
    execute(
        delete_seed,
        "INSERT INTO orders (customer, amount) VALUES ('erin', 1); TRUNCATE orders;"
        "INSERT INTO orders (customer, amount) VALUES ('alice', 7), ('frank', 3)",
    )
    result = refresh(delete_seed, "customer_totals", CUSTOMER_TOTALS, refresh_mode="differential")
    assert result.action == "FULL" and "truncated" in (result.reason or "")
    assert totals(delete_seed) == [("alice", d("7.00"), 1), ("frank", d("3.00"), 1)]


# ---------------------------------------------------------------------------------------------------
# UPDATE walkthrough: orders alice 49.99, alice 30.00, bob 75.00

UPDATE_CASES = {
    1: "UPDATE orders SET amount = 59.99 WHERE id = 1",
    2: "UPDATE orders SET customer = 'bob' WHERE id = 2",
    3: "UPDATE orders SET customer = 'bob' WHERE id = 1",
}


@pytest.fixture
def update_seed(pg_conn: Any) -> Any:
    execute(pg_conn, ORDERS)
    execute(
        pg_conn,
        "INSERT INTO orders (customer, amount) VALUES ('alice', 49.99), ('alice', 30.00), ('bob', 75.00)",
    )
    refresh(pg_conn, "customer_totals", CUSTOMER_TOTALS, refresh_mode="differential")
    assert totals(pg_conn) == [("alice", d("79.99"), 2), ("bob", d("75.00"), 1)]
    return pg_conn


def test_update_case_1_value_change_in_one_group(update_seed: Any) -> None:
    result = step(update_seed, UPDATE_CASES[1])
    assert totals(update_seed) == [("alice", d("89.99"), 2), ("bob", d("75.00"), 1)]
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (0, 1, 0)


def test_update_case_2_group_key_change(update_seed: Any) -> None:
    step(update_seed, UPDATE_CASES[1])
    result = step(update_seed, UPDATE_CASES[2])
    assert totals(update_seed) == [("alice", d("59.99"), 1), ("bob", d("105.00"), 2)]
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (0, 2, 0)


def test_update_case_3_update_deletes_a_group(update_seed: Any) -> None:
    step(update_seed, UPDATE_CASES[1])
    step(update_seed, UPDATE_CASES[2])
    result = step(update_seed, UPDATE_CASES[3])
    # The walkthrough prints 165.00, but 105.00 + 59.99 is 164.99.
    assert totals(update_seed) == [("bob", d("164.99"), 3)]
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (0, 1, 1)


def test_update_case_4_many_updates_of_one_row_in_one_batch(update_seed: Any) -> None:
    result = step(
        update_seed,
        "UPDATE orders SET amount = 10.00 WHERE id = 3; UPDATE orders SET amount = 20.00 WHERE id = 3;"
        "UPDATE orders SET amount = 30.00 WHERE id = 3",
    )
    assert totals(update_seed) == [("alice", d("79.99"), 2), ("bob", d("30.00"), 1)]
    assert (result.rows_updated, result.rows_changed) == (1, 1)
    assert history(update_seed, "customer_totals")[-1]["changes_read"] == 6  # three old and three new images


def test_update_case_5_insert_then_update_in_one_batch(update_seed: Any) -> None:
    result = step(
        update_seed,
        "INSERT INTO orders (customer, amount) VALUES ('charlie', 100.00);"
        "UPDATE orders SET amount = 200.00 WHERE customer = 'charlie'",
    )
    assert totals(update_seed) == [
        ("alice", d("79.99"), 2),
        ("bob", d("75.00"), 1),
        ("charlie", d("200.00"), 1),
    ]
    assert (result.rows_inserted, result.rows_changed) == (1, 1)


def test_update_case_6_update_then_delete_in_one_batch(update_seed: Any) -> None:
    result = step(
        update_seed, "UPDATE orders SET amount = 999.99 WHERE id = 3; DELETE FROM orders WHERE id = 3"
    )
    assert totals(update_seed) == [("alice", d("79.99"), 2)]
    assert (result.rows_deleted, result.rows_changed) == (1, 1)


def test_update_case_7_update_through_a_join(pg_conn: Any) -> None:
    execute(pg_conn, JOINED)
    execute(
        pg_conn,
        "INSERT INTO customers VALUES (1, 'alice', 'standard'), (2, 'bob', 'standard');"
        "INSERT INTO orders VALUES (1, 1, 50.00), (2, 1, 30.00), (3, 2, 75.00)",
    )
    refresh(pg_conn, "order_details", ORDER_DETAILS)
    result = step(
        pg_conn, "UPDATE customers SET tier = 'premium' WHERE name = 'alice'", "order_details", ORDER_DETAILS
    )
    assert table_rows(pg_conn, "public", "order_details") == [
        ("alice", "premium", d("30.00")),
        ("alice", "premium", d("50.00")),
        ("bob", "standard", d("75.00")),
    ]
    assert (result.action, result.rows_updated, result.rows_changed) == ("DIFFERENTIAL", 2, 2)
    assert rows(pg_conn, "SELECT count(*) FROM order_details") == [(3,)]
