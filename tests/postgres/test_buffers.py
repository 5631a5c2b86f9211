"""Change buffers: shared per source, typed, private, and emptied once every consumer has seen their rows."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.postgres.runner import drop_stream_table
from tests.oracle import assert_matches_query
from tests.postgres.streams import (
    CATALOG,
    buffer_count,
    buffer_of,
    connect,
    execute,
    refresh,
    refresh_and_check,
    rows,
    value,
)

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

STREAMS = {
    "customer_totals": (
        "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
    ),
    "big_orders": "SELECT id, amount FROM orders WHERE amount > 10",
}


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2), placed date);"
        "INSERT INTO orders SELECT i, 'c' || (i % 4), i, DATE '2024-01-01' + i FROM generate_series(1, 20) i;",
    )
    for name, sql in STREAMS.items():
        refresh(pg_conn, name, sql, refresh_mode="differential")
    return pg_conn


def test_one_typed_buffer_per_source_shared_by_its_consumers(shop: Any) -> None:
    assert value(shop, f"SELECT count(*) FROM {CATALOG}.change_buffers") == 1
    columns = rows(
        shop,
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped AND attname NOT LIKE '\\_\\_ivm%%' "
        "ORDER BY attnum",
        (buffer_of(shop, "public.orders"),),
    )
    assert columns == [
        ("id", "integer"),
        ("customer", "text"),
        ("amount", "numeric(10,2)"),
        ("placed", "date"),
    ]
    # One trigger per event (transition tables forbid multi-event triggers), statement level.
    triggers = rows(
        shop,
        "SELECT count(*), bool_and((tgtype & 1) = 0) FROM pg_trigger "
        "WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal",
    )
    assert triggers == [(4, True)]


def test_buffers_empty_once_every_consumer_refreshed(shop: Any) -> None:
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id < 5; DELETE FROM orders WHERE id = 9")
    assert buffer_count(shop, "public.orders") == 9
    refresh_and_check(shop, "customer_totals", STREAMS["customer_totals"], refresh_mode="differential")
    # big_orders has not seen these rows yet: they stay.
    assert buffer_count(shop, "public.orders") == 9
    execute(shop, "INSERT INTO orders VALUES (100, 'c1', 50, NULL)")
    refresh_and_check(shop, "customer_totals", STREAMS["customer_totals"], refresh_mode="differential")
    assert buffer_count(shop, "public.orders") == 10
    # The lagging consumer reads both batches at once, then nothing is left.
    result = refresh_and_check(shop, "big_orders", STREAMS["big_orders"], refresh_mode="differential")
    assert result.action == "DIFFERENTIAL"
    assert buffer_count(shop, "public.orders") == 0


def test_uncommitted_rows_stay_in_the_buffer(shop: Any, pg_dsn: str) -> None:
    writer = connect(pg_dsn)
    try:
        execute(writer, "BEGIN")
        execute(writer, "INSERT INTO orders VALUES (200, 'c1', 99, NULL)")
        execute(shop, "INSERT INTO orders VALUES (201, 'c2', 98, NULL)")
        for name, sql in STREAMS.items():
            refresh_and_check(shop, name, sql)
        execute(writer, "COMMIT")
        assert buffer_count(shop, "public.orders") == 1
        for name, sql in STREAMS.items():
            refresh_and_check(shop, name, sql)
        assert buffer_count(shop, "public.orders") == 0
    finally:
        writer.close()


def test_a_dropped_stream_table_releases_its_rows_and_the_last_one_removes_capture(shop: Any) -> None:
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id < 5")
    refresh(shop, "customer_totals", STREAMS["customer_totals"])
    execute(shop, "DROP TABLE big_orders")
    drop_stream_table(shop, "public", "big_orders")
    # The next refresh of the remaining consumer frees the rows only big_orders still needed.
    refresh(shop, "customer_totals", STREAMS["customer_totals"])
    assert buffer_count(shop, "public.orders") == 0
    # With no consumer left, writes to the source are no longer captured at all.
    execute(shop, "DROP TABLE customer_totals")
    drop_stream_table(shop, "public", "customer_totals")
    assert (
        value(shop, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal")
        == 0
    )
    assert value(shop, f"SELECT count(*) FROM {CATALOG}.change_buffers") == 0
    assert value(shop, "SELECT count(*) FROM pg_class WHERE relname LIKE 'changes\\_%%'") == 0
    execute(shop, "INSERT INTO orders VALUES (300, 'c1', 1, NULL)")
    # Defining it again starts over.
    refresh_and_check(shop, "customer_totals", STREAMS["customer_totals"])
    execute(shop, "DELETE FROM orders WHERE id = 300")
    assert refresh_and_check(shop, "customer_totals", STREAMS["customer_totals"]).action == "DIFFERENTIAL"


def test_buffers_get_no_more_privileges_than_their_source(shop: Any, pg_dsn: str) -> None:
    """A role that may only write the source can still write (capture runs as the buffer's owner),
    and can read neither the buffer nor anything it may not read in the source."""
    execute(
        shop,
        "DROP ROLE IF EXISTS ivm_writer; CREATE ROLE ivm_writer LOGIN;"
        "GRANT USAGE ON SCHEMA public TO ivm_writer; GRANT INSERT, UPDATE, DELETE, SELECT ON orders TO ivm_writer;"
        f"GRANT USAGE ON SCHEMA {CATALOG} TO ivm_writer;",
    )
    writer = connect(pg_dsn.replace("user=postgres", "user=ivm_writer"))
    try:
        execute(
            writer,
            "INSERT INTO orders VALUES (400, 'c3', 33, NULL); UPDATE orders SET amount = 1 WHERE id = 1",
        )
        with pytest.raises(Exception, match="permission denied"):
            execute(writer, f"SELECT * FROM {buffer_of(shop, 'public.orders')}")
        with pytest.raises(Exception, match="permission denied"):
            execute(writer, f"DELETE FROM {buffer_of(shop, 'public.orders')}")
    finally:
        writer.close()
        execute(shop, "DROP OWNED BY ivm_writer; DROP ROLE ivm_writer")
    for name, sql in STREAMS.items():
        refresh_and_check(shop, name, sql)
        assert_matches_query(shop, "public", name, sql)


def test_buffer_reset_by_crash_recovery_forces_full_refresh(pg_conn: Any) -> None:
    """Crash recovery empties UNLOGGED buffers; the missing sentinel turns that into a FULL refresh."""
    from dbt_ivm.postgres.runner import run_stream_table
    from dbt_ivm.spec import StreamTableSpec

    cur = pg_conn.cursor()
    cur.execute("CREATE TABLE t (id int PRIMARY KEY, g text, v int)")
    cur.execute("INSERT INTO t VALUES (1, 'a', 1), (2, 'b', 2)")
    spec = StreamTableSpec(
        model="sums", schema="public", name="sums", sql="SELECT g, SUM(v) AS s FROM t GROUP BY g"
    )
    run_stream_table(pg_conn, spec)
    cur.execute("INSERT INTO t VALUES (3, 'a', 5)")
    # What crash recovery does to an unlogged table: it comes back empty, changes and sentinel alike.
    cur.execute("SELECT buffer_table FROM dbt_ivm.change_buffers WHERE source = 'public.t'")
    cur.execute(f'TRUNCATE dbt_ivm."{cur.fetchone()[0]}", dbt_ivm.buffer_marks')
    result = run_stream_table(pg_conn, spec)
    assert result.action == "FULL"
    assert result.reason is not None and "was reset" in result.reason
    cur.execute("SELECT g, s FROM sums ORDER BY g")
    assert cur.fetchall() == [("a", 6), ("b", 2)]
    cur.execute("INSERT INTO t VALUES (4, 'b', 1)")
    assert run_stream_table(pg_conn, spec).action == "DIFFERENTIAL"
    cur.execute("SELECT g, s FROM sums ORDER BY g")
    assert cur.fetchall() == [("a", 6), ("b", 3)]
