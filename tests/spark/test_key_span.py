"""A batch's key span on Spark: it covers every key the batch touches, whatever the key's type, and
it lets a refresh skip the stream table's files that hold none of them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dbt_ivm.spark.apply import DIALECT, SpanProbe, TempViews, pinned_with_span
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import assert_matches_query, make_spec, refresh_and_check

pytestmark = pytest.mark.spark


@contextmanager
def session_conf(spark: Any, **settings: str) -> Iterator[None]:
    keys = {key.replace("_", "."): value for key, value in settings.items()}
    before = {key: spark.conf.get(key, None) for key in keys}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


KEYS = {
    "bigint": "(5), (-3), (9)",
    "decimal(10,2)": "(1.50), (-0.25), (12345678.99)",
    "string": "('o''brien'), ('a\\\\b'), ('zoë'), ('')",
    "date": "(DATE'2024-02-29'), (DATE'1999-12-31')",
    # New York's clocks go back at 06:00Z on 2024-11-03: 01:30 local names both 05:30Z and 06:30Z, so
    # a largest key of 06:30Z shown as local time would read back as 05:30Z and leave itself out.
    "timestamp": "(TIMESTAMP'2024-11-03 04:00:00Z'), (TIMESTAMP'2024-11-03 06:30:00.000001Z')",
    "timestamp_ntz": "(TIMESTAMP_NTZ'2024-11-03 01:30:00'), (TIMESTAMP_NTZ'2020-01-01 00:00:00')",
    "int": "(7), (NULL), (2)",
}


@pytest.mark.parametrize("key_type", list(KEYS))
def test_the_span_covers_every_key_and_no_more(spark: Any, key_type: str) -> None:
    views = TempViews(spark)
    try:
        with session_conf(spark, spark_sql_session_timeZone="America/New_York"):
            query = f"SELECT CAST(k AS {key_type}) AS k FROM VALUES {KEYS[key_type]} AS v(k)"
            rows, span = pinned_with_span(views, "keys", views.frame(query), "k")
            assert span is not None
            relation = rows.sql(DIALECT)
            bounds = f"min(k) = {span.low.sql(DIALECT)} AND max(k) = {span.high.sql(DIALECT)}"
            covered = f"count_if({span.covers().sql(DIALECT)}) = count(*)"
            assert spark.sql(f"SELECT {bounds}, {covered} FROM {relation}").collect()[0] == (True, True)
            assert span.holds_null == (key_type == "int")
    finally:
        views.drop()


def test_a_floating_point_key_has_no_span(spark: Any) -> None:
    views = TempViews(spark)
    try:
        frame = views.frame("SELECT CAST(k AS double) AS k FROM VALUES (1.0), (CAST('NaN' AS DOUBLE)) v(k)")
        assert SpanProbe.of(frame, "k") is None
    finally:
        views.drop()


SKIPPED = "number of skipped data files"


def skipped_data_files(spark: Any, after_execution: int) -> int:
    """Data files Iceberg's scans skipped (by their column bounds) in the SQL executions after
    `after_execution`, as Spark's SQL metrics recorded them."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    skipped = 0
    for index in range(executions.size()):
        execution = executions.apply(index)
        if execution.executionId() <= after_execution:
            continue
        accumulators = set()
        metrics = execution.metrics()
        for position in range(metrics.size()):
            metric = metrics.apply(position)
            if metric.name() == SKIPPED:
                accumulators.add(metric.accumulatorId())
        values = store.executionMetrics(execution.executionId()).iterator()
        while values.hasNext():
            pair = values.next()
            if pair._1() in accumulators:
                skipped += int(str(pair._2()).replace(",", ""))
    return skipped


def last_execution(spark: Any) -> int:
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((executions.apply(i).executionId() for i in range(executions.size())), default=-1)


def test_a_batch_of_recent_keys_skips_the_files_of_older_ones(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.events USING iceberg TBLPROPERTIES ('dbt_ivm.primary_key'='id') "
        "AS SELECT id, CAST(id % 7 AS INT) AS kind FROM range(4000)"
    )
    query = f"SELECT id, kind FROM {s}.events WHERE kind <> 3"
    # Eight files, written in key order (the stream table's own write order) by eight tasks.
    with session_conf(spark, spark_sql_shuffle_partitions="8", spark_sql_adaptive_enabled="false"):
        assert refresh_and_check(spark, s, "recent", query).action == "CREATE"
    files = spark.sql(f"SELECT count(*) FROM {s}.recent.files").collect()[0][0]
    assert files == 8, files
    spark.sql(f"UPDATE {s}.events SET kind = kind + 1 WHERE id >= 3990")
    spark.sql(f"INSERT INTO {s}.events VALUES (4000, 1), (4001, 3)")
    before = last_execution(spark)
    result = run_stream_table(spark, make_spec(s, "recent", query))
    skipped = skipped_data_files(spark, before)
    assert result.action == "DIFFERENTIAL", result.summary()
    assert_matches_query(spark, s, "recent", query)
    # The batch's keys all lie in the last file: the classification and the MERGE skip the other 7.
    assert skipped >= 2 * 7, skipped
