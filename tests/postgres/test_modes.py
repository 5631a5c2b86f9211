"""Refresh modes: differential refuses, auto falls back with a reason, full always recomputes, no changes skip.

FULL is applied as a diff: rows whose values did not change keep their physical version (ctid, xmin),
so a FULL refresh never empties the table and rewrites only what differs.
"""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from tests.oracle import assert_matches_query
from tests.postgres.streams import (
    applies,
    execute,
    history,
    recording_connection,
    refresh,
    refresh_and_check,
    rows,
    value,
)

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

CUSTOMER_TOTALS = (
    "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
)
UNSUPPORTED = {
    "window functions": "SELECT DISTINCT customer, count(*) OVER (PARTITION BY customer) AS n FROM orders",
    "LIMIT": "SELECT id, amount FROM orders LIMIT 3",
    "DISTINCT ON": "SELECT DISTINCT ON (customer) customer, amount FROM orders",
}


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, customer text, amount numeric(10,2));"
        "INSERT INTO customers VALUES (1, 'alice'), (2, 'bob'), (3, 'carol');"
        "INSERT INTO orders SELECT i, i % 3 + 1, (ARRAY['alice', 'bob', 'carol'])[i % 3 + 1], i "
        "FROM generate_series(1, 100) i;"
        "ANALYZE customers; ANALYZE orders;",
    )
    return pg_conn


@pytest.mark.parametrize("construct", list(UNSUPPORTED))
def test_differential_refuses_an_unsupported_query_naming_model_and_construct(
    shop: Any, construct: str
) -> None:
    model = f"model_with_{construct.replace(' ', '_').lower()}"
    with pytest.raises(UnsupportedQuery) as raised:
        refresh(shop, model, UNSUPPORTED[construct], refresh_mode="differential")
    message = str(raised.value)
    assert model in message and construct.lower() in message.lower(), message
    assert value(shop, "SELECT to_regclass(%s)", (f"public.{model}",)) is None
    assert history(shop, model)[-1]["status"] == "FAILED"


@pytest.mark.parametrize("construct", list(UNSUPPORTED))
def test_auto_falls_back_to_full_with_the_reason(shop: Any, construct: str) -> None:
    name, sql = "fallback", UNSUPPORTED[construct]
    created = refresh_and_check(shop, name, sql)
    assert created.action == "CREATE"
    assert any(construct.lower() in w.lower() for w in created.warnings), created.warnings
    execute(
        shop,
        "UPDATE orders SET amount = amount + 1000, customer = 'dave' WHERE id IN (1, 2); DELETE FROM orders WHERE id = 3",
    )
    result = refresh_and_check(shop, name, sql)
    assert result.action == "FULL"
    assert result.reason is not None and construct.lower() in result.reason.lower()
    assert history(shop, name)[-1]["reason"] == result.reason
    # No capture is installed for a query that can only be refreshed FULL.
    assert (
        value(shop, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal")
        == 0
    )


def test_full_mode_always_recomputes(shop: Any) -> None:
    refresh_and_check(shop, "totals", CUSTOMER_TOTALS, refresh_mode="full")
    for statements in ("UPDATE orders SET amount = 0 WHERE id = 5", None):
        if statements:
            execute(shop, statements)
        result = refresh_and_check(shop, "totals", CUSTOMER_TOTALS, refresh_mode="full")
        assert result.action == "FULL"
        assert result.reason == "refresh_mode='full'"
    assert history(shop, "totals")[-1]["action"] == "FULL"


def test_no_changes_is_a_skip_without_merge(shop: Any, pg_dsn: str) -> None:
    refresh(shop, "totals", CUSTOMER_TOTALS)
    with recording_connection(pg_dsn) as conn:
        result = refresh(conn, "totals", CUSTOMER_TOTALS)
        assert result.action == "SKIP"
        assert applies(conn) == []
        assert not [s for s in conn.statements if '"public"."totals"' in s and "INSERT" in s.upper()]
        # The instrument works: a real change does run a MERGE (differential asked for: on a table of
        # a few rows AUTO may weigh FULL cheaper, and a slow CREATE on a loaded machine tips it).
        execute(shop, "UPDATE orders SET amount = 7 WHERE id = 1")
        assert refresh(conn, "totals", CUSTOMER_TOTALS, refresh_mode="differential").action == "DIFFERENTIAL"
        assert len(applies(conn)) == 1
    assert [h["action"] for h in history(shop, "totals")] == ["CREATE", "SKIP", "DIFFERENTIAL"]
    # Changes that cancel within the batch (insert then delete) leave nothing to write.
    execute(shop, "INSERT INTO orders VALUES (500, 1, 'zed', 1); DELETE FROM orders WHERE id = 500")
    result = refresh_and_check(shop, "totals", CUSTOMER_TOTALS)
    assert result.rows_changed == 0


def test_auto_goes_full_when_a_batch_exceeds_the_threshold(shop: Any) -> None:
    refresh(shop, "totals", CUSTOMER_TOTALS)
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id <= 5")
    small = refresh_and_check(shop, "totals", CUSTOMER_TOTALS)
    assert small.action == "DIFFERENTIAL"
    # 60 updated rows are 120 change rows against ~100 source rows: over the default 0.5.
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id <= 60")
    large = refresh_and_check(shop, "totals", CUSTOMER_TOTALS)
    assert large.action == "FULL"
    assert large.reason is not None and "full_refresh_threshold" in large.reason
    assert history(shop, "totals")[-1]["reason"] == large.reason
    # The threshold is configurable; differential mode never applies it.
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id <= 5")
    assert refresh_and_check(shop, "totals", CUSTOMER_TOTALS, full_refresh_threshold=0.01).action == "FULL"
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id <= 60")
    assert (
        refresh_and_check(shop, "totals", CUSTOMER_TOTALS, refresh_mode="differential").action
        == "DIFFERENTIAL"
    )


def _versions(conn: Any, relation: str, key: str) -> dict[Any, tuple[str, str]]:
    return {r[0]: (r[1], r[2]) for r in rows(conn, f"SELECT {key}, ctid::text, xmin::text FROM {relation}")}


def test_the_threshold_weighs_a_small_dimension_against_all_the_query_reads(shop: Any) -> None:
    """A star schema's small table changes by a large fraction of itself: two of three customers
    renamed are 4 captured changes, 2 rows, of the ~103 rows the query reads, not of 3."""
    sql = "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"
    refresh(shop, "named", sql)
    execute(shop, "UPDATE customers SET name = name || '!' WHERE id <= 2")
    result = refresh_and_check(shop, "named", sql)
    assert "full_refresh_threshold" not in (result.reason or ""), result.summary()
    execute(
        shop, "UPDATE customers SET name = name || '?'; UPDATE orders SET amount = amount + 1 WHERE id <= 60"
    )
    result = refresh_and_check(shop, "named", sql)  # the amounts are not read: 3 rows of ~103
    assert "full_refresh_threshold" not in (result.reason or ""), result.summary()
    execute(shop, "UPDATE orders SET customer_id = customer_id % 3 + 1 WHERE id <= 60")
    result = refresh_and_check(shop, "named", sql)
    assert result.action == "FULL", result.summary()
    assert result.reason == (
        "60 changes to public.orders exceed full_refresh_threshold=0.5 of the ~103 rows the query reads"
    )


@pytest.mark.parametrize("path", ["dbt run", "CALL"])
def test_the_threshold_counts_rows_changed_in_the_columns_read(shop: Any, path: str) -> None:
    """Captured changes overcount what the query sees: 40 updated rows of ~100 are 80 captured
    changes, but 40 rows, under the default 0.5; every row's unread `customer_id` updated is 200
    captured changes, but no row the query reads changed. Neither batch is FULL for the threshold."""
    refresh(shop, "totals", CUSTOMER_TOTALS)

    def refreshed() -> tuple[str, str]:
        if path == "CALL":
            execute(
                shop, "BEGIN ISOLATION LEVEL REPEATABLE READ; CALL dbt_ivm.refresh('public.totals'); COMMIT"
            )
            last = history(shop, "totals")[-1]
            action, reason = str(last["action"]), str(last["reason"] or "")
        else:
            result = refresh(shop, "totals", CUSTOMER_TOTALS)
            action, reason = result.action, result.reason or ""
        return action, reason

    for write in (
        "UPDATE orders SET amount = amount + 1 WHERE id <= 40",
        "UPDATE orders SET customer_id = customer_id + 1",
    ):
        execute(shop, write)
        action, reason = refreshed()
        assert "full_refresh_threshold" not in reason, (write, action, reason)
        assert_matches_query(shop, "public", "totals", CUSTOMER_TOTALS, write)
    # Past it when the rows the query reads do change: 60 of ~100.
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id <= 60")
    action, reason = refreshed()
    assert action == "FULL" and "60 changes to public.orders exceed full_refresh_threshold" in reason, reason


@pytest.mark.parametrize(
    ("sql", "key", "changes", "rewritten"),
    [
        # order 1 belongs to bob: bob's row is updated, dave's inserted, alice and carol untouched
        (CUSTOMER_TOTALS, "customer", (1, 1, 0), {"bob"}),
        # a recomputed aggregate, keyed by its group like any aggregate: bob's row is updated
        (
            "SELECT customer, MAX(amount) AS biggest FROM orders GROUP BY customer",
            "customer",
            (1, 1, 0),
            {"bob"},
        ),
        # orders 1 and 1000 enter the filter; the ten stored rows stay as they are
        ("SELECT id, customer, amount FROM orders WHERE amount > 90", "id", (2, 0, 0), set()),
    ],
)
def test_full_refresh_rewrites_only_rows_that_differ(
    shop: Any, sql: str, key: str, changes: tuple[int, int, int], rewritten: set[Any]
) -> None:
    refresh(shop, "st", sql, refresh_mode="full")
    before = _versions(shop, "st", key)
    execute(
        shop,
        "UPDATE orders SET amount = amount + 500 WHERE id = 1; INSERT INTO orders VALUES (1000, 9, 'dave', 95)",
    )
    result = refresh_and_check(shop, "st", sql, refresh_mode="full")
    assert (result.action, result.rows_inserted, result.rows_updated, result.rows_deleted) == (
        "FULL",
        *changes,
    )
    after = _versions(shop, "st", key)
    assert len(after) == len(before) + changes[0] - changes[2]
    # Every row whose values did not change is the very same tuple: never deleted and re-inserted.
    moved = {k for k in before if before[k] != after.get(k)}
    assert moved == rewritten


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT customer, amount FROM orders ORDER BY amount DESC, id LIMIT 3",
        "SELECT id, customer, amount FROM orders ORDER BY amount DESC, id LIMIT 3",
    ],
    ids=["hidden order keys", "shown order keys"],
)
def test_auto_weighs_a_top_by_hidden_keys_by_cost(shop: Any, sql: str) -> None:
    """A top by keys it does not show reads its input's top again: cheaper than recomputing (3× at 1M
    rows, benchmarks/bench_whole_input.py), so AUTO weighs it like any query (it used to recompute)."""
    assert refresh_and_check(shop, "top", sql).action == "CREATE"
    execute(shop, "UPDATE orders SET amount = amount + 1000 WHERE id = 5")
    result = refresh_and_check(shop, "top", sql)
    assert result.action == "DIFFERENTIAL", result.summary()
    execute(shop, "DELETE FROM orders WHERE id = 5")
    differential = refresh_and_check(shop, "top", sql, refresh_mode="differential")
    assert differential.action == "DIFFERENTIAL", differential.summary()


def test_auto_refreshes_a_window_without_partitions_full_and_says_why(shop: Any) -> None:
    sql = "SELECT id, row_number() OVER (ORDER BY amount DESC, id) AS place FROM orders"
    assert refresh_and_check(shop, "places", sql).action == "CREATE"
    execute(shop, "UPDATE orders SET amount = amount + 1000 WHERE id = 5")
    result = refresh_and_check(shop, "places", sql)
    assert result.action == "FULL" and "has no PARTITION BY" in (result.reason or ""), result.summary()
    execute(shop, "DELETE FROM orders WHERE id = 6")
    differential = refresh_and_check(shop, "places", sql, refresh_mode="differential")
    assert differential.action == "DIFFERENTIAL", differential.summary()
