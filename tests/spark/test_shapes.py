"""The shared query shapes (tests/shapes.py) on Spark/Iceberg, all in one test: every Spark statement is
an Iceberg commit, so one schema holds the sources and every stream table, and two small batches of
random DML are refreshed and checked (multiset oracle) for every stream table.

A stream table that fails (refused, wrong rows, a FULL refresh) is recorded and left out of the later
cycles; the test fails at the end naming every broken stream table, so one does not hide another.
DBT_IVM_SHAPES_SEED picks another seed; it is in the failure message. DBT_IVM_SHAPES (names, comma
separated) runs only those stream tables.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from tests.depth import by_depth
from tests.shapes import ONLY_MODEL_COLUMNS, Workload, create_statements, streams
from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("DBT_IVM_SHAPES_SEED", "20250101"))
# One batch in CI (PostgreSQL's shapes take six, Spark's randomized suite three refreshes in a row
# on stored state); --deep refreshes six times.
CYCLES = by_depth(1, 6)
CHANGES = 3
MESSAGE_LINES = int(os.environ.get("DBT_IVM_MESSAGE_LINES", "4"))


def _first_lines(error: BaseException) -> str:
    lines = f"{type(error).__name__}: {error}".strip().splitlines()
    return "\n    ".join(lines[:MESSAGE_LINES])


def test_shapes_refresh_differentially(spark: Any, spark_schema: str) -> None:
    """Over 60 s (about 11 min in CI): 74 stream tables created and refreshed twice, each refresh a
    few Spark jobs and Iceberg commits, each checked by the oracle; one test so the sources and
    their commits are shared."""
    s = spark_schema
    rng = random.Random(SEED)
    for statement in create_statements(s, "spark"):
        spark.sql(statement)
    workload = Workload(s, rng)
    for statement in workload.seed():
        spark.sql(statement)
    active = streams(s)
    only = [n for n in os.environ.get("DBT_IVM_SHAPES", "").split(",") if n]
    if only:
        active = {n: q for n, q in active.items() if n in only}
    failures: dict[str, str] = {}

    def refresh(name: str, sql: str, stage: str, allowed: tuple[str, ...]) -> None:
        try:
            result = refresh_and_check(
                spark, s, name, sql, f"seed {SEED}, {stage}", refresh_mode="differential"
            )
            assert result.action in allowed, f"{stage}: {result.action} not in {allowed}: {result.summary()}"
        except Exception as error:  # recorded, reported together at the end
            failures[name] = f"{stage}: {_first_lines(error)}"

    for name, sql in active.items():
        refresh(name, sql, "create", ("CREATE",))
        if name in ONLY_MODEL_COLUMNS and name not in failures:
            hidden = [f.name for f in spark.table(f"{s}.{name}").schema.fields if f.name.startswith("__ivm_")]
            if hidden:
                failures[name] = f"create: hidden columns {hidden}"
    for cycle in range(CYCLES):
        batch = workload.batch(CHANGES)
        for statement in batch:
            spark.sql(statement)
        for name, sql in active.items():
            if name not in failures:
                refresh(name, sql, f"cycle {cycle}: {batch}", ("DIFFERENTIAL", "SKIP"))
    passed = sorted(set(active) - set(failures))
    assert not failures, (
        f"seed {SEED} (DBT_IVM_SHAPES_SEED): {len(failures)} of {len(active)} stream tables failed "
        f"(passed: {', '.join(passed) or 'none'}):\n"
        + "\n".join(f"  {name}: {message}" for name, message in failures.items())
    )
