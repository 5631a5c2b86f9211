"""dbt-labs' classic jaffle_shop, unchanged, with its marts as stream tables on PostgreSQL: after the
creating run and after each day's batch, every mart equals its compiled query and was refreshed
differentially; the project's own schema tests pass on the stream tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]
from psycopg2.extensions import parse_dsn
from tests.oracle import assert_matches_query

from tests import jaffle_shop

pytestmark = pytest.mark.postgres

SCHEMA = "jaffle"
VARS = "{marts: stream_table, refresh_mode: differential}"


def dbt(project: Path, *args: str) -> Any:
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(
        [*args, "--project-dir", str(project), "--profiles-dir", str(project), "--quiet"]
    )
    assert result.success, f"dbt {' '.join(args)} failed: {result.exception}"
    return result.result


def actions(conn: Any, since: int) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT stream_table, action FROM dbt_ivm.refresh_history WHERE refresh_id > %s ORDER BY refresh_id",
            (since,),
        )
        return {table.split(".")[-1]: action for table, action in cur.fetchall()}


def newest_refresh(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT coalesce(max(refresh_id), 0) FROM dbt_ivm.refresh_history")
        return int(cur.fetchone()[0])


def test_marts_follow_a_few_days_of_the_shop(pg_server: Any, pg_dsn: str, tmp_path: Path) -> None:
    project = jaffle_shop.copy_project(tmp_path)
    output = {
        "type": "ivm_postgres",
        "host": pg_server.host,
        "port": pg_server.port,
        "user": pg_server.user,
        "pass": "",
        "dbname": parse_dsn(pg_dsn)["dbname"],
        "schema": SCHEMA,
        "threads": 2,
    }
    (project / "profiles.yml").write_text(
        yaml.safe_dump({"jaffle_shop": {"target": "pg", "outputs": {"pg": output}}})
    )
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    shop = jaffle_shop.Shop(lambda name: f'"{SCHEMA}"."{name}"')

    def write(statements: list[str]) -> None:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def assert_marts_match(context: str) -> None:
        for mart in jaffle_shop.MARTS:
            assert_matches_query(conn, SCHEMA, mart, jaffle_shop.compiled_sql(mart, project), context)

    dbt(project, "seed")
    write(shop.grow(customers=150, orders=600))
    dbt(project, "run", "--vars", VARS)
    assert_marts_match("after the creating run")
    for day in range(3):
        before = newest_refresh(conn)
        write(shop.batch(0.02))
        dbt(project, "run", "--vars", VARS)
        assert_marts_match(f"after day {day + 1}")
        assert actions(conn, before) == {"customers": "DIFFERENTIAL", "orders": "DIFFERENTIAL"}
    dbt(project, "test")
    conn.close()
