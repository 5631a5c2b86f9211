"""What a Spark refresh learns without a query of its own: counts and key spans observed while the
rows are pinned (`observed`). They must answer exactly what a query of its own would."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F
from sqlglot import exp

from dbt_ivm.spark import observed
from dbt_ivm.spark.apply import TempViews

pytestmark = pytest.mark.spark

COUNTS = [exp.func("COUNT", exp.Star()), exp.func("SUM", exp.column("v")), exp.func("MAX", exp.column("v"))]


def test_metrics_come_out_of_the_pin(spark: Any) -> None:
    views = TempViews(spark)
    try:
        some, values = views.observed("some", views.frame("SELECT id AS v FROM range(1, 11)"), COUNTS)
        assert values == (10, 55, 10)
        assert spark.sql(f"SELECT count(*) FROM {some.sql('spark')}").first()[0] == 10
        _, none = views.observed("none", views.frame("SELECT id AS v FROM range(5) WHERE id > 9"), COUNTS)
        assert none == (0, None, None)
    finally:
        views.drop()


def test_metrics_that_never_arrive_are_computed_from_the_pinned_rows(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An observation whose frame never ran: its listener never answers, the wait gives up.
    monkeypatch.setattr(observed, "WAIT_SECONDS", 0.2)
    idle = Observation("never_run")
    spark.range(3).observe(idle, F.count(F.lit(1)))
    assert observed._delivered(idle) is None
    # Then a pin whose metrics do not arrive answers from a query over the rows it kept.
    monkeypatch.setattr(observed, "_delivered", lambda observation: None)
    views = TempViews(spark)
    try:
        _, values = views.observed("late", views.frame("SELECT id AS v FROM range(1, 5)"), COUNTS)
        assert values == (4, 10, 4)
    finally:
        views.drop()
