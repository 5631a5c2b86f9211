"""PostgreSQL: dbt's `grants:` on a stream table give SELECT on the model's columns, never the hidden ones.

A stream table also holds hidden `__ivm_` columns (here `__ivm_g0`, the GROUP BY key the query does not
output). A role named in `grants: {select: [...]}` may read the model's columns only; dbt compares the
column grants with the config at every run, so a role removed from it loses SELECT altogether.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.errors
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

pytestmark = pytest.mark.postgres

READER = f"ivm_grants_reader_{os.getpid()}"
OTHER = f"ivm_grants_other_{os.getpid()}"

SEED_CSV = """
id,customer_id,amount
1,1,10
2,1,20
3,2,30
""".lstrip()


def totals_sql(grantees: list[str]) -> str:
    return (
        f"{{{{ config(materialized='stream_table', grants={{'select': {grantees!r}}}) }}}}\n"
        "select sum(amount) as total from {{ ref('orders') }} group by customer_id\n"
    )


PLAIN_TABLE_SQL = f"""
{{{{ config(materialized='table', grants={{'select': ['{READER}']}}) }}}}
select id, amount from {{{{ ref('orders') }}}}
"""


@pytest.fixture(scope="class")
def roles(project: Any) -> Iterator[None]:
    """Cluster-wide roles for this class; their privileges in the test database go first, then they do."""
    for role in (READER, OTHER):
        project.run_sql(f'drop role if exists "{role}"')
        project.run_sql(f'create role "{role}" nologin')
        project.run_sql(f'grant usage on schema "{project.test_schema}" to "{role}"')
    yield
    for role in (READER, OTHER):
        project.run_sql(f'drop owned by "{role}" cascade')
        project.run_sql(f'drop role "{role}"')


@pytest.fixture
def as_reader(project: Any, pg_server: Any, dbt_database: str) -> Iterator[Any]:
    conn = psycopg2.connect(pg_server.dsn(dbt_database))
    conn.autocommit = True
    with conn.cursor() as cursor:
        cursor.execute(f'set role "{READER}"')
    yield conn
    conn.close()


def allowed(conn: Any, sql: str) -> bool:
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
    except psycopg2.errors.InsufficientPrivilege:
        return False
    return True


def select_grantees(project: Any, name: str) -> dict[str, list[str]]:
    """Roles other than the owner holding SELECT on `name`: {"table": [...], "<column>": [...]}."""
    relation = f'\'"{project.test_schema}"."{name}"\'::regclass'
    rows = project.run_sql(
        "select 'table', pg_get_userbyid(acl.grantee)::text from pg_class c "
        "cross join lateral aclexplode(c.relacl) acl "
        f"where c.oid = {relation} and acl.privilege_type = 'SELECT' and acl.grantee <> c.relowner "
        "union all "
        "select a.attname::text, pg_get_userbyid(acl.grantee)::text from pg_attribute a "
        "cross join lateral aclexplode(a.attacl) acl "
        f"where a.attrelid = {relation} and acl.privilege_type = 'SELECT' order by 1, 2",
        fetch="all",
    )
    found: dict[str, list[str]] = {}
    for where, grantee in rows:
        found.setdefault(where, []).append(grantee)
    return found


class TestStreamTableGrants:
    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {"totals.sql": totals_sql([READER]), "plain.sql": PLAIN_TABLE_SQL}

    @pytest.fixture(scope="class", autouse=True)
    def seeded(self, project: Any, roles: None) -> None:
        run_dbt(["seed"])

    def test_select_on_model_columns_only(self, project: Any, as_reader: Any) -> None:
        totals = f'"{project.test_schema}"."totals"'
        run_dbt(["run"])
        assert select_grantees(project, "totals") == {"total": [READER]}
        assert allowed(as_reader, f"select total from {totals}")
        assert not allowed(as_reader, f"select __ivm_g0 from {totals}")
        assert not allowed(as_reader, f"select * from {totals}")  # a reader names the model's columns
        # Other materializations keep dbt's table-level grants.
        assert select_grantees(project, "plain") == {"table": [READER]}

        # Nothing to change on a re-run.
        _, logs = run_dbt_and_capture(["--debug", "run", "--select", "totals"])
        assert "All grants are in place" in logs
        assert select_grantees(project, "totals") == {"total": [READER]}

        # Table-level SELECT granted by hand goes: converted for the configured role, revoked for another.
        project.run_sql(f'grant select on {totals} to "{READER}", "{OTHER}"')
        run_dbt(["run", "--select", "totals"])
        assert select_grantees(project, "totals") == {"total": [READER]}
        assert not allowed(as_reader, f"select __ivm_g0 from {totals}")

        # A rebuild creates the table afresh; the grant follows.
        run_dbt(["run", "--select", "totals", "--full-refresh"])
        assert select_grantees(project, "totals") == {"total": [READER]}
        assert allowed(as_reader, f"select total from {totals}")

        # Another role instead: the reader has no privilege left.
        write_file(totals_sql([OTHER]), project.project_root, "models", "totals.sql")
        run_dbt(["run", "--select", "totals"])
        assert select_grantees(project, "totals") == {"total": [OTHER]}
        assert not allowed(as_reader, f"select total from {totals}")

        # No role at all.
        write_file(totals_sql([]), project.project_root, "models", "totals.sql")
        run_dbt(["run", "--select", "totals"])
        assert select_grantees(project, "totals") == {}
