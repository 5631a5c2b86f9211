"""dbt functional-test fixtures for the `ivm_postgres` adapter, on the session's embedded server.

dbt-tests-adapter's fixtures (`project`, `adapter`, ...) are imported here rather than declared via
`pytest_plugins`, which pytest only accepts in the root conftest.
"""

from __future__ import annotations

import shutil
import tempfile
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
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


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The session's server, outside pytest's temp root (see tests/conftest.py: pytest keeps that 0700,
    and the server, run under root as an unprivileged user whose group is root's, cannot reach it)."""
    from dbt_ivm.embedded import postgres_server

    value = str(request.config.getoption("--pg-bin") or "")
    bin_dir = PG15_BIN if value == "15" else (value or None)
    base = Path(tempfile.mkdtemp(prefix="dbt_ivm_functional_"))
    base.chmod(0o755)
    server = postgres_server.start(base / "data", bin_dir=bin_dir)
    yield server
    postgres_server.destroy(base / "data")
    shutil.rmtree(base, ignore_errors=True)
