"""Refreshes next to open transactions, concurrent writers, and each other.

A batch is "committed after the frontier and visible now", so a transaction that wrote before a
refresh and committed after it must show up in the next refresh, exactly once. To make two
refreshes overlap for certain, a third session locks the stream table(s) so the first refresh
stops at its MERGE while holding its locks; the test waits until PostgreSQL reports the sessions
as waiting before releasing it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from dbt_ivm.spec import RefreshResult
from tests.oracle import assert_matches_query, table_rows
from tests.postgres.streams import buffer_count, connect, execute, history, refresh, refresh_and_check, value

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

CUSTOMER_TOTALS = (
    "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
)
ORDER_DETAILS = "SELECT c.name, c.tier, o.amount, o.id FROM orders o JOIN customers c ON o.customer_id = c.id"
ORDER_STATS = "SELECT COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean FROM orders"
STREAMS = {"customer_totals": CUSTOMER_TOTALS, "order_details": ORDER_DETAILS, "order_stats": ORDER_STATS}


def _setup(conn: Any) -> None:
    execute(
        conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, customer text, amount numeric(12,2));"
        "INSERT INTO customers SELECT i, 'c' || i, CASE WHEN i % 2 = 0 THEN 'gold' END FROM generate_series(1, 10) i;"
        "INSERT INTO orders SELECT i, i % 10 + 1, 'c' || (i % 10 + 1), i FROM generate_series(1, 50) i;",
    )
    for name, sql in STREAMS.items():
        refresh(conn, name, sql)


def _wait_until_blocked(conn: Any, pids: list[int], timeout: float = 20) -> None:
    """Wait until every backend in `pids` is waiting for a lock."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = value(
            conn,
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY (%s) AND wait_event_type = 'Lock'",
            (pids,),
        )
        if waiting == len(pids):
            return
        assert time.monotonic() < deadline, f"sessions {pids} never blocked"
        time.sleep(0.05)


def test_transaction_open_across_a_refresh_appears_exactly_once(pg_conn: Any, pg_dsn: str) -> None:
    _setup(pg_conn)
    writer = connect(pg_dsn)
    try:
        execute(writer, "BEGIN")
        execute(writer, "INSERT INTO orders VALUES (100, 1, 'c1', 1000)")
        execute(writer, "UPDATE orders SET amount = 0, customer = 'moved' WHERE id = 2")
        # Committed work of another session in the same window is picked up now.
        execute(pg_conn, "INSERT INTO orders VALUES (101, 3, 'c3', 7)")
        for name, sql in STREAMS.items():
            result = refresh_and_check(pg_conn, name, sql, "writer still open")
            assert result.action == "DIFFERENTIAL", name
        assert value(pg_conn, "SELECT count(*) FROM order_details WHERE id = 100") == 0
        # The open transaction keeps writing after the refresh, then commits.
        execute(writer, "DELETE FROM orders WHERE id = 5")
        execute(writer, "COMMIT")
        for name, sql in STREAMS.items():
            result = refresh_and_check(pg_conn, name, sql, "writer committed")
            assert result.action == "DIFFERENTIAL", name
        stats = table_rows(pg_conn, "public", "order_stats")
        assert stats[0][0] == 51  # 50 orders, +101, +100, −5: each counted once
        # Nothing is applied twice: the next refresh has nothing to do.
        for name, sql in STREAMS.items():
            assert refresh_and_check(pg_conn, name, sql).action == "SKIP", name
    finally:
        writer.close()


def test_transaction_older_than_the_frontier_commits_late(pg_conn: Any, pg_dsn: str) -> None:
    """A writer whose xid is below the frontier's xmin of two refreshes ago is still picked up once."""
    _setup(pg_conn)
    writer = connect(pg_dsn)
    try:
        execute(writer, "BEGIN")
        execute(writer, "UPDATE orders SET amount = amount + 100 WHERE id <= 10")
        for round_ in range(3):
            execute(pg_conn, f"INSERT INTO orders VALUES ({200 + round_}, 1, 'c1', 1)")
            for name, sql in STREAMS.items():
                refresh_and_check(pg_conn, name, sql, f"round {round_}")
        execute(writer, "COMMIT")
        for name, sql in STREAMS.items():
            assert refresh_and_check(pg_conn, name, sql, "late commit").action == "DIFFERENTIAL"
            assert refresh_and_check(pg_conn, name, sql).action == "SKIP"
    finally:
        writer.close()


def test_aborted_transaction_leaves_no_trace(pg_conn: Any, pg_dsn: str) -> None:
    _setup(pg_conn)
    writer = connect(pg_dsn)
    try:
        execute(writer, "BEGIN")
        execute(writer, "DELETE FROM orders")
        for name, sql in STREAMS.items():
            refresh_and_check(pg_conn, name, sql)
        execute(writer, "ROLLBACK")
        for name, sql in STREAMS.items():
            refresh_and_check(pg_conn, name, sql, "after rollback")
    finally:
        writer.close()


def _writer(dsn: str, worker: int, stop: threading.Event, errors: list[BaseException]) -> None:
    """Random single-statement and multi-statement transactions on this worker's own order ids."""
    rng = random.Random(worker)
    conn = connect(dsn)
    base = 1_000_000 * (worker + 1)  # disjoint id ranges per worker
    next_id = base
    try:
        while not stop.is_set():
            choice = rng.random()
            if choice < 0.4:
                execute(
                    conn,
                    "INSERT INTO orders VALUES (%s, %s, %s, %s)",
                    (next_id, rng.randint(1, 12), rng.choice(["c1", "c2", "c3", None]), rng.randint(0, 99)),
                )
                next_id += 1
            elif choice < 0.7:
                execute(
                    conn,
                    "UPDATE orders SET amount = amount + 1, customer = %s WHERE id BETWEEN %s AND %s",
                    (rng.choice(["c1", "c4", None]), base, base + rng.randint(0, 5)),
                )
            elif choice < 0.85:
                execute(conn, "DELETE FROM orders WHERE id = %s", (rng.randint(base, next_id),))
            else:
                execute(conn, "BEGIN")
                execute(conn, "INSERT INTO orders VALUES (%s, 2, 'c2', 5)", (next_id,))
                execute(conn, "UPDATE orders SET amount = 6 WHERE id = %s", (next_id,))
                next_id += 1
                time.sleep(rng.random() * 0.05)  # stay open across a refresh now and then
                execute(conn, "COMMIT" if rng.random() < 0.8 else "ROLLBACK")
    except BaseException as error:
        errors.append(error)
    finally:
        conn.close()


def test_refreshes_while_writers_write(pg_conn: Any, pg_dsn: str) -> None:
    _setup(pg_conn)
    stop = threading.Event()
    errors: list[BaseException] = []
    writers = [threading.Thread(target=_writer, args=(pg_dsn, w, stop, errors)) for w in range(3)]
    for thread in writers:
        thread.start()
    try:
        actions: set[str] = set()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            for name, sql in STREAMS.items():
                actions.add(refresh(pg_conn, name, sql, refresh_mode="differential").action)
    finally:
        stop.set()
        for thread in writers:
            thread.join()
    assert not errors, errors
    assert "DIFFERENTIAL" in actions
    for name, sql in STREAMS.items():
        refresh_and_check(pg_conn, name, sql, "after the writers stopped")
    for source in ("public.orders", "public.customers"):
        assert buffer_count(pg_conn, source) == 0


def _run_blocked(
    pg_conn: Any,
    pg_dsn: str,
    lock_tables: list[str],
    calls: list[Callable[[Any], RefreshResult]],
    mode: str = "EXCLUSIVE",
    while_blocked: Callable[[], None] | None = None,
) -> list[RefreshResult]:
    """Run each call on its own connection while `lock_tables` are locked, then release the lock."""
    blocker = connect(pg_dsn)
    sessions = [connect(pg_dsn) for _ in calls]
    try:
        execute(blocker, "BEGIN")
        execute(blocker, f"LOCK TABLE {', '.join(lock_tables)} IN {mode} MODE")
        with ThreadPoolExecutor(len(calls)) as pool:
            futures: list[Future[RefreshResult]] = []
            for session, call in zip(sessions, calls, strict=True):
                futures.append(pool.submit(call, session))
                _wait_until_blocked(pg_conn, [session.get_backend_pid()])
            if while_blocked is not None:
                while_blocked()
            execute(blocker, "COMMIT")
            return [f.result(timeout=60) for f in futures]
    finally:
        for conn in [blocker, *sessions]:
            conn.close()


def test_two_refreshes_of_one_stream_table_serialize(pg_conn: Any, pg_dsn: str) -> None:
    _setup(pg_conn)
    execute(
        pg_conn, "UPDATE orders SET amount = amount * 2 WHERE id % 3 = 0; DELETE FROM orders WHERE id = 7"
    )
    before = len(history(pg_conn, "customer_totals"))
    results = _run_blocked(
        pg_conn,
        pg_dsn,
        ["customer_totals"],
        [lambda c: refresh(c, "customer_totals", CUSTOMER_TOTALS)] * 2,
    )
    # The second waited for the first and then found its batch already applied.
    assert sorted(r.action for r in results) == ["DIFFERENTIAL", "SKIP"]
    assert [h["action"] for h in history(pg_conn, "customer_totals")[before:]] == ["DIFFERENTIAL", "SKIP"]
    assert_matches_query(pg_conn, "public", "customer_totals", CUSTOMER_TOTALS)


def test_concurrent_refreshes_of_stream_tables_sharing_a_source(pg_conn: Any, pg_dsn: str) -> None:
    """dbt runs models in parallel threads: consumers of one change buffer refresh at the same time."""
    _setup(pg_conn)
    for round_ in range(3):
        execute(pg_conn, f"UPDATE orders SET amount = amount + 1 WHERE id % 4 = {round_}")
        results = _run_blocked(
            pg_conn,
            pg_dsn,
            list(STREAMS),
            # differential: a quarter of the rows changed is near AUTO's threshold once autovacuum
            # has analyzed the table, and this test is about concurrency, not AUTO's choice
            [
                lambda c, n=name, s=sql: refresh(c, n, s, refresh_mode="differential")
                for name, sql in STREAMS.items()
            ],
        )
        assert [r.action for r in results] == ["DIFFERENTIAL"] * 3, f"round {round_}"
        for name, sql in STREAMS.items():
            assert_matches_query(pg_conn, "public", name, sql, f"round {round_}")
    for name, sql in STREAMS.items():
        refresh(pg_conn, name, sql)
    assert buffer_count(pg_conn, "public.orders") == 0


def test_stream_tables_created_at_once_on_a_new_source(pg_conn: Any, pg_dsn: str) -> None:
    """dbt's first run creates several stream tables over one source in parallel: capture is installed once."""
    execute(
        pg_conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, customer text, amount numeric(12,2));"
        "INSERT INTO customers VALUES (1, 'c1', 'gold'); INSERT INTO orders VALUES (1, 1, 'c1', 5);",
    )
    # Installing capture needs a lock on orders that this session holds until every creator waits.
    results = _run_blocked(
        pg_conn,
        pg_dsn,
        ["orders"],
        [lambda c, n=name, s=sql: refresh(c, n, s) for name, sql in STREAMS.items()],
        mode="SHARE ROW EXCLUSIVE",
    )
    assert [r.action for r in results] == ["CREATE"] * 3
    execute(pg_conn, "INSERT INTO orders VALUES (2, 1, 'c1', 6); UPDATE customers SET tier = 'x'")
    for name, sql in STREAMS.items():
        assert refresh_and_check(pg_conn, name, sql).action == "DIFFERENTIAL"


def test_writers_are_not_blocked_by_a_refresh(pg_conn: Any, pg_dsn: str) -> None:
    """While a refresh holds its snapshot and locks (stopped at its MERGE), sources stay writable."""
    _setup(pg_conn)
    execute(pg_conn, "UPDATE orders SET amount = amount + 1 WHERE id < 10")
    writer = connect(pg_dsn)
    execute(writer, "SET statement_timeout = '5s'")

    def write() -> None:
        execute(
            writer, "INSERT INTO orders VALUES (500, 1, 'c1', 5); UPDATE orders SET amount = 0 WHERE id = 20"
        )
        execute(writer, "DELETE FROM orders WHERE id = 21; UPDATE customers SET tier = 'new' WHERE id = 1")
        execute(writer, "BEGIN; INSERT INTO orders VALUES (501, 2, 'c2', 6); COMMIT")

    try:
        results = _run_blocked(
            pg_conn,
            pg_dsn,
            ["customer_totals"],
            [lambda c: refresh(c, "customer_totals", CUSTOMER_TOTALS)],
            while_blocked=write,
        )
    finally:
        writer.close()
    assert results[0].action == "DIFFERENTIAL"
    for name, sql in STREAMS.items():
        refresh_and_check(pg_conn, name, sql, "after writes during a refresh")


def test_a_new_stream_table_keeps_changes_another_consumer_cleans_up(pg_conn: Any, pg_dsn: str) -> None:
    """A stream table being created shares the buffer before its registration commits: another
    consumer's cleanup must not delete rows committed after the new table's snapshot."""
    _setup(pg_conn)
    # A plain table under the new stream table's name: its build stops at DROP TABLE while locked,
    # after it took its snapshot.
    execute(pg_conn, "CREATE TABLE new_totals (x int)")
    new_sql = "SELECT customer, COUNT(*) AS n, SUM(amount) AS s FROM orders GROUP BY customer"

    def meanwhile() -> None:
        execute(
            pg_conn,
            "INSERT INTO orders VALUES (900, 1, 'late', 1); UPDATE orders SET amount = 77 WHERE id = 1",
        )
        for name, sql in STREAMS.items():  # every other consumer catches up, then cleans up
            refresh(pg_conn, name, sql)

    results = _run_blocked(
        pg_conn,
        pg_dsn,
        ["new_totals"],
        [lambda c: refresh(c, "new_totals", new_sql)],
        mode="ACCESS EXCLUSIVE",
        while_blocked=meanwhile,
    )
    assert results[0].action == "REBUILD"
    result = refresh_and_check(pg_conn, "new_totals", new_sql, "changes made while it was being built")
    assert result.action == "DIFFERENTIAL"
