"""A delta is applied without JIT compilation, whichever path applies it; a recompute keeps the
session's setting. A user trigger on the stream table records `jit` as the apply runs: the setting
PostgreSQL plans the apply's statements under.

Why (postgres/apply.py `NO_JIT`): on a server built with JIT (Debian's PostgreSQL 15 here), compiling
a delta's plans cost 0.6–4.6 s per refresh of a nested join whose statements ran in milliseconds.
"""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from tests.oracle import assert_matches_query

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

SOURCES = """
CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, amount int NOT NULL);
INSERT INTO orders VALUES (1, 'a', 10), (2, 'b', 20);
CREATE TABLE seen (tbl text, step text, jit text);
CREATE FUNCTION note_jit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO seen VALUES (TG_TABLE_NAME, current_setting('dbt_ivm_test.step'), current_setting('jit'));
  RETURN NULL;
END $$;
"""
TOTALS = "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer"


def execute(conn: Any, sql: str) -> None:
    with conn.cursor() as cur:
        cur.execute(sql)


def refresh(conn: Any, name: str, **options: Any) -> RefreshResult:
    spec = StreamTableSpec(model=name, schema="public", name=name, sql=TOTALS, user_triggers="on", **options)
    return run_stream_table(conn, spec)


def test_deltas_are_applied_without_jit_and_recomputes_under_the_session_setting(pg_conn: Any) -> None:
    execute(pg_conn, SOURCES)
    execute(pg_conn, "SET jit = on")  # what the apply must not inherit (a no-op where JIT is absent)
    for name, mode in (("totals", "differential"), ("live", "immediate")):
        refresh(pg_conn, name, refresh_mode=mode)
        execute(
            pg_conn,
            f"CREATE TRIGGER note AFTER INSERT OR UPDATE OR DELETE ON {name} FOR EACH ROW "
            "EXECUTE FUNCTION note_jit()",
        )

    def step(label: str, sql: str) -> None:
        execute(pg_conn, f"SET dbt_ivm_test.step = '{label}'")
        execute(pg_conn, sql)

    step("write", "INSERT INTO orders VALUES (3, 'a', 5)")  # IMMEDIATE: `live` in the writer's statement
    step("dbt run", "SELECT 1")
    assert refresh(pg_conn, "totals", refresh_mode="differential").action == "DIFFERENTIAL"
    step("CALL", "UPDATE orders SET amount = 7 WHERE id = 2")
    execute(pg_conn, "CALL dbt_ivm.refresh('public.totals')")
    step("FULL", "DELETE FROM orders WHERE id = 1")
    assert refresh(pg_conn, "totals", refresh_mode="full").action == "FULL"
    with pg_conn.cursor() as cur:
        cur.execute("SELECT tbl, step, array_agg(DISTINCT jit) FROM seen GROUP BY tbl, step")
        seen = {(table, label): jit for table, label, jit in cur.fetchall()}
    # `live` is maintained in each writer's statement; `totals` by dbt-ivm's run, CALL, then a FULL.
    assert seen == {
        ("live", "write"): ["off"],
        ("live", "CALL"): ["off"],
        ("live", "FULL"): ["off"],
        ("totals", "dbt run"): ["off"],
        ("totals", "CALL"): ["off"],
        ("totals", "FULL"): ["on"],
    }
    for name in ("totals", "live"):
        assert_matches_query(pg_conn, "public", name, TOTALS)
