"""`CALL dbt_ivm.refresh('public.customer_totals')`: a refresh inside PostgreSQL (pg_cron or any
client) from the statements the last dbt run rendered, checked by the oracle after every call."""

from __future__ import annotations

import random
import threading
from typing import Any

import psycopg2
import pytest

from dbt_ivm.postgres import statistics
from dbt_ivm.postgres.in_database import tag_of
from tests.oracle import assert_matches_query
from tests.postgres.streams import (
    CATALOG,
    SCHEMA,
    TWENTY_ORDERS,
    buffer_count,
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

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
DETAILS = (
    "SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON c.name = o.customer WHERE o.amount > 3"
)
BIG_SPENDERS = "SELECT customer, total FROM customer_totals WHERE total > 100"
# Not maintainable (a volatile function): every refresh is FULL.
RANKED = "SELECT customer, amount, random() < 2 AS kept FROM orders"


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE customers (name text PRIMARY KEY, region text);"
        "INSERT INTO customers SELECT 'c' || i, 'r' || (i % 2) FROM generate_series(0, 3) i;" + TWENTY_ORDERS,
    )
    refresh(pg_conn, "customer_totals", TOTALS, refresh_mode="differential")
    refresh(pg_conn, "order_details", DETAILS, refresh_mode="differential")
    refresh(pg_conn, "big_spenders", BIG_SPENDERS, refresh_mode="differential")
    return pg_conn


def call(conn: Any, name: str) -> dict[str, Any]:
    with conn.cursor() as cursor:
        cursor.execute(f"CALL {CATALOG}.refresh(%s)", (name,))
        names = [d[0] for d in cursor.description]
        return dict(zip(names, cursor.fetchone(), strict=True))


def last_history(conn: Any, name: str) -> tuple[Any, ...]:
    return rows(
        conn,
        f"SELECT action, initiated_by, rows_inserted, rows_updated, rows_deleted, changes_read "
        f"FROM {CATALOG}.refresh_history WHERE stream_table = %s ORDER BY refresh_id DESC LIMIT 1",
        (name,),
    )[0]


@pytest.mark.server_version
def test_call_refreshes_differentially_and_in_order(shop: Any) -> None:
    execute(
        shop,
        "INSERT INTO orders VALUES (21, 'c1', 500); UPDATE orders SET amount = 1 WHERE id = 16;"
        "DELETE FROM orders WHERE id = 2; UPDATE customers SET region = 'north' WHERE name = 'c3'",
    )
    done = call(shop, "public.customer_totals")
    assert done["action"] == "DIFFERENTIAL" and done["changes_read"] == 4
    # c1 gains one order, c0 and c2 change their totals; nothing inserted or deleted.
    assert (done["rows_inserted"], done["rows_updated"], done["rows_deleted"]) == (0, 3, 0)
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "after CALL refresh")
    assert last_history(shop, "public.customer_totals") == (
        "DIFFERENTIAL",
        "CALL dbt_ivm.refresh",
        0,
        3,
        0,
        4,
    )
    # A stream table over another one, called after it, sees what that refresh wrote.
    assert call(shop, "public.big_spenders")["action"] == "DIFFERENTIAL"
    assert_matches_query(shop, "public", "big_spenders", BIG_SPENDERS, "after CALL refresh")
    # Two sources changed in one batch: the join.
    assert call(shop, "public.order_details")["action"] == "DIFFERENTIAL"
    assert_matches_query(shop, "public", "order_details", DETAILS, "after CALL refresh")
    # Nothing changed since: SKIP, the frontier moves, the history says so.
    done = call(shop, "public.customer_totals")
    assert (done["action"], done["reason"], done["changes_read"]) == ("SKIP", "no changes", 0)
    # The buffers were trimmed once every consumer had seen their rows.
    assert (buffer_count(shop, "public.orders"), buffer_count(shop, "public.customers")) == (0, 0)
    # dbt-ivm refresh (Python) and CALL refresh share frontier and history: no change is applied twice.
    execute(shop, "INSERT INTO orders VALUES (22, 'c2', 7)")
    refresh(shop, "customer_totals", TOTALS, refresh_mode="differential")
    assert call(shop, "public.customer_totals")["action"] == "SKIP"
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "after dbt-ivm then CALL")


@pytest.mark.server_version
def test_changes_are_analyzed_from_a_sample_and_the_callers_target_kept(shop: Any) -> None:
    # 500 distinct amounts: a histogram of the caller's target would have 58 bounds, the sample's 11.
    execute(
        shop,
        "SET default_statistics_target = 57;"
        "INSERT INTO orders SELECT 100 + i, 'c' || (i % 4), i FROM generate_series(1, 500) i",
    )
    assert call(shop, "public.customer_totals")["action"] == "DIFFERENTIAL"
    assert value(shop, "SHOW default_statistics_target") == "57"
    bounds = value(
        shop,
        "SELECT max(pg_catalog.array_length(histogram_bounds::text::text[], 1)) FROM pg_catalog.pg_stats "
        "WHERE schemaname LIKE 'pg_temp%%' AND tablename LIKE '__ivm_pending_%%' AND attname = 'amount'",
    )
    assert bounds == statistics.SAMPLED_TARGET + 1
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "after 500 inserts")


@pytest.mark.server_version
def test_changes_carry_only_the_columns_the_query_reads(shop: Any) -> None:
    # big_spenders reads customer_totals' customer and total, not its order_count.
    execute(shop, "INSERT INTO orders VALUES (21, 'c1', 500)")
    assert call(shop, "public.customer_totals")["action"] == "DIFFERENTIAL"
    assert call(shop, "public.big_spenders")["action"] == "DIFFERENTIAL"
    carried = rows(
        shop,
        "SELECT a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
        "WHERE c.relnamespace = pg_catalog.pg_my_temp_schema() AND c.relname LIKE %s AND a.attnum > 0 "
        "ORDER BY a.attnum",
        (f"__ivm_pending_{tag_of('public.big_spenders')}_%",),
    )
    assert [name for (name,) in carried] == ["__ivm_weight", "customer", "total"]
    assert_matches_query(shop, "public", "big_spenders", BIG_SPENDERS, "after an insert")


@pytest.mark.server_version
def test_call_recomputes_where_a_refresh_must(shop: Any) -> None:
    # A TRUNCATE cannot list its rows: FULL, and the next call is differential again.
    execute(shop, "TRUNCATE orders; INSERT INTO orders VALUES (1, 'c1', 5), (2, 'c9', 50)")
    done = call(shop, "public.customer_totals")
    assert (done["action"], done["reason"]) == ("FULL", "public.orders was truncated")
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "after a TRUNCATE")
    execute(shop, "INSERT INTO orders VALUES (3, 'c9', 1)")
    assert call(shop, "public.customer_totals")["action"] == "DIFFERENTIAL"
    assert call(shop, "public.order_details")["action"] == "FULL"  # it saw the TRUNCATE too
    assert_matches_query(shop, "public", "order_details", DETAILS, "after a TRUNCATE")
    # A query the engine cannot maintain is recomputed by the call too, saying why.
    refresh(shop, "ranked", RANKED, refresh_mode="auto")
    execute(shop, "INSERT INTO orders VALUES (4, 'c1', 2)")
    done = call(shop, "public.ranked")
    assert done["action"] == "FULL" and "RANDOM()" in done["reason"]
    assert_matches_query(shop, "public", "ranked", RANKED.replace("random() < 2", "true"), "FULL by CALL")


@pytest.mark.server_version
def test_call_refuses_what_it_cannot_follow(shop: Any) -> None:
    # A column added to a source changes what capture records: the call refuses by name until
    # dbt-ivm refresh (or dbt run) plans again; that refresh installs it anew.
    execute(shop, "ALTER TABLE orders ADD COLUMN note text; INSERT INTO orders VALUES (30, 'c1', 3, 'x')")
    with pytest.raises(psycopg2.Error) as raised:
        call(shop, "public.customer_totals")
    assert "public.customer_totals" in str(raised.value) and "orders" in str(raised.value)
    assert "dbt-ivm refresh" in (raised.value.diag.message_hint or "")
    refresh(shop, "customer_totals", TOTALS, refresh_mode="differential")
    execute(shop, "INSERT INTO orders VALUES (31, 'c2', 4, 'y')")
    assert call(shop, "public.customer_totals")["action"] == "DIFFERENTIAL"
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "after the source's new column")
    # Unknown names, and a READ COMMITTED transaction block, are refused with the way out.
    with pytest.raises(psycopg2.Error, match=r"no stream table public\.nope"):
        call(shop, "public.nope")
    execute(shop, "BEGIN")
    with pytest.raises(psycopg2.Error) as raised:
        call(shop, "public.customer_totals")
    assert "REPEATABLE READ" in (raised.value.diag.message_hint or "")
    execute(shop, "ROLLBACK")
    # In a REPEATABLE READ block it refreshes in the caller's transaction (no commit of its own).
    execute(shop, "INSERT INTO orders VALUES (32, 'c3', 9, NULL)")
    execute(shop, "BEGIN ISOLATION LEVEL REPEATABLE READ")
    assert call(shop, "public.customer_totals")["action"] == "DIFFERENTIAL"
    assert rows(shop, "SHOW random_page_cost") == [("4",)]  # the caller's settings are its own
    execute(shop, "COMMIT")
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "in the caller's transaction")


@pytest.mark.server_version
def test_call_as_a_role_that_may_only_read_and_write(shop: Any, pg_dsn: str) -> None:
    """The call runs with the caller's rights: a role without them gets PostgreSQL's refusal."""
    execute(shop, "DROP ROLE IF EXISTS ivm_caller; CREATE ROLE ivm_caller LOGIN")
    execute(shop, f"GRANT USAGE ON SCHEMA {CATALOG} TO ivm_caller")
    stranger = connect(pg_dsn.replace("user=postgres", "user=ivm_caller"))
    try:
        with pytest.raises(psycopg2.Error, match="permission denied"):
            call(stranger, "public.customer_totals")
    finally:
        stranger.close()
        execute(shop, f"REVOKE USAGE ON SCHEMA {CATALOG} FROM ivm_caller; DROP ROLE ivm_caller")


@pytest.mark.server_version
def test_user_triggers_on_the_stream_table_fire_per_row(shop: Any) -> None:
    execute(
        shop,
        "CREATE TABLE audit (customer text, op text);"
        "CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO audit VALUES (COALESCE(NEW.customer, OLD.customer), TG_OP); RETURN NULL; END $$;"
        "CREATE TRIGGER audited AFTER INSERT OR UPDATE OR DELETE ON customer_totals "
        "FOR EACH ROW EXECUTE FUNCTION audit_row();"
        "INSERT INTO orders VALUES (40, 'c7', 1); DELETE FROM orders WHERE customer = 'c3'",
    )
    done = call(shop, "public.customer_totals")
    assert (done["rows_inserted"], done["rows_updated"], done["rows_deleted"]) == (1, 0, 1)
    assert sorted(rows(shop, "SELECT customer, op FROM audit")) == [("c3", "DELETE"), ("c7", "INSERT")]
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "through explicit DML")


@pytest.mark.server_version
def test_concurrent_calls_and_writers_apply_every_change_once(shop: Any, pg_dsn: str) -> None:
    """Writers and three refreshers (two CALLs, one dbt-ivm refresh) at once: each batch is applied
    by exactly one of them; a refresh that loses the race waits, or fails to serialize (retried)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(seed: int) -> None:
        conn, rng = connect(pg_dsn), random.Random(seed)
        try:
            for i in range(60):
                customer = f"c{rng.randrange(6)}"
                execute(
                    conn, f"INSERT INTO orders VALUES ({1000 * seed + i}, '{customer}', {rng.randrange(50)})"
                )
                if i % 7 == 0:
                    execute(conn, f"DELETE FROM orders WHERE id = {1000 * seed + i - 3}")
        except BaseException as error:
            errors.append(error)
        finally:
            conn.close()

    def keep_calling(use_python: bool) -> None:
        conn = connect(pg_dsn)
        try:
            while not stop.is_set():
                try:
                    if use_python:
                        refresh(conn, "customer_totals", TOTALS, refresh_mode="differential")
                    else:
                        call(conn, "public.customer_totals")
                except psycopg2.errors.SerializationFailure:
                    continue
        except BaseException as error:
            errors.append(error)
        finally:
            conn.close()

    writers = [threading.Thread(target=write, args=(seed,)) for seed in (1, 2)]
    refreshers = [threading.Thread(target=keep_calling, args=(p,)) for p in (False, False, True)]
    for thread in writers + refreshers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in refreshers:
        thread.join()
    assert not errors, errors
    call(shop, "public.customer_totals")
    assert_matches_query(shop, "public", "customer_totals", TOTALS, "after concurrent refreshes")


SHAPES = streams(SCHEMA)


@pytest.mark.parametrize("name", shape_parameters(list(SHAPES)))
def test_shape_refreshed_by_call_and_by_dbt_ivm_in_turn(pg_dsn: str, name: str) -> None:
    """The shared query shapes (tests/shapes.py) under random batches, refreshed by CALL and by
    dbt-ivm refresh in turn: every CALL differential (or SKIP), the oracle after each."""
    sql, rng = SHAPES[name], random.Random(f"call:{name}")
    conn = connect(pg_dsn)
    try:
        workload = seeded_shapes(conn, rng)
        refresh(conn, name, sql, refresh_mode="differential")
        for cycle in range(6):
            batch = workload.batch(5)
            for statement in batch:
                execute(conn, statement)
            where = f"{name}, cycle {cycle}: {batch}"
            if cycle % 3 == 2:
                refresh(conn, name, sql, refresh_mode="differential")
            else:
                done = call(conn, f"{SCHEMA}.{name}")
                assert done["action"] in ("DIFFERENTIAL", "SKIP"), f"{where}: {done}"
            assert_matches_query(conn, SCHEMA, name, sql, where)
    finally:
        conn.close()


@pytest.mark.server_version
def test_odd_identifiers(pg_conn: Any) -> None:
    """Names with quotes, spaces, Unicode and reserved words, columns named like the procedure's
    outputs and our own internals (after a column the query does not read: the changes it reads
    leave that one out), a stream table named like the procedure."""
    from dbt_ivm.postgres.runner import run_stream_table
    from dbt_ivm.spec import StreamTableSpec

    execute(
        pg_conn,
        'CREATE SCHEMA "Odd ""schema"" ü"; CREATE TABLE "Odd ""schema"" ü"."select" '
        '(id int PRIMARY KEY, "action" text, "reason" int, "unread" int, "__ivm_weight" int);'
        'INSERT INTO "Odd ""schema"" ü"."select" SELECT i, \'a\' || (i % 3), i, i, i FROM generate_series(1, 9) i',
    )
    sql = (
        'SELECT "action", SUM("reason") AS "rows_inserted", SUM("__ivm_weight") AS "w", COUNT(*) AS n '
        'FROM "Odd ""schema"" ü"."select" GROUP BY "action"'
    )
    spec = StreamTableSpec(
        model="refresh", schema='Odd "schema" ü', name="refresh", sql=sql, refresh_mode="differential"
    )
    assert run_stream_table(pg_conn, spec).action == "CREATE"
    execute(
        pg_conn,
        'UPDATE "Odd ""schema"" ü"."select" SET "action" = \'b\', "__ivm_weight" = 7 WHERE id < 4;'
        'DELETE FROM "Odd ""schema"" ü"."select" WHERE id = 9',
    )
    key = '"Odd ""schema"" ü"."refresh"'
    assert (
        value(pg_conn, f"SELECT count(*) FROM {CATALOG}.stream_tables WHERE stream_table = %s", (key,)) == 1
    )
    assert call(pg_conn, key)["action"] == "DIFFERENTIAL"
    assert_matches_query(pg_conn, 'Odd "schema" ü', "refresh", sql, "odd names, by CALL")


@pytest.mark.server_version
def test_auto_batches_are_the_functions_until_history_says_full(shop: Any) -> None:
    """Under AUTO the function applies any batch while no differential refresh is measured (the
    threshold decides: no reason), then every batch measured history keeps differential, with
    history's numbers as the reason."""
    refresh(shop, "auto_totals", TOTALS)
    reasons = []
    for new_id in (21, 22):
        execute(shop, f"INSERT INTO orders VALUES ({new_id}, 'c1', 5)")
        done = refresh(shop, "auto_totals", TOTALS)
        assert done.action == "DIFFERENTIAL", done.summary()
        reasons.append(done.reason)
        assert_matches_query(shop, "public", "auto_totals", TOTALS, done.summary())
    assert reasons[0] is None and "history: differential" in (reasons[1] or ""), reasons
    assert refresh(shop, "auto_totals", TOTALS).action == "SKIP"


@pytest.mark.server_version
def test_call_refuses_after_a_called_function_is_redefined(shop: Any) -> None:
    """A user function the query calls, replaced or dropped and created again, changes what the
    query means: the call refuses by name, and the next dbt-ivm refresh rebuilds the table."""
    execute(
        shop, "CREATE FUNCTION doubled(x numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT x * 2'"
    )
    sql = "SELECT customer, SUM(doubled(amount)) AS total FROM orders GROUP BY customer"
    refresh(shop, "doubled_totals", sql, refresh_mode="differential")
    execute(shop, "INSERT INTO orders VALUES (40, 'c1', 5)")
    assert call(shop, "public.doubled_totals")["action"] == "DIFFERENTIAL"
    for redefinition in (
        "CREATE OR REPLACE FUNCTION doubled(x numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT x * 3'",
        "DROP FUNCTION doubled(numeric); "
        "CREATE FUNCTION doubled(x numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT x * 4'",
    ):
        execute(shop, redefinition)
        with pytest.raises(
            psycopg2.Error, match="a function the defining query calls was redefined"
        ) as raised:
            call(shop, "public.doubled_totals")
        assert "public.doubled_totals" in str(raised.value)
        result = refresh(shop, "doubled_totals", sql, refresh_mode="differential")
        assert result.action == "REBUILD", result.summary()
        assert_matches_query(shop, "public", "doubled_totals", sql, redefinition)
        execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id = 40")
        assert call(shop, "public.doubled_totals")["action"] == "DIFFERENTIAL"
        assert_matches_query(shop, "public", "doubled_totals", sql, f"a call after: {redefinition}")
