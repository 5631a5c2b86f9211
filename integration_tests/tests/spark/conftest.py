"""Spark fixtures: one embedded Spark + Iceberg session for the whole test session, and dbt's
functional-test fixtures for the `ivm_spark` adapter on it.

dbt-tests-adapter's fixtures (`project`, `adapter`, ...) are imported here rather than declared via
`pytest_plugins`, which pytest only accepts in the root conftest. dbt runs in this process, so every
dbt invocation of every test uses the same SparkSession (the adapter returns the running session).
"""

from __future__ import annotations

import itertools
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbt.flags import set_from_args

# dbt renders profiles through its global flags; they must exist before any dbt fixture runs.
set_from_args(Namespace(), None)  # type: ignore[arg-type]

from dbt.tests.fixtures.project import *  # noqa: E402, F403
from tests.spark.sessions import TEST_THRIFT_PORT, shared_session, shared_warehouse  # noqa: E402

from dbt_ivm.spark.session import ICEBERG_SESSION_CATALOG, existing_session  # noqa: E402

_schema_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def spark_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_warehouse(tmp_path_factory)


@pytest.fixture(scope="session")
def spark(spark_warehouse: Path) -> Iterator[Any]:
    """The embedded session (Iceberg's SparkSessionCatalog over a Derby-backed Hive metastore)."""
    before = existing_session()
    # The same session as tests/spark's fixture (whichever runs first starts it), with the Thrift
    # server's port among its static settings.
    session = shared_session(spark_warehouse)
    catalog = session.conf.get("spark.sql.catalog.spark_catalog", "")
    if catalog != ICEBERG_SESSION_CATALOG:
        pytest.fail(
            "another SparkSession was started first in this process with spark_catalog="
            f"{catalog!r}; the Spark tests need dbt_ivm.spark.session's (run them in their own process)"
        )
    yield session
    if before is None:
        session.stop()


@pytest.fixture(scope="session")
def thrift_server(spark: Any) -> int:
    """A Spark Thrift server on the test session (what `method: thrift` profiles connect to); its port."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext()
    )
    return TEST_THRIFT_PORT


@pytest.fixture
def spark_schema(spark: Any) -> Iterator[str]:
    """A fresh database for one test, dropped afterwards."""
    name = f"ivm_test_{next(_schema_numbers)}"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS `{name}` CASCADE")


@pytest.fixture(scope="class")
def dbt_profile_target(spark: Any, spark_warehouse: Path) -> dict[str, Any]:
    return {
        "type": "ivm_spark",
        "method": "session",
        "warehouse": str(spark_warehouse),
        "threads": 1,
    }
