"""Planning stays bounded for any query (`delta.budget`): a join of many inputs that all change is an
inclusion–exclusion sum of up to 2ᵏ − 1 terms where an input cannot be read as it was. A star of nine
dimensions read twice through one CTE made an 11 MB refresh function in 143 s; nineteen inputs never
finished. Past the budget nothing that large is built: the stream table is created at once, a batch
on a few sources is still differential, a batch on every source is recomputed saying why, and CALL
refresh (which cannot plan) recomputes."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dbt_ivm.delta import budget
from dbt_ivm.errors import UnsupportedQuery
from tests.postgres.streams import CATALOG, execute, history, refresh_and_check, value

pytestmark = pytest.mark.postgres

DIMENSIONS = 9


def _star(conn: Any) -> str:
    """A fact table with nine dimensions, joined through one CTE read twice (TPC-DS Q64's form)."""
    dims = range(DIMENSIONS)
    execute(
        conn,
        "CREATE TABLE fact (id int PRIMARY KEY, "
        + ", ".join(f"d{i} int" for i in dims)
        + ", v int);"
        + "".join(
            f"CREATE TABLE dim{i} (k int PRIMARY KEY, name text);"
            f"INSERT INTO dim{i} SELECT g, 'n' || g FROM generate_series(1, 10) g;"
            for i in dims
        )
        + "INSERT INTO fact SELECT g, "
        + ", ".join("1 + g % 10" for _ in dims)
        + ", g FROM generate_series(1, 200) g",
    )
    joins = " ".join(f"JOIN dim{i} ON dim{i}.k = fact.d{i}" for i in dims)
    names = ", ".join(f"dim{i}.name AS n{i}" for i in dims)
    return (
        f"WITH cs AS (SELECT fact.id, fact.v, {names} FROM fact {joins}) "
        "SELECT c1.id, c1.v + c2.v AS v2, c1.n0, c2.n8 FROM cs c1 JOIN cs c2 ON c1.id = c2.id + 1"
    )


def test_a_star_joined_twice_is_created_at_once_and_refreshed(pg_conn: Any) -> None:
    sql = _star(pg_conn)
    started = time.monotonic()
    created = refresh_and_check(pg_conn, "pairs", sql)
    assert created.action == "CREATE", created.summary()
    assert time.monotonic() - started < 30, "minutes before the budget"
    size = value(
        pg_conn,
        f"SELECT length(p.prosrc) FROM pg_proc p JOIN {CATALOG}.refresh_procedures r "
        "ON p.proname = 'refresh_' || r.tag WHERE r.stream_table = 'public.pairs'",
    )
    assert size < 100_000, size  # 11 MB before the budget
    # A batch on two of the ten sources: the engine builds its delta, differential.
    execute(pg_conn, "UPDATE dim0 SET name = name || 'x' WHERE k = 1; UPDATE fact SET v = v + 1 WHERE id < 5")
    few = refresh_and_check(pg_conn, "pairs", sql, "two sources")
    assert few.action == "DIFFERENTIAL", few.summary()
    # Every source changed: past the budget, recomputed with the reason.
    execute(
        pg_conn,
        "".join(f"UPDATE dim{i} SET name = name || 'y' WHERE k = 2;" for i in range(DIMENSIONS))
        + "UPDATE fact SET v = v - 1 WHERE id < 5",
    )
    every = refresh_and_check(pg_conn, "pairs", sql, "every source")
    assert (every.action, every.reason) == ("FULL", budget.reason()), every.summary()
    # CALL refresh cannot plan the delta of the sources a batch changed: it recomputes, saying why.
    execute(pg_conn, "UPDATE fact SET v = v + 2 WHERE id = 7")
    with pg_conn.cursor() as cursor:
        cursor.execute(f"CALL {CATALOG}.refresh('public.pairs')")
        action, reason = cursor.fetchone()[:2]
    assert (action, reason) == ("FULL", f"model pairs: {budget.reason()}")
    refresh_and_check(pg_conn, "pairs", sql, "after CALL refresh")
    assert [r["action"] for r in history(pg_conn, "pairs")] == [
        "CREATE",
        "DIFFERENTIAL",
        "FULL",
        "FULL",
        "SKIP",
    ]


def test_immediate_refuses_a_query_past_the_budget_by_name(pg_conn: Any) -> None:
    sql = _star(pg_conn)
    with pytest.raises(UnsupportedQuery, match="refresh_mode='auto'") as refused:
        refresh_and_check(pg_conn, "pairs", sql, refresh_mode="immediate")
    assert "more than 2,000 terms" in str(refused.value) and "model pairs" in str(refused.value)
