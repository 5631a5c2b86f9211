"""Set-returning calls in a SELECT list (unnest, generate_series, jsonb_array_elements, a user's
RETURNS SETOF) yield several rows per source row: no source key identifies them, so the stream table
holds them as a multiset, and every refresh equals the query through writes that change how many rows
a source row yields. Over an aggregate they are refused by name."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from tests.postgres.streams import execute, follow_writes, refresh

pytestmark = pytest.mark.postgres

SOURCES = (
    "CREATE TABLE o (id int PRIMARY KEY, tags text[], j jsonb, n int);"
    "INSERT INTO o VALUES (1, '{a,b}', '[1, 2]', 2), (2, '{c}', '[3]', 0), (3, '{}', '[]', 1);"
    "CREATE FUNCTION public.upto(k int) RETURNS SETOF int LANGUAGE sql IMMUTABLE AS 'SELECT generate_series(1, k)'"
)
STREAMS = {
    "tagged": "SELECT id, unnest(tags) AS tag FROM o",
    "numbered": "SELECT id, generate_series(1, n) AS k FROM o",
    "elements": "SELECT id, jsonb_array_elements(j) AS e FROM o",
    "counted_up": "SELECT id, public.upto(n) AS k FROM o",
    "tag_counts": "SELECT tag, COUNT(*) AS n FROM (SELECT unnest(tags) AS tag FROM o) t GROUP BY tag",
}
WRITES = [
    "UPDATE o SET tags = '{x,y,z}', j = '[7, 8]', n = 3 WHERE id = 1",
    "UPDATE o SET tags = '{c,c}' WHERE id = 2",
    "DELETE FROM o WHERE id = 1",
    "INSERT INTO o VALUES (4, '{a,a}', '[1]', 2), (5, NULL, NULL, NULL)",
    "UPDATE o SET n = 0, tags = '{}' WHERE id = 4",
]


@pytest.mark.parametrize("mode", ["differential", "immediate", "auto"])
def test_set_returning_calls_multiply_rows(pg_conn: Any, mode: str) -> None:
    execute(pg_conn, SOURCES)
    follow_writes(pg_conn, STREAMS, WRITES, mode)


def test_a_set_returning_call_over_an_aggregate_or_beside_a_window_is_refused(pg_conn: Any) -> None:
    execute(pg_conn, SOURCES)
    ranked = "SELECT id, unnest(tags) AS tag, row_number() OVER (PARTITION BY id ORDER BY n) AS r FROM o"
    with pytest.raises(UnsupportedQuery, match=re.escape('`UNNEST("o"."tags")` beside window functions')):
        refresh(pg_conn, "ranked", ranked, refresh_mode="differential")
    sql = "SELECT n, unnest(array_agg(id)) AS member FROM o GROUP BY n"
    with pytest.raises(
        UnsupportedQuery,
        match=re.escape('set-returning call `UNNEST(ARRAY_AGG("o"."id"))` in an aggregate query'),
    ):
        refresh(pg_conn, "members", sql, refresh_mode="differential")
