"""User triggers on stream tables (issue 5), against a real PostgreSQL with real audit triggers.

Every trigger here writes to one audit table: TG_OP, the table, OLD and NEW as jsonb text (jsonb
text is canonical, so rows compare as strings). Row triggers record ("INSERT" | "UPDATE" | "DELETE");
statement triggers record "STATEMENT <op>".
"""

from __future__ import annotations

import io
import json
import random
import select
import time
from collections import Counter
from typing import Any

import psycopg2
import psycopg2.extras
import pytest

from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from tests.postgres.streams import leave_batches_to_the_engine, recording_connection

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

AUDIT = """
CREATE TABLE audit (id bigserial PRIMARY KEY, tbl text NOT NULL, op text NOT NULL, old text, new text);
CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit (tbl, op, old, new) VALUES (TG_TABLE_NAME, TG_OP,
    CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD)::text END,
    CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW)::text END);
  RETURN NULL;
END $$;
CREATE FUNCTION audit_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit (tbl, op) VALUES (TG_TABLE_NAME, 'STATEMENT ' || TG_OP);
  RETURN NULL;
END $$;
"""

STATEMENT_ORDER = ("DELETE", "UPDATE", "INSERT")  # how explicit DML applies a refresh
TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer"


def execute(conn: Any, sql: str, params: Any = None) -> None:
    with conn.cursor() as cur:
        cur.execute(sql, params)


def fetch(conn: Any, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def refresh(conn: Any, name: str, sql: str, **options: Any) -> RefreshResult:
    return run_stream_table(conn, StreamTableSpec(model=name, schema="public", name=name, sql=sql, **options))


def audit_rows(conn: Any, name: str) -> None:
    execute(
        conn,
        f'CREATE TRIGGER audit_rows AFTER INSERT OR UPDATE OR DELETE ON "{name}" '
        "FOR EACH ROW EXECUTE FUNCTION audit_row()",
    )


def audit_statements(conn: Any, name: str) -> None:
    execute(
        conn,
        f'CREATE TRIGGER audit_statements AFTER INSERT OR UPDATE OR DELETE ON "{name}" '
        "FOR EACH STATEMENT EXECUTE FUNCTION audit_statement()",
    )


def take_audit(conn: Any, name: str) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
    """The audit entries for table `name` in firing order (OLD/NEW decoded), then forget them."""
    rows = fetch(conn, "SELECT op, old, new FROM audit WHERE tbl = %s ORDER BY id", (name,))
    execute(conn, "DELETE FROM audit WHERE tbl = %s", (name,))
    return [(op, json.loads(old) if old else None, json.loads(new) if new else None) for op, old, new in rows]


def take_audit_text(conn: Any, name: str) -> list[tuple[str, str | None, str | None]]:
    rows = fetch(conn, "SELECT op, old, new FROM audit WHERE tbl = %s ORDER BY id", (name,))
    execute(conn, "DELETE FROM audit WHERE tbl = %s", (name,))
    return [(str(op), old, new) for op, old, new in rows]


def snapshot(conn: Any, name: str) -> Counter[str]:
    """The table as a multiset of whole rows (hidden columns included), as canonical jsonb text."""
    return Counter(r[0] for r in fetch(conn, f'SELECT to_jsonb(t)::text FROM "{name}" AS t'))


def assert_equals_query(conn: Any, name: str, sql: str) -> None:
    columns = [d[0] for d in _describe(conn, sql)]
    listed = ", ".join(f'"{c}"' for c in columns)
    stored = f'SELECT {listed} FROM "{name}"'
    extra = fetch(conn, f"{stored} EXCEPT ALL SELECT * FROM ({sql}) AS q")
    missing = fetch(conn, f"SELECT * FROM ({sql}) AS q EXCEPT ALL {stored}")
    assert (extra, missing) == ([], []), f"{name}: extra {extra}, missing {missing}"


def _describe(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM ({sql}) AS q LIMIT 0")
        return cur.description


def wait_for_notifies(listener: Any, count: int, seconds: float = 10.0) -> None:
    """Poll `listener` until it holds `count` notifications (they arrive asynchronously) or time runs out."""
    deadline = time.monotonic() + seconds
    listener.poll()
    while len(listener.notifies) < count and time.monotonic() < deadline:
        select.select([listener], [], [], max(deadline - time.monotonic(), 0))
        listener.poll()
    time.sleep(0.2)  # and nothing more is on its way
    listener.poll()


def user_part(row: dict[str, Any] | None, *columns: str) -> tuple[Any, ...] | None:
    return None if row is None else tuple(row[c] for c in columns)


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(pg_conn, AUDIT)
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2));"
        "INSERT INTO orders VALUES (1, 'alice', 10), (2, 'alice', 20), (3, 'bob', 5);"
        "CREATE TABLE events (kind text, v int);"
        "INSERT INTO events VALUES ('a', 1), ('a', 1), ('b', NULL);",
    )
    return pg_conn


def test_aggregate_triggers_see_right_tg_op_old_new_in_delete_update_insert_order(shop: Any) -> None:
    refresh(shop, "totals", TOTALS)
    audit_rows(shop, "totals")
    audit_statements(shop, "totals")

    execute(shop, "INSERT INTO orders VALUES (4, 'carol', 7)")
    result = refresh(shop, "totals", TOTALS)
    assert (result.action, result.apply_path) == ("DIFFERENTIAL", "explicit")
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (1, 0, 0)
    assert any("audit_rows" in w and "audit_statements" in w for w in result.warnings), result.warnings
    [(op, old, new), statement] = take_audit(shop, "totals")
    assert (op, old, statement[0]) == ("INSERT", None, "STATEMENT INSERT")
    assert new is not None and user_part(new, "customer", "total", "n") == ("carol", 7.0, 1)
    # OLD/NEW carry only the table's columns: the query's own (the key hash is an index, the sum's
    # non-NULL count is recounted when in doubt).
    assert sorted(new) == ["customer", "n", "total"], new

    execute(
        shop,
        "DELETE FROM orders WHERE id = 3; UPDATE orders SET amount = 15 WHERE id = 1; "
        "INSERT INTO orders VALUES (5, 'dave', 1)",
    )
    result = refresh(shop, "totals", TOTALS)
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (1, 1, 1)
    fired = take_audit(shop, "totals")
    assert [op for op, _, _ in fired] == [
        "DELETE",
        "STATEMENT DELETE",
        "UPDATE",
        "STATEMENT UPDATE",
        "INSERT",
        "STATEMENT INSERT",
    ]
    columns = ("customer", "total", "n")
    assert [
        (user_part(o, *columns), user_part(n, *columns)) for _, o, n in fired if not _.startswith("S")
    ] == [
        (("bob", 5.0, 1), None),
        (("alice", 30.0, 2), ("alice", 35.0, 2)),
        (None, ("dave", 1.0, 1)),
    ]
    assert_equals_query(shop, "totals", TOTALS)


def test_keyed_and_multiset_tables_fire_row_triggers(shop: Any) -> None:
    keyed = "SELECT id, customer, amount FROM orders WHERE amount > 1"
    bag = "SELECT kind, v FROM events"
    refresh(shop, "keyed", keyed)
    refresh(shop, "bag", bag)
    audit_rows(shop, "keyed")
    audit_rows(shop, "bag")

    execute(shop, "UPDATE orders SET amount = 12 WHERE id = 1; UPDATE orders SET amount = 0 WHERE id = 3")
    execute(shop, "INSERT INTO events VALUES ('a', 1); DELETE FROM events WHERE kind = 'b'")
    assert refresh(shop, "keyed", keyed).apply_path == "explicit"
    assert refresh(shop, "bag", bag).apply_path == "explicit"

    fired = [
        (op, user_part(o, "id", "amount"), user_part(n, "id", "amount"))
        for op, o, n in take_audit(shop, "keyed")
    ]
    assert fired == [("DELETE", (3, 5.0), None), ("UPDATE", (1, 10.0), (1, 12.0))]
    fired = [
        (op, user_part(o, "kind", "v"), user_part(n, "kind", "v")) for op, o, n in take_audit(shop, "bag")
    ]
    assert fired == [("DELETE", ("b", None), None), ("INSERT", None, ("a", 1))]
    assert_equals_query(shop, "keyed", keyed)
    assert_equals_query(shop, "bag", bag)


def test_change_that_leaves_an_aggregate_equal_fires_nothing(shop: Any) -> None:
    refresh(shop, "totals", TOTALS)
    audit_rows(shop, "totals")
    audit_statements(shop, "totals")
    # alice's two orders trade 5: her total and count stay; bob's row is rewritten to itself.
    execute(
        shop,
        "UPDATE orders SET amount = amount + 5 WHERE id = 1; UPDATE orders SET amount = amount - 5 WHERE id = 2;"
        "UPDATE orders SET amount = amount WHERE id = 3",
    )
    result = refresh(shop, "totals", TOTALS)
    assert (result.action, result.apply_path, result.rows_changed) == ("DIFFERENTIAL", "explicit", 0)
    assert take_audit(shop, "totals") == []


def test_full_refresh_fires_the_same_triggers_as_differential(shop: Any) -> None:
    queries = {
        "totals": TOTALS,
        "keyed": "SELECT id, customer, amount FROM orders WHERE amount > 1",
        "bag": "SELECT kind, v FROM events",
    }
    for name, sql in queries.items():
        for mode in ("differential", "full"):
            refresh(shop, f"{name}_{mode}", sql, refresh_mode=mode)
            audit_rows(shop, f"{name}_{mode}")
            audit_statements(shop, f"{name}_{mode}")
        # A FULL refresh must neither truncate nor disable triggers: this one would see a TRUNCATE.
        execute(
            shop,
            f'CREATE TRIGGER audit_truncate AFTER TRUNCATE ON "{name}_full" '
            "FOR EACH STATEMENT EXECUTE FUNCTION audit_statement()",
        )
    execute(
        shop,
        "DELETE FROM orders WHERE id = 3; UPDATE orders SET amount = 15 WHERE id = 1; "
        "INSERT INTO orders VALUES (4, 'carol', 7), (5, 'alice', 0); "
        "INSERT INTO events VALUES ('a', 1), ('c', 2); DELETE FROM events WHERE kind = 'b'",
    )
    logged = io.StringIO()
    logging_conn = psycopg2.connect(shop.dsn, connection_factory=psycopg2.extras.LoggingConnection)
    logging_conn.initialize(logged)
    logging_conn.autocommit = True
    for name, sql in queries.items():
        differential = refresh(shop, f"{name}_differential", sql, refresh_mode="differential")
        full = refresh(logging_conn, f"{name}_full", sql, refresh_mode="full")
        assert (differential.action, full.action) == ("DIFFERENTIAL", "FULL")
        assert full.apply_path == "explicit"
        counts = (full.rows_inserted, full.rows_updated, full.rows_deleted)
        assert counts == (differential.rows_inserted, differential.rows_updated, differential.rows_deleted)
        fired = take_audit_text(shop, f"{name}_full")
        assert Counter(fired) == Counter(take_audit_text(shop, f"{name}_differential"))
        assert [op for op, _, _ in fired if op.startswith("STATEMENT")] == [
            f"STATEMENT {op}" for op in STATEMENT_ORDER if any(fired_op == op for fired_op, _, _ in fired)
        ]
        assert snapshot(shop, f"{name}_full") == snapshot(shop, f"{name}_differential")
    logging_conn.close()
    statements = logged.getvalue().upper()
    assert "TRUNCATE" not in statements and "DISABLE TRIGGER" not in statements


def test_audit_trail_equals_the_multiset_difference_over_random_dml(shop: Any) -> None:
    queries = {
        "totals": "SELECT customer, SUM(amount) AS total, COUNT(*) AS n, COUNT(amount) AS priced "
        "FROM orders GROUP BY customer",
        "everything": "SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders",
        "keyed": "SELECT id, customer, amount FROM orders WHERE amount IS NULL OR amount > 3",
        "bag": "SELECT kind, v FROM events",
        "kinds": "SELECT kind, COUNT(*) AS n, SUM(v) AS total FROM events GROUP BY kind",
    }
    tables = [f"{name}_{mode}" for name in queries for mode in ("differential", "full")]
    for name, sql in queries.items():
        for mode in ("differential", "full"):
            refresh(shop, f"{name}_{mode}", sql, refresh_mode=mode)
            audit_rows(shop, f"{name}_{mode}")
    before = {t: snapshot(shop, t) for t in tables}
    rng = random.Random(20260224)
    next_id = 100
    for round_number in range(25):
        for _ in range(rng.randint(1, 8)):
            next_id = _random_change(shop, rng, next_id)
        for name, sql in queries.items():
            trails = {}
            for mode in ("differential", "full"):
                table = f"{name}_{mode}"
                result = refresh(shop, table, sql, refresh_mode=mode)
                after = snapshot(shop, table)
                trail = take_audit_text(shop, table)
                removed = Counter(old for op, old, _ in trail if op in ("DELETE", "UPDATE"))
                added = Counter(new for op, _, new in trail if op in ("INSERT", "UPDATE"))
                context = f"round {round_number}, {table}: {trail}"
                assert all(old != new for op, old, new in trail if op == "UPDATE"), context
                assert removed == before[table] - after, context
                assert added == after - before[table], context
                assert result.rows_changed == len(trail), context
                assert_equals_query(shop, table, sql)
                before[table] = after
                trails[mode] = trail
            # FULL fires exactly the row triggers differential does (rows within one statement come in
            # plan order, so compare as multisets); both fire all DELETEs, then UPDATEs, then INSERTs.
            assert Counter(trails["full"]) == Counter(trails["differential"]), f"round {round_number}, {name}"
            for trail in trails.values():
                ops = [STATEMENT_ORDER.index(op) for op, _, _ in trail]
                assert ops == sorted(ops), f"round {round_number}, {name}: {trail}"


def _random_change(conn: Any, rng: random.Random, next_id: int) -> int:
    ids = [r[0] for r in fetch(conn, "SELECT id FROM orders")]
    customers = ["alice", "bob", "carol", "dave", None]
    amount = rng.choice([None, 0, 1, 2.5, 4, 10, 10.5, 99])
    choice = rng.randrange(8)
    if choice == 0 or not ids:
        execute(conn, "INSERT INTO orders VALUES (%s, %s, %s)", (next_id, rng.choice(customers), amount))
        return next_id + 1
    if choice == 1:
        execute(conn, "UPDATE orders SET amount = %s WHERE id = %s", (amount, rng.choice(ids)))
    elif choice == 2:
        execute(
            conn, "UPDATE orders SET customer = %s WHERE id = %s", (rng.choice(customers), rng.choice(ids))
        )
    elif choice == 3:
        execute(conn, "DELETE FROM orders WHERE id = %s", (rng.choice(ids),))
    elif choice == 4:
        # Rewrite a row to itself, or trade an amount between two orders: nothing changes downstream.
        a, b = rng.choice(ids), rng.choice(ids)
        execute(conn, "UPDATE orders SET amount = amount + 1 WHERE id = %s", (a,))
        execute(
            conn, "UPDATE orders SET amount = amount - 1 WHERE id = %s", (a if rng.random() < 0.5 else b,)
        )
    elif choice == 5:
        execute(conn, "INSERT INTO events VALUES (%s, %s)", (rng.choice("abc"), rng.choice([1, 2, None])))
    elif choice == 6:
        execute(conn, "DELETE FROM events WHERE ctid = (SELECT ctid FROM events ORDER BY random() LIMIT 1)")
    else:
        execute(
            conn,
            "UPDATE events SET v = %s WHERE ctid = (SELECT ctid FROM events ORDER BY random() LIMIT 1)",
            (rng.choice([1, 2, None]),),
        )
    return next_id


def test_off_suppresses_user_triggers_but_not_capture(shop: Any) -> None:
    refresh(shop, "totals", TOTALS, user_triggers="off")
    downstream = 'SELECT COUNT(*) AS groups, SUM(total) AS grand FROM "totals"'
    refresh(
        shop, "grand", downstream, refresh_mode="differential"
    )  # makes totals a source: it now carries our capture triggers
    audit_rows(shop, "totals")
    audit_statements(shop, "totals")
    execute(
        shop,
        "CREATE TRIGGER always_audit AFTER INSERT OR UPDATE OR DELETE ON totals "
        "FOR EACH ROW EXECUTE FUNCTION audit_row();"
        "ALTER TABLE totals ENABLE ALWAYS TRIGGER always_audit;"
        "CREATE TRIGGER disabled_audit AFTER INSERT ON totals FOR EACH ROW EXECUTE FUNCTION audit_row();"
        "ALTER TABLE totals DISABLE TRIGGER disabled_audit;",
    )
    enabled_before = fetch(
        shop, "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'totals'::regclass ORDER BY 1"
    )

    execute(
        shop,
        "DELETE FROM orders WHERE id = 3; UPDATE orders SET amount = 1 WHERE id = 1; INSERT INTO orders VALUES (4, 'eve', 3)",
    )
    result = refresh(shop, "totals", TOTALS, user_triggers="off")
    assert (result.apply_path, result.rows_inserted, result.rows_updated, result.rows_deleted) == (
        "merge_triggers_off",
        1,
        1,
        1,
    )
    assert any("did not fire" in w and "always_audit" in w for w in result.warnings), result.warnings
    assert take_audit(shop, "totals") == []
    assert (
        fetch(shop, "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'totals'::regclass ORDER BY 1")
        == enabled_before
    )
    assert_equals_query(shop, "totals", TOTALS)
    # The capture triggers on totals kept working: the stream table over it follows.
    assert refresh(shop, "grand", downstream, refresh_mode="differential").action == "DIFFERENTIAL"
    assert_equals_query(shop, "grand", downstream)
    # Outside the refresh the triggers are back.
    execute(shop, "UPDATE totals SET n = n WHERE customer = 'eve'")
    assert [op for op, _, _ in take_audit(shop, "totals")] == ["UPDATE", "UPDATE", "STATEMENT UPDATE"]


def test_off_locks_out_writers_but_not_readers(shop: Any, pg_dsn: str) -> None:
    refresh(shop, "totals", TOTALS, user_triggers="off")
    audit_rows(shop, "totals")
    other = psycopg2.connect(pg_dsn)  # not autocommit: its lock lasts until rollback
    try:
        other.cursor().execute("SELECT count(*) FROM totals")  # ACCESS SHARE: a reader
        execute(shop, "INSERT INTO orders VALUES (4, 'carol', 7)")
        assert refresh(shop, "totals", TOTALS, user_triggers="off").rows_inserted == 1
        other.rollback()
        other.cursor().execute("LOCK TABLE totals IN ROW EXCLUSIVE MODE")  # what a writer holds
        execute(shop, "INSERT INTO orders VALUES (5, 'dave', 7)")
        execute(shop, "SET lock_timeout = '300ms'")
        with pytest.raises(psycopg2.errors.LockNotAvailable):
            refresh(shop, "totals", TOTALS, user_triggers="off")
        # auto (explicit DML) needs only ROW EXCLUSIVE, which writers share.
        assert refresh(shop, "totals", TOTALS).rows_inserted == 1
    finally:
        other.close()
        execute(shop, "RESET lock_timeout")
    assert [op for op, _, _ in take_audit(shop, "totals")] == ["INSERT"]


def test_before_trigger_that_edits_new_is_reported(shop: Any) -> None:
    refresh(shop, "totals", TOTALS)
    execute(
        shop,
        "CREATE FUNCTION keep_new() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;"
        "CREATE TRIGGER passes BEFORE INSERT OR UPDATE ON totals FOR EACH ROW EXECUTE FUNCTION keep_new();",
    )
    execute(shop, "INSERT INTO orders VALUES (4, 'carol', 7)")
    result = refresh(shop, "totals", TOTALS)
    assert result.apply_path == "explicit"
    assert not any("read back different" in w for w in result.warnings), result.warnings
    assert_equals_query(shop, "totals", TOTALS)

    execute(
        shop,
        "CREATE FUNCTION inflate() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN NEW.total := NEW.total * 100; RETURN NEW; END $$;"
        "CREATE TRIGGER inflates BEFORE INSERT OR UPDATE ON totals FOR EACH ROW EXECUTE FUNCTION inflate();",
    )
    execute(shop, "UPDATE orders SET amount = 11 WHERE id = 1; INSERT INTO orders VALUES (5, 'dave', 2)")
    result = refresh(shop, "totals", TOTALS)
    [warning] = [w for w in result.warnings if "read back different" in w]
    assert warning.startswith("2 row(s)") and "inflates" in warning and "passes" in warning
    assert fetch(
        shop, "SELECT customer, total FROM totals WHERE customer IN ('alice', 'dave') ORDER BY 1"
    ) == [
        ("alice", 3100),
        ("dave", 200),
    ]

    # A BEFORE DELETE trigger that cancels the delete leaves a row the query no longer has.
    execute(
        shop,
        "DROP TRIGGER inflates ON totals;"
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;"
        "CREATE TRIGGER refuses BEFORE DELETE ON totals FOR EACH ROW EXECUTE FUNCTION refuse();"
        "DELETE FROM orders WHERE customer = 'bob'",
    )
    result = refresh(shop, "totals", TOTALS)
    assert any(w.startswith("1 row(s)") and "refuses" in w for w in result.warnings), result.warnings
    assert fetch(shop, "SELECT count(*) FROM totals WHERE customer = 'bob'") == [(1,)]


def test_without_user_triggers_the_refresh_uses_one_statement(shop: Any) -> None:
    refresh(shop, "totals", TOTALS)
    refresh(shop, "bag", "SELECT kind, v FROM events")
    # A stream table over totals puts our capture triggers on it: those are not user triggers.
    refresh(shop, "grand", 'SELECT COUNT(*) AS groups FROM "totals"')
    leave_batches_to_the_engine(shop)  # the engine's own apply is under test
    execute(shop, "INSERT INTO orders VALUES (4, 'carol', 7); UPDATE orders SET amount = 1 WHERE id = 3")
    execute(shop, "INSERT INTO events VALUES ('z', 9); DELETE FROM events WHERE kind = 'b'")
    with recording_connection(shop.dsn) as conn:
        results = [refresh(conn, "totals", TOTALS), refresh(conn, "bag", "SELECT kind, v FROM events")]
        # What ran, without the refresh functions the engine installs anew (their bodies hold MERGEs).
        ran = [s for s in conn.statements if "CREATE OR REPLACE FUNCTION" not in s]
    assert [(r.apply_path, r.rows_changed, r.warnings) for r in results] == [
        ("merge", 2, []),
        ("merge", 2, []),
    ]
    statements = "\n".join(ran)
    assert statements.count("MERGE INTO") == 1  # the totals
    # The bag's copies go and come in one statement (`apply/multiset`), no explicit DML.
    assert statements.count('WITH "__ivm_gone" AS (DELETE FROM "public"."bag"') == 1
    assert statements.count('DELETE FROM "public"') == 1 and 'UPDATE "public"' not in statements
    assert 'INSERT INTO "public"."totals"' not in statements and "DISABLE TRIGGER" not in statements


def test_on_uses_explicit_dml_without_triggers(shop: Any) -> None:
    refresh(shop, "totals", TOTALS, user_triggers="on")
    leave_batches_to_the_engine(shop)  # the engine's own apply is under test
    execute(shop, "INSERT INTO orders VALUES (4, 'carol', 7); DELETE FROM orders WHERE id = 3")
    result = refresh(shop, "totals", TOTALS, user_triggers="on")
    assert (result.apply_path, result.rows_inserted, result.rows_deleted, result.warnings) == (
        "explicit",
        1,
        1,
        [],
    )
    assert_equals_query(shop, "totals", TOTALS)


def test_notify_after_a_refresh_that_changed_rows(shop: Any, pg_dsn: str) -> None:
    listener = psycopg2.connect(pg_dsn)
    listener.autocommit = True
    execute(listener, 'LISTEN "totals changed"')
    try:
        created = refresh(shop, "totals", TOTALS, notify_channel="totals changed")
        audit_rows(shop, "totals")
        execute(shop, "UPDATE orders SET amount = 1 WHERE id = 3; INSERT INTO orders VALUES (4, 'carol', 7)")
        refreshed = refresh(shop, "totals", TOTALS, notify_channel="totals changed")
        skipped = refresh(shop, "totals", TOTALS, notify_channel="totals changed")
        execute(shop, "UPDATE orders SET amount = amount WHERE id = 3")
        unchanged = refresh(shop, "totals", TOTALS, notify_channel="totals changed")
        wait_for_notifies(listener, 2)
        payloads = [json.loads(n.payload) for n in listener.notifies]
        assert {n.channel for n in listener.notifies} == {"totals changed"}
    finally:
        listener.close()
    assert (skipped.action, unchanged.action, unchanged.rows_changed) == ("SKIP", "DIFFERENTIAL", 0)
    assert payloads == [
        {
            "stream_table": "public.totals",
            "model": "totals",
            "mode": "CREATE",
            "rows_inserted": 2,
            "rows_updated": 0,
            "rows_deleted": 0,
            "refresh_id": created.refresh_id,
            "apply_path": None,
        },
        {
            "stream_table": "public.totals",
            "model": "totals",
            "mode": "DIFFERENTIAL",
            "rows_inserted": 1,
            "rows_updated": 1,
            "rows_deleted": 0,
            "refresh_id": refreshed.refresh_id,
            "apply_path": "explicit",
        },
    ]
    history = fetch(
        shop,
        "SELECT action, rows_inserted, rows_updated FROM dbt_ivm.refresh_history WHERE refresh_id = %s",
        (refreshed.refresh_id,),
    )
    assert history == [("DIFFERENTIAL", 1, 1)]


def test_no_notify_when_the_refresh_fails_to_commit(shop: Any, pg_dsn: str) -> None:
    refresh(shop, "totals", TOTALS, notify_channel="totals_changed")
    # A deferred check that fails at COMMIT, after the NOTIFY was queued: the refresh rolls back.
    execute(
        shop,
        "CREATE FUNCTION fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN IF NEW.action <> 'FAILED' THEN RAISE EXCEPTION 'refused at commit'; END IF; RETURN NULL; END $$;"
        "CREATE CONSTRAINT TRIGGER fail_commit AFTER INSERT ON dbt_ivm.refresh_history "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_commit()",
    )
    listener = psycopg2.connect(pg_dsn)
    listener.autocommit = True
    try:
        execute(listener, "LISTEN totals_changed")
        execute(shop, "INSERT INTO orders VALUES (4, 'carol', 7)")
        with pytest.raises(psycopg2.errors.RaiseException, match="refused at commit"):
            refresh(shop, "totals", TOTALS, notify_channel="totals_changed")
        # Were it sent, it would arrive before the next refresh's: the list below would have two.
        execute(shop, "DROP TRIGGER fail_commit ON dbt_ivm.refresh_history")
        result = refresh(shop, "totals", TOTALS, notify_channel="totals_changed")
        wait_for_notifies(listener, 1)
        assert [json.loads(n.payload)["refresh_id"] for n in listener.notifies] == [result.refresh_id]
    finally:
        listener.close()


def test_rebuild_warns_that_it_dropped_user_triggers(shop: Any) -> None:
    refresh(shop, "totals", TOTALS)
    audit_rows(shop, "totals")
    result = run_stream_table(
        shop, StreamTableSpec(model="totals", schema="public", name="totals", sql=TOTALS, full_refresh=True)
    )
    assert result.action == "REBUILD"
    assert any("dropped its user triggers (audit_rows)" in w for w in result.warnings), result.warnings
    assert fetch(
        shop,
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'totals'::regclass AND NOT tgisinternal",
    ) == [("__ivm_guard",)]  # only ours (postgres.outside_writes)
