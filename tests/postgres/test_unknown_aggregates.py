"""Aggregates sqlglot parses as plain calls (`every`, a user's CREATE AGGREGATE): planned as per-row
functions they split each group and the stream table was wrong from its first build, in every mode.
They are refused by name, and AUTO refreshes them FULL, equal to the query through writes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from tests.postgres.streams import execute, refresh, refresh_and_check

pytestmark = pytest.mark.postgres

SOURCES = (
    "CREATE TABLE t (id int PRIMARY KEY, g text, v int, b boolean);"
    "INSERT INTO t VALUES (1, 'a', 1, true), (2, 'a', 2, false), (3, 'b', 3, true);"
    "CREATE AGGREGATE public.total(int) (sfunc = int4pl, stype = int, initcond = '0')"
)
STREAMS = {
    "all_true": ("SELECT g, every(b) AS e FROM t GROUP BY g", 'EVERY("t"."b")'),
    "everything_true": ("SELECT every(b) AS e FROM t", 'EVERY("t"."b")'),
    "totals": ("SELECT g, total(v) AS s FROM t GROUP BY g", 'TOTAL("t"."v")'),
    "qualified_totals": ("SELECT g, public.total(v) AS s FROM t GROUP BY g", 'TOTAL("t"."v")'),
    "running_totals": ("SELECT id, total(v) OVER (PARTITION BY g ORDER BY id) AS s FROM t", 'TOTAL("t"."v")'),
}
WRITES = [
    "UPDATE t SET v = 10, b = false WHERE id = 1",
    "INSERT INTO t VALUES (4, 'b', 0, false)",
    "DELETE FROM t WHERE id = 3",
]


def test_unknown_aggregates_are_refused_by_name_and_refreshed_full(pg_conn: Any) -> None:
    execute(pg_conn, SOURCES)
    for name, (sql, call) in STREAMS.items():
        for mode in ("differential", "immediate"):
            with pytest.raises(
                UnsupportedQuery,
                match=re.escape(f"aggregate `{call}` that dbt-ivm does not know in model {name}"),
            ):
                refresh(pg_conn, name, sql, refresh_mode=mode)
        refresh_and_check(pg_conn, name, sql, "create", refresh_mode="auto")
    for write in WRITES:
        execute(pg_conn, write)
        for name, (sql, _call) in STREAMS.items():
            result = refresh_and_check(pg_conn, name, sql, write, refresh_mode="auto")
            assert result.action == "FULL" and "does not know" in (result.reason or ""), result.summary()
