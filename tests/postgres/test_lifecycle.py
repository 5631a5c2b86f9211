"""A stream table's life: create, refresh, --full-refresh, a changed defining query or config, a dropped table."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from dbt_ivm.errors import IvmError
from tests.oracle import assert_matches_query, user_columns
from tests.postgres.streams import execute, history, refresh, refresh_and_check, value

pytestmark = pytest.mark.postgres

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
TOTALS_V2 = "SELECT customer, SUM(amount) AS total FROM orders WHERE amount > 1 GROUP BY customer"


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2));"
        "INSERT INTO orders VALUES (1, 'a', 1), (2, 'a', 2), (3, 'b', 3);",
    )
    created = refresh_and_check(pg_conn, "totals", TOTALS)
    assert created.action == "CREATE" and created.rows_inserted == 2
    return pg_conn


def test_user_columns_come_first_and_hidden_ones_are_marked(shop: Any) -> None:
    assert user_columns(shop, "public", "totals") == ["customer", "total", "order_count"]
    means = "SELECT customer, AVG(amount) AS mean FROM orders GROUP BY customer"
    refresh_and_check(shop, "means", means)  # no output holds the sum and count AVG divides
    assert user_columns(shop, "public", "means") == ["customer", "mean"]
    hidden = value(
        shop,
        "SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute "
        "WHERE attrelid = 'means'::regclass AND attnum > 2 AND NOT attisdropped",
    )
    assert hidden and all(name.startswith("__ivm_") for name in hidden)


def test_full_refresh_rebuilds(shop: Any) -> None:
    execute(shop, "UPDATE orders SET amount = 9 WHERE id = 3")
    result = refresh_and_check(shop, "totals", TOTALS, full_refresh=True)
    assert (result.action, result.reason) == ("REBUILD", "--full-refresh")
    execute(shop, "DELETE FROM orders WHERE id = 1")
    assert refresh_and_check(shop, "totals", TOTALS).action == "DIFFERENTIAL"


def test_changed_query_is_applied(shop: Any) -> None:
    result = refresh_and_check(shop, "totals", TOTALS_V2)
    assert (result.action, result.reason) == ("REBUILD", "defining query changed")
    assert user_columns(shop, "public", "totals") == ["customer", "total"]
    execute(shop, "INSERT INTO orders VALUES (4, 'c', 5), (5, 'c', 0.5)")
    assert refresh_and_check(shop, "totals", TOTALS_V2).action == "DIFFERENTIAL"


def test_a_changed_query_rebuilds_whatever_on_configuration_change(shop: Any) -> None:
    result = refresh_and_check(shop, "totals", TOTALS_V2, on_configuration_change="fail")
    assert (result.action, result.reason) == ("REBUILD", "defining query changed")
    result = refresh_and_check(shop, "totals", TOTALS, on_configuration_change="continue")
    assert (result.action, result.reason) == ("REBUILD", "defining query changed")


def test_a_changed_config_fails_continues_or_applies(shop: Any) -> None:
    """on_configuration_change with dbt's meaning: a stream-table config (here refresh_mode and
    full_refresh_threshold) that differs from the registered one fails the run, is kept as registered
    with a warning, or is applied and registered."""
    registered_mode = "SELECT refresh_mode FROM dbt_ivm.stream_tables WHERE stream_table = 'public.totals'"
    with pytest.raises(IvmError, match=r"refresh_mode: 'auto' -> 'full'.*on_configuration_change='fail'"):
        refresh(shop, "totals", TOTALS, refresh_mode="full", on_configuration_change="fail")
    execute(shop, "INSERT INTO orders VALUES (4, 'c', 5)")
    kept = refresh_and_check(
        shop,
        "totals",
        TOTALS,
        refresh_mode="full",
        full_refresh_threshold=0.9,
        on_configuration_change="continue",
    )
    assert kept.action == "DIFFERENTIAL", kept.summary()  # still 'auto', as registered
    assert "full_refresh_threshold: 0.5 -> 0.9" in kept.warnings[0], kept.warnings
    assert "keeps the previous configuration" in kept.warnings[0]
    assert value(shop, registered_mode) == "auto"
    execute(shop, "INSERT INTO orders VALUES (5, 'c', 6)")
    applied = refresh_and_check(shop, "totals", TOTALS, refresh_mode="full")
    assert (applied.action, applied.reason) == ("FULL", "refresh_mode='full'") and not applied.warnings
    assert value(shop, registered_mode) == "full"
    # Registered now: no change left to refuse.
    execute(shop, "DELETE FROM orders WHERE id = 5")
    assert (
        refresh_and_check(shop, "totals", TOTALS, refresh_mode="full", on_configuration_change="fail").action
        == "FULL"
    )
    # And back to auto: capture is reinstalled and the table is maintained differentially again.
    execute(shop, "DELETE FROM orders WHERE id = 4")
    refresh_and_check(shop, "totals", TOTALS)
    execute(shop, "INSERT INTO orders VALUES (6, 'a', 1)")
    assert refresh_and_check(shop, "totals", TOTALS).action == "DIFFERENTIAL"


def test_a_dropped_table_is_created_again(shop: Any) -> None:
    execute(shop, "DROP TABLE totals; INSERT INTO orders VALUES (4, 'c', 5)")
    result = refresh_and_check(shop, "totals", TOTALS)
    assert result.action == "CREATE"
    execute(shop, "DELETE FROM orders WHERE id = 4")
    assert refresh_and_check(shop, "totals", TOTALS).action == "DIFFERENTIAL"
    assert [h["action"] for h in history(shop, "totals")] == ["CREATE", "CREATE", "DIFFERENTIAL"]


def test_global_aggregate_over_an_empty_table(pg_conn: Any) -> None:
    execute(pg_conn, "CREATE TABLE orders (id int PRIMARY KEY, amount numeric)")
    sql = "SELECT COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, COUNT(amount) AS n_amount FROM orders"
    refresh_and_check(pg_conn, "stats", sql)
    assert value(pg_conn, "SELECT count(*) FROM stats") == 1
    execute(pg_conn, "INSERT INTO orders VALUES (1, NULL), (2, 4)")
    refresh_and_check(pg_conn, "stats", sql, refresh_mode="differential")
    execute(pg_conn, "DELETE FROM orders")
    refresh_and_check(pg_conn, "stats", sql, refresh_mode="differential")
    # One row, count 0, SUM and AVG NULL: exactly what the query returns over an empty table.
    assert value(pg_conn, "SELECT row(n, total, mean, n_amount)::text FROM stats") == "(0,,,0)"


def test_two_refreshes_in_one_transaction_keep_their_temp_tables_apart(shop: Any) -> None:
    """Temp tables live until commit: a second refresh in the same transaction (IMMEDIATE mode will
    run inside the writer's) must not collide with the first one's."""
    from dbt_ivm import refresh
    from dbt_ivm.postgres import registry
    from dbt_ivm.postgres.db import Db
    from dbt_ivm.postgres.installed import program as _program
    from dbt_ivm.postgres.refresh_steps import PostgresRefresh
    from dbt_ivm.postgres.runner import PostgresBackend, compile_query
    from tests.postgres.streams import make_spec

    keyless = "SELECT customer, amount FROM orders"  # multiset layout: rows and ops temp tables
    refresh_and_check(shop, "amounts", keyless)
    execute(shop, "INSERT INTO orders VALUES (4, 'b', 4); UPDATE orders SET amount = 5 WHERE id = 1")
    db = Db(shop)
    with db.transaction("REPEATABLE READ"):
        for name, sql in (("totals", TOTALS), ("amounts", keyless), ("totals", TOTALS)):
            backend = PostgresBackend(db, make_spec(name, sql))
            registered = registry.lookup(db, backend.spec.catalog_schema, f"public.{name}")
            assert registered is not None
            compiled = compile_query(db, backend.spec, sql)
            program = functools.partial(_program, db, backend.spec, compiled, sql)
            steps = PostgresRefresh(backend, db, compiled, sql, registered, None, program, backend.started)
            refreshed = refresh.refresh(steps)
            assert refreshed.action in ("DIFFERENTIAL", "SKIP")
    assert_matches_query(shop, "public", "totals", TOTALS)
    assert_matches_query(shop, "public", "amounts", keyless)
