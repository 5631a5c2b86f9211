"""`dbt-ivm refresh`: stream tables refreshed without dbt, from what the last run stored, in
dependency order; target_lag or a cron schedule decides which are due; --watch keeps going; the model's run settings
(notify_channel here) hold as they do under dbt."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from typing import Any

import pytest

from dbt_ivm import cli
from tests.oracle import assert_matches_query
from tests.postgres.streams import CATALOG, TWENTY_ORDERS, connect, execute, refresh, rows

pytestmark = pytest.mark.postgres

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
# A stream table over the one above: refreshed after it in the same pass.
BIG_SPENDERS = "SELECT customer, total FROM customer_totals WHERE total > 100"
RECENT = "SELECT id, amount FROM orders WHERE id > 15"


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        TWENTY_ORDERS,
    )
    refresh(pg_conn, "customer_totals", TOTALS, refresh_mode="differential", notify_channel="totals_changed")
    refresh(pg_conn, "big_spenders", BIG_SPENDERS, refresh_mode="differential")
    refresh(pg_conn, "recent_orders", RECENT, refresh_mode="differential", target_lag_seconds=3600)
    return pg_conn


def check_all(conn: Any) -> None:
    for name, sql in (("customer_totals", TOTALS), ("big_spenders", BIG_SPENDERS), ("recent_orders", RECENT)):
        assert_matches_query(conn, "public", name, sql, "after dbt-ivm refresh")


def test_refresh_in_dependency_order_with_the_models_settings(
    shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    listener = connect(pg_dsn)
    execute(listener, "LISTEN totals_changed")
    execute(shop, "INSERT INTO orders VALUES (21, 'c1', 500); UPDATE orders SET amount = 1 WHERE id = 16")
    assert cli.main(["refresh", "--dsn", pg_dsn, "--json"]) == 0
    done = {o["stream_table"]: o for o in json.loads(capsys.readouterr().out)}
    # big_spenders reads customer_totals: listed (and refreshed) after it, and sees its new rows.
    assert list(done) == ["public.customer_totals", "public.big_spenders", "public.recent_orders"]
    assert done["public.customer_totals"]["action"] == "DIFFERENTIAL"
    assert done["public.big_spenders"]["action"] == "DIFFERENTIAL"
    assert done["public.big_spenders"]["rows_inserted"] + done["public.big_spenders"]["rows_updated"] >= 1
    assert done["public.recent_orders"]["action"] is None  # refreshed at creation, its lag is an hour
    assert_matches_query(shop, "public", "customer_totals", TOTALS)
    assert_matches_query(shop, "public", "big_spenders", BIG_SPENDERS)
    # The model's notify_channel, kept by its last run, holds for a refresh without dbt.
    select.select([listener], [], [], 5)
    listener.poll()
    assert [n.channel for n in listener.notifies] == ["totals_changed"]
    listener.close()

    # Named, a stream table is refreshed whatever its lag; the table shows what each did.
    assert cli.main(["refresh", "--dsn", pg_dsn, "public.recent_orders"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["STREAM", "TABLE", "DID", "ROWS", "REASON"]
    assert "public.recent_orders" in out and "DIFFERENTIAL" in out
    check_all(shop)
    history = rows(
        shop,
        f"SELECT initiated_by FROM {CATALOG}.refresh_history WHERE stream_table = 'public.recent_orders' "
        "ORDER BY refresh_id DESC LIMIT 1",
    )
    assert history == [("dbt-ivm refresh",)]
    # Nothing changed since: NO-OP.
    assert cli.main(["refresh", "--dsn", pg_dsn, "public.customer_totals"]) == 0
    assert "NO-OP" in capsys.readouterr().out


# A pass that finds nothing to do: done by the stream tables' functions in the database.
NO_PLANNER = (
    "import sys; from dbt_ivm import cli; code = cli.main(['refresh', '--dsn', sys.argv[1]]); "
    "print('planner loaded' if 'sqlglot' in sys.modules else 'planner not loaded'); sys.exit(code)"
)


def test_a_pass_with_nothing_to_do_never_loads_the_planner(shop: Any, pg_dsn: str) -> None:
    def cli_pass() -> str:
        done = subprocess.run([sys.executable, "-c", NO_PLANNER, pg_dsn], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    out = cli_pass()
    assert "planner not loaded" in out and out.count("NO-OP") == 2, out  # recent_orders is not due
    history = rows(
        shop,
        f"SELECT stream_table, action, initiated_by FROM {CATALOG}.refresh_history "
        "ORDER BY refresh_id DESC LIMIT 2",
    )
    assert sorted(history) == [
        ("public.big_spenders", "SKIP", "dbt-ivm refresh"),
        ("public.customer_totals", "SKIP", "dbt-ivm refresh"),
    ]
    # A change: the functions apply it differentially too (and the tables over it see the new rows).
    execute(shop, "INSERT INTO orders VALUES (30, 'c1', 400)")
    out = cli_pass()
    assert "planner not loaded" in out and out.count("DIFFERENTIAL") == 2, out
    assert_matches_query(shop, "public", "customer_totals", TOTALS)
    assert_matches_query(shop, "public", "big_spenders", BIG_SPENDERS)
    # A reason for FULL is the engine's (the function would recompute as well, but the engine logs why).
    execute(
        shop, f"UPDATE {CATALOG}.stream_tables SET needs_full = 'by hand' WHERE table_name = 'big_spenders'"
    )
    out = cli_pass()
    assert "planner loaded" in out and "FULL" in out, out
    # A source whose columns changed: its functions no longer fit, so the engine plans again (and
    # installs them anew); the next quiet pass is the database's again.
    execute(shop, "ALTER TABLE orders ADD COLUMN note text")
    assert "planner loaded" in cli_pass()
    assert_matches_query(shop, "public", "customer_totals", TOTALS)
    assert "planner not loaded" in cli_pass()


def test_an_unknown_name_is_refused_by_name(
    shop: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["refresh", "--dsn", pg_dsn, "public.nope"]) == 1
    assert "public.nope" in capsys.readouterr().err


def test_watch_keeps_refreshing_until_stopped(shop: Any, pg_dsn: str) -> None:
    watcher = subprocess.Popen(
        [sys.executable, "-m", "dbt_ivm.cli", "refresh", "--dsn", pg_dsn, "--watch", "0.2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        json.loads(watcher.stdout.readline())  # the first pass
        execute(shop, "INSERT INTO orders VALUES (22, 'c9', 7)")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = rows(shop, "SELECT total FROM customer_totals WHERE customer = 'c9'")
            if found:
                break
            time.sleep(0.2)
        assert found, "the watcher did not pick up the insert"
        assert_matches_query(shop, "public", "customer_totals", TOTALS)
        # recent_orders' target_lag (an hour) has not passed: the watcher leaves it behind.
        assert rows(shop, "SELECT id FROM recent_orders WHERE id = 22") == []
    finally:
        watcher.terminate()
        watcher.wait(10)


def test_a_cron_schedule_decides_when_a_refresh_is_due(
    pg_conn: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    execute(
        pg_conn,
        TWENTY_ORDERS,
    )
    refresh(pg_conn, "daily_totals", TOTALS, refresh_mode="differential", schedule="0 6 * * *")
    execute(pg_conn, "INSERT INTO orders VALUES (21, 'c9', 5)")

    # Refreshed just now: its next 06:00 UTC is ahead, so the pass leaves it, and says when.
    assert cli.main(["refresh", "--dsn", pg_dsn]) == 0
    out = capsys.readouterr().out
    assert "not due" in out and "its schedule (0 6 * * * UTC) next fires at" in out, out
    assert rows(pg_conn, "SELECT customer FROM daily_totals WHERE customer = 'c9'") == []
    assert cli.main(["status", "--dsn", pg_dsn]) == 0
    status = capsys.readouterr().out
    assert "SCHEDULE" in status.splitlines()[0] and "0 6 * * *" in status, status

    # Last refreshed two days ago: a fire time has passed since, so it is due.
    execute(
        pg_conn,
        f"UPDATE {CATALOG}.stream_tables SET refreshed_at = refreshed_at - interval '2 days' "
        "WHERE stream_table = 'public.daily_totals'",
    )
    assert cli.main(["refresh", "--dsn", pg_dsn, "--json"]) == 0
    (done,) = json.loads(capsys.readouterr().out)
    assert done["action"] == "DIFFERENTIAL", done
    assert_matches_query(pg_conn, "public", "daily_totals", TOTALS, "after the scheduled refresh")
    assert cli.main(["refresh", "--dsn", pg_dsn, "--json"]) == 0
    (again,) = json.loads(capsys.readouterr().out)
    assert again["action"] is None  # refreshed now: not due until the next 06:00
