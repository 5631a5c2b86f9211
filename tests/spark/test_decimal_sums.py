"""Running SUM and AVG over Spark decimals keep every decimal: a batch's sum is added in the stored
sum's type (decimal(p + 10, s)), and AVG divides as Spark's own does. A decimal whose sum Spark would
round (more than 27 digits, more than 6 decimals) is refused by name, and AUTO refreshes it FULL."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import make_spec, refresh_and_check

pytestmark = pytest.mark.spark

# x: all 27 digits, 10 of them decimals; y: money; z: 38 digits but 4 decimals (kept).
ROWS = [
    "(1, 1, 12345678901234567.1234567891, 1234567890123456.78, 1234567890123456789012345678901234.5678)",
    "(2, 1, 0.0000000001, 0.01, 0.0001)",
    "(3, 2, 99999999999999999.9999999999, 9999999999999999.99, 1.0001)",
    "(4, 2, -0.3333333333, 0.33, -0.3333)",
]
WRITES = [
    "UPDATE {t} SET x = x + 0.0000000001, y = y + 0.01, z = z + 0.0001 WHERE id = 2",
    "DELETE FROM {t} WHERE id = 1",
    "INSERT INTO {t} VALUES (5, 1, 7.7777777777, 7.77, 7.7777), (6, 2, 0.0000000007, 0.07, 0.0007)",
    "UPDATE {t} SET g = 1 WHERE id = 3",
]


def test_decimal_sums_keep_their_decimals(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    t = f"{s}.amounts"
    spark.sql(
        f"CREATE TABLE {t} (id int, g int, x decimal(27,10), y decimal(18,2), z decimal(38,4)) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"INSERT INTO {t} VALUES {', '.join(ROWS)}")
    streams = {
        "sums": f"SELECT g, SUM(x) AS sx, SUM(y) AS sy, SUM(z) AS sz, COUNT(*) AS n FROM {t} GROUP BY g",
        "means": f"SELECT g, AVG(x) AS ax, AVG(y) AS ay, AVG(z) AS az FROM {t} GROUP BY g",
        "overall": f"SELECT SUM(x) AS sx, AVG(x) AS ax, AVG(y) AS ay FROM {t}",
    }
    for name, sql in streams.items():
        refresh_and_check(spark, s, name, sql, "create", refresh_mode="differential")
    for write in WRITES:
        spark.sql(write.format(t=t))
        for name, sql in streams.items():
            result = refresh_and_check(spark, s, name, sql, write, refresh_mode="differential")
            assert result.action == "DIFFERENTIAL", (write, name, result.summary())

    wide = f"SELECT g, SUM(CAST(x AS decimal(38,10))) AS total FROM {t} GROUP BY g"
    construct = "over decimal(38,10) (a running sum of it would lose decimals)"
    with pytest.raises(UnsupportedQuery, match=re.escape(construct) + ".*in model wide") as refused:
        run_stream_table(spark, make_spec(s, "wide", wide, refresh_mode="differential"))
    assert "decimal(27, 10)" in refused.value.fix, refused.value.fix
    refresh_and_check(spark, s, "wide", wide, "create")
    spark.sql(f"DELETE FROM {t} WHERE id = 2")
    result = refresh_and_check(spark, s, "wide", wide, "auto after a write")
    assert result.action == "FULL" and "lose decimals" in str(result.reason), result.summary()
