"""dbt-labs' classic jaffle_shop, unchanged, with its marts as stream tables on PostgreSQL: after the
creating run and after each day's batch, every mart equals its compiled query and was refreshed
differentially; the project's own schema tests pass on the stream tables (tests/jaffle_shop.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2.extensions import parse_dsn

from tests import jaffle_shop, oracle

pytestmark = pytest.mark.postgres

SCHEMA = "jaffle"


class PostgresShop:
    def __init__(self, dsn: str) -> None:
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True

    def write(self, statements: list[str]) -> None:
        with self.conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def assert_matches_query(self, name: str, sql: str, context: str) -> None:
        oracle.assert_matches_query(self.conn, SCHEMA, name, sql, context)

    def newest_refresh(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute("SELECT coalesce(max(refresh_id), 0) FROM dbt_ivm.refresh_history")
            return int(cur.fetchone()[0])

    def actions_since(self, refresh_id: int) -> dict[str, str]:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT stream_table, action FROM dbt_ivm.refresh_history WHERE refresh_id > %s "
                "ORDER BY refresh_id",
                (refresh_id,),
            )
            return {table.split(".")[-1]: action for table, action in cur.fetchall()}


def test_marts_follow_a_few_days_of_the_shop(pg_server: Any, pg_dsn: str, tmp_path: Path) -> None:
    project = jaffle_shop.copy_project(tmp_path)
    output = {"type": "ivm_postgres", "host": pg_server.host, "port": pg_server.port, "user": pg_server.user}
    output |= {"pass": "", "dbname": parse_dsn(pg_dsn)["dbname"], "schema": SCHEMA, "threads": 2}
    jaffle_shop.write_profile(project, output)
    warehouse = PostgresShop(pg_dsn)
    jaffle_shop.follow_days(project, warehouse, jaffle_shop.Shop(lambda name: f'"{SCHEMA}"."{name}"'))
    warehouse.conn.close()
