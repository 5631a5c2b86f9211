"""Sources whose changes capture cannot follow, and source types it must survive.

A partition or an inheritance child read directly: a write through its parent fires only the
parent's statement triggers, so capture on the child never sees it. A table whose row-level security
applies to the dbt role: capture records every row written, the query reads only the rows the role
may see. Both are refused by name for differential and immediate modes, and AUTO refreshes them FULL
with that reason, so the stream table stays equal to its query through writes that go around
capture. A column retyped from a domain to its base type must not fail a write (the change buffer
still has the domain), and an aggregate over an enum builds in every mode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
import pytest

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.postgres.runner import run_stream_table
from tests.oracle import assert_matches_query
from tests.postgres.streams import connect, execute, make_spec, refresh, refresh_and_check, value

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

TREES = (
    "CREATE TABLE sales (id int, region text, amount numeric, PRIMARY KEY (id, region)) PARTITION BY LIST (region);"
    "CREATE TABLE sales_n PARTITION OF sales FOR VALUES IN ('n');"
    "CREATE TABLE sales_s PARTITION OF sales FOR VALUES IN ('s');"
    "INSERT INTO sales VALUES (1, 'n', 10), (2, 's', 20);"
    "CREATE TABLE base (id int PRIMARY KEY, amount numeric); CREATE TABLE kid (extra text) INHERITS (base);"
    "INSERT INTO kid VALUES (1, 5, 'x')"
)
LEAVES = {
    "north": ("SELECT id, amount FROM sales_n", "partition public.sales_n"),
    "north_total": ("SELECT SUM(amount) AS total, COUNT(*) AS n FROM sales_n", "partition public.sales_n"),
    "kids": ("SELECT id, amount FROM kid", "inheritance child public.kid"),
}
AROUND_CAPTURE = [
    "INSERT INTO sales VALUES (3, 'n', 30)",
    "UPDATE sales SET amount = amount + 1",
    "UPDATE sales SET region = 'n' WHERE id = 2",
    "MERGE INTO sales s USING (VALUES (3)) v(id) ON s.id = v.id WHEN MATCHED THEN DELETE",
    "UPDATE base SET amount = 99",
    "DELETE FROM base WHERE id = 1",
]


@pytest.mark.parametrize("mode", ["differential", "immediate"])
def test_a_partition_or_child_read_directly_is_refused(pg_conn: Any, mode: str) -> None:
    execute(pg_conn, TREES)
    for name, (sql, construct) in LEAVES.items():
        with pytest.raises(
            UnsupportedQuery, match=re.escape(f"{construct} in model {name} is not supported")
        ) as refused:
            refresh(pg_conn, name, sql, refresh_mode=mode)
        assert "read the" in refused.value.fix and "refresh_mode='full'" in refused.value.fix


def test_auto_refreshes_a_partition_or_child_full_through_writes_to_its_parent(pg_conn: Any) -> None:
    execute(pg_conn, TREES)
    for name, (sql, _) in LEAVES.items():
        refresh_and_check(pg_conn, name, sql)
    for step in AROUND_CAPTURE:
        execute(pg_conn, step)
        for name, (sql, construct) in LEAVES.items():
            result = refresh_and_check(pg_conn, name, sql, step)
            assert result.action == "FULL" and construct in str(result.reason), result.summary()


@contextmanager
def three_roles(pg_conn: Any, pg_dsn: str) -> Iterator[tuple[Any, Any, Any, str, str]]:
    """Connections as a sources' owner, a dbt role and a writer (none a superuser, all dropped after),
    then the dbt role's and the writer's names. ``docs`` is the owner's, readable by dbt and writable by
    the writer; ``secret`` marks the rows a policy may hide."""
    database = value(pg_conn, "SELECT current_database()")
    dbt, owner, writer = f"{database}_dbt", f"{database}_own", f"{database}_wr"
    for role in (dbt, owner, writer):
        execute(pg_conn, f'CREATE ROLE "{role}" LOGIN')
    execute(
        pg_conn,
        f'GRANT CREATE ON DATABASE "{database}" TO "{dbt}"; GRANT USAGE, CREATE ON SCHEMA public TO "{dbt}", '
        f'"{owner}"; GRANT USAGE ON SCHEMA public TO "{writer}"',
    )
    connections = [connect(pg_dsn, user=role) for role in (owner, dbt, writer)]
    try:
        execute(
            connections[0],
            "CREATE TABLE docs (id int PRIMARY KEY, owner_name text, amount numeric, secret bool NOT NULL);"
            "INSERT INTO docs VALUES (1, 'a', 1, false), (2, 'a', 2, true), (3, 'b', 3, false);"
            f'GRANT SELECT, TRIGGER ON docs TO "{dbt}"; GRANT SELECT, INSERT, UPDATE, DELETE ON docs TO "{writer}"',
        )
        yield connections[0], connections[1], connections[2], dbt, writer
    finally:
        for connection in connections:
            connection.close()
        execute(pg_conn, f'DROP OWNED BY "{dbt}", "{owner}", "{writer}" CASCADE')
        for role in (dbt, owner, writer):
            execute(pg_conn, f'DROP ROLE "{role}"')


def _hide_secret_rows_from(owner: Any, dbt: str, writer: str) -> None:
    execute(
        owner,
        "ALTER TABLE docs ENABLE ROW LEVEL SECURITY;"
        f'CREATE POLICY dbt_sees ON docs FOR SELECT TO "{dbt}" USING (NOT secret);'
        f'CREATE POLICY writes ON docs TO "{writer}" USING (true) WITH CHECK (true);',
    )


def execute_call(conn: Any, stream_table: str) -> str:
    """`CALL dbt_ivm.refresh(stream_table)`: its action."""
    with conn.cursor() as cursor:
        cursor.execute("CALL dbt_ivm.refresh(%s)", (stream_table,))
        row = cursor.fetchone()
    conn.commit()
    return str(row[0])


DOC_TOTALS = "SELECT owner_name, SUM(amount) AS total, COUNT(*) AS n FROM docs GROUP BY owner_name"


def test_row_level_security_on_a_source_is_refreshed_full(pg_conn: Any, pg_dsn: str) -> None:
    """The dbt role reads only rows a policy shows it; writers see all. Differential is refused by
    name; AUTO stays equal to the query as the dbt role reads it, through rows hidden and shown."""
    with three_roles(pg_conn, pg_dsn) as (as_owner, as_dbt, as_writer, dbt, writer):
        _hide_secret_rows_from(as_owner, dbt, writer)
        sql = DOC_TOTALS
        with pytest.raises(UnsupportedQuery, match=re.escape("table under row-level security public.docs")):
            run_stream_table(as_dbt, make_spec("secret_totals", sql, refresh_mode="differential"))
        run_stream_table(as_dbt, make_spec("totals", sql))
        for step in [
            "INSERT INTO docs VALUES (4, 'a', 40, true), (5, 'b', 5, false)",
            "UPDATE docs SET amount = amount + 100 WHERE id = 2",
            "UPDATE docs SET secret = true WHERE id = 1",
            "DELETE FROM docs WHERE id = 4",
        ]:
            execute(as_writer, step)
            result = run_stream_table(as_dbt, make_spec("totals", sql))
            assert result.action == "FULL" and "row-level security" in str(result.reason), result.summary()
            assert_matches_query(as_dbt, "public", "totals", sql, step)


def test_row_level_security_that_comes_after_dbt_run_stops_immediate_maintenance(
    pg_conn: Any, pg_dsn: str
) -> None:
    """IMMEDIATE maintenance reads the sources as the dbt role: once a policy hides rows from it, a
    write still succeeds, its maintenance is undone and flagged, and the next run refuses by name."""
    with three_roles(pg_conn, pg_dsn) as (as_owner, as_dbt, as_writer, dbt, writer):
        run_stream_table(as_dbt, make_spec("totals", DOC_TOTALS, refresh_mode="immediate"))
        execute(as_writer, "INSERT INTO docs VALUES (4, 'b', 4, false)")
        assert_matches_query(as_dbt, "public", "totals", DOC_TOTALS, "maintained")
        _hide_secret_rows_from(as_owner, dbt, writer)
        execute(as_writer, "INSERT INTO docs VALUES (5, 'b', 5, false)")  # succeeds
        needs = value(
            pg_conn, "SELECT needs_full FROM dbt_ivm.stream_tables WHERE stream_table = 'public.totals'"
        )
        assert "row-level security applies to the dbt role" in str(needs), needs
        with pytest.raises(UnsupportedQuery, match=re.escape("table under row-level security public.docs")):
            run_stream_table(as_dbt, make_spec("totals", DOC_TOTALS, refresh_mode="immediate"))


@pytest.mark.parametrize("mode", ["differential", "auto"])
def test_row_level_security_that_comes_after_dbt_run_is_noticed_by_call(
    pg_conn: Any, pg_dsn: str, mode: str
) -> None:
    """A policy the owner adds after dbt run built the table: `CALL dbt_ivm.refresh` (planned when
    the dbt role read every row) refuses by name, and the next refresh by the engine refuses
    differential or refreshes AUTO FULL, equal to the query as the dbt role now reads it."""
    with three_roles(pg_conn, pg_dsn) as (as_owner, as_dbt, as_writer, dbt, writer):
        run_stream_table(as_dbt, make_spec("totals", DOC_TOTALS, refresh_mode=mode))
        assert_matches_query(as_dbt, "public", "totals", DOC_TOTALS, "built")
        _hide_secret_rows_from(as_owner, dbt, writer)
        execute(as_writer, "INSERT INTO docs VALUES (4, 'b', 4, false)")
        with pytest.raises(
            psycopg2.Error, match=re.escape("row-level security applies to the caller on public.docs")
        ):
            execute_call(as_dbt, "public.totals")
        as_dbt.rollback()
        if mode == "differential":
            with pytest.raises(
                UnsupportedQuery, match=re.escape("table under row-level security public.docs")
            ):
                run_stream_table(as_dbt, make_spec("totals", DOC_TOTALS, refresh_mode=mode))
            return
        result = run_stream_table(as_dbt, make_spec("totals", DOC_TOTALS, refresh_mode=mode))
        # Its rows need no key now (every refresh is FULL): rebuilt once, saying why.
        assert result.action == "REBUILD" and "row-level security" in str(result.reason), result.summary()
        assert_matches_query(as_dbt, "public", "totals", DOC_TOTALS, "after the policy")
        execute(as_writer, "UPDATE docs SET secret = true WHERE id = 3")
        result = run_stream_table(as_dbt, make_spec("totals", DOC_TOTALS, refresh_mode=mode))
        assert result.action == "FULL" and "row-level security" in str(result.reason), result.summary()
        assert_matches_query(as_dbt, "public", "totals", DOC_TOTALS, "a row hidden")
        execute(as_owner, "ALTER TABLE docs DISABLE ROW LEVEL SECURITY")
        result = run_stream_table(as_dbt, make_spec("totals", DOC_TOTALS, refresh_mode=mode))
        assert result.action == "REBUILD" and "differentially now" in str(result.reason), result.summary()
        assert_matches_query(as_dbt, "public", "totals", DOC_TOTALS, "without the policy")
        execute(as_writer, "INSERT INTO docs VALUES (5, 'c', 5, true)")
        assert execute_call(as_dbt, "public.totals") == "DIFFERENTIAL"
        assert_matches_query(as_dbt, "public", "totals", DOC_TOTALS, "CALL again")


@pytest.mark.parametrize(
    ("retype", "write"),
    [
        ("ALTER TABLE t ALTER COLUMN x TYPE numeric", "INSERT INTO t VALUES (10, 1, -5, 'a')"),
        ("ALTER TABLE t ALTER COLUMN label TYPE text", "INSERT INTO t VALUES (11, 1, 5, NULL)"),
        ("ALTER TABLE t ALTER COLUMN label TYPE text", "UPDATE t SET label = NULL WHERE id = 1"),
    ],
)
@pytest.mark.parametrize("mode", ["differential", "immediate"])
def test_a_domain_column_retyped_to_its_base_type_fails_no_write(
    pg_conn: Any, mode: str, retype: str, write: str
) -> None:
    execute(
        pg_conn,
        "CREATE DOMAIN positive AS numeric CHECK (VALUE > 0); CREATE DOMAIN required AS text NOT NULL;"
        "CREATE TABLE t (id int PRIMARY KEY, g int, x positive, label required);"
        "INSERT INTO t VALUES (1, 1, 1, 'a'), (2, 2, 2, 'b')",
    )
    streams = {
        "by_group": "SELECT g, SUM(x) AS total, COUNT(*) AS n FROM t GROUP BY g",
        "all_rows": "SELECT id, g, x, label FROM t",
    }
    for name, sql in streams.items():
        refresh(pg_conn, name, sql, refresh_mode=mode)
    execute(pg_conn, retype)
    execute(pg_conn, write)  # the buffer's domain refuses the value: capture marks a FULL instead
    for name, sql in streams.items():
        refresh_and_check(pg_conn, name, sql, f"{retype}; {write}", refresh_mode=mode)


@pytest.mark.parametrize("mode", ["differential", "auto", "immediate"])
def test_an_aggregate_over_an_enum_builds_in_every_mode(pg_conn: Any, mode: str) -> None:
    execute(
        pg_conn,
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');"
        "CREATE TABLE t (id int PRIMARY KEY, g int, m mood); INSERT INTO t VALUES (1, 1, 'sad'), (2, 1, 'ok')",
    )
    sql = "SELECT g, MAX(m) AS top, MIN(m) AS bottom FROM t GROUP BY g"
    refresh_and_check(pg_conn, "moods", sql, refresh_mode=mode)
    execute(pg_conn, "INSERT INTO t VALUES (3, 1, 'happy'), (4, 2, 'ok'); DELETE FROM t WHERE id = 1")
    refresh_and_check(pg_conn, "moods", sql, refresh_mode=mode)
