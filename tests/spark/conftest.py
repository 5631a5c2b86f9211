"""The pytest process's one SparkSession (shared with integration_tests/tests/spark); a fresh schema per test."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.sessions import shared_session

_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def engine_warehouse() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="dbt_ivm_spark_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(engine_warehouse: str) -> Any:
    # Not stopped here: the integration tests' fixture may use the same session after these tests.
    return shared_session(Path(engine_warehouse))


@pytest.fixture
def spark_schema(spark: Any) -> str:
    """A fresh database for one test (stream tables, sources and the ivm catalog live apart per test)."""
    name = f"t{next(_numbers)}"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {name}")
    return name
