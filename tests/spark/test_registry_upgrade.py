"""A Spark catalog written by an earlier version: its history table gains the columns added since
(invocation_id), and the next refresh fills them."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.spark import registry
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import make_spec

pytestmark = pytest.mark.spark


def test_an_earlier_history_table_gains_the_invocation_column(spark: Any, spark_schema: str) -> None:
    s, catalog = spark_schema, f"{spark_schema}_ivm"
    before = registry.HISTORY_COLUMNS.replace(", invocation_id string", "")
    assert before != registry.HISTORY_COLUMNS
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {catalog}")
    spark.sql(
        f"CREATE TABLE {catalog}.refresh_history ({before}) USING iceberg "
        f"TBLPROPERTIES ({registry.REGISTRY_PROPERTIES})"
    )
    spark.sql(f"CREATE TABLE {s}.people (id int, name string) USING iceberg")
    spark.sql(f"INSERT INTO {s}.people VALUES (1, 'a'), (2, 'b')")
    spec = make_spec(s, "named", f"SELECT id, name FROM {s}.people", invocation_id="run-7")
    assert run_stream_table(spark, spec).action == "CREATE"
    rows = spark.sql(f"SELECT action, invocation_id FROM {catalog}.refresh_history").collect()
    assert [tuple(r) for r in rows] == [("CREATE", "run-7")]
