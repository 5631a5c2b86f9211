"""Adversarial tests (issue 9): what a suspicious user would try against PostgreSQL stream tables.

The cases live in tests/postgres/adversarial_cases.py: each sets up sources (user triggers, domains,
partitions, odd names, ...), creates the shared stream shapes, then runs user writes and DDL; after
every step every stream table is refreshed and must equal its defining query with the query's column
types, no user statement may fail because of capture, and a FULL or REBUILD must give its reason.

Here: the parametrized cases, a hypothesis-driven identifier fuzz, and a refresh killed while it
applies its changes.
"""

from __future__ import annotations

import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import StreamTableSpec
from tests.depth import by_depth
from tests.postgres.adversarial_cases import (
    CASES,
    STANDARD_SETUP,
    STANDARD_SHAPES,
    Case,
    Ctx,
    Shape,
    check_shape,
    create_shapes,
    quote,
    refresh_shape,
    run_case,
    server_version,
    user_sql,
)
from tests.postgres.streams import connect, execute, value

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_adversarial_case(case: Case, pg_dsn: str, pg_conn: Any) -> None:
    if case.min_version and server_version(pg_conn) < case.min_version:
        pytest.skip(f"needs server_version_num >= {case.min_version}")
    run_case(case, pg_dsn, pg_conn)


# ---------------------------------------------------------------------------------------------------
# Identifier fuzz: names built from quotes, spaces, Unicode, reserved words, SQL syntax and our own
# internal names, at most 63 bytes (PostgreSQL's limit), for schemas, tables, columns and aliases.

FRAGMENTS = [
    "select",
    "order",
    "user",
    "Mixed Case",
    '"',
    " ",
    "Ünïcødé",
    "表",
    "__ivm_weight",
    "__ivm_count",
    "__ivm_hash",
    "dbt_ivm",
    "changes_1234",
    ".",
    "'",
    "$",  # "$ivm$" (the capture function's quote) has a case of its own
    "ivm",
    "%s",
    "%",
    ";",
    "--",
    "\\",
    "writer",
    "statement_number",
    "NEW",
    "x" * 30,
    "é" * 20,
]


def _fit(name: str, limit: int = 63) -> str:
    """Cut to at most `limit` bytes of UTF-8 without splitting a character."""
    while len(name.encode()) > limit:
        name = name[:-1]
    return name


identifiers = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=4).map(
    lambda parts: _fit("".join(parts))
)
_schemas = itertools.count(1)


@pytest.fixture
def fuzz_ctx(pg_dsn: str, pg_conn: Any) -> Any:
    conns = [connect(pg_dsn) for _ in range(2)]
    yield Ctx(pg_dsn, pg_conn, dbt=conns[0], owner=pg_conn, writer=conns[1], writer2=conns[1])
    for conn in conns:
        conn.close()


@settings(
    max_examples=by_depth(12, 100),
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: each example costs real refreshes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    schema=identifiers,
    relations=st.lists(identifiers, min_size=3, max_size=3, unique=True),  # source, two stream tables
    columns=st.lists(identifiers, min_size=3, max_size=3, unique=True),
    aliases=st.lists(identifiers, min_size=3, max_size=3, unique=True),
)
def test_identifier_fuzz(
    fuzz_ctx: Ctx, schema: str, relations: list[str], columns: list[str], aliases: list[str]
) -> None:
    schema = _fit(schema, 58) + f" #{next(_schemas):03d}"  # a fresh schema per example
    source, aggregate_name, projection_name = relations
    key, text_column, number = (quote(c) for c in columns)
    table = f"{quote(schema)}.{quote(source)}"
    where = f"identifier fuzz: schema {schema!r}, relations {relations!r}, columns {columns!r}, aliases {aliases!r}"
    execute(
        fuzz_ctx.admin,
        f"CREATE SCHEMA {quote(schema)}; CREATE TABLE {table} ({key} int PRIMARY KEY, {text_column} text, "
        f"{number} int); INSERT INTO {table} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'b', NULL)",
    )
    a0, a1, a2 = (quote(a) for a in aliases)
    shapes = (
        Shape(
            aggregate_name,
            f"SELECT {text_column} AS {a0}, SUM({number}) AS {a1}, COUNT(*) AS {a2} FROM {table} "
            f"GROUP BY {text_column}",
            schema=schema,
        ),
        Shape(
            projection_name,
            f"SELECT {key} AS {a0}, {text_column}, {number} FROM {table} WHERE {key} > 0",
            schema=schema,
        ),
    )
    steps = [
        f"INSERT INTO {table} VALUES (4, 'c', 4), (5, 'a', 5)",
        f"UPDATE {table} SET {text_column} = 'b', {number} = 7 WHERE {key} = 1; DELETE FROM {table} WHERE {key} = 2",
    ]
    shapes = create_shapes(fuzz_ctx, shapes, f"{where}, create")
    for number_, sql in enumerate(steps, 1):
        user_sql(fuzz_ctx, "writer", sql, "write", f"{where}, step {number_}")
        for shape in shapes:
            refresh_shape(fuzz_ctx, shape, f"{where}, step {number_}")


# ---------------------------------------------------------------------------------------------------
# A refresh killed while it writes the stream table: the next refresh, in a new session, is correct.


def _spec(shape: Shape) -> StreamTableSpec:
    return StreamTableSpec(
        model=shape.name, schema=shape.schema, name=shape.name, sql=shape.sql, refresh_mode=shape.mode
    )


@pytest.mark.parametrize("shape", [STANDARD_SHAPES[0], STANDARD_SHAPES[3]], ids=lambda s: s.name)
def test_refresh_killed_while_applying(pg_dsn: str, pg_conn: Any, shape: Shape) -> None:
    execute(pg_conn, STANDARD_SETUP)
    refresher, blocker = connect(pg_dsn), connect(pg_dsn)
    try:
        run_stream_table(refresher, _spec(shape))
        execute(
            pg_conn,
            "INSERT INTO orders VALUES (10, 1, NULL, 'alice', 70); UPDATE orders SET amount = 1 WHERE id = 1;"
            "DELETE FROM orders WHERE id = 3; INSERT INTO events VALUES ('a', 1), ('k', 4); DELETE FROM events WHERE kind = 'c'",
        )
        # Reads of the stream table pass a SHARE lock; its write (MERGE, or DELETE/UPDATE/INSERT) waits.
        execute(blocker, f"BEGIN; LOCK TABLE {shape.relation} IN SHARE MODE")
        pid = refresher.get_backend_pid()
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(run_stream_table, refresher, _spec(shape))
            deadline = time.monotonic() + 20
            while True:
                waiting = value(
                    pg_conn,
                    "SELECT query FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                    (pid,),
                )
                if waiting is not None:
                    break
                assert not running.done(), (
                    f"the refresh finished without writing: {running.result().summary()}"
                )
                assert time.monotonic() < deadline, "the refresh never waited for the stream table's lock"
                time.sleep(0.02)
            assert value(pg_conn, "SELECT pg_terminate_backend(%s)", (pid,)) is True
            with pytest.raises(Exception):  # noqa: B017 - the session is gone: any error
                running.result(timeout=30)
        execute(blocker, "ROLLBACK")
        execute(pg_conn, "UPDATE orders SET amount = 2 WHERE id = 2; INSERT INTO events VALUES ('k', 5)")
        fresh = connect(pg_dsn)
        try:
            ctx = Ctx(pg_dsn, pg_conn, dbt=fresh, owner=pg_conn, writer=pg_conn, writer2=pg_conn)
            refresh_shape(ctx, shape, f"after a refresh killed at {str(waiting)[:60]!r}")
            execute(pg_conn, "DELETE FROM orders WHERE id = 10; DELETE FROM events WHERE kind = 'k'")
            refresh_shape(ctx, shape, "a later refresh")
        finally:
            fresh.close()
        check_shape(pg_conn, shape, "final")
    finally:
        refresher.close()
        blocker.close()
