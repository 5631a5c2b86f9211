"""AUTO chooses by cost (dbt_ivm.cost): a batch under the changes threshold is still recomputed when
its delta is clearly dearer than a FULL refresh, and every choice says why, in the refresh's reason and
its history row. refresh_mode='differential' never weighs (nor switches)."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.cost import PastRefresh
from dbt_ivm.postgres import in_database
from dbt_ivm.postgres.db import Db
from tests.postgres.streams import (
    CATALOG,
    execute,
    history,
    recording_connection,
    refresh_and_check,
)

pytestmark = pytest.mark.postgres

ROWS = 100_000
# An aggregate over a recomputed aggregate: a batch touching each of the three groups makes the delta
# recompute every group twice (over its rows now and before the batch), i.e. the whole table twice
# plus the bookkeeping, where FULL reads it once.
GROUP_TOPS = "SELECT COUNT(*) AS groups, SUM(top) AS total FROM (SELECT k, MAX(v) AS top FROM t GROUP BY k) g"
TOTALS = "SELECT k, SUM(v) AS total, COUNT(*) AS n FROM t GROUP BY k"


@pytest.fixture
def table(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE t (id int PRIMARY KEY, k int NOT NULL, v int NOT NULL);"
        f"INSERT INTO t SELECT i, i % 3, (i * 7919) % 100003 FROM generate_series(1, {ROWS}) i;"
        "ANALYZE t",
    )
    return pg_conn


def _add_user_trigger(conn: Any, stream_table: str) -> None:
    """A user trigger on the stream table: its refresh function leaves each batch to the engine."""
    execute(
        conn,
        "CREATE OR REPLACE FUNCTION noted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;"
        f"CREATE TRIGGER noted AFTER UPDATE ON {stream_table} FOR EACH ROW EXECUTE FUNCTION noted()",
    )


def _delta_work(statements: list[str]) -> list[str]:
    """The statements that build a delta (its change sets and pinned subqueries) or price it."""
    building = ('CREATE TEMP TABLE "__ivm_delta_', 'CREATE TEMP TABLE "__ivm_pin_', "EXPLAIN")
    return [s for s in statements if s.startswith(building)]


def test_a_small_batch_with_a_dear_delta_is_recomputed(table: Any, pg_dsn: str) -> None:
    """Where the engine builds a batch's delta anyway (here: a user trigger on the stream table, which
    its refresh function leaves to the engine), the planner prices the first batch."""
    refresh_and_check(table, "tops", GROUP_TOPS)
    _add_user_trigger(table, "tops")
    # As if a FULL refresh had taken 0.5 s: FULL's seconds per planner unit (the create's contents
    # took ~20 ms here, so the delta's extra units would come to a saving under MIN_SAVING_SECONDS).
    execute(
        table,
        f"INSERT INTO {CATALOG}.refresh_history (stream_table, action, changes_read, duration_seconds, status) "
        "VALUES ('public.tops', 'FULL', 0, 0.5, 'OK')",
    )
    execute(table, "UPDATE t SET v = v + 1 WHERE id <= 6")  # 12 changes: far under the threshold
    result = refresh_and_check(table, "tops", GROUP_TOPS, "one row of each group")
    assert result.action == "FULL", result.summary()
    assert result.reason is not None and result.reason.startswith("differential estimated"), result.reason
    assert "planner:" in result.reason and "FULL" in result.reason
    row = history(table, "tops")[-1]
    assert (row["action"], row["reason"], row["changes_read"]) == ("FULL", result.reason, 12)
    assert row["estimated_differential_seconds"] == result.estimated_differential_seconds > 0
    # The planner's estimate is a prior: it chose that FULL only. The next batch is refreshed
    # differentially to measure it, without pricing its delta first.
    execute(table, "UPDATE t SET v = v - 1 WHERE id <= 6")
    with recording_connection(pg_dsn) as conn:
        measured = refresh_and_check(conn, "tops", GROUP_TOPS, "the same batch again")
        assert measured.action == "DIFFERENTIAL", measured.summary()
        assert (measured.reason or "").startswith("measuring a differential refresh: the planner's ~")
        assert not [s for s in conn.statements if s.startswith("EXPLAIN")]
    # From then on measured seconds decide, before any delta is built when they say FULL.
    execute(table, "UPDATE t SET v = v + 1 WHERE id <= 6")
    with recording_connection(pg_dsn) as conn:
        decided = refresh_and_check(conn, "tops", GROUP_TOPS, "a third batch")
        assert decided.reason is not None and "history: differential ~" in decided.reason, decided.reason
        assert "planner" not in decided.reason
        if decided.action == "FULL":
            assert not _delta_work(conn.statements)


def test_a_small_batch_stays_differential_with_its_numbers(table: Any, pg_dsn: str) -> None:
    """The first batch under the threshold is measured, not priced: the refresh function applies it
    without planning (a planner's estimate was off 60-fold on a tiny delta, issue 60); from then on
    the measured history decides, and says so."""
    refresh_and_check(table, "totals", TOTALS)
    execute(table, "UPDATE t SET v = v + 1 WHERE id <= 6")
    with recording_connection(pg_dsn) as conn:
        first = refresh_and_check(conn, "totals", TOTALS, "measured")
        assert (first.action, first.reason) == ("DIFFERENTIAL", None), first.summary()
        assert not _delta_work(conn.statements), conn.statements
    execute(table, "UPDATE t SET v = v + 1 WHERE id > 99990")
    second = refresh_and_check(table, "totals", TOTALS, "history")
    assert second.action == "DIFFERENTIAL", second.summary()
    assert second.reason is not None and "history: differential" in second.reason, second.reason
    rows = history(table, "totals")
    assert [(r["action"], r["reason"]) for r in rows[1:]] == [
        ("DIFFERENTIAL", first.reason),
        ("DIFFERENTIAL", second.reason),
    ]
    assert f"({second.reason})" in second.summary()


def test_a_batch_history_keeps_differential_runs_the_installed_refresh(table: Any, pg_dsn: str) -> None:
    """Once measured history keeps batches of this size differential, AUTO applies one with the
    statements planned at install (the stream table's refresh function), as refresh_mode='differential'
    does: no planning, no delta built in Python; its history row still gives AUTO's numbers."""
    refresh_and_check(table, "totals", TOTALS)
    execute(table, "UPDATE t SET v = v + 1 WHERE id <= 6")
    refresh_and_check(table, "totals", TOTALS, "the first batch, measured")
    execute(table, "UPDATE t SET v = v + 1 WHERE id > 99990")
    with recording_connection(pg_dsn) as conn:
        result = refresh_and_check(conn, "totals", TOTALS, "history decides")
        assert result.action == "DIFFERENTIAL", result.summary()
        assert result.reason is not None and "history: differential" in result.reason, result.reason
        assert [s for s in conn.statements if '"refresh_' in s and "SELECT * FROM" in s], conn.statements
        assert not _delta_work(conn.statements)
    row = history(table, "totals")[-1]
    assert (row["action"], row["reason"], row["changes_read"]) == ("DIFFERENTIAL", result.reason, 20)


def test_a_create_stands_for_full_by_the_seconds_its_contents_took(table: Any) -> None:
    """A CREATE plans the query and installs capture and refresh functions besides computing the
    contents; only the contents stand for what a FULL refresh costs."""
    refresh_and_check(table, "totals", TOTALS)
    (created,) = history(table, "totals")
    assert created["action"] == "CREATE" and 0 < created["contents_seconds"] < created["duration_seconds"]
    past = in_database.recent_refreshes(Db(table), CATALOG, "public.totals")
    assert past == [PastRefresh("CREATE", created["contents_seconds"], 0)]


def test_a_top_by_hidden_columns_is_weighed_by_cost(table: Any) -> None:
    """Its differential refresh reads its input's top again, which costs less than recomputing (3×
    at 1M rows, benchmarks/bench_whole_input.py): AUTO weighs it as any other query (it used to
    refresh it FULL always, as it still does a window without PARTITION BY)."""
    sql = "SELECT id, v FROM t ORDER BY k DESC, id DESC LIMIT 5"
    refresh_and_check(table, "whole", sql)
    execute(table, "UPDATE t SET v = v + 1 WHERE id > 99990; DELETE FROM t WHERE id = 99999")
    result = refresh_and_check(table, "whole", sql, "a small batch")
    assert result.action == "DIFFERENTIAL", result.summary()


def test_measured_history_decides_before_the_delta_is_built(table: Any, pg_dsn: str) -> None:
    refresh_and_check(table, "totals", TOTALS)
    execute(table, "UPDATE t SET v = v + 1 WHERE id <= 6")
    # As if the last differential refresh of 12 changes had taken a minute.
    execute(
        table,
        f"INSERT INTO {CATALOG}.refresh_history (stream_table, action, changes_read, duration_seconds, status) "
        "VALUES ('public.totals', 'DIFFERENTIAL', 12, 60, 'OK')",
    )
    with recording_connection(pg_dsn) as conn:
        result = refresh_and_check(conn, "totals", TOTALS, "after a slow differential refresh")
        assert result.action == "FULL", result.summary()
        assert result.reason is not None and "history: differential ~60.00 s for 12 changes" in result.reason
        assert not _delta_work(conn.statements)
    assert history(table, "totals")[-1]["reason"] == result.reason


def test_differential_mode_never_weighs(table: Any, pg_dsn: str) -> None:
    refresh_and_check(table, "tops", GROUP_TOPS, refresh_mode="differential")
    execute(table, "UPDATE t SET v = v + 1 WHERE id <= 6")
    with recording_connection(pg_dsn) as conn:
        result = refresh_and_check(
            conn, "tops", GROUP_TOPS, "one row of each group", refresh_mode="differential"
        )
        assert (result.action, result.reason) == ("DIFFERENTIAL", None)
        assert not [s for s in conn.statements if s.startswith("EXPLAIN") or "ORDER BY refresh_id DESC" in s]


def test_a_slow_create_of_a_small_table_is_no_reason_to_recompute(pg_conn: Any) -> None:
    """A few rows' FULL costs the planner a few units; the seconds a CREATE took on a busy machine
    are fixed cost both paths pay, not work per unit, so a delta of a few more units saves nothing.
    (The planner prices a first batch where the engine builds its delta: a user trigger here.)"""
    execute(pg_conn, "CREATE TABLE t (id int PRIMARY KEY, k int NOT NULL, v int NOT NULL)")
    execute(pg_conn, "INSERT INTO t SELECT i, i % 3, i FROM generate_series(1, 100) i; ANALYZE t")
    refresh_and_check(pg_conn, "totals", TOTALS)
    _add_user_trigger(pg_conn, "totals")
    execute(pg_conn, f"UPDATE {CATALOG}.refresh_history SET duration_seconds = 5 WHERE action = 'CREATE'")
    execute(pg_conn, "UPDATE t SET v = v + 1 WHERE id <= 5")
    result = refresh_and_check(pg_conn, "totals", TOTALS, "after a 5 s CREATE")
    assert result.action == "DIFFERENTIAL", result.summary()
    assert result.reason is not None and "a unit at most 100 us" in result.reason, result.reason
