"""Regression tests for issue 9's mechanisms, one class each: what capture records, how a batch nets
out, what a refresh detects, and what it rebuilds by itself. The adversarial suite
(test_adversarial.py) throws many write shapes at the same mechanisms; these pin each one down.
"""

from __future__ import annotations

from typing import Any

import psycopg2.errors
import pytest

from dbt_ivm.errors import TriggerNameTaken
from tests.oracle import assert_matches_query
from tests.postgres.streams import (
    CATALOG,
    buffer_of,
    connect,
    execute,
    refresh,
    refresh_and_check,
    rows,
    value,
)

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer"
AMOUNTS = "SELECT id, amount FROM orders WHERE amount > 0"
STREAMS = {"totals": TOTALS, "amounts": AMOUNTS}


@pytest.fixture
def orders(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2));"
        "INSERT INTO orders SELECT i, 'c' || (i % 3), i FROM generate_series(1, 9) i;",
    )
    _refresh_all(pg_conn, "CREATE")
    return pg_conn


def _refresh_all(conn: Any, action: str, reason: str | None = None) -> None:
    for name, sql in STREAMS.items():
        result = refresh_and_check(conn, name, sql, refresh_mode="differential")
        assert result.action == action, f"{name}: {result.summary()}"
        if reason is not None:
            assert result.reason is not None and reason in result.reason, result.summary()


# --- class 1: a batch's net effect does not depend on the order capture fired ---------------------


def test_row_trigger_updating_the_same_row_is_not_lost(orders: Any) -> None:
    # The nested UPDATE's statement trigger fires before the outer statement's.
    execute(
        orders,
        "CREATE FUNCTION bump() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.amount < 100 THEN UPDATE orders SET amount = NEW.amount + 100 WHERE id = NEW.id; END IF; "
        "RETURN NULL; END $$;"
        "CREATE TRIGGER bump AFTER INSERT OR UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION bump();"
        "UPDATE orders SET amount = 50 WHERE id = 1; INSERT INTO orders VALUES (10, 'c1', 5)",
    )
    _refresh_all(orders, "DIFFERENTIAL")


def test_writable_cte_moving_rows_nets_out(orders: Any) -> None:
    execute(
        orders,
        "WITH d AS (DELETE FROM orders WHERE id IN (1, 2) RETURNING *) "
        "INSERT INTO orders SELECT id, 'moved', amount * 2 FROM d",
    )
    _refresh_all(orders, "DIFFERENTIAL")


def test_deferred_key_duplicated_inside_a_transaction(pg_conn: Any) -> None:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int, customer text, amount numeric(10,2), "
        "CONSTRAINT orders_pk PRIMARY KEY (id) DEFERRABLE INITIALLY DEFERRED);"
        "INSERT INTO orders SELECT i, 'c' || (i % 3), i FROM generate_series(1, 9) i;",
    )
    _refresh_all(pg_conn, "CREATE")
    execute(
        pg_conn,
        "BEGIN; INSERT INTO orders VALUES (1, 'dup', 99); UPDATE orders SET id = 100 WHERE customer = 'dup'; "
        "UPDATE orders SET amount = 7 WHERE id = 1; COMMIT",
    )
    _refresh_all(pg_conn, "DIFFERENTIAL")


def test_self_referencing_cascade_updates_are_all_seen(pg_conn: Any) -> None:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2), "
        "parent int REFERENCES orders (id) ON UPDATE CASCADE);"
        "INSERT INTO orders VALUES (1, 'a', 1, NULL), (2, 'a', 2, 1), (3, 'b', 3, 2);",
    )
    sql = "SELECT parent, COUNT(*) AS children FROM orders GROUP BY parent"
    refresh_and_check(pg_conn, "children", sql, refresh_mode="differential")
    execute(pg_conn, "UPDATE orders SET id = id + 10")
    result = refresh_and_check(pg_conn, "children", sql, refresh_mode="differential")
    assert result.action == "DIFFERENTIAL"


def test_an_update_that_changes_nothing_nets_to_nothing(orders: Any) -> None:
    execute(orders, "UPDATE orders SET amount = amount")
    result = refresh_and_check(orders, "amounts", AMOUNTS, refresh_mode="differential")
    assert result.rows_changed == 0, result.summary()


# --- class 2: no user name collides with ours ------------------------------------------------------


@pytest.mark.parametrize("column", ["writer", "statement_number", "__ivm_weight", "__ivm_xid", "__ivm_seq"])
def test_source_columns_named_like_our_internals(pg_conn: Any, column: str) -> None:
    quoted = '"' + column + '"'
    execute(
        pg_conn, f"CREATE TABLE t (id int PRIMARY KEY, {quoted} int); INSERT INTO t VALUES (1, 1), (2, 2)"
    )
    sqls = {
        "t_sum": f"SELECT SUM({quoted}) AS s, COUNT(*) AS n FROM t",
        "t_rows": f"SELECT id, {quoted} AS v FROM t",
    }
    for name, sql in sqls.items():
        refresh_and_check(pg_conn, name, sql, refresh_mode="differential")
    # The user's own writes must never fail because of capture.
    execute(
        pg_conn,
        f"INSERT INTO t VALUES (3, 3); UPDATE t SET {quoted} = {quoted} + 1; DELETE FROM t WHERE id = 1",
    )
    for name, sql in sqls.items():
        assert refresh_and_check(pg_conn, name, sql, refresh_mode="differential").action == "DIFFERENTIAL"


def test_long_key_columns_keep_apart(pg_conn: Any) -> None:
    first, second = "k" * 55 + "_first_", "k" * 55 + "_second"
    execute(
        pg_conn,
        f'CREATE TABLE t ("{first}" int, "{second}" int, v int, PRIMARY KEY ("{first}", "{second}"));'
        "INSERT INTO t VALUES (1, 1, 10), (1, 2, 20)",
    )
    sql = "SELECT v FROM t"
    refresh_and_check(pg_conn, "vals", sql, refresh_mode="differential")
    execute(pg_conn, f'UPDATE t SET v = 30 WHERE "{second}" = 2')
    assert refresh_and_check(pg_conn, "vals", sql, refresh_mode="differential").action == "DIFFERENTIAL"


def test_an_output_named_like_our_columns_is_refused_by_name(orders: Any) -> None:
    with pytest.raises(Exception, match=r"__ivm_count.*another alias"):
        refresh(orders, "bad", "SELECT customer, COUNT(*) AS __ivm_count FROM orders GROUP BY customer")


def _user_trigger_fires(conn: Any, name: str) -> bool:
    """Whether the trigger `name` on orders, which logs each insert into fired, still runs the user's function."""
    execute(
        conn, "DELETE FROM fired; INSERT INTO orders VALUES (99, 'c9', 9); DELETE FROM orders WHERE id = 99"
    )
    owner = value(
        conn,
        "SELECT p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
        "WHERE t.tgrelid = 'orders'::regclass AND t.tgname = %s",
        (name,),
    )
    return owner == "log_insert" and value(conn, "SELECT count(*) FROM fired") == 1


def test_a_user_trigger_named_like_capture_is_refused_never_replaced(pg_conn: Any) -> None:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2)); CREATE TABLE fired (id int);"
        "CREATE FUNCTION log_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO fired SELECT id FROM new_rows; RETURN NULL; END $$;"
        'CREATE TRIGGER "__ivm_capture_ins" AFTER INSERT ON orders REFERENCING NEW TABLE AS new_rows '
        "FOR EACH STATEMENT EXECUTE FUNCTION log_insert();"
        "INSERT INTO orders VALUES (1, 'c1', 1)",
    )
    with pytest.raises(
        TriggerNameTaken,
        match=r'model totals: source public\.orders has .*"?__ivm_capture_ins"? ON orders.*rename',
    ):
        refresh(pg_conn, "totals", TOTALS, refresh_mode="differential")
    assert _user_trigger_fires(pg_conn, "__ivm_capture_ins")
    execute(pg_conn, 'ALTER TRIGGER "__ivm_capture_ins" ON orders RENAME TO log_insert')
    assert refresh_and_check(pg_conn, "totals", TOTALS, refresh_mode="differential").action == "CREATE"
    # The user replaces a capture trigger with one of their own: refused again, theirs kept.
    execute(
        pg_conn,
        "DROP TRIGGER log_insert ON orders;"
        'CREATE OR REPLACE TRIGGER "__ivm_capture_ins" AFTER INSERT ON orders REFERENCING NEW TABLE AS new_rows '
        "FOR EACH STATEMENT EXECUTE FUNCTION log_insert(); INSERT INTO orders VALUES (2, 'c1', 2)",
    )
    with pytest.raises(TriggerNameTaken, match="__ivm_capture_ins"):
        refresh(pg_conn, "totals", TOTALS, refresh_mode="differential")
    assert _user_trigger_fires(pg_conn, "__ivm_capture_ins")
    execute(pg_conn, 'DROP TRIGGER "__ivm_capture_ins" ON orders')
    result = refresh_and_check(pg_conn, "totals", TOTALS, refresh_mode="differential")
    assert result.action == "FULL" and result.reason and "triggers" in result.reason, result.summary()


# --- class 3: writes that bypass ordinary triggers are captured or detected ------------------------


def test_replica_role_writes_are_captured(orders: Any) -> None:
    assert rows(orders, "SELECT DISTINCT tgenabled FROM pg_trigger WHERE tgname LIKE '__ivm_capture_%'") == [
        ("A",)
    ]
    execute(orders, "SET session_replication_role = replica; INSERT INTO orders VALUES (20, 'c9', 9)")
    execute(orders, "UPDATE orders SET amount = 1 WHERE id = 2; RESET session_replication_role")
    _refresh_all(orders, "DIFFERENTIAL")


def test_a_dbt_role_that_does_not_own_the_source_warns_about_replica_writes(
    pg_conn: Any, pg_dsn: str
) -> None:
    role = f"{value(pg_conn, 'SELECT current_database()')}_dbt"
    execute(
        pg_conn,
        f'CREATE ROLE "{role}" LOGIN; GRANT CREATE ON DATABASE "{value(pg_conn, "SELECT current_database()")}" '
        f'TO "{role}"; GRANT CREATE ON SCHEMA public TO "{role}";'
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2));"
        f"INSERT INTO orders VALUES (1, 'a', 1); GRANT SELECT, TRIGGER ON orders TO \"{role}\"",
    )
    try:
        dbt = connect(pg_dsn, user=role)
        try:
            first = refresh(dbt, "totals", TOTALS)
            again = refresh(dbt, "totals", TOTALS)
        finally:
            dbt.close()
        for result in (first, again):
            assert any("not ENABLE ALWAYS" in w and "ALTER TABLE" in w for w in result.warnings), (
                result.warnings
            )
        # The owner's fix is kept: the next refresh re-fingerprints the triggers instead of recreating them.
        execute(
            pg_conn,
            "".join(
                f'ALTER TABLE orders ENABLE ALWAYS TRIGGER "__ivm_capture_{e}";'
                for e in ("ins", "upd", "del", "trunc")
            ),
        )
        dbt = connect(pg_dsn, user=role)
        try:
            result = refresh(dbt, "totals", TOTALS)
            assert result.action == "FULL" and not result.warnings, result
            execute(pg_conn, "SET session_replication_role = replica; INSERT INTO orders VALUES (2, 'a', 2)")
            assert refresh(dbt, "totals", TOTALS).action == "DIFFERENTIAL"
        finally:
            dbt.close()
        assert_matches_query(pg_conn, "public", "totals", TOTALS)
    finally:
        execute(
            pg_conn, f'REASSIGN OWNED BY "{role}" TO CURRENT_USER; DROP OWNED BY "{role}"; DROP ROLE "{role}"'
        )


def test_disabled_triggers_are_detected(orders: Any) -> None:
    execute(
        orders,
        "ALTER TABLE orders DISABLE TRIGGER ALL; INSERT INTO orders VALUES (21, 'c1', 21); "
        "ALTER TABLE orders ENABLE TRIGGER ALL",
    )
    _refresh_all(orders, "FULL", "triggers on public.orders were disabled")
    execute(orders, "INSERT INTO orders VALUES (22, 'c1', 22)")
    _refresh_all(orders, "DIFFERENTIAL")


@pytest.mark.parametrize("removal", ["DROP TABLE {buffer}", "ALTER TABLE {buffer} RENAME TO set_aside"])
def test_a_removed_buffer_never_fails_a_write(orders: Any, removal: str) -> None:
    """Every write to the source failed ("relation … does not exist") once the buffer was dropped or
    renamed by hand. Now the write succeeds uncaptured, and the next refresh finds the buffer gone,
    reinstalls capture and is FULL."""
    execute(orders, removal.format(buffer=buffer_of(orders, "public.orders")))
    execute(orders, "INSERT INTO orders VALUES (21, 'c1', 21); UPDATE orders SET amount = 0 WHERE id = 1")
    _refresh_all(
        orders, "FULL", "the change buffer of public.orders was reset (crash recovery or failover) or removed"
    )
    execute(orders, "DELETE FROM orders WHERE id = 2")
    _refresh_all(orders, "DIFFERENTIAL")


def _move_frontiers_ahead(conn: Any) -> None:
    """What a dump restored into a new server leaves: frontiers recorded by a server whose
    transaction counter was far beyond this one's."""
    execute(
        conn,
        "UPDATE dbt_ivm.stream_tables SET frontier = pg_catalog.format('%1$s:%1$s:', "
        "pg_snapshot_xmax(pg_current_snapshot())::text::bigint + 1000000)::pg_snapshot",
    )


def test_a_frontier_ahead_of_the_server_is_a_full_refresh(orders: Any) -> None:
    """Every change until the counter passed the frontier looked applied already: SKIP, stale."""
    _move_frontiers_ahead(orders)
    execute(orders, "INSERT INTO orders VALUES (21, 'c1', 21); UPDATE orders SET amount = 0 WHERE id = 1")
    _refresh_all(orders, "FULL", "its frontier is ahead of this server's transactions")
    execute(orders, "DELETE FROM orders WHERE id = 2")
    _refresh_all(orders, "DIFFERENTIAL")


def test_call_refresh_with_a_frontier_ahead_of_the_server_is_full(orders: Any) -> None:
    _move_frontiers_ahead(orders)
    execute(orders, "DELETE FROM orders WHERE id = 3")
    for name, sql in STREAMS.items():
        with orders.cursor() as cursor:
            cursor.execute("CALL dbt_ivm.refresh(%s)", (f"public.{name}",))
            action, reason = cursor.fetchone()[:2]
        assert action == "FULL" and "ahead of this server" in reason, (name, action, reason)
        assert_matches_query(orders, "public", name, sql, "after CALL refresh")


def test_rows_inserted_into_an_inheritance_child_are_captured(orders: Any) -> None:
    execute(orders, "CREATE TABLE orders_archive (note text, extra int) INHERITS (orders)")
    _refresh_all(orders, "FULL", "children of public.orders changed")
    execute(
        orders,
        "INSERT INTO orders_archive VALUES (30, 'c1', 30, 'x', 1); UPDATE orders SET amount = amount + 1;"
        "DELETE FROM orders_archive WHERE id = 30; INSERT INTO orders_archive VALUES (31, 'c2', 31, 'y', 2)",
    )
    _refresh_all(orders, "DIFFERENTIAL")


def test_from_only_is_refused_and_refreshed_full_in_auto(orders: Any) -> None:
    execute(
        orders,
        "CREATE TABLE orders_archive () INHERITS (orders); INSERT INTO orders_archive VALUES (60, 'c1', 60)",
    )
    sql = "SELECT id, amount FROM ONLY orders"
    with pytest.raises(Exception, match="FROM ONLY orders"):
        refresh(orders, "own_rows", sql, refresh_mode="differential")
    refresh_and_check(orders, "own_rows", sql)
    execute(
        orders, "INSERT INTO orders_archive VALUES (61, 'c1', 61); INSERT INTO orders VALUES (62, 'c1', 62)"
    )
    result = refresh_and_check(orders, "own_rows", sql)
    assert result.action == "FULL" and "ONLY" in (result.reason or ""), result.summary()


@pytest.mark.parametrize(
    "rewrite",
    [
        "ALTER TABLE orders ALTER COLUMN amount TYPE numeric(10,2) USING amount * 2",
        "BEGIN; ALTER TABLE orders DROP COLUMN customer; ALTER TABLE orders ADD COLUMN customer text "
        "DEFAULT 'same'; COMMIT",
    ],
)
def test_table_rewrites_are_detected(orders: Any, rewrite: str) -> None:
    execute(orders, rewrite)
    for name, sql in STREAMS.items():
        result = refresh_and_check(orders, name, sql, refresh_mode="differential")
        assert result.action in ("FULL", "REBUILD") and result.reason, result.summary()
    execute(orders, "INSERT INTO orders (id, customer, amount) VALUES (40, 'c1', 40)")
    _refresh_all(orders, "DIFFERENTIAL")


# --- class 4: schema changes rebuild by themselves --------------------------------------------------


def test_a_new_column_under_select_star_rebuilds(orders: Any) -> None:
    sql = "SELECT * FROM orders"
    refresh_and_check(orders, "everything", sql)
    execute(orders, "ALTER TABLE orders ADD COLUMN note text DEFAULT 'n'")
    result = refresh_and_check(orders, "everything", sql)
    assert result.action == "REBUILD" and "columns" in (result.reason or ""), result.summary()


def test_a_wider_column_type_reaches_the_stream_table(orders: Any) -> None:
    execute(
        orders, "ALTER TABLE orders ALTER COLUMN amount TYPE numeric(12,4); UPDATE orders SET amount = 1.2345"
    )
    result = refresh_and_check(orders, "amounts", AMOUNTS, refresh_mode="differential")
    assert result.action == "REBUILD", result.summary()
    assert (
        value(
            orders,
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'amounts'::regclass AND attname = 'amount'",
        )
        == "numeric(12,4)"
    )


def test_a_changed_primary_key_rebuilds(orders: Any) -> None:
    execute(orders, "ALTER TABLE orders DROP CONSTRAINT orders_pkey; INSERT INTO orders VALUES (1, 'zz', 1)")
    result = refresh_and_check(orders, "amounts", AMOUNTS, refresh_mode="differential")
    assert result.action == "REBUILD", result.summary()
    execute(
        orders, "ALTER TABLE orders ADD PRIMARY KEY (id, customer); UPDATE orders SET amount = 3 WHERE id = 3"
    )
    assert refresh_and_check(orders, "amounts", AMOUNTS, refresh_mode="differential").action == "REBUILD"
    execute(orders, "UPDATE orders SET amount = 4 WHERE id = 4")
    assert refresh_and_check(orders, "amounts", AMOUNTS, refresh_mode="differential").action == "DIFFERENTIAL"


# --- class 5: capture runs no user code with the dbt role's rights --------------------------------


def test_domain_checks_never_run_in_capture_or_refresh(pg_conn: Any) -> None:
    execute(
        pg_conn,
        "CREATE TABLE calls (who text); "
        "CREATE FUNCTION is_positive(numeric) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO calls VALUES (current_user); RETURN $1 > 0; END $$;"
        "CREATE DOMAIN positive AS numeric(10,2) CHECK (is_positive(VALUE));"
        "CREATE DOMAIN required AS text NOT NULL;"
        "CREATE TABLE orders (id int PRIMARY KEY, customer required, amount positive);"
        "INSERT INTO orders VALUES (1, 'a', 5), (2, 'b', 6); DELETE FROM calls",
    )
    sql = "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer"
    refresh_and_check(pg_conn, "totals", sql, refresh_mode="differential")
    types = rows(
        pg_conn,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attname IN ('customer', 'amount') ORDER BY attnum",
        (buffer_of(pg_conn, "public.orders"),),
    )
    assert types == [("required",), ("positive",)]  # declared types: copies coerce nothing
    assert value(pg_conn, "SELECT count(*) FROM calls") == 0  # nothing ran at install
    execute(
        pg_conn,
        "INSERT INTO orders VALUES (3, 'a', 7); TRUNCATE orders; INSERT INTO orders VALUES (4, 'b', 8)",
    )
    assert value(pg_conn, "SELECT count(*) FROM calls") == 2  # the user's own inserts, once each
    assert refresh_and_check(pg_conn, "totals", sql, refresh_mode="differential").action == "FULL"
    execute(pg_conn, "UPDATE orders SET amount = 9")
    assert refresh_and_check(pg_conn, "totals", sql, refresh_mode="differential").action == "DIFFERENTIAL"
    assert value(pg_conn, "SELECT count(*) FROM calls") == 3  # the user's UPDATE; no refresh ran the check
    rows_sql = "SELECT id, amount FROM orders"  # the domain-typed column itself in the stream table
    refresh_and_check(pg_conn, "amounts", rows_sql, refresh_mode="differential")
    execute(pg_conn, "UPDATE orders SET amount = 10; INSERT INTO orders VALUES (5, 'c', 11)")
    assert (
        refresh_and_check(pg_conn, "amounts", rows_sql, refresh_mode="differential").action == "DIFFERENTIAL"
    )
    assert value(pg_conn, "SELECT count(*) FROM calls") == 5


# --- class 9: key types without a hash function ------------------------------------------------------


def test_a_group_key_without_a_hash_function_is_matched_by_equality(pg_conn: Any) -> None:
    # tsvector has btree equality but no hash opclass.
    execute(
        pg_conn,
        "CREATE TABLE docs (id int PRIMARY KEY, words tsvector, n int);"
        "INSERT INTO docs VALUES (1, 'a b', 1), (2, 'a b', 2), (3, 'c', 3)",
    )
    sql = "SELECT words, SUM(n) AS total FROM docs GROUP BY words"
    refresh_and_check(pg_conn, "by_words", sql, refresh_mode="differential")
    assert (
        value(
            pg_conn,
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'by_words'::regclass "
            "AND attname = '__ivm_hash'",
        )
        == 0
    )
    execute(
        pg_conn,
        "INSERT INTO docs VALUES (4, 'c', 4); DELETE FROM docs WHERE id = 1; UPDATE docs SET words = 'd'",
    )
    assert refresh_and_check(pg_conn, "by_words", sql, refresh_mode="differential").action == "DIFFERENTIAL"


# --- upgrade: capture installed by an earlier version is replaced, and the refresh says why ---------


def test_capture_from_an_earlier_version_is_reinstalled(orders: Any) -> None:
    execute(orders, f"UPDATE {CATALOG}.change_buffers SET capture_version = 1")
    execute(orders, "INSERT INTO orders VALUES (50, 'c1', 50)")
    _refresh_all(orders, "FULL", "upgraded")


# --- class 5: nobody but a source's own writes reaches its buffer ---------------------------------


def test_capture_attached_to_a_look_alike_table_captures_nothing(orders: Any) -> None:
    """A role with no rights on the source cannot attach its capture function to a table of its own
    (EXECUTE is the dbt role's alone); one that may execute it (granted by hand) attaches it, and
    its rows never reach the buffer: the consumers' next refresh is FULL, the writer's statement
    succeeds, and the source's own writes are still captured."""
    stranger = f"stranger_{value(orders, 'SELECT current_database()')}"
    oid = value(orders, "SELECT 'public.orders'::regclass::oid::text")
    function = f'"{CATALOG}"."capture_{oid}"()'
    buffer = buffer_of(orders, "public.orders")
    attach = (
        "CREATE TRIGGER forged AFTER INSERT ON public.look_alike REFERENCING NEW TABLE AS __ivm_new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}"
    )
    execute(orders, f'CREATE ROLE "{stranger}" NOLOGIN; GRANT CREATE ON SCHEMA public TO "{stranger}"')
    try:
        execute(orders, f'SET ROLE "{stranger}"')
        execute(orders, "CREATE TABLE public.look_alike (id int, customer text, amount numeric(10,2))")
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            execute(orders, attach)
        execute(orders, "RESET ROLE")
        execute(orders, f'GRANT USAGE ON SCHEMA "{CATALOG}" TO "{stranger}"')
        execute(orders, f'GRANT EXECUTE ON FUNCTION {function} TO "{stranger}"')
        execute(orders, f'SET ROLE "{stranger}"')
        execute(orders, attach)
        execute(orders, "INSERT INTO public.look_alike VALUES (100, 'c0', 1000)")
        execute(orders, "RESET ROLE")
        assert value(orders, f"SELECT count(*) FROM {buffer}") == 0
        _refresh_all(orders, "FULL")
        execute(orders, "UPDATE orders SET amount = amount + 1 WHERE id = 1")
        assert value(orders, f"SELECT count(*) FROM {buffer}") == 2
        _refresh_all(orders, "DIFFERENTIAL")
    finally:
        execute(orders, "RESET ROLE")
        execute(orders, f'DROP OWNED BY "{stranger}" CASCADE; DROP ROLE "{stranger}"')
