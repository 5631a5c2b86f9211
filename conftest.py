"""Shared pytest options and fixtures: which backends run, and one PostgreSQL server per session.

pytest --backend postgres          # only PostgreSQL tests (engine + dbt)
pytest --backend spark             # only Spark tests
pytest --pg-bin /usr/lib/postgresql/15/bin   # run the PostgreSQL tests on another server build
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PG15_BIN = "/usr/lib/postgresql/15/bin"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        choices=["all", "postgres", "spark"],
        default=os.environ.get("DBT_IVM_BACKEND", "all"),
        help="which backends' tests run (tests marked postgres / spark)",
    )
    parser.addoption(
        "--pg-bin",
        default=os.environ.get("DBT_IVM_PG_BIN", ""),
        help="bin directory of the PostgreSQL build to test against ('15' means "
        + PG15_BIN
        + "); default: the embedded PostgreSQL 18",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    backend = config.getoption("--backend")
    if backend == "all":
        return
    other = "spark" if backend == "postgres" else "postgres"
    skip = pytest.mark.skip(reason=f"--backend {backend}")
    for item in items:
        if other in item.keywords and backend not in item.keywords:
            item.add_marker(skip)


def _pg_bin(config: pytest.Config) -> str | None:
    value = str(config.getoption("--pg-bin") or "")
    if value == "15":
        return PG15_BIN
    return value or None


@pytest.fixture(scope="session")
def pg_bin_dir(request: pytest.FixtureRequest) -> Path:
    """The bin directory of the PostgreSQL build under test (its pg_dump, pg_restore, initdb)."""
    from dbt_ivm.embedded import postgres_server

    return Path(_pg_bin(request.config) or postgres_server.embedded_bin_dir())


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[object]:
    """One throwaway PostgreSQL cluster for the whole test session (engine and dbt tests alike).

    Not under pytest's temp root: pytest keeps that 0700, and under root the server runs as an
    unprivileged user that could not reach its data directory there.
    """
    from dbt_ivm.embedded import postgres_server

    base = Path(tempfile.mkdtemp(prefix="dbt_ivm_tests_"))
    base.chmod(0o755)
    server = postgres_server.start(base / "data", bin_dir=_pg_bin(request.config))
    yield server
    postgres_server.destroy(base / "data")
    shutil.rmtree(base, ignore_errors=True)


_db_numbers = itertools.count(1)


@pytest.fixture
def pg_dsn(pg_server: object) -> Iterator[str]:
    """A fresh, empty database on the session's server; dropped after the test."""
    import psycopg2

    name = f"test_{os.getpid()}_{next(_db_numbers)}"
    admin = psycopg2.connect(pg_server.dsn())  # type: ignore[attr-defined]
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    yield pg_server.dsn(name)  # type: ignore[attr-defined]
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture
def pg_conn(pg_dsn: str) -> Iterator[object]:
    """An autocommit connection to a fresh database (the engine issues its own BEGIN/COMMIT)."""
    import psycopg2

    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    yield conn
    conn.close()
