"""Readers of a stream table see the model's columns only, never the hidden `__ivm_` ones (issue 9).

Each test grants SELECT the way people do (by hand, by default privileges, with a grant option, to
PUBLIC), converts it with `restrict_to_user_columns`, then reads as the grantee (`SET ROLE` on a
separate connection). Roles are cluster-wide: each test names its roles after its own database and
drops them at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import psycopg2.errors
import pytest

from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.privileges import restrict_to_user_columns
from dbt_ivm.sqltext import q, qn
from tests.postgres.streams import connect, execute, refresh, rows, value

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

ORDERS = """
CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2));
INSERT INTO orders VALUES (1, 'alice', 10), (2, 'alice', 20), (3, 'bob', 5);
"""
TOTALS = "SELECT sum(amount) AS total FROM orders GROUP BY customer"  # hides the group key
AMOUNTS = "SELECT amount FROM orders"  # hides the primary key


@pytest.fixture
def make_role(pg_conn: Any) -> Iterator[Callable[[str], str]]:
    """Creates NOLOGIN roles unique to this test's database; drops them (and their grants) after."""
    database = value(pg_conn, "SELECT current_database()")
    created: list[str] = []

    def make(base: str) -> str:
        name = f"{base}_{database}"
        execute(pg_conn, f"CREATE ROLE {q(name)} NOLOGIN")
        created.append(name)
        return name

    yield make
    # Privileges (and default privileges) are per database: this one's go, then the roles. In order of
    # creation: revoking a grantor's privileges (CASCADE) also revokes what it granted others.
    for name in created:
        execute(pg_conn, f"DROP OWNED BY {q(name)} CASCADE")
    for name in created:
        execute(pg_conn, f"DROP ROLE {q(name)}")


@pytest.fixture
def as_role(pg_dsn: str) -> Iterator[Callable[[str], Any]]:
    """Opens an autocommit connection acting as a role (`SET ROLE`), closed at the end of the test."""
    opened: list[Any] = []

    def open_as(role: str) -> Any:
        conn = connect(pg_dsn)
        execute(conn, f"SET ROLE {q(role)}")
        opened.append(conn)
        return conn

    yield open_as
    for conn in opened:
        conn.close()


def allowed(conn: Any, sql: str) -> bool:
    """Runs `sql` as the connection's role: True if that worked, False on "permission denied"."""
    try:
        execute(conn, sql)
    except psycopg2.errors.InsufficientPrivilege:
        return False
    return True


def columns_of(conn: Any, table: str) -> tuple[list[str], list[str]]:
    """The (user, hidden) columns of a table in schema public."""
    names = [
        r[0]
        for r in rows(
            conn,
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            (qn("public", table),),
        )
    ]
    return [n for n in names if not n.startswith("__ivm_")], [n for n in names if n.startswith("__ivm_")]


def table_select_grantees(conn: Any, table: str) -> list[str]:
    """Roles other than the owner holding table-level SELECT on public.<table> (PUBLIC as 'PUBLIC')."""
    return [
        r[0]
        for r in rows(
            conn,
            "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END "
            "FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a "
            "WHERE c.oid = %s::regclass AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner "
            "ORDER BY 1",
            (qn("public", table),),
        )
    ]


def restrict(conn: Any, table: str) -> list[str]:
    user, _ = columns_of(conn, table)
    return restrict_to_user_columns(Db(conn), qn("public", table), user)


def assert_reads_only_user_columns(reader: Any, table: str, user: list[str], hidden: list[str]) -> None:
    relation = qn("public", table)
    assert allowed(reader, f"SELECT {', '.join(q(c) for c in user)} FROM {relation}")
    for column in hidden:
        assert not allowed(reader, f"SELECT {q(column)} FROM {relation}"), column
        assert not allowed(reader, f"SELECT count(*) FROM {relation} WHERE {q(column)} IS NOT NULL"), column
    # Until hidden state leaves the table, `select *` needs every column: a reader must name columns.
    assert not allowed(reader, f"SELECT * FROM {relation}")


@pytest.mark.parametrize(
    ("sql", "hidden_prefix"),
    [(TOTALS, "__ivm_g0"), (AMOUNTS, "__ivm_k0_")],
    ids=["aggregate-group-key", "keyed-primary-key"],
)
def test_hand_made_grant_becomes_column_grant(
    pg_conn: Any, make_role: Callable[[str], str], as_role: Callable[[str], Any], sql: str, hidden_prefix: str
) -> None:
    execute(pg_conn, ORDERS)
    refresh(pg_conn, "st", sql)
    user, hidden = columns_of(pg_conn, "st")
    hidden_key = next(c for c in hidden if c.startswith(hidden_prefix))  # a group key / source key
    reader_role = make_role("reader")
    reader = as_role(reader_role)

    execute(pg_conn, f"GRANT SELECT ON st TO {q(reader_role)}")
    assert allowed(reader, f"SELECT {q(hidden_key)} FROM st")  # the leak this module closes

    assert restrict(pg_conn, "st") == [reader_role]
    assert table_select_grantees(pg_conn, "st") == []
    assert_reads_only_user_columns(reader, "st", user, hidden)
    assert sorted(r[0] for r in rows(reader, f"SELECT {q(user[0])} FROM st")) == sorted(
        r[0] for r in rows(pg_conn, sql)
    )

    # Refreshes keep the column grants (the table is updated in place), and converting again is a no-op.
    execute(pg_conn, "INSERT INTO orders VALUES (4, 'carol', 7)")
    refresh(pg_conn, "st", sql)
    assert restrict(pg_conn, "st") == []
    assert_reads_only_user_columns(reader, "st", user, hidden)


def test_the_next_refresh_narrows_a_hand_made_grant(
    pg_conn: Any, make_role: Callable[[str], str], as_role: Callable[[str], Any]
) -> None:
    execute(pg_conn, ORDERS)
    refresh(pg_conn, "totals", TOTALS)
    user, hidden = columns_of(pg_conn, "totals")
    reader_role = make_role("reader")
    reader = as_role(reader_role)
    execute(pg_conn, f"GRANT SELECT ON totals TO {q(reader_role)}")
    refresh(pg_conn, "totals", TOTALS)  # nothing changed in orders: a SKIP still narrows the grant
    assert table_select_grantees(pg_conn, "totals") == []
    assert_reads_only_user_columns(reader, "totals", user, hidden)


def test_default_privileges_are_converted(
    pg_conn: Any, make_role: Callable[[str], str], as_role: Callable[[str], Any]
) -> None:
    execute(pg_conn, ORDERS)
    reader_role = make_role("reader")
    reader = as_role(reader_role)
    execute(pg_conn, f"ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO {q(reader_role)}")

    refresh(pg_conn, "totals", TOTALS)
    user, hidden = columns_of(pg_conn, "totals")
    assert "__ivm_g0" in hidden
    # The runner converted the default privilege right after creating the table.
    assert restrict(pg_conn, "totals") == []
    assert table_select_grantees(pg_conn, "totals") == []
    assert_reads_only_user_columns(reader, "totals", user, hidden)

    # A rebuild creates a new table, which gets the default privileges again: converted again.
    refresh(pg_conn, "totals", TOTALS, full_refresh=True)
    assert restrict(pg_conn, "totals") == []
    assert table_select_grantees(pg_conn, "totals") == []
    assert_reads_only_user_columns(reader, "totals", user, hidden)


def test_grant_option_public_and_other_privileges(
    pg_conn: Any, make_role: Callable[[str], str], as_role: Callable[[str], Any]
) -> None:
    execute(pg_conn, ORDERS)
    refresh(pg_conn, "totals", TOTALS)
    user, hidden = columns_of(pg_conn, "totals")
    granter_role, grantee_role, writer_role = make_role("granter"), make_role("grantee"), make_role("writer")
    execute(pg_conn, f"GRANT SELECT ON totals TO {q(granter_role)} WITH GRANT OPTION")
    granter = as_role(granter_role)
    execute(granter, f"GRANT SELECT ON totals TO {q(grantee_role)}")  # uses the grant option
    execute(pg_conn, "GRANT SELECT ON totals TO PUBLIC")
    execute(pg_conn, f"GRANT SELECT, INSERT ON totals TO {q(writer_role)}")
    execute(pg_conn, f"GRANT UPDATE ({q(user[0])}) ON totals TO {q(writer_role)}")

    assert sorted(restrict(pg_conn, "totals")) == sorted(["PUBLIC", granter_role, writer_role])
    assert table_select_grantees(pg_conn, "totals") == []

    def has(role: str, privilege: str, column: str | None = None) -> bool:
        if column is None:
            return bool(value(pg_conn, "SELECT has_table_privilege(%s, 'totals', %s)", (role, privilege)))
        return bool(
            value(pg_conn, "SELECT has_column_privilege(%s, 'totals', %s, %s)", (role, column, privilege))
        )

    # The grant option is kept, on the model's columns.
    for column in user:
        assert has(granter_role, "SELECT WITH GRANT OPTION", column)
        assert has("public", "SELECT", column)
    for column in hidden:
        for role in (granter_role, writer_role, "public"):
            assert not has(role, "SELECT", column), (role, column)
    # Other privileges stay as they were.
    assert has(writer_role, "INSERT")
    assert has(writer_role, "UPDATE", user[0])
    # The grant made through the table-level grant option went with it (CASCADE)...
    grantee = as_role(grantee_role)
    for column in hidden:
        assert not allowed(grantee, f"SELECT {q(column)} FROM totals")
    # ...and its grantor can grant the model's columns again, but not the hidden ones.
    execute(granter, f"GRANT SELECT ({', '.join(q(c) for c in user)}) ON totals TO {q(grantee_role)}")
    assert not allowed(granter, f"GRANT SELECT ON totals TO {q(grantee_role)}")
    assert table_select_grantees(pg_conn, "totals") == []
    assert_reads_only_user_columns(grantee, "totals", user, hidden)
    assert_reads_only_user_columns(granter, "totals", user, hidden)


def test_identifiers_are_quoted(
    pg_conn: Any, make_role: Callable[[str], str], as_role: Callable[[str], Any]
) -> None:
    execute(pg_conn, ORDERS)
    sql = 'SELECT sum(amount) AS "Total ""USD""", count(*) AS "n; drop" FROM orders GROUP BY customer'
    refresh(pg_conn, "Odd st", sql)
    user, hidden = columns_of(pg_conn, "Odd st")
    assert user == ['Total "USD"', "n; drop"]
    reader_role = make_role('Read"er')
    execute(pg_conn, f'GRANT SELECT ON "Odd st" TO {q(reader_role)}')
    assert restrict(pg_conn, "Odd st") == [reader_role]
    assert_reads_only_user_columns(as_role(reader_role), "Odd st", user, hidden)


def test_nothing_to_do_costs_one_catalog_query(pg_conn: Any, make_role: Callable[[str], str]) -> None:
    execute(pg_conn, ORDERS)
    refresh(pg_conn, "totals", TOTALS)
    user, _ = columns_of(pg_conn, "totals")
    reader_role = make_role("reader")
    execute(pg_conn, f"GRANT SELECT ({', '.join(q(c) for c in user)}) ON totals TO {q(reader_role)}")
    db = Db(pg_conn)
    assert restrict_to_user_columns(db, qn("public", "totals"), user) == []
    assert len(db.statements) == 1


def test_table_level_revoke_also_revokes_column_privileges(
    pg_conn: Any, make_role: Callable[[str], str]
) -> None:
    """The PostgreSQL behaviour the conversion relies on: revoke first, then grant the columns."""
    role = q(make_role("reader"))
    execute(pg_conn, "CREATE TABLE t (a int, b int)")

    def column_acl() -> list[tuple[str, str | None]]:
        return [
            (r[0], r[1])
            for r in rows(
                pg_conn,
                "SELECT attname, attacl::text FROM pg_attribute WHERE attrelid = 't'::regclass AND attnum > 0 "
                "ORDER BY attnum",
            )
        ]

    execute(pg_conn, f"GRANT SELECT (a), UPDATE (b) ON t TO {role}")
    execute(pg_conn, f"REVOKE SELECT ON t FROM {role}")  # no table-level SELECT to revoke...
    acl = dict(column_acl())
    assert acl["a"] is None  # ...yet the column SELECT is gone
    assert acl["b"] is not None and "=w/" in acl["b"]  # and other column privileges stay

    execute(pg_conn, f"GRANT SELECT ON t TO {role}; GRANT SELECT (a) ON t TO {role}")
    execute(pg_conn, f"REVOKE SELECT ON t FROM {role}")
    assert dict(column_acl())["a"] is None


def test_two_catalogs_capture_one_source_and_a_missing_trigger_grant_is_named(
    pg_conn: Any, make_role: Callable[[str], str], as_role: Callable[[str], Any]
) -> None:
    """A second dbt project (its own catalog schema and role) over a source the first captures: its
    role, with SELECT but not TRIGGER on the source, is told which source, which privilege and which
    GRANT; granted, both catalogs capture the source and refresh differentially."""
    execute(pg_conn, ORDERS)
    assert refresh(pg_conn, "totals", TOTALS).action == "CREATE"
    second = make_role("second_project")
    database = value(pg_conn, "SELECT current_database()")
    execute(
        pg_conn,
        f"GRANT CREATE ON DATABASE {q(database)} TO {q(second)}; GRANT USAGE, CREATE ON SCHEMA public TO {q(second)};"
        f"GRANT SELECT ON orders TO {q(second)}",
    )
    other = as_role(second)
    options = {"catalog_schema": "second_ivm", "refresh_mode": "differential"}
    with pytest.raises(
        Exception, match=r"TRIGGER privilege on source public\.orders.*GRANT TRIGGER ON public\.orders TO"
    ):
        refresh(other, "amounts_2", AMOUNTS, **options)
    execute(pg_conn, f"GRANT TRIGGER ON orders TO {q(second)}")
    assert refresh(other, "amounts_2", AMOUNTS, **options).action == "CREATE"
    execute(pg_conn, "INSERT INTO orders VALUES (4, 'carol', 7); UPDATE orders SET amount = 11 WHERE id = 1")
    assert refresh(pg_conn, "totals", TOTALS).action == "DIFFERENTIAL"
    assert refresh(other, "amounts_2", AMOUNTS, **options).action == "DIFFERENTIAL"
    assert sorted(rows(pg_conn, "SELECT total FROM totals")) == sorted(
        rows(pg_conn, "SELECT sum(amount) FROM orders GROUP BY customer")
    )
    assert sorted(rows(pg_conn, "SELECT amount FROM amounts_2")) == sorted(
        rows(pg_conn, "SELECT amount FROM orders")
    )
