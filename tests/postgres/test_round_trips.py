"""What a refresh by the stream table's function costs the client (issue 14 item 3): six round trips
for the engine, each a statement as recorded; and whatever fails on the way leaves the session with no
transaction open and no refresh lock held."""

from __future__ import annotations

from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.in_database import function_name, refresh_by_function
from dbt_ivm.postgres.runner import run_stream_table
from tests.oracle import assert_matches_query
from tests.postgres.streams import CATALOG, TWENTY_ORDERS, execute, make_spec, refresh, rows, value

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
KEY = "public.totals"
# The refresh function's signature and result (postgres.procedure), for a stand-in that fails.
SIGNATURE = (
    "(__ivm_initiated_by text, __ivm_invocation_id text, __ivm_apply_up_to bigint, OUT __ivm_out_action text, "
    "OUT __ivm_out_reason text, OUT __ivm_out_inserted bigint, OUT __ivm_out_updated bigint, "
    "OUT __ivm_out_deleted bigint, OUT __ivm_out_changes bigint)"
)


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        TWENTY_ORDERS,
    )
    refresh(pg_conn, "totals", TOTALS, refresh_mode="differential")
    return pg_conn


def engine_run(conn: Any, statements: list[str]) -> Any:
    return run_stream_table(
        conn, make_spec("totals", TOTALS, refresh_mode="differential", on_statement=statements.append)
    )


def assert_clean(conn: Any) -> None:
    """No transaction open, no advisory lock held by the session."""
    assert conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
    held = value(conn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
    assert held == 0


def last_action(conn: Any) -> tuple[Any, ...]:
    return rows(
        conn,
        f"SELECT action, status, initiated_by FROM {CATALOG}.refresh_history WHERE stream_table = %s "
        "ORDER BY refresh_id DESC LIMIT 1",
        (KEY,),
    )[0]


@pytest.mark.parametrize("change", [False, True], ids=["nothing to do", "a batch"])
def test_the_engine_refreshes_by_function_in_six_round_trips(shop: Any, change: bool) -> None:
    if change:
        execute(shop, "INSERT INTO orders VALUES (21, 'c1', 5)")
    statements: list[str] = []
    result = engine_run(shop, statements)
    assert result.action == ("DIFFERENTIAL" if change else "SKIP"), result.summary()
    assert_matches_query(shop, "public", "totals", TOTALS)
    # The catalog check, the missing tables, the lock, the registration with the table and the
    # functions, BEGIN with the function, COMMIT with the buffer trim and the unlock.
    assert len(statements) == 6, statements
    assert "pg_advisory_lock" in statements[2]
    assert statements[4].startswith("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM")
    assert statements[5].startswith("COMMIT; SELECT") and "pg_advisory_unlock" in statements[5]
    assert_clean(shop)


def test_dbt_ivm_refresh_by_function_in_four_round_trips(shop: Any) -> None:
    execute(shop, "INSERT INTO orders VALUES (21, 'c1', 5)")
    db = Db(shop)
    result = refresh_by_function(db, CATALOG, KEY, "differential", "dbt-ivm refresh")
    assert result is not None and result.action == "DIFFERENTIAL"
    assert_matches_query(shop, "public", "totals", TOTALS)
    # The installed version, the lock, BEGIN with the function, COMMIT with the trim and the unlock.
    assert len(db.statements) == 4, db.statements
    assert_clean(shop)


def failing_trim(conn: Any) -> None:
    execute(
        conn,
        f"CREATE OR REPLACE FUNCTION {CATALOG}.{function_name(KEY, '_cleanup')}() RETURNS void "
        "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'trim refused'; END $$",
    )


def failing_commit(conn: Any) -> None:
    """A deferred check on the history that fails at COMMIT (a failed run's row passes)."""
    execute(
        conn,
        "CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN IF NEW.status <> 'FAILED' THEN RAISE EXCEPTION 'commit refused'; END IF; RETURN NULL; END $$;"
        f"CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON {CATALOG}.refresh_history "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()",
    )


@pytest.mark.parametrize("by", ["engine", "dbt-ivm refresh"])
@pytest.mark.parametrize("failing", [failing_trim, failing_commit], ids=["trim", "commit"])
def test_a_failed_commit_or_trim_leaves_no_transaction_nor_lock(shop: Any, by: str, failing: Any) -> None:
    failing(shop)
    execute(shop, "INSERT INTO orders VALUES (21, 'c1', 5)")
    message = "trim refused" if failing is failing_trim else "commit refused"
    with pytest.raises(psycopg2.Error, match=message):
        if by == "engine":
            engine_run(shop, [])
        else:
            refresh_by_function(Db(shop), CATALOG, KEY, "differential", by)
    assert_clean(shop)
    committed = value(
        shop,
        f"SELECT count(*) FROM {CATALOG}.refresh_history WHERE stream_table = %s AND status = 'OK'",
        (KEY,),
    )
    if failing is failing_trim:  # the refresh committed before its trim failed
        assert committed == 2
        assert_matches_query(shop, "public", "totals", TOTALS)
    else:
        assert committed == 1  # the CREATE's
        assert value(shop, "SELECT total FROM totals WHERE customer = 'c1'") == 45


def test_a_failing_function_leaves_the_refresh_to_the_engine(shop: Any) -> None:
    execute(
        shop,
        f"CREATE OR REPLACE FUNCTION {CATALOG}.{function_name(KEY)}{SIGNATURE} LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'function refused'; END $$",
    )
    execute(shop, "INSERT INTO orders VALUES (21, 'c1', 5)")
    assert refresh_by_function(Db(shop), CATALOG, KEY, "differential", "dbt-ivm refresh") is None
    assert_clean(shop)
    statements: list[str] = []
    result = engine_run(shop, statements)
    assert result.action == "DIFFERENTIAL", result.summary()
    assert any(s.startswith("ROLLBACK") for s in statements)
    assert last_action(shop) == ("DIFFERENTIAL", "OK", "dbt")
    assert_matches_query(shop, "public", "totals", TOTALS)
    assert_clean(shop)
