"""The pytest process's one SparkSession (shared with integration_tests/tests/spark); a fresh schema per test."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.spark.sessions import shared_session, shared_warehouse

_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # The same warehouse and session as integration_tests/tests/spark's fixture; not stopped here,
    # those tests may use the session after these.
    return shared_session(shared_warehouse(tmp_path_factory))


@pytest.fixture
def spark_schema(spark: Any) -> str:
    """A fresh database for one test (stream tables, sources and the ivm catalog live apart per test)."""
    name = f"t{next(_numbers)}"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {name}")
    return name
