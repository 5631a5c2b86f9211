"""One SparkSession (Iceberg over a temp warehouse) for the whole test session; a fresh schema per test."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.sessions import build_session

_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def spark_warehouse() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="dbt_ivm_spark_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(spark_warehouse: str) -> Iterator[Any]:
    session = build_session(spark_warehouse)
    yield session
    session.stop()


@pytest.fixture
def spark_schema(spark: Any) -> str:
    """A fresh database for one test (stream tables, sources and the ivm catalog live apart per test)."""
    name = f"t{next(_numbers)}"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {name}")
    return name
