"""Registrations that outlive their table: forgotten, so they no longer pin shared change buffers."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from dbt_ivm import cli
from dbt_ivm.postgres import outside_writes, registrations
from dbt_ivm.postgres.db import Db
from tests.oracle import assert_matches_query
from tests.postgres.streams import (
    CATALOG,
    buffer_count,
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


def registered(conn: Any) -> list[str]:
    return [str(r[0]) for r in rows(conn, f"SELECT stream_table FROM {CATALOG}.stream_tables ORDER BY 1")]


def capture_triggers(conn: Any) -> int:
    return int(
        value(
            conn,
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND tgname LIKE '\\_\\_ivm\\_capture\\_%'",
        )
    )


def test_a_hand_dropped_consumer_no_longer_pins_the_shared_buffer(shop: Any) -> None:
    execute(shop, "DROP TABLE big_orders")
    assert registrations.forget_missing(Db(shop), CATALOG) == ["public.big_orders"]
    assert registered(shop) == ["public.customer_totals"]
    # The survivor still reads the source: its capture stays.
    assert capture_triggers(shop) == 4
    for cycle in range(20):
        execute(
            shop,
            "INSERT INTO orders VALUES (%s, 'c9', %s, NULL); UPDATE orders SET amount = amount + 1 WHERE id = %s",
            (1000 + cycle, cycle, 1 + cycle % 20),
        )
        assert buffer_count(shop, "public.orders") == 3
        result = refresh_and_check(
            shop, "customer_totals", STREAMS["customer_totals"], f"cycle {cycle}", refresh_mode="differential"
        )
        assert result.action == "DIFFERENTIAL"
        assert buffer_count(shop, "public.orders") == 0, f"cycle {cycle}: cleanup is still pinned"
    # Nothing more to forget; the survivor is untouched.
    assert registrations.forget_missing(Db(shop), CATALOG) == []
    assert registered(shop) == ["public.customer_totals"]


def test_forgetting_the_only_consumer_removes_capture_and_buffer(shop: Any) -> None:
    buffer = value(shop, f"SELECT buffer_table FROM {CATALOG}.change_buffers WHERE source = 'public.orders'")
    execute(shop, "DROP TABLE big_orders; DROP TABLE customer_totals")
    assert registrations.forget_missing(Db(shop), CATALOG) == ["public.big_orders", "public.customer_totals"]
    assert registered(shop) == []
    assert capture_triggers(shop) == 0
    assert value(shop, "SELECT to_regclass(%s)", (f'"{CATALOG}"."{buffer}"',)) is None
    assert value(shop, f"SELECT count(*) FROM {CATALOG}.change_buffers") == 0
    # Writes to the source no longer pay for capture, and a new stream table over it starts afresh.
    execute(shop, "INSERT INTO orders VALUES (500, 'c1', 5, NULL)")
    refresh_and_check(shop, "big_orders", STREAMS["big_orders"], refresh_mode="differential")
    execute(shop, "UPDATE orders SET amount = 50 WHERE id = 500")
    result = refresh_and_check(shop, "big_orders", STREAMS["big_orders"], refresh_mode="differential")
    assert result.action == "DIFFERENTIAL"


def test_forget_missing_keeps_tables_with_awkward_names(pg_conn: Any) -> None:
    execute(
        pg_conn,
        'CREATE SCHEMA "Odd schema"; CREATE TABLE orders (id int PRIMARY KEY, amount int);'
        "INSERT INTO orders VALUES (1, 5), (2, 50)",
    )
    from dbt_ivm.postgres.runner import run_stream_table
    from dbt_ivm.spec import StreamTableSpec

    spec = StreamTableSpec(
        model="odd",
        schema="Odd schema",
        name='Big "orders"',
        sql="SELECT id, amount FROM public.orders WHERE amount > 10",
        refresh_mode="differential",
    )
    run_stream_table(pg_conn, spec)
    assert registrations.forget_missing(Db(pg_conn), CATALOG) == []
    assert registered(pg_conn) == ['"Odd schema"."Big ""orders"""']
    execute(pg_conn, 'DROP TABLE "Odd schema"."Big ""orders"""')
    assert registrations.forget_missing(Db(pg_conn), CATALOG) == ['"Odd schema"."Big ""orders"""']


def test_forget_missing_runs_concurrently(shop: Any, pg_dsn: str) -> None:
    execute(shop, "DROP TABLE big_orders")
    results: list[list[str]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        conn = connect(pg_dsn)
        try:
            barrier.wait()
            results.append(registrations.forget_missing(Db(conn), CATALOG))
        except BaseException as error:
            errors.append(error)
        finally:
            conn.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Exactly one session reports it; the others find it already gone.
    assert sorted(results, key=len) == [[], [], [], ["public.big_orders"]]
    assert registered(shop) == ["public.customer_totals"]


def test_a_refresh_in_progress_is_left_alone(shop: Any, pg_dsn: str) -> None:
    """A stream table whose table is missing while its refresh holds the lock is not forgotten."""
    execute(shop, "DROP TABLE big_orders")
    other = connect(pg_dsn)
    try:
        execute(
            other,
            "SELECT pg_advisory_lock(hashtext(%s))",
            (registrations.refresh_lock_key("public.big_orders"),),
        )
        assert registrations.forget_missing(Db(shop), CATALOG) == []
        assert "public.big_orders" in registered(shop)
        # Unlock explicitly: a closed connection's backend releases its locks
        # only when it exits, after close() has already returned.
        execute(
            other,
            "SELECT pg_advisory_unlock(hashtext(%s))",
            (registrations.refresh_lock_key("public.big_orders"),),
        )
    finally:
        other.close()
    assert registrations.forget_missing(Db(shop), CATALOG) == ["public.big_orders"]


def test_without_a_catalog_there_is_nothing_to_do(pg_conn: Any) -> None:
    db = Db(pg_conn)
    assert registrations.forget_missing(db, CATALOG) == []
    assert registrations.list_registrations(db, CATALOG) == []
    assert registrations.drop_registration(db, CATALOG, "public.nothing", drop_table=True) is False


def test_list_registrations_counts_pending_changes(shop: Any) -> None:
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id < 4")  # 6 buffer rows
    refresh(shop, "customer_totals", STREAMS["customer_totals"], refresh_mode="differential")
    found = {r.stream_table: r for r in registrations.list_registrations(Db(shop), CATALOG)}
    assert set(found) == {"public.big_orders", "public.customer_totals"}
    assert found["public.big_orders"].pending == {"public.orders": 6}
    assert found["public.customer_totals"].pending == {"public.orders": 0}
    assert all(r.exists and r.refresh_mode == "differential" for r in found.values())
    assert all(r.refreshed_at is not None for r in found.values())
    execute(shop, "DROP TABLE big_orders")
    found = {r.stream_table: r for r in registrations.list_registrations(Db(shop), CATALOG)}
    assert not found["public.big_orders"].exists


def test_cli_list(shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    execute(shop, "INSERT INTO orders VALUES (100, 'c1', 50, NULL), (101, 'c2', 60, NULL)")
    refresh(shop, "customer_totals", STREAMS["customer_totals"], refresh_mode="differential")
    assert cli.main(["list", "--dsn", pg_dsn]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "STREAM",
        "TABLE",
        "EXISTS",
        "MODE",
        "SOURCES",
        "PENDING",
        "CHANGES",
        "LAST",
        "REFRESH",
        "STALE",
        "FOR",
        "SCHEDULE",
        "NEXT",
        "REFRESH",
    ]
    lines = {line.split()[0]: line.split() for line in out[1:]}
    assert lines["public.big_orders"][1:5] == ["yes", "differential", "public.orders", "2"]
    assert lines["public.customer_totals"][1:5] == ["yes", "differential", "public.orders", "0"]
    # Aligned: every column starts at the same offset on each line.
    assert len({line.index("differential") for line in out[1:]}) == 1

    assert cli.main(["list", "--dsn", pg_dsn, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["stream_table"] for r in listed] == ["public.big_orders", "public.customer_totals"]
    assert listed[0]["pending"] == {"public.orders": 2}
    assert listed[0]["exists"] is True and listed[0]["sources"] == ["public.orders"]
    assert (listed[1]["last_action"], listed[1]["last_status"]) == ("DIFFERENTIAL", "OK")
    assert 0 <= listed[1]["staleness_seconds"] < 600 and listed[1]["target_lag_seconds"] is None
    # `status` is the same command.
    assert cli.main(["status", "--dsn", pg_dsn]) == 0
    status = capsys.readouterr().out.splitlines()
    assert [line.split()[:7] for line in status] == [line.split()[:7] for line in out]
    assert "DIFFERENTIAL OK" in status[2]


def test_status_says_why_the_next_refresh_recomputes(
    shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def next_refresh() -> dict[str, tuple[str | None, str | None]]:
        found = registrations.list_registrations(Db(shop), CATALOG)
        return {r.stream_table: (r.next_action, r.next_reason) for r in found}

    assert set(next_refresh().values()) == {(None, None)}
    execute(shop, "TRUNCATE orders; INSERT INTO orders VALUES (1, 'c1', 5, NULL)")
    truncated = ("FULL", "public.orders was truncated")
    assert next_refresh() == {"public.big_orders": truncated, "public.customer_totals": truncated}
    # The refresh does what status said, and says it in the same words.
    result = refresh_and_check(
        shop, "customer_totals", STREAMS["customer_totals"], refresh_mode="differential"
    )
    assert (result.action, result.reason) == truncated
    assert next_refresh()["public.customer_totals"] == (None, None)

    execute(shop, "UPDATE customer_totals SET total = 0 WHERE customer = 'c1'")  # by hand
    action, why = next_refresh()["public.customer_totals"]
    assert action == "FULL" and why is not None and "written outside dbt-ivm" in why
    result = refresh_and_check(
        shop, "customer_totals", STREAMS["customer_totals"], refresh_mode="differential"
    )
    assert (result.action, result.reason) == (action, why)
    execute(shop, "ALTER TABLE customer_totals DISABLE TRIGGER __ivm_guard")
    assert next_refresh()["public.customer_totals"] == ("FULL", outside_writes.UNGUARDED)

    assert cli.main(["status", "--dsn", pg_dsn]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:3]}
    assert lines["public.customer_totals"].rstrip().endswith("FULL (see below)")
    assert out.split("recomputed at the next refresh:\n")[1].splitlines() == [
        f"  public.big_orders: FULL, {truncated[1]}",
        f"  public.customer_totals: FULL, {outside_writes.UNGUARDED}",
    ]
    assert cli.main(["status", "--dsn", pg_dsn, "--json"]) == 0
    listed = {r["stream_table"]: r for r in json.loads(capsys.readouterr().out)}
    assert (
        listed["public.big_orders"]["next_action"],
        listed["public.big_orders"]["next_reason"],
    ) == truncated


def test_status_says_an_immediate_table_written_by_hand_is_rebuilt(shop: Any) -> None:
    sql = "SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer"
    refresh_and_check(shop, "counts_now", sql, refresh_mode="immediate")
    execute(shop, "INSERT INTO orders VALUES (100, 'c9', 1, NULL)")  # maintained by the writer
    execute(shop, "DELETE FROM counts_now WHERE customer = 'c0'")  # by hand
    (found,) = [
        r
        for r in registrations.list_registrations(Db(shop), CATALOG)
        if r.stream_table == "public.counts_now"
    ]
    assert found.next_action == "REBUILD" and found.next_reason and "outside dbt-ivm" in found.next_reason
    result = refresh_and_check(shop, "counts_now", sql, refresh_mode="immediate")
    assert (result.action, result.reason) == (found.next_action, found.next_reason)
    # A TRUNCATE of its source, which the differential stream tables over it see in the shared
    # buffer, is followed by IMMEDIATE maintenance itself: nothing to rebuild.
    execute(shop, "TRUNCATE orders")
    found = {r.stream_table: r for r in registrations.list_registrations(Db(shop), CATALOG)}
    assert found["public.big_orders"].next_reason == "public.orders was truncated"
    assert (found["public.counts_now"].next_action, found["public.counts_now"].next_reason) == (None, None)
    # Its writers applied every change: none waits for it (the shared buffer holds those of the others).
    execute(shop, "INSERT INTO orders VALUES (101, 'c1', 11, NULL)")
    found = {r.stream_table: r for r in registrations.list_registrations(Db(shop), CATALOG)}
    assert found["public.counts_now"].pending == {"public.orders": 0}
    assert found["public.big_orders"].pending["public.orders"]
    assert refresh_and_check(shop, "counts_now", sql, refresh_mode="immediate").action == "SKIP"


def test_cli_history(shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    execute(shop, "INSERT INTO orders VALUES (100, 'c1', 50, NULL)")
    refresh(shop, "customer_totals", STREAMS["customer_totals"], refresh_mode="differential")
    assert cli.main(["history", "--dsn", pg_dsn, "public.customer_totals", "--limit", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["REFRESH", "ID", "STREAM", "TABLE"]
    assert [line.split()[2] for line in out[1:]] == ["DIFFERENTIAL", "CREATE"]  # newest first
    assert out[1].split()[4:6] == ["+0", "~1"]
    assert cli.main(["history", "--dsn", pg_dsn, "--json", "--limit", "1"]) == 0
    newest = json.loads(capsys.readouterr().out)
    assert len(newest) == 1 and newest[0]["stream_table"] == "public.customer_totals"
    assert newest[0]["changes_read"] == 1 and newest[0]["status"] == "OK"


def test_cli_list_flags_missing_tables_and_takes_the_dsn_from_the_environment(
    shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    execute(shop, "DROP TABLE big_orders")
    monkeypatch.setenv("DBT_IVM_PG_DSN", pg_dsn)
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    big = next(line for line in out.splitlines() if line.startswith("public.big_orders"))
    assert big.split()[1] == "NO"
    assert "dbt-ivm gc" in out


def test_cli_connects_through_the_dbt_profile(
    shop: Any, pg_dsn: str, tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """#62 item 1: in a dbt project, `dbt-ivm` finds the connection as dbt does (dbt_project.yml's
    profile, profiles.yml, the target, env_var()); a target it cannot use is one line naming it."""
    from psycopg2.extensions import parse_dsn

    given = parse_dsn(pg_dsn)
    (tmp_path / "dbt_project.yml").write_text("name: shop\nprofile: shop\n")
    output = {k: given[k] for k in ("host", "user", "dbname")}
    profile = {
        "shop": {
            "target": "dev",
            "outputs": {
                "dev": {
                    "type": "ivm_postgres",
                    **output,
                    "port": "{{ env_var('SHOP_PG_PORT') }}",
                    "schema": "x",
                },
                "down": {"type": "ivm_postgres", **output, "port": 1, "schema": "x"},
            },
        }
    }
    (tmp_path / "profiles.yml").write_text(json.dumps(profile))  # JSON is YAML
    monkeypatch.delenv("DBT_IVM_PG_DSN", raising=False)
    monkeypatch.setenv("SHOP_PG_PORT", given["port"])

    assert cli.main(["status", "--project-dir", str(tmp_path)]) == 0
    assert "public.customer_totals" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)  # the current directory's project, as dbt
    assert cli.main(["status", "--json"]) == 0
    assert {r["stream_table"] for r in json.loads(capsys.readouterr().out)} == {
        f"public.{n}" for n in STREAMS
    }

    assert cli.main(["status", "--target", "down"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot connect to PostgreSQL" in err, err
    assert f"(profile 'shop', target 'down' in {tmp_path / 'profiles.yml'})" in err, err
    monkeypatch.setenv("DBT_TARGET", "staging")
    assert cli.main(["status"]) == 1
    assert "has no target 'staging' (it has: dev, down)" in capsys.readouterr().err
    monkeypatch.delenv("DBT_TARGET")
    monkeypatch.delenv("SHOP_PG_PORT")
    assert cli.main(["status"]) == 1
    assert "reads the environment variable SHOP_PG_PORT, which is not set" in capsys.readouterr().err
    assert cli.main(["status", "--project-dir", str(tmp_path / "elsewhere")]) == 1
    assert "no dbt_project.yml in" in capsys.readouterr().err


def test_cli_list_without_a_catalog(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list", "--dsn", pg_dsn, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli.main(["list", "--dsn", pg_dsn, "--catalog-schema", "elsewhere"]) == 0
    assert "no stream tables" in capsys.readouterr().out


def test_cli_drop(shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drop", "public.big_orders", "--dsn", pg_dsn]) == 0
    assert "public.big_orders" in capsys.readouterr().out
    assert registered(shop) == ["public.customer_totals"]
    assert value(shop, "SELECT to_regclass('public.big_orders')") is None
    assert capture_triggers(shop) == 4  # customer_totals still reads orders

    assert cli.main(["drop", "public.customer_totals", "--keep-table", "--dsn", pg_dsn]) == 0
    capsys.readouterr()
    assert registered(shop) == []
    assert value(shop, "SELECT count(*) FROM customer_totals") == 4  # kept, now a plain table
    assert capture_triggers(shop) == 0  # nobody reads orders any more
    assert value(shop, f"SELECT count(*) FROM {CATALOG}.change_buffers") == 0


def test_a_project_is_recorded_and_an_unregistered_table_kept_plain(shop: Any) -> None:
    """#58 item 5: a dbt run records its project with the registration, and unregistering a stream
    table whose model is gone (`dbt run` does it for its own project's) keeps a plain table: no
    capture on its sources, no guard noting writes to it, nothing kept for it in the catalog."""
    for name, sql in STREAMS.items():
        refresh(shop, name, sql, refresh_mode="differential", initiated_by="dbt", dbt_project="shop")
    found = registrations.registered_relations(Db(shop), CATALOG)
    assert {(r.key, r.project) for r in found} == {(f"public.{n}", "shop") for n in STREAMS}
    guard = f"SELECT count(*) FROM pg_trigger WHERE tgname = '{outside_writes.TRIGGER}'"
    assert value(shop, guard) == 2
    execute(shop, "UPDATE big_orders SET amount = amount + 1 WHERE id = 11")  # noted, then forgotten
    for name in STREAMS:
        assert registrations.drop_registration(Db(shop), CATALOG, f"public.{name}", drop_table=False)
    assert registered(shop) == [] and capture_triggers(shop) == 0 and value(shop, guard) == 0
    assert value(shop, f"SELECT count(*) FROM {CATALOG}.change_buffers") == 0
    assert value(shop, f"SELECT count(*) FROM {CATALOG}.{outside_writes.TABLE}") == 0
    execute(shop, "DELETE FROM big_orders; INSERT INTO orders VALUES (99, 'c1', 5, NULL)")
    assert value(shop, "SELECT count(*) FROM customer_totals") == 4  # a plain table, as it was left
    assert value(shop, f"SELECT count(*) FROM {CATALOG}.{outside_writes.TABLE}") == 0


def test_cli_drop_unknown(shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drop", "public.no_such_table", "--dsn", pg_dsn]) == 1
    err = capsys.readouterr().err
    assert "no stream table 'public.no_such_table' is registered" in err
    assert cli.main(["drop", "big_orders", "--dsn", pg_dsn]) == 1
    assert "schema.table" in capsys.readouterr().err
    assert registered(shop) == ["public.big_orders", "public.customer_totals"]


def test_cli_gc(shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    execute(shop, "DROP TABLE big_orders")
    assert cli.main(["gc", "--dsn", pg_dsn]) == 0
    assert "public.big_orders" in capsys.readouterr().out
    assert registered(shop) == ["public.customer_totals"]
    assert cli.main(["gc", "--dsn", pg_dsn]) == 0
    assert "nothing to unregister" in capsys.readouterr().out


def test_cli_reports_a_connection_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["gc", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2"]) == 1
    assert "cannot connect to PostgreSQL" in capsys.readouterr().err


def test_a_catalog_from_an_earlier_version_gains_the_invocation_column(shop: Any) -> None:
    """A catalog from before invocation_id, run_settings and refresh procedures: the next run adds
    them, and fills them."""
    execute(
        shop, f"ALTER TABLE {CATALOG}.refresh_history DROP COLUMN invocation_id, DROP COLUMN contents_seconds"
    )
    execute(shop, f"ALTER TABLE {CATALOG}.stream_tables DROP COLUMN run_settings")
    execute(shop, f"DROP TABLE {CATALOG}.refresh_procedures, {CATALOG}.outside_writes")
    execute(shop, "INSERT INTO orders VALUES (21, 'c1', 5, DATE '2024-02-01')")
    refresh(
        shop,
        "customer_totals",
        STREAMS["customer_totals"],
        refresh_mode="differential",
        invocation_id="run-7",
    )
    latest = rows(
        shop,
        f"SELECT action, invocation_id FROM {CATALOG}.refresh_history "
        "WHERE stream_table LIKE '%customer_totals' ORDER BY refresh_id DESC LIMIT 2",
    )
    assert [tuple(r) for r in latest] == [("DIFFERENTIAL", "run-7"), ("CREATE", None)]
    # The refresh installed what CALL refresh runs, which the earlier catalog lacked.
    execute(shop, "INSERT INTO orders VALUES (22, 'c2', 6, DATE '2024-02-02')")
    with shop.cursor() as cursor:
        cursor.execute(f"CALL {CATALOG}.refresh('public.customer_totals')")
        assert cursor.fetchone()[0] == "DIFFERENTIAL"
    assert_matches_query(shop, "public", "customer_totals", STREAMS["customer_totals"])


def test_cli_with_odd_identifiers(pg_conn: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """status, refresh, history and drop name a stream table as `dbt-ivm status` shows it, quotes and
    all; a name like the engine's own internals is just a name."""
    from dbt_ivm.postgres.runner import run_stream_table
    from dbt_ivm.spec import StreamTableSpec

    execute(
        pg_conn,
        'CREATE SCHEMA "Odd schema"; CREATE TABLE "Odd schema"."__ivm_weight" (id int PRIMARY KEY, "select" int);'
        'INSERT INTO "Odd schema"."__ivm_weight" VALUES (1, 5), (2, 50)',
    )
    name = '"Odd schema"."Big ""orders"" ü"'
    spec = StreamTableSpec(
        model="odd",
        schema="Odd schema",
        name='Big "orders" ü',
        sql='SELECT id, "select" FROM "Odd schema"."__ivm_weight" WHERE "select" > 10',
        refresh_mode="differential",
    )
    run_stream_table(pg_conn, spec)
    execute(pg_conn, 'INSERT INTO "Odd schema"."__ivm_weight" VALUES (3, 70)')
    assert cli.main(["status", "--dsn", pg_dsn, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["stream_table"] == name and listed["pending"] == {"Odd schema.__ivm_weight": 1}
    assert cli.main(["refresh", name, "--dsn", pg_dsn, "--json"]) == 0
    (outcome,) = json.loads(capsys.readouterr().out)
    assert (outcome["stream_table"], outcome["action"], outcome["rows_inserted"]) == (name, "DIFFERENTIAL", 1)
    assert value(pg_conn, 'SELECT count(*) FROM "Odd schema"."Big ""orders"" ü"') == 2
    assert cli.main(["history", name, "--dsn", pg_dsn, "--json"]) == 0
    assert [h["action"] for h in json.loads(capsys.readouterr().out)] == ["DIFFERENTIAL", "CREATE"]
    assert cli.main(["drop", name, "--dsn", pg_dsn]) == 0
    capsys.readouterr()
    assert registered(pg_conn) == []
    assert value(pg_conn, 'SELECT to_regclass(\'"Odd schema"."Big ""orders"" ü"\')') is None


def test_cli_as_a_role_without_catalog_privileges(
    shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A role that may not read dbt-ivm's catalog gets PostgreSQL's reason, not a traceback."""
    role = f"cli_reader_{value(shop, 'SELECT current_database()')}"
    execute(shop, f'CREATE ROLE "{role}" LOGIN')
    try:
        dsn = f"{pg_dsn} user={role}"
        for command in (["status"], ["history"], ["refresh"], ["gc"]):
            assert cli.main([*command, "--dsn", dsn]) == 1, command
            err = capsys.readouterr().err
            assert err.startswith("dbt-ivm: ") and "permission denied" in err, (command, err)
    finally:
        execute(shop, f'DROP OWNED BY "{role}" CASCADE; DROP ROLE "{role}"')
