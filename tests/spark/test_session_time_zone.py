"""A stream table that reads or shows dates and timestamps follows the session time zone it was
computed in (casts, date parts): a run in another time zone recomputes it, saying why; one that reads
no date or timestamp does not care."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark

ZONE = "spark.sql.session.timeZone"


def test_another_time_zone_recomputes_what_depends_on_it(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.visits (id int, at timestamp, pages int) USING iceberg")
    spark.sql(
        f"INSERT INTO {s}.visits VALUES (1, TIMESTAMP '2026-11-27 23:30:00 UTC', 3), "
        f"(2, TIMESTAMP '2026-11-28 06:00:00 UTC', 5)"
    )
    streams = {
        "per_day": f"SELECT CAST(at AS date) AS day, SUM(pages) AS pages FROM {s}.visits GROUP BY CAST(at AS date)",
        "shown": f"SELECT id, CAST(at AS string) AS at_text FROM {s}.visits",
        "pages": f"SELECT id, pages FROM {s}.visits",
    }
    before = spark.conf.get(ZONE)
    try:
        spark.conf.set(ZONE, "UTC")
        for name, sql in streams.items():
            refresh_and_check(spark, s, name, sql, "create", refresh_mode="differential")
        spark.conf.set(ZONE, "America/Los_Angeles")
        for name, sql in streams.items():
            result = refresh_and_check(spark, s, name, sql, "in another zone", refresh_mode="differential")
            if name == "pages":
                assert result.action == "SKIP", result.summary()
            else:
                assert result.action == "FULL" and "time zone" in str(result.reason), result.summary()
        spark.sql(f"INSERT INTO {s}.visits VALUES (3, TIMESTAMP '2026-11-28 07:59:00 UTC', 1)")
        for name, sql in streams.items():
            result = refresh_and_check(spark, s, name, sql, "a write, same zone", refresh_mode="differential")
            assert result.action == "DIFFERENTIAL", result.summary()
    finally:
        spark.conf.set(ZONE, before)
