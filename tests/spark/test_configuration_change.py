"""on_configuration_change on Spark: a changed stream-table config fails the run, is kept as registered
with a warning, or is applied and registered (the lifecycle is shared with PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.errors import IvmError
from dbt_ivm.spark import registry
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import make_spec, refresh_and_check

pytestmark = pytest.mark.spark

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY customer"


def test_a_changed_config_fails_continues_or_applies(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    sql = TOTALS.format(s=s)
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10),(2,'a',20),(3,'b',30),(4,'c',1)")
    # Registered as 'differential': AUTO could choose FULL by cost on a busy machine.
    refresh_and_check(spark, s, "totals", sql, "create", refresh_mode="differential")
    with pytest.raises(
        IvmError, match=r"refresh_mode: 'differential' -> 'full'.*on_configuration_change='fail'"
    ):
        run_stream_table(
            spark, make_spec(s, "totals", sql, refresh_mode="full", on_configuration_change="fail")
        )

    spark.sql(f"INSERT INTO {s}.orders VALUES (5,'c',5)")
    kept = refresh_and_check(
        spark, s, "totals", sql, "continue", refresh_mode="full", on_configuration_change="continue"
    )
    assert kept.action == "DIFFERENTIAL" and "keeps the previous configuration" in kept.warnings[0], (
        kept.warnings
    )
    assert registry.lookup(spark, f"{s}_ivm", f"{s}.totals").refresh_mode == "differential"  # type: ignore[union-attr]

    spark.sql(f"INSERT INTO {s}.orders VALUES (6,'c',6)")
    applied = refresh_and_check(spark, s, "totals", sql, "apply", refresh_mode="full")
    assert applied.action == "FULL" and not applied.warnings, applied.summary()
    assert registry.lookup(spark, f"{s}_ivm", f"{s}.totals").refresh_mode == "full"  # type: ignore[union-attr]


def test_table_properties_follow_on_configuration_change(spark: Any, spark_schema: str) -> None:
    """tblproperties: a change is refused, kept, or applied; a property dropped from the config is
    unset from the table when applied."""
    s = spark_schema
    sql = TOTALS.format(s=s)
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10),(2,'b',20)")
    first = {"write.merge.mode": "merge-on-read", "dbt-ivm-test.owner": "team a"}
    mode = "differential"  # AUTO could choose FULL by cost on a busy machine
    refresh_and_check(spark, s, "totals", sql, "create", table_properties=first, refresh_mode=mode)

    def held() -> dict[str, str]:
        return {str(k): str(v) for k, v in spark.sql(f"SHOW TBLPROPERTIES {s}.totals").collect()}

    assert held()["dbt-ivm-test.owner"] == "team a"
    second = {"write.merge.mode": "copy-on-write"}
    with pytest.raises(IvmError, match=r"table_properties: .*on_configuration_change='fail'"):
        run_stream_table(
            spark,
            make_spec(
                s, "totals", sql, table_properties=second, refresh_mode=mode, on_configuration_change="fail"
            ),
        )
    spark.sql(f"INSERT INTO {s}.orders VALUES (3,'c',30)")
    kept = refresh_and_check(
        spark,
        s,
        "totals",
        sql,
        "continue",
        table_properties=second,
        refresh_mode=mode,
        on_configuration_change="continue",
    )
    assert kept.warnings and held()["write.merge.mode"] == "merge-on-read", kept.warnings
    spark.sql(f"INSERT INTO {s}.orders VALUES (4,'d',40)")
    applied = refresh_and_check(spark, s, "totals", sql, "apply", table_properties=second, refresh_mode=mode)
    assert applied.action == "DIFFERENTIAL" and not applied.warnings, applied.summary()
    properties = held()
    assert properties["write.merge.mode"] == "copy-on-write" and "dbt-ivm-test.owner" not in properties
