"""Source columns with a collation other than their type's default: a change buffer and a pending
table hold their values with that collation, so the delta rules compare and order them as the query
does. Under a case-insensitive (nondeterministic) ICU collation 'A' and 'a' are one group; under an
ICU English collation 'a' sorts before 'B', where the database's C collation puts it after.

Needs a server built with ICU (Debian's PostgreSQL 15 is; the embedded server is not)."""

from __future__ import annotations

from typing import Any

import psycopg2
import pytest

from tests.postgres.streams import execute, follow_writes

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

SOURCE = (
    "CREATE TABLE people (id int PRIMARY KEY, name text COLLATE ci, word text COLLATE english, amount int);"
    "INSERT INTO people VALUES (1, 'A', 'b', 1), (2, 'b', 'B', 2), (3, 'c', 'a', 3)"
)
STREAMS = {
    "by_name": "SELECT name, SUM(amount) AS total, COUNT(*) AS n FROM people GROUP BY name",
    "names": "SELECT DISTINCT name FROM people",
    "extremes": "SELECT amount > 1 AS big, MIN(word) AS lo, MAX(word) AS hi FROM people GROUP BY amount > 1",
    "first_words": "SELECT id, word, amount FROM people ORDER BY word, id LIMIT 2",
    "same_name": "SELECT p.id, q.id AS other FROM people p JOIN people q ON p.name = q.name",
}
WRITES = [
    "INSERT INTO people VALUES (4, 'a', 'A', 5)",  # joins A's group; a word between
    "DELETE FROM people WHERE id = 1",  # the group keeps 'a'
    "UPDATE people SET name = 'B' WHERE id = 2",  # the same group under another spelling
    "INSERT INTO people VALUES (5, 'b', 'c', 1), (6, 'C', 'Z', 7)",
    "UPDATE people SET word = 'aa' WHERE id = 6",
    "DELETE FROM people WHERE name = 'c'",
]


@pytest.mark.parametrize("mode", ["differential", "immediate", "auto"])
def test_collated_sources(pg_conn: Any, mode: str) -> None:
    try:
        execute(
            pg_conn,
            "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);"
            "CREATE COLLATION english (provider = icu, locale = 'en')",
        )
    except psycopg2.errors.FeatureNotSupported as error:
        pytest.skip(f"this server has no ICU: {error}")
    execute(pg_conn, SOURCE)
    follow_writes(pg_conn, STREAMS, WRITES, mode)
