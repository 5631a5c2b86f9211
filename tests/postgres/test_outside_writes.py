"""Writes into a stream table by hand (postgres.outside_writes): the next refresh recomputes it,
whatever path refreshes it (the engine, CALL refresh, an IMMEDIATE table's next dbt run); dbt-ivm's
own writes, including a stream table maintained inside another's refresh, are never taken for them."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.errors import TriggerNameTaken
from dbt_ivm.postgres import outside_writes
from tests.oracle import assert_matches_query
from tests.postgres.streams import (
    CATALOG,
    SCHEMA,
    TWENTY_ORDERS,
    connect,
    execute,
    refresh,
    refresh_and_check,
    value,
)

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer"
BIG = "SELECT customer, total FROM totals WHERE total > 40"
OUTSIDE = "written outside dbt-ivm"

# Each write by hand, and the operation its statement trigger names (a MERGE fires its actions').
BY_HAND = [
    ("DELETE FROM totals WHERE customer = 'c1'", "DELETE"),
    ("UPDATE totals SET total = total + 1 WHERE customer = 'c2'", "UPDATE"),
    ("INSERT INTO totals VALUES ('nobody', 1, 1)", "INSERT"),
    ("TRUNCATE totals", "TRUNCATE"),
    (
        "MERGE INTO totals t USING (SELECT 'c3' AS customer) s ON t.customer = s.customer "
        "WHEN MATCHED THEN DELETE",
        "DELETE",
    ),
    ("COPY totals FROM PROGRAM 'echo x,1,1' WITH (FORMAT csv)", "INSERT"),
]


@pytest.mark.parametrize("refresh_mode", ["differential", "auto", "full"])
def test_each_kind_of_write_by_hand_makes_the_next_refresh_full(pg_conn: Any, refresh_mode: str) -> None:
    execute(pg_conn, TWENTY_ORDERS)
    mode = {"refresh_mode": refresh_mode}
    refresh_and_check(pg_conn, "totals", TOTALS, "create", **mode)
    for statement, operation in BY_HAND:
        execute(pg_conn, statement)
        execute(pg_conn, "UPDATE orders SET amount = amount + 1 WHERE id = 1")
        repaired = refresh_and_check(pg_conn, "totals", TOTALS, statement, **mode)
        assert repaired.action == "FULL", (statement, repaired.summary())
        if refresh_mode != "full":
            assert f"{OUTSIDE} ({operation} by role" in str(repaired.reason), (statement, repaired.reason)
        execute(pg_conn, "UPDATE orders SET amount = amount + 1 WHERE id = 2")
        after = refresh_and_check(pg_conn, "totals", TOTALS, f"after {statement}", **mode)
        assert after.action == ("FULL" if refresh_mode == "full" else "DIFFERENTIAL"), after.summary()
        assert OUTSIDE not in str(after.reason)
    assert value(pg_conn, f"SELECT count(*) FROM {CATALOG}.{outside_writes.TABLE}") == 0


def test_call_refresh_recomputes_after_a_write_by_hand(pg_conn: Any) -> None:
    execute(pg_conn, TWENTY_ORDERS)
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="differential")
    execute(pg_conn, "UPDATE totals SET n = 0")
    with pg_conn.cursor() as cursor:
        cursor.execute(f"CALL {CATALOG}.refresh('public.totals')")
        action, reason = cursor.fetchone()[:2]
    assert action == "FULL" and OUTSIDE in reason, (action, reason)
    assert_matches_query(pg_conn, SCHEMA, "totals", TOTALS, "after CALL refresh")
    execute(pg_conn, "INSERT INTO orders VALUES (21, 'c1', 5)")
    with pg_conn.cursor() as cursor:
        cursor.execute(f"CALL {CATALOG}.refresh('public.totals')")
        assert cursor.fetchone()[0] == "DIFFERENTIAL"
    assert_matches_query(pg_conn, SCHEMA, "totals", TOTALS, "CALL refresh again")


def test_a_writer_with_only_dml_rights_writes_and_is_noticed(pg_conn: Any, pg_dsn: str) -> None:
    execute(pg_conn, TWENTY_ORDERS)
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="differential")
    execute(pg_conn, "CREATE ROLE fixer LOGIN; GRANT SELECT, UPDATE, DELETE ON totals TO fixer")
    fixer = connect(pg_dsn.replace("user=postgres", "user=fixer"))
    try:
        execute(fixer, "DELETE FROM public.totals WHERE customer = 'c0'")  # no rights on the catalog
    finally:
        fixer.close()
    repaired = refresh_and_check(pg_conn, "totals", TOTALS, "after the fixer", refresh_mode="differential")
    assert repaired.action == "FULL" and "by role fixer" in str(repaired.reason), repaired.summary()


def test_a_replica_session_is_noticed_too(pg_conn: Any) -> None:
    execute(pg_conn, TWENTY_ORDERS)
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="differential")
    execute(pg_conn, "BEGIN; SET LOCAL session_replication_role = replica; DELETE FROM totals; COMMIT")
    repaired = refresh_and_check(pg_conn, "totals", TOTALS, "replica", refresh_mode="differential")
    assert repaired.action == "FULL" and OUTSIDE in str(repaired.reason), repaired.summary()


def test_a_disabled_guard_is_a_full_refresh_and_comes_back(pg_conn: Any) -> None:
    execute(pg_conn, TWENTY_ORDERS)
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="differential")
    execute(pg_conn, "ALTER TABLE totals DISABLE TRIGGER ALL; DELETE FROM totals WHERE customer = 'c0'")
    repaired = refresh_and_check(pg_conn, "totals", TOTALS, "guard off", refresh_mode="differential")
    assert repaired.action == "FULL" and repaired.reason == outside_writes.UNGUARDED, repaired.summary()
    execute(pg_conn, "DELETE FROM totals WHERE customer = 'c1'")  # seen again
    again = refresh_and_check(pg_conn, "totals", TOTALS, "guard back", refresh_mode="differential")
    assert again.action == "FULL" and OUTSIDE in str(again.reason), again.summary()


def test_a_user_trigger_named_like_the_guard_is_refused_never_replaced(pg_conn: Any) -> None:
    execute(
        pg_conn,
        TWENTY_ORDERS + "; CREATE TABLE fired (n int);"
        "CREATE FUNCTION count_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO fired VALUES (1); RETURN NULL; END $$",
    )
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="differential")
    # Put on by hand (a post-hook, say): it replaces dbt-ivm's guard of the same name.
    execute(
        pg_conn,
        'CREATE OR REPLACE TRIGGER "__ivm_guard" AFTER INSERT OR UPDATE OR DELETE ON totals '
        "FOR EACH STATEMENT EXECUTE FUNCTION count_writes(); UPDATE orders SET amount = amount + 1 WHERE id = 1",
    )
    with pytest.raises(
        TriggerNameTaken, match=r"model totals: stream table .*totals.* __ivm_guard ON totals.*rename"
    ):
        refresh(pg_conn, "totals", TOTALS, refresh_mode="differential")
    owner = value(
        pg_conn,
        "SELECT p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
        "WHERE t.tgrelid = 'totals'::regclass AND t.tgname = '__ivm_guard'",
    )
    assert owner == "count_writes"
    execute(pg_conn, 'ALTER TRIGGER "__ivm_guard" ON totals RENAME TO count_writes')
    result = refresh_and_check(pg_conn, "totals", TOTALS, "renamed", refresh_mode="differential")
    assert result.action == "FULL" and result.reason == outside_writes.UNGUARDED, result.summary()
    assert value(pg_conn, "SELECT count(*) > 0 FROM fired"), "the user's trigger runs on the refresh's writes"


def test_stream_tables_over_stream_tables_are_not_taken_for_outside_writers(pg_conn: Any) -> None:
    """totals is refreshed by the engine; big (differential) and its IMMEDIATE twin read it: the
    twin is maintained inside totals' refresh, and must hand the mark back to it: totals has a user
    trigger, so it is written in three statements (DELETE, UPDATE, INSERT), the twin maintained after
    each."""
    execute(pg_conn, TWENTY_ORDERS)
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="differential")
    execute(
        pg_conn,
        "CREATE TABLE audit (n int); CREATE FUNCTION audited() RETURNS trigger LANGUAGE plpgsql AS "
        "'BEGIN INSERT INTO audit VALUES (1); RETURN NULL; END'; CREATE TRIGGER audit AFTER INSERT OR "
        "UPDATE OR DELETE ON totals FOR EACH ROW EXECUTE FUNCTION audited()",
    )
    refresh_and_check(pg_conn, "big", BIG, "create", refresh_mode="differential")
    refresh_and_check(pg_conn, "big_now", BIG, "create", refresh_mode="immediate")
    for step, write in enumerate(
        [
            "INSERT INTO orders VALUES (21, 'c1', 500), (22, 'c9', 1); DELETE FROM orders WHERE customer = 'c0'",
            "UPDATE orders SET amount = amount * 3 WHERE customer IN ('c2', 'c9');"
            "INSERT INTO orders VALUES (23, 'c8', 100); DELETE FROM orders WHERE customer = 'c3'",
            "DELETE FROM orders WHERE customer = 'c1'; INSERT INTO orders VALUES (24, 'c7', 70)",
        ]
    ):
        execute(pg_conn, write)
        for name, sql in (("totals", TOTALS), ("big", BIG), ("big_now", BIG)):
            mode = "immediate" if name == "big_now" else "differential"
            result = refresh_and_check(pg_conn, name, sql, f"{step}: {write}", refresh_mode=mode)
            assert result.action in ("DIFFERENTIAL", "SKIP"), (name, write, result.summary())
    assert value(pg_conn, f"SELECT count(*) FROM {CATALOG}.{outside_writes.TABLE}") == 0


def test_an_immediate_table_written_by_hand_is_rebuilt_by_the_next_run(pg_conn: Any) -> None:
    execute(pg_conn, TWENTY_ORDERS)
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="immediate")
    execute(pg_conn, "INSERT INTO orders VALUES (21, 'c1', 5); UPDATE orders SET amount = 0 WHERE id = 3")
    kept = refresh_and_check(pg_conn, "totals", TOTALS, "maintained", refresh_mode="immediate")
    assert kept.action == "SKIP", kept.summary()
    execute(pg_conn, "UPDATE totals SET total = -1")
    rebuilt = refresh(pg_conn, "totals", TOTALS, refresh_mode="immediate")
    assert rebuilt.action == "REBUILD" and OUTSIDE in str(rebuilt.reason), rebuilt.summary()
    assert_matches_query(pg_conn, SCHEMA, "totals", TOTALS, "rebuilt")
    execute(pg_conn, "DELETE FROM orders WHERE id = 4")
    assert refresh(pg_conn, "totals", TOTALS, refresh_mode="immediate").action == "SKIP"
    assert_matches_query(pg_conn, SCHEMA, "totals", TOTALS, "maintained again")


def test_a_rebuilt_table_starts_clean(pg_conn: Any) -> None:
    execute(pg_conn, TWENTY_ORDERS)
    refresh_and_check(pg_conn, "totals", TOTALS, "create", refresh_mode="differential")
    execute(pg_conn, "DELETE FROM totals")
    other = TOTALS.replace("COUNT(*) AS n", "COUNT(*) AS n, MAX(id) AS last_id")
    rebuilt = refresh_and_check(pg_conn, "totals", other, "rebuilt", refresh_mode="differential")
    assert rebuilt.action == "REBUILD", rebuilt.summary()
    execute(pg_conn, "INSERT INTO orders VALUES (21, 'c1', 5)")
    after = refresh_and_check(pg_conn, "totals", other, "after", refresh_mode="differential")
    assert after.action == "DIFFERENTIAL", after.summary()
