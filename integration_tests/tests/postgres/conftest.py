"""dbt functional-test fixtures for the `ivm_postgres` adapter, on the session's embedded server.

dbt-tests-adapter's fixtures (`project`, `adapter`, ...) are imported here rather than declared via
`pytest_plugins`, which pytest only accepts in the root conftest.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

import pytest
from dbt.flags import set_from_args

# dbt renders profiles through its global flags; they must exist before any dbt fixture runs.
set_from_args(Namespace(), None)  # type: ignore[arg-type]

from dbt.tests.fixtures.project import *  # noqa: E402, F403

FUNCTIONAL_DATABASE = "dbt_functional"
PG15_BIN = "/usr/lib/postgresql/15/bin"


@pytest.fixture(scope="session")
def dbt_database(pg_server: Any) -> str:
    """One database for every dbt functional test; each test class gets its own schema in it."""
    import psycopg2

    admin = psycopg2.connect(pg_server.dsn())
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("select 1 from pg_database where datname = %s", (FUNCTIONAL_DATABASE,))
        if cursor.fetchone() is None:
            cursor.execute(f'create database "{FUNCTIONAL_DATABASE}"')
    admin.close()
    return FUNCTIONAL_DATABASE


@pytest.fixture(scope="class")
def dbt_profile_target(pg_server: Any, dbt_database: str) -> dict[str, Any]:
    return {
        "type": "ivm_postgres",
        "threads": 2,
        "host": pg_server.host,
        "port": pg_server.port,
        "user": pg_server.user,
        "pass": "",
        "dbname": dbt_database,
    }
