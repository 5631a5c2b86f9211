"""refresh_mode='immediate': the stream table changes inside the writer's own transaction.

Every check is the multiset oracle, run inside the writing transaction (before COMMIT) and after it:
every shared query shape under random DML, every write shape (COPY, MERGE, upserts, writable CTEs
over two sources, FK cascades, triggers on sources writing other sources, TRUNCATE, savepoints),
writers without rights on the stream table, concurrent writers (the join-halves anomaly, REPEATABLE
READ, random DML from threads), and maintenance that cannot run never failing the write.
"""

from __future__ import annotations

import copy
import io
import os
import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg2
import psycopg2.errors
import pytest

from dbt_ivm.errors import IvmError
from tests.oracle import assert_matches_query, differences
from tests.postgres.streams import (
    SCHEMA,
    connect,
    execute,
    refresh,
    rows,
    seeded_shapes,
    shape_parameters,
    value,
)
from tests.shapes import streams

pytestmark = pytest.mark.postgres

SEED = int(os.environ.get("DBT_IVM_SHAPES_SEED", "20250101"))
SHAPES = streams(SCHEMA)
CUSTOMER_TOTALS = "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer_id"
ORDER_DETAILS = "SELECT o.id, o.amount, c.name FROM orders o JOIN customers c ON o.customer_id = c.id"
KEYLESS = "SELECT o.amount, c.name FROM orders o LEFT JOIN customers c ON o.customer_id = c.id"
STREAMS = {"customer_totals": CUSTOMER_TOTALS, "order_details": ORDER_DETAILS, "keyless_names": KEYLESS}
# Aggregates keeping state, written straight onto their groups (apply/grouped.py): values computed
# over the state (AVG, arithmetic), a group key that is an expression, and the one global row. Only
# the write-shape test adds them (each stream table is checked after every statement).
BUCKETS = (
    "SELECT customer_id % 3 AS bucket, SUM(amount) * 2 AS doubled, AVG(amount) AS mean, "
    "COUNT(amount) AS counted FROM orders GROUP BY customer_id % 3"
)
GLOBAL_TOTALS = "SELECT COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean FROM orders"
EVERY_SHAPE_STREAMS = {**STREAMS, "buckets": BUCKETS, "global_totals": GLOBAL_TOTALS}


def _immediate(conn: Any, name: str, sql: str, **options: Any) -> None:
    result = refresh(conn, name, sql, refresh_mode="immediate", **options)
    assert result.action in ("CREATE", "REBUILD"), result.summary()


def _check_all(conn: Any, streams_: dict[str, str], context: str) -> None:
    for name, sql in streams_.items():
        assert_matches_query(conn, SCHEMA, name, sql, context)


@pytest.mark.parametrize("name", shape_parameters(list(SHAPES)))
def test_shape_is_maintained_inside_the_writers_transaction(pg_dsn: str, name: str) -> None:
    sql = SHAPES[name]
    rng = random.Random(f"{SEED}:immediate:{name}")
    conn = connect(pg_dsn)
    try:
        workload = seeded_shapes(conn, rng)
        _immediate(conn, name, sql)
        context = f"{name}, seed {SEED} (DBT_IVM_SHAPES_SEED)"
        for cycle in range(4):
            saved = copy.deepcopy(workload, {id(rng): rng})  # its model of the tables, for a rollback
            batch = workload.batch(4)
            execute(conn, "BEGIN")
            for statement in batch:
                execute(conn, statement)
                assert_matches_query(
                    conn, SCHEMA, name, sql, f"{context}, cycle {cycle}, before COMMIT: {statement}"
                )
            if cycle == 2:
                execute(conn, "ROLLBACK")
                workload = saved
            else:
                execute(conn, "COMMIT")
            assert_matches_query(conn, SCHEMA, name, sql, f"{context}, cycle {cycle}, after: {batch}")
        again = refresh(conn, name, sql, refresh_mode="immediate")
        assert again.action == "SKIP", f"{context}: {again.summary()}"
    finally:
        conn.close()


def _orders_and_customers(conn: Any, streams_: dict[str, str] = STREAMS, **options: Any) -> None:
    execute(
        conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int REFERENCES customers ON DELETE CASCADE, "
        "amount numeric(12,2));"
        "INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 10) i;"
        "INSERT INTO orders SELECT i, i % 10 + 1, i FROM generate_series(1, 50) i;",
    )
    for name, sql in streams_.items():
        _immediate(conn, name, sql, **options)


def _audit(conn: Any, names: list[str]) -> None:
    """A row trigger on each stream table recording what it saw: which table, TG_OP, OLD, NEW."""
    execute(
        conn,
        "CREATE TABLE audit (seen serial, st text, op text, old jsonb, new jsonb);"
        "CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO audit (st, op, old, new) VALUES (TG_TABLE_NAME, TG_OP, "
        "CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END, CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END); "
        "RETURN NULL; END $$;"
        + "".join(
            f"CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {n} FOR EACH ROW EXECUTE FUNCTION audit_row();"
            for n in names
        ),
    )


WRITE_SHAPES = [
    "INSERT INTO orders VALUES (100, 1, 5), (101, 2, NULL)",
    "UPDATE orders SET amount = amount + 1 WHERE id < 20",
    "UPDATE orders SET id = id + 1000, customer_id = 3 WHERE id BETWEEN 20 AND 22",  # key changes
    "UPDATE orders SET amount = amount WHERE id < 5",  # changes nothing
    "UPDATE orders SET amount = 1 WHERE false",  # touches nothing
    "DELETE FROM orders WHERE id > 45",
    "UPDATE customers SET name = name || '!' WHERE id < 4",
    # one statement, two sources of one join
    "WITH c AS (INSERT INTO customers VALUES (11, 'new') RETURNING id) INSERT INTO orders SELECT 200, id, 9 FROM c",
    "WITH o AS (UPDATE orders SET amount = 7 WHERE customer_id = 2 RETURNING id) "
    "UPDATE customers SET name = 'two' WHERE id = 2",
    "INSERT INTO orders VALUES (100, 2, 6) ON CONFLICT (id) DO UPDATE SET amount = excluded.amount, "
    "customer_id = excluded.customer_id",
    "INSERT INTO orders VALUES (300, 2, 6) ON CONFLICT (id) DO NOTHING",
    "MERGE INTO orders o USING (VALUES (1, 3, 1.5), (400, 4, 2.5)) v(id, c, a) ON o.id = v.id "
    "WHEN MATCHED THEN UPDATE SET amount = v.a WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.c, v.a)",
    "DELETE FROM customers WHERE id = 5",  # cascades into orders
    "TRUNCATE orders",
    "INSERT INTO orders SELECT i, i % 4 + 1, i FROM generate_series(1, 30) i",
    "TRUNCATE orders, customers",
]


@pytest.mark.server_version
@pytest.mark.parametrize("apply_path", ["merge", "explicit"])
def test_every_write_shape(pg_conn: Any, apply_path: str) -> None:
    _orders_and_customers(pg_conn, EVERY_SHAPE_STREAMS)
    if apply_path == "explicit":  # a user trigger on every stream table, created after dbt run
        _audit(pg_conn, list(EVERY_SHAPE_STREAMS))
    for statement in WRITE_SHAPES:
        execute(pg_conn, "BEGIN")
        execute(pg_conn, statement)
        _check_all(pg_conn, EVERY_SHAPE_STREAMS, f"before COMMIT: {statement}")
        execute(pg_conn, "COMMIT")
        _check_all(pg_conn, EVERY_SHAPE_STREAMS, statement)
    with pg_conn.cursor() as cur:
        cur.copy_expert("COPY customers FROM STDIN", _lines(["1\tone", "2\ttwo"]))
        cur.copy_expert("COPY orders FROM STDIN", _lines(["1\t1\t10.00", "2\t2\t\\N", "3\t2\t3.00"]))
    _check_all(pg_conn, EVERY_SHAPE_STREAMS, "COPY")
    for name, sql in EVERY_SHAPE_STREAMS.items():  # the TRUNCATEs were recomputed for: nothing to rebuild
        result = refresh(pg_conn, name, sql, refresh_mode="immediate")
        assert result.action == "SKIP", result.summary()
    if apply_path == "explicit":
        seen = {r[0] for r in rows(pg_conn, "SELECT DISTINCT st || ' ' || op FROM audit")}
        every = {f"{n} {op}" for n in EVERY_SHAPE_STREAMS for op in ("INSERT", "UPDATE", "DELETE")}
        # The one row of a global aggregate is always there: it is only ever updated.
        assert seen == every - {"global_totals INSERT", "global_totals DELETE"}, seen


@pytest.mark.server_version
def test_user_triggers_fire_once_per_changed_row(pg_conn: Any) -> None:
    """Like a differential refresh with user triggers: DELETE, UPDATE, INSERT, each only when it
    changes rows, so a row trigger sees each changed row once with its OLD and NEW, and a statement
    trigger fires only for statements that change something."""
    _orders_and_customers(pg_conn, {"customer_totals": CUSTOMER_TOTALS})
    _audit(pg_conn, ["customer_totals"])
    execute(
        pg_conn,
        "CREATE TABLE statements (op text);"
        "CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO statements VALUES (TG_OP); RETURN NULL; END $$;"
        "CREATE TRIGGER counted AFTER INSERT OR UPDATE OR DELETE ON customer_totals "
        "FOR EACH STATEMENT EXECUTE FUNCTION count_statement();",
    )

    def seen() -> list[tuple[Any, ...]]:
        found = rows(
            pg_conn,
            "SELECT op, old->>'customer_id', old->>'n', new->>'customer_id', new->>'n' FROM audit ORDER BY seen",
        )
        execute(pg_conn, "TRUNCATE audit")
        return found

    def statements() -> list[str]:
        found = [r[0] for r in rows(pg_conn, "SELECT op FROM statements")]
        execute(pg_conn, "TRUNCATE statements")
        return found

    n3 = value(pg_conn, "SELECT count(*) FROM orders WHERE customer_id = 3")
    execute(
        pg_conn,
        "INSERT INTO customers VALUES (77, 'new'); INSERT INTO orders VALUES (700, 77, 5), (701, 3, 1)",
    )
    assert sorted(seen()) == [("INSERT", None, None, "77", "1"), ("UPDATE", "3", str(n3), "3", str(n3 + 1))]
    assert statements() == ["UPDATE", "INSERT"]
    execute(pg_conn, "UPDATE orders SET amount = amount WHERE customer_id = 3")  # changes no group
    assert seen() == [] and statements() == []
    execute(pg_conn, "DELETE FROM orders WHERE customer_id = 77")
    assert seen() == [("DELETE", "77", "1", None, None)] and statements() == ["DELETE"]
    _check_all(pg_conn, {"customer_totals": CUSTOMER_TOTALS}, "explicit DML")

    # Several statements at once (the combined path) and a TRUNCATE (the recompute) apply explicitly too.
    execute(
        pg_conn,
        "WITH c AS (INSERT INTO customers VALUES (78, 'cte') RETURNING id) "
        "INSERT INTO orders SELECT 703, id, 2 FROM c UNION ALL SELECT 704, 3, 2",
    )
    assert sorted(r[0] for r in seen()) == ["INSERT", "UPDATE"] and statements() == ["UPDATE", "INSERT"]
    groups = value(pg_conn, "SELECT count(*) FROM customer_totals")
    execute(pg_conn, "TRUNCATE orders")
    assert [r[0] for r in seen()] == ["DELETE"] * groups and statements() == ["DELETE"]
    _check_all(pg_conn, {"customer_totals": CUSTOMER_TOTALS}, "combined and truncated")

    # A BEFORE trigger that changes what is written leaves the table unlike its query: the writer is told.
    execute(
        pg_conn,
        "CREATE FUNCTION doubled() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "NEW.total := NEW.total * 2; RETURN NEW; END $$;"
        "CREATE TRIGGER doubled BEFORE UPDATE ON customer_totals FOR EACH ROW EXECUTE FUNCTION doubled();",
    )
    execute(pg_conn, "INSERT INTO orders VALUES (702, 4, 1)")  # a new group: inserted, not doubled
    pg_conn.notices.clear()
    execute(pg_conn, "INSERT INTO orders VALUES (705, 4, 1)")
    assert any("read back different" in n and "customer_totals" in n for n in pg_conn.notices), (
        pg_conn.notices
    )


@pytest.mark.server_version
def test_a_user_trigger_that_writes_a_source_again(pg_conn: Any) -> None:
    """A trigger on the stream table that writes one of its sources runs the maintenance again, nested
    inside the first one's writes: each applies only its own rows."""
    _orders_and_customers(pg_conn, {"customer_totals": CUSTOMER_TOTALS})
    execute(
        pg_conn,
        "CREATE FUNCTION bonus() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO orders VALUES (NEW.n * 1000 + NEW.customer_id, 50, 1); RETURN NULL; END $$;"
        "CREATE TRIGGER bonus AFTER UPDATE ON customer_totals FOR EACH ROW WHEN (NEW.customer_id = 1) "
        "EXECUTE FUNCTION bonus();",
    )
    execute(pg_conn, "INSERT INTO customers VALUES (50, 'x')")
    # Group 1 is updated first (its trigger writes an order of customer 50: maintained, nested), then
    # group 50 is inserted by the same outer maintenance.
    execute(pg_conn, "INSERT INTO orders VALUES (900, 50, 5), (902, 1, 7)")
    assert value(pg_conn, "SELECT n FROM customer_totals WHERE customer_id = 50") == 2
    _check_all(pg_conn, {"customer_totals": CUSTOMER_TOTALS}, "after nested maintenance")


@pytest.mark.server_version
def test_a_rows_table_taken_by_the_writer_falls_back_to_the_merge(pg_conn: Any, pg_dsn: str) -> None:
    """A writer whose session made a table under the explicit path's temp-table name (its name is in
    the function's source, which anyone may read) gets the MERGE: maintained, its row triggers fire."""
    _orders_and_customers(pg_conn, {"customer_totals": CUSTOMER_TOTALS})
    _audit(pg_conn, ["customer_totals"])
    execute(pg_conn, "CREATE ROLE squatter LOGIN; GRANT INSERT ON orders TO squatter")
    source = value(pg_conn, "SELECT prosrc FROM pg_proc WHERE proname LIKE 'immediate\\_%'")
    taken = re.search(r"(__ivm_rows_[0-9a-f_]+)", source)
    assert taken is not None
    squatter = connect(pg_dsn.replace("user=postgres", "user=squatter"))
    try:
        execute(squatter, f'CREATE TEMP TABLE "{taken.group(1)}" (x int)')
        squatter.notices.clear()
        execute(squatter, "INSERT INTO public.orders VALUES (800, 2, 3)")
        assert not squatter.notices, squatter.notices
    finally:
        squatter.close()
    _check_all(pg_conn, {"customer_totals": CUSTOMER_TOTALS}, "rows table taken")
    assert value(pg_conn, "SELECT count(*) FROM audit WHERE op = 'UPDATE'") == 1
    assert value(pg_conn, "SELECT needs_full FROM dbt_ivm.stream_tables") is None


@pytest.mark.server_version
def test_user_triggers_on_a_keyless_stream_table(pg_conn: Any) -> None:
    """Rows identified by value (identical copies) are deleted and inserted, never updated."""
    notes = "SELECT amount FROM notes"
    execute(pg_conn, "CREATE TABLE notes (amount numeric); INSERT INTO notes VALUES (1), (1), (2)")
    _immediate(pg_conn, "keyless", notes)
    _audit(pg_conn, ["keyless"])
    execute(pg_conn, "BEGIN; INSERT INTO notes VALUES (1), (3); DELETE FROM notes WHERE amount = 2")
    _check_all(pg_conn, {"keyless": notes}, "before COMMIT")
    execute(pg_conn, "COMMIT; UPDATE notes SET amount = amount")  # the same values: nothing changes
    found = rows(pg_conn, "SELECT op, old->>'amount', new->>'amount' FROM audit ORDER BY seen")
    assert sorted(found, key=str) == sorted(
        [("INSERT", None, "1"), ("INSERT", None, "3"), ("DELETE", "2", None)], key=str
    ), found
    _check_all(pg_conn, {"keyless": notes}, "after")


@pytest.mark.server_version
def test_user_triggers_off_is_refused_for_immediate(pg_conn: Any) -> None:
    execute(pg_conn, "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric)")
    with pytest.raises(IvmError, match="user_triggers='off' cannot be used with refresh_mode='immediate'"):
        refresh(pg_conn, "customer_totals", CUSTOMER_TOTALS, refresh_mode="immediate", user_triggers="off")


def _lines(lines: list[str]) -> Any:
    return io.StringIO("\n".join(lines) + "\n")


@pytest.mark.server_version
def test_savepoints_and_one_row_changed_many_times(pg_conn: Any) -> None:
    _orders_and_customers(pg_conn)
    before = {name: rows(pg_conn, f"SELECT * FROM {name} ORDER BY 1, 2") for name in STREAMS}
    execute(pg_conn, "BEGIN")
    for amount in range(20):
        execute(pg_conn, f"UPDATE orders SET amount = {amount}, customer_id = {amount % 3 + 1} WHERE id = 7")
    execute(pg_conn, "SAVEPOINT s")
    execute(pg_conn, "DELETE FROM orders WHERE id < 30")
    execute(pg_conn, "TRUNCATE customers CASCADE")
    _check_all(pg_conn, STREAMS, "after TRUNCATE, before ROLLBACK TO SAVEPOINT")
    execute(pg_conn, "ROLLBACK TO SAVEPOINT s")
    _check_all(pg_conn, STREAMS, "rolled back to the savepoint")
    execute(pg_conn, "INSERT INTO orders VALUES (500, 1, 1)")
    _check_all(pg_conn, STREAMS, "after the savepoint")
    execute(pg_conn, "ROLLBACK")
    after = {name: rows(pg_conn, f"SELECT * FROM {name} ORDER BY 1, 2") for name in STREAMS}
    assert after == before, "a rolled-back transaction left the stream tables changed"


@pytest.mark.server_version
def test_a_trigger_on_one_source_writes_the_other(pg_conn: Any) -> None:
    """The nested statement's changes are kept until the outer statement's last trigger applies both."""
    _orders_and_customers(pg_conn)
    execute(
        pg_conn,
        "CREATE FUNCTION add_customer() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO customers VALUES (NEW.customer_id, 'auto ' || NEW.customer_id) ON CONFLICT DO NOTHING; "
        "RETURN NEW; END $$;"
        "CREATE TRIGGER a_add BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION add_customer();"
        "CREATE FUNCTION rename() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "UPDATE customers SET name = name || '*' WHERE id = NEW.customer_id; RETURN NULL; END $$;"
        "CREATE TRIGGER z_rename AFTER UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION rename();",
    )
    for statement in (
        "INSERT INTO orders VALUES (600, 60, 1), (601, 61, 2), (602, 60, 3)",
        "UPDATE orders SET amount = amount + 1 WHERE customer_id IN (60, 1)",
    ):
        execute(pg_conn, "BEGIN")
        execute(pg_conn, statement)
        _check_all(pg_conn, STREAMS, f"before COMMIT: {statement}")
        execute(pg_conn, "COMMIT")
        _check_all(pg_conn, STREAMS, statement)


@pytest.mark.server_version
def test_writer_without_rights_on_the_stream_table(pg_conn: Any, pg_dsn: str) -> None:
    _orders_and_customers(pg_conn)
    execute(
        pg_conn,
        "CREATE ROLE clerk LOGIN; GRANT INSERT, UPDATE, DELETE, SELECT ON orders TO clerk;"
        "CREATE SCHEMA clerk_things AUTHORIZATION clerk;",
    )
    clerk = connect(pg_dsn.replace("user=postgres", "user=clerk"))
    try:
        # A function named like what the maintenance calls, where the clerk's search_path finds it first.
        execute(clerk, "SET search_path = clerk_things, public")
        execute(
            clerk,
            "CREATE FUNCTION clerk_things.hash_record_extended(anyelement, bigint) RETURNS bigint "
            "LANGUAGE sql AS 'SELECT 0::bigint'",
        )
        # A table under the name of the orders' pending rows, first, in the clerk's own session.
        pending = _pending_name(pg_conn, "public.customer_totals", 0)
        execute(
            clerk,
            f'CREATE TEMP TABLE "{pending}" ("__ivm_weight" smallint, id int, customer_id int, amount numeric)',
        )
        execute(
            clerk, "INSERT INTO public.orders VALUES (3, 1, 3) ON CONFLICT (id) DO UPDATE SET amount = 33"
        )
        assert value(clerk, f'SELECT count(*) FROM pg_temp."{pending}"') == 0  # never written by us
        execute(clerk, "INSERT INTO public.orders VALUES (700, 1, 70)")
        execute(clerk, "UPDATE public.orders SET amount = 0 WHERE id = 1")
        execute(clerk, "DELETE FROM public.orders WHERE id = 2")
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            execute(clerk, "SELECT * FROM public.customer_totals")
    finally:
        clerk.close()
    _check_all(pg_conn, STREAMS, "written by a role with no rights on the stream tables")


def _blocked(conn: Any, pid: int) -> bool:
    return bool(value(conn, "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)))


def _wait_blocked(conn: Any, pid: int) -> None:
    import time

    deadline = time.monotonic() + 20
    while not _blocked(conn, pid):
        assert time.monotonic() < deadline, "the second writer never waited for the first"
        time.sleep(0.02)


@pytest.mark.server_version
@pytest.mark.parametrize("first", ["customer", "order"])
def test_two_transactions_insert_the_two_halves_of_a_join(pg_conn: Any, pg_dsn: str, first: str) -> None:
    _orders_and_customers(pg_conn)
    writes = {
        "customer": "INSERT INTO customers VALUES (99, 'late')",
        "order": "INSERT INTO orders VALUES (999, 99, 9.99)",
    }
    second = "order" if first == "customer" else "customer"
    execute(pg_conn, "ALTER TABLE orders DROP CONSTRAINT orders_customer_id_fkey")  # halves in any order
    one, two = connect(pg_dsn), connect(pg_dsn)
    try:
        execute(one, "BEGIN")
        execute(one, writes[first])
        execute(two, "BEGIN")
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(execute, two, writes[second])
            _wait_blocked(pg_conn, two.get_backend_pid())
            execute(one, "COMMIT")
            pending.result(timeout=30)
        execute(two, "COMMIT")
    finally:
        one.close()
        two.close()
    _check_all(pg_conn, STREAMS, f"{first} committed first, then the other half")
    assert value(pg_conn, "SELECT count(*) FROM order_details WHERE id = 999") == 1


@pytest.mark.server_version
def test_repeatable_read_writer_gets_a_serialization_error_never_a_wrong_table(
    pg_conn: Any, pg_dsn: str
) -> None:
    _orders_and_customers(pg_conn)
    execute(pg_conn, "ALTER TABLE orders DROP CONSTRAINT orders_customer_id_fkey")
    writer = connect(pg_dsn)
    try:
        execute(writer, "BEGIN ISOLATION LEVEL REPEATABLE READ")
        execute(writer, "SELECT count(*) FROM orders")  # its snapshot
        execute(pg_conn, "INSERT INTO customers VALUES (88, 'committed meanwhile')")
        with pytest.raises(psycopg2.errors.SerializationFailure):
            execute(writer, "INSERT INTO orders VALUES (888, 88, 8)")
        execute(writer, "ROLLBACK")
        execute(writer, "BEGIN ISOLATION LEVEL REPEATABLE READ")
        execute(writer, "INSERT INTO orders VALUES (888, 88, 8)")  # the retry sees the customer
        _check_all(writer, STREAMS, "REPEATABLE READ retry, before COMMIT")
        execute(writer, "COMMIT")
    finally:
        writer.close()
    _check_all(pg_conn, STREAMS, "after the REPEATABLE READ retry")


def _stripe(conn: Any, customer: int) -> int:
    return int(value(conn, "SELECT (hash_record_extended(ROW(%s::int), 0) & 63)::int", (customer,)))


def _two_customers_apart(conn: Any) -> tuple[int, int]:
    """Two customers whose ids hash to different stripes."""
    first = 1
    second = next(c for c in range(2, 11) if _stripe(conn, c) != _stripe(conn, first))
    return first, second


@pytest.mark.server_version
@pytest.mark.parametrize(
    "streams_, apart",
    [
        ({"customer_totals": CUSTOMER_TOTALS, "order_details": ORDER_DETAILS}, True),
        ({"keyless_names": KEYLESS}, True),  # keyed by the hidden primary keys of both sides
        # two customers may share a name: no value tells the writers of one group apart
        (
            {
                "orders_per_name": "SELECT c.name, COUNT(*) AS n FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.name"
            },
            False,
        ),
    ],
    ids=["by-group-and-join-value", "by-join-value", "takes-turns"],
)
def test_writers_of_different_groups_go_on_at_once(
    pg_conn: Any, pg_dsn: str, streams_: dict[str, str], apart: bool
) -> None:
    _orders_and_customers(pg_conn, streams_)
    first, second = _two_customers_apart(pg_conn)
    one, two, three = connect(pg_dsn), connect(pg_dsn), connect(pg_dsn)
    try:
        execute(one, "BEGIN")
        execute(one, f"INSERT INTO orders VALUES (901, {first}, 1)")
        execute(two, "BEGIN")
        execute(three, "BEGIN")
        with ThreadPoolExecutor(2) as pool:
            other = pool.submit(execute, two, f"INSERT INTO orders VALUES (902, {second}, 2)")
            if apart:
                other.result(timeout=30)  # another customer: never waits for the first writer
                assert not _blocked(pg_conn, two.get_backend_pid())
            else:
                _wait_blocked(pg_conn, two.get_backend_pid())
            same = pool.submit(execute, three, f"UPDATE customers SET name = 'renamed' WHERE id = {first}")
            _wait_blocked(pg_conn, three.get_backend_pid())  # the first writer's customer: waits
            execute(one, "COMMIT")
            other.result(timeout=30)
            if not apart:
                _wait_blocked(pg_conn, three.get_backend_pid())  # now behind the second writer
                execute(two, "COMMIT")
            same.result(timeout=30)
        _check_all(three, streams_, "third writer, before COMMIT")
        if apart:
            execute(two, "COMMIT")
        execute(three, "COMMIT")
    finally:
        for conn in (one, two, three):
            conn.close()
    _check_all(pg_conn, streams_, "three writers, two of them on one customer")


RETRIED = (psycopg2.errors.SerializationFailure, psycopg2.errors.DeadlockDetected)


@pytest.mark.server_version
@pytest.mark.parametrize("isolation", ["READ COMMITTED", "REPEATABLE READ", "mixed"])
def test_concurrent_random_writers(pg_conn: Any, pg_dsn: str, isolation: str) -> None:
    _orders_and_customers(pg_conn)
    execute(pg_conn, "ALTER TABLE orders DROP CONSTRAINT orders_customer_id_fkey")
    failures: list[str] = []
    lock = threading.Lock()

    def writer(number: int) -> int:
        rng = random.Random(f"{SEED}:writer:{number}")
        level = isolation if isolation != "mixed" else ("READ COMMITTED", "REPEATABLE READ")[number % 2]
        conn = connect(pg_dsn)
        committed = 0
        try:
            for _ in range(25):
                statements = [_random_write(rng) for _ in range(rng.randint(1, 3))]
                try:
                    execute(conn, f"BEGIN ISOLATION LEVEL {level}")
                    for statement in statements:
                        execute(conn, statement)
                    execute(conn, "COMMIT")
                    committed += 1
                except RETRIED:
                    execute(conn, "ROLLBACK")
                except Exception as error:  # reported below with its statements
                    execute(conn, "ROLLBACK")
                    with lock:
                        failures.append(f"{statements}: {error}")
        finally:
            conn.close()
        return committed

    with ThreadPoolExecutor(4) as pool:
        committed = sum(pool.map(writer, range(4)))
    assert not failures, failures
    assert committed > 20, f"only {committed} transactions committed"
    _check_all(pg_conn, STREAMS, f"4 concurrent writers, {isolation}, seed {SEED}")


def _random_write(rng: random.Random) -> str:
    order, customer = rng.randint(1, 80), rng.randint(1, 14)
    return rng.choice(
        [
            f"INSERT INTO orders VALUES ({order}, {customer}, {rng.randint(1, 99)}) ON CONFLICT (id) DO UPDATE "
            "SET amount = excluded.amount, customer_id = excluded.customer_id",
            f"UPDATE orders SET amount = amount + 1 WHERE id = {order}",
            f"DELETE FROM orders WHERE id = {order}",
            f"INSERT INTO customers VALUES ({customer}, 'n{customer}') ON CONFLICT (id) DO UPDATE SET name = 'u{customer}'",
            f"DELETE FROM customers WHERE id = {customer}",
        ]
    )


@pytest.mark.server_version
def test_a_key_that_becomes_nullable_is_caught_at_write_time(pg_conn: Any) -> None:
    """A NOT NULL group key is matched by `=`; once its NOT NULL is dropped, a write with a NULL key is
    written, not maintained, warned about, and the stream table rebuilt by the next dbt run."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2));"
        "INSERT INTO orders SELECT i, i % 10 + 1, i FROM generate_series(1, 50) i;",
    )
    _immediate(pg_conn, "customer_totals", CUSTOMER_TOTALS)
    indexes = rows(pg_conn, "SELECT indexdef FROM pg_indexes WHERE tablename = 'customer_totals'")
    assert [d for (d,) in indexes if "hash_record_extended" not in d], indexes  # found by `=` on its key
    execute(pg_conn, "ALTER TABLE orders ALTER COLUMN customer_id DROP NOT NULL")
    execute(pg_conn, "INSERT INTO orders VALUES (51, 3, 5)")  # a key that is not NULL: maintained
    assert_matches_query(pg_conn, SCHEMA, "customer_totals", CUSTOMER_TOTALS, "after DROP NOT NULL")
    pg_conn.notices.clear()
    execute(pg_conn, "INSERT INTO orders VALUES (52, NULL, 7), (53, NULL, 8)")
    assert value(pg_conn, "SELECT count(*) FROM orders WHERE customer_id IS NULL") == 2
    assert any("can be NULL now" in n for n in pg_conn.notices), pg_conn.notices
    reason = value(
        pg_conn, "SELECT needs_full FROM dbt_ivm.stream_tables WHERE stream_table = 'public.customer_totals'"
    )
    assert reason is not None and "can be NULL now" in reason
    result = refresh(pg_conn, "customer_totals", CUSTOMER_TOTALS, refresh_mode="immediate")
    assert result.action == "REBUILD", result.summary()
    assert_matches_query(pg_conn, SCHEMA, "customer_totals", CUSTOMER_TOTALS, "rebuilt")
    execute(pg_conn, "INSERT INTO orders VALUES (54, NULL, 1); DELETE FROM orders WHERE id = 52")
    assert_matches_query(pg_conn, SCHEMA, "customer_totals", CUSTOMER_TOTALS, "maintained with NULL keys")


@pytest.mark.server_version
def test_maintenance_that_fails_never_fails_the_write(pg_conn: Any) -> None:
    _orders_and_customers(pg_conn)
    execute(pg_conn, "ALTER TABLE orders ALTER COLUMN amount TYPE text")
    pg_conn.notices.clear()
    execute(pg_conn, "INSERT INTO orders VALUES (900, 1, 'nine')")  # SUM(text) cannot run: still written
    assert value(pg_conn, "SELECT count(*) FROM orders WHERE id = 900") == 1
    assert any("was not maintained" in n and "customer_totals" in n for n in pg_conn.notices), pg_conn.notices
    reason = value(
        pg_conn, "SELECT needs_full FROM dbt_ivm.stream_tables WHERE stream_table = 'public.customer_totals'"
    )
    assert reason is not None and "immediate maintenance failed" in reason
    # Back to numbers, rewritten: no trigger fires, the other two stream tables are stale too.
    execute(pg_conn, "ALTER TABLE orders ALTER COLUMN amount TYPE numeric(12,2) USING length(amount)")
    for name, sql in STREAMS.items():
        result = refresh(pg_conn, name, sql, refresh_mode="immediate")
        assert result.action == "REBUILD", result.summary()
    _check_all(pg_conn, STREAMS, "rebuilt after a failed maintenance")
    execute(pg_conn, "INSERT INTO orders VALUES (901, 1, 1)")
    _check_all(pg_conn, STREAMS, "maintained again")


@pytest.mark.server_version
def test_switching_modes_rebuilds_and_moves_the_triggers(pg_conn: Any) -> None:
    _orders_and_customers(pg_conn)
    ours = "SELECT count(*) FROM pg_trigger WHERE tgname LIKE '\\_\\_ivm\\_immediate\\_%'"
    assert value(pg_conn, ours) > 0
    for mode in ("differential", "immediate", "auto"):
        execute(pg_conn, "INSERT INTO orders SELECT max(id) + 1, 1, 1 FROM orders")
        for name, sql in STREAMS.items():
            result = refresh(pg_conn, name, sql, refresh_mode=mode)
            assert result.action == "REBUILD" and "refresh_mode changed" in (result.reason or ""), (
                result.summary()
            )
        _check_all(pg_conn, STREAMS, f"switched to {mode}")
        execute(pg_conn, "UPDATE orders SET amount = amount * 2 WHERE id % 3 = 0")
        if mode != "immediate":
            # AUTO decides by cost, from measured history: on a loaded machine a tiny table may go FULL.
            expected = ("DIFFERENTIAL",) if mode == "differential" else ("DIFFERENTIAL", "FULL")
            for name, sql in STREAMS.items():
                assert refresh(pg_conn, name, sql, refresh_mode=mode).action in expected
        _check_all(pg_conn, STREAMS, f"maintained as {mode}")
    assert value(pg_conn, ours) == 0


@pytest.mark.server_version
def test_a_dropped_stream_table_stops_being_maintained(pg_conn: Any) -> None:
    _orders_and_customers(pg_conn)
    execute(pg_conn, "DROP TABLE customer_totals")
    pg_conn.notices.clear()
    execute(pg_conn, "INSERT INTO orders VALUES (950, 1, 1)")  # its trigger finds no table: silent
    assert not [n for n in pg_conn.notices if "customer_totals" in n], pg_conn.notices
    refresh(pg_conn, "order_details", ORDER_DETAILS, refresh_mode="immediate")  # forgets what is gone
    function = value(
        pg_conn,
        "SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid WHERE p.proname = %s",
        ("immediate_" + _tag("public.customer_totals"),),
    )
    assert function == 0
    _check_all(pg_conn, {k: v for k, v in STREAMS.items() if k != "customer_totals"}, "after the drop")


def _pending_name(conn: Any, stream_table: str, index: int) -> str:
    from dbt_ivm.catalog import Column, TableInfo
    from dbt_ivm.postgres.immediate import pending_table

    columns = rows(
        conn,
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'orders'::regclass "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    return pending_table(
        stream_table, index, TableInfo("public", "orders", tuple(Column(n, t) for n, t in columns))
    )


def _tag(stream_table: str) -> str:
    from dbt_ivm.postgres.immediate import tag_of

    return tag_of(stream_table)


@pytest.mark.server_version
def test_disabled_triggers_are_detected_and_rebuilt(pg_conn: Any) -> None:
    _orders_and_customers(pg_conn)
    trigger = f"__ivm_immediate_{_tag('public.order_details')}_ins"
    execute(pg_conn, f'ALTER TABLE orders DISABLE TRIGGER "{trigger}"')
    execute(pg_conn, "INSERT INTO orders VALUES (960, 1, 1)")
    execute(pg_conn, f'ALTER TABLE orders ENABLE ALWAYS TRIGGER "{trigger}"')  # as if nothing happened
    stale, _ = differences(pg_conn, SCHEMA, "order_details", ORDER_DETAILS)
    assert not stale  # the row is missing, not extra
    result = refresh(pg_conn, "order_details", ORDER_DETAILS, refresh_mode="immediate")
    assert result.action == "REBUILD" and "disabled" in (result.reason or ""), result.summary()
    _check_all(pg_conn, STREAMS, "rebuilt after its trigger was disabled")


@pytest.mark.server_version
def test_maintenance_is_compared_by_what_it_was_rendered_from(pg_conn: Any) -> None:
    """A run compares the installed function by the digest of its inputs (the engine's code, the plan,
    the settings): equal, the run skips without rendering it; different (another dbt-ivm, another
    setting the function reads), it reinstalls saying why."""
    _orders_and_customers(pg_conn)
    state = "dbt_ivm.immediate_state"
    installed = value(pg_conn, f"SELECT digest FROM {state} WHERE stream_table = 'public.order_details'")
    again = refresh(pg_conn, "order_details", ORDER_DETAILS, refresh_mode="immediate")
    assert again.action == "SKIP", again.summary()
    execute(
        pg_conn, f"UPDATE {state} SET digest = 'another version' WHERE stream_table = 'public.order_details'"
    )
    result = refresh(pg_conn, "order_details", ORDER_DETAILS, refresh_mode="immediate")
    assert result.action == "REBUILD" and "dbt-ivm version" in (result.reason or ""), result.summary()
    assert (
        value(pg_conn, f"SELECT digest FROM {state} WHERE stream_table = 'public.order_details'") == installed
    )
    # user_triggers='on' renders explicit DML into the function: another function, reinstalled.
    result = refresh(pg_conn, "order_details", ORDER_DETAILS, refresh_mode="immediate", user_triggers="on")
    assert result.action == "REBUILD", result.summary()
    assert (
        value(pg_conn, f"SELECT digest FROM {state} WHERE stream_table = 'public.order_details'") != installed
    )
    execute(pg_conn, "INSERT INTO orders VALUES (961, 1, 5)")
    _check_all(pg_conn, STREAMS, "after the reinstalls")


@pytest.mark.server_version
def test_maintenance_and_call_run_in_dbts_time_zone(pg_conn: Any, pg_dsn: str) -> None:
    """A timestamptz cast to a date or to text, or truncated to a day, depends on the session's time
    zone. The stream table holds what the query gives in `dbt run`'s session, whatever zone the writer
    (IMMEDIATE) or the caller of `CALL refresh` (differential) has set."""
    execute(
        pg_conn,
        "SET TimeZone = 'UTC'; CREATE TABLE ev (id int PRIMARY KEY, ts timestamptz);"
        "INSERT INTO ev VALUES (1, '2024-01-01 12:00+00')",
    )
    queries = {
        "dates": "SELECT id, ts::date AS d, ts::text AS shown FROM ev",
        "days": "SELECT date_trunc('day', ts) AS day, COUNT(*) AS n FROM ev GROUP BY date_trunc('day', ts)",
    }
    for name, sql in queries.items():
        _immediate(pg_conn, name, sql)
        refresh(pg_conn, f"{name}_later", sql, refresh_mode="differential")
    elsewhere = connect(pg_dsn)
    try:
        execute(
            elsewhere,
            "SET TimeZone = 'Pacific/Kiritimati'; SET DateStyle = 'SQL, DMY';"
            "INSERT INTO ev VALUES (2, '2024-01-01 12:00+00'), (3, '2024-01-01 23:30+00')",
        )
        for name in queries:
            execute(elsewhere, f"CALL dbt_ivm.refresh('public.{name}_later')")
    finally:
        elsewhere.close()
    for name, sql in queries.items():
        _check_all(pg_conn, {name: sql, f"{name}_later": sql}, "written and called from Kiritimati")
