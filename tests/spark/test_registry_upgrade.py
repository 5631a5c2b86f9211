"""The Spark registry across versions and processes: a history table an earlier version created gains
the columns added since (invocation_id); the model's run settings dbt kept hold for a refresh without
dbt."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.spark import registry
from dbt_ivm.spark.runner import run_stream_table
from dbt_ivm.spark.standalone import refresh
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


def test_a_refresh_without_dbt_keeps_the_models_threshold(spark: Any, spark_schema: str) -> None:
    """dbt kept full_refresh_threshold=0.01 with the registration: a PySpark refresh of a batch over 1 %
    of the source goes FULL, as `dbt run` would; a threshold given to it overrides, for that refresh."""
    s, catalog = spark_schema, f"{spark_schema}_ivm"
    spark.sql(f"CREATE TABLE {s}.people (id int, name string) USING iceberg")
    spark.sql(f"INSERT INTO {s}.people SELECT id, concat('p', id) FROM range(1, 201) AS r(id)")
    query = f"SELECT id, name FROM {s}.people"
    built = run_stream_table(spark, make_spec(s, "named", query, full_refresh_threshold=0.01))
    assert built.action == "CREATE"
    kept = spark.sql(f"SELECT run_settings FROM {catalog}.stream_tables").collect()[0][0]
    assert '"full_refresh_threshold": 0.01' in kept, kept
    spark.sql(f"INSERT INTO {s}.people VALUES (201, 'new'), (202, 'new'), (203, 'new')")
    first = refresh(spark, f"{s}.named", catalog_schema=catalog)
    assert first.action == "FULL" and "threshold" in (first.reason or ""), first.summary()
    spark.sql(f"INSERT INTO {s}.people VALUES (204, 'new'), (205, 'new'), (206, 'new')")
    second = refresh(spark, f"{s}.named", catalog_schema=catalog, full_refresh_threshold=0.5)
    assert second.action == "DIFFERENTIAL", second.summary()
    # Refreshes without dbt leave the model's settings as dbt kept them.
    assert spark.sql(f"SELECT run_settings FROM {catalog}.stream_tables").collect()[0][0] == kept
