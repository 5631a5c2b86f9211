"""Shared helpers for the PostgreSQL engine tests: define, refresh and inspect stream tables."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from tests.oracle import assert_matches_query
from tests.shapes import ON_EVERY_SERVER_VERSION, Workload, create_statements

SCHEMA = "public"
CATALOG = "dbt_ivm"
# The small shop several tests refresh from: 20 orders of four customers, c0..c3.
TWENTY_ORDERS = (
    "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2));"
    "INSERT INTO orders SELECT i, 'c' || (i % 4), i FROM generate_series(1, 20) i;"
)


def shape_parameters(names: list[str]) -> list[Any]:
    """Shape names as pytest parameters, those of `ON_EVERY_SERVER_VERSION` marked `server_version`:
    for a test that runs every shape through a mechanism that depends on the server's version (CI
    reruns those shapes on PostgreSQL 15, every shape on PostgreSQL 18)."""
    mark = pytest.mark.server_version
    return [pytest.param(n, marks=mark) if n in ON_EVERY_SERVER_VERSION else n for n in names]


def make_spec(name: str, sql: str, **options: Any) -> StreamTableSpec:
    return StreamTableSpec(model=name, schema=SCHEMA, name=name, sql=sql, **options)


def refresh(conn: Any, name: str, sql: str, **options: Any) -> RefreshResult:
    """Create or refresh the stream table `name` defined by `sql` (schema public)."""
    return run_stream_table(conn, make_spec(name, sql, **options))


def refresh_and_check(conn: Any, name: str, sql: str, context: str = "", **options: Any) -> RefreshResult:
    result = refresh(conn, name, sql, **options)
    assert_matches_query(conn, SCHEMA, name, sql, f"{context}; {result.summary()}")
    return result


def follow_writes(conn: Any, streams: dict[str, str], writes: list[str], mode: str) -> None:
    """Create each stream table, then after each write refresh and check them all: each refresh must
    be differential (or find nothing to do). IMMEDIATE tables are checked as each write left them,
    and refreshed once at the end, which must find nothing to rebuild."""
    for name, sql in streams.items():
        refresh_and_check(conn, name, sql, "create", refresh_mode=mode)
    for write in writes:
        execute(conn, write)
        for name, sql in streams.items():
            if mode == "immediate":
                assert_matches_query(conn, SCHEMA, name, sql, f"after {write}")
                continue
            result = refresh_and_check(conn, name, sql, f"after {write}", refresh_mode=mode)
            assert result.action in ("DIFFERENTIAL", "SKIP"), (write, name, result.summary())
    if mode == "immediate":
        for name, sql in streams.items():
            result = refresh_and_check(conn, name, sql, "the run after the writes", refresh_mode=mode)
            assert result.action == "SKIP", (name, result.summary())


def seeded_shapes(conn: Any, rng: Any) -> Workload:
    """Create the shared shapes' source tables (tests/shapes.py) and seed them; the workload for batches."""
    for statement in create_statements(SCHEMA, "postgres"):
        execute(conn, statement)
    workload = Workload(SCHEMA, rng)
    for statement in workload.seed():
        execute(conn, statement)
    return workload


def execute(conn: Any, sql: str, params: Any = None) -> None:
    with conn.cursor() as cur:
        cur.execute(sql, params)


def rows(conn: Any, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def value(conn: Any, sql: str, params: Any = None) -> Any:
    found = rows(conn, sql, params)
    return found[0][0] if found else None


def history(conn: Any, name: str) -> list[dict[str, Any]]:
    """The refresh history of one stream table, oldest first."""
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT * FROM {CATALOG}.refresh_history WHERE stream_table = %s ORDER BY refresh_id",
            (f"{SCHEMA}.{name}",),
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def leave_batches_to_the_engine(conn: Any) -> None:
    """As if the installed refresh functions were an earlier version's: the engine builds the next
    batch's delta itself (and installs them anew), as it does where they cannot apply a batch (a test
    of what the engine's statements do, under refresh_mode='auto' whose first batch a function would
    otherwise apply)."""
    execute(conn, f"UPDATE {CATALOG}.refresh_procedures SET version = 0")


def buffer_of(conn: Any, source: str) -> str:
    """The change buffer (schema-qualified, quoted) of a source table, e.g. 'public.orders'."""
    table = value(conn, f"SELECT buffer_table FROM {CATALOG}.change_buffers WHERE source = %s", (source,))
    assert table is not None, f"no change buffer for {source}"
    return f'"{CATALOG}"."{table}"'


def buffer_count(conn: Any, source: str) -> int:
    """Captured rows waiting in a source's buffer."""
    return int(value(conn, f"SELECT count(*) FROM {buffer_of(conn, source)}"))


def connect(dsn: str, **options: Any) -> Any:
    conn = psycopg2.connect(dsn, **options)
    conn.autocommit = True
    return conn


class RecordingCursor(psycopg2.extensions.cursor):
    """A real cursor that records every statement, and EXPLAINs each apply statement / CREATE TEMP TABLE AS first."""

    def execute(self, query: Any, vars: Any = None) -> Any:
        text = query if isinstance(query, str) else query.decode()
        connection: RecordingConnection = self.connection
        connection.statements.append(text)
        if connection.explain and (is_apply(text) or text.lstrip().upper().startswith("CREATE TEMP TABLE")):
            super().execute("EXPLAIN (FORMAT JSON) " + text, vars)
            connection.plans.append((text, self.fetchone()[0][0]["Plan"]))
        return super().execute(query, vars)


class RecordingConnection(psycopg2.extensions.connection):
    def __init__(self, dsn: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(dsn, *args, **kwargs)
        self.statements: list[str] = []
        self.plans: list[tuple[str, dict[str, Any]]] = []  # (statement, its JSON plan tree)
        self.explain = False
        self.cursor_factory = RecordingCursor


@contextmanager
def recording_connection(dsn: str, explain: bool = False) -> Iterator[Any]:
    """An autocommit connection that records statements (and their plans, with explain=True)."""
    conn = connect(dsn, connection_factory=RecordingConnection)
    conn.explain = explain
    try:
        yield conn
    finally:
        conn.close()


def is_apply(statement: str) -> bool:
    """A statement that writes a batch to a stream table: a MERGE (on PostgreSQL ≥ 17 inside a WITH
    that counts what it did), or a multiset's copies deleted and inserted (`apply/multiset`)."""
    merge = re.match(r'\s*(WITH\s+"__ivm_merged"\s+AS\s*\(\s*)?MERGE\b', statement, re.I)
    return (
        merge is not None or re.match(r'\s*WITH\s+"__ivm_gone"\s+AS\s*\(\s*DELETE\b', statement) is not None
    )


def applies(conn: Any) -> list[str]:
    return [s for s in conn.statements if is_apply(s)]
