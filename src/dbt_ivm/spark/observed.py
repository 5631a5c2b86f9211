"""Pin a DataFrame and measure its rows in the same Spark job.

A refresh pins what it computes (``localCheckpoint``) and then needs a few numbers about those rows:
how many changes a change set holds, the span of a batch's keys, how many rows the MERGE will insert,
update and delete. Asking for them with a query of their own costs a Spark job each (planning,
scheduling, a scan of the pinned rows: 0.1–0.2 s on a small machine). Spark's observed metrics
compute aggregates over a DataFrame's rows while another action runs over it, so the pin itself
answers them.

The metrics reach the driver through a query-execution listener, after the action returns. Should
they never arrive (a plan shape whose metrics Spark drops), the values are computed by a query over
the pinned rows instead: slower, never wrong, never a hang.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from dbt_ivm.spark.jvm import values_of

DIALECT = "spark"
# How long to wait for the listener after the action returned (it is usually a few milliseconds).
WAIT_SECONDS = 30.0
_numbers = itertools.count()


def pin(frame: Any, view: str, metrics: Sequence[exp.Expr] = ()) -> tuple[Any, tuple[Any, ...]]:
    """Compute `frame` now, keep its rows as the temp view `view`, and return the pinned DataFrame
    (for `free`) and `metrics` (aggregates over its columns, e.g. ``COUNT(*)``) as they came out over
    those rows, in order."""
    if not metrics:
        pinned = frame.localCheckpoint(eager=True)
        pinned.createOrReplaceTempView(view)
        return pinned, ()
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    names = [f"m{index}" for index in range(len(metrics))]
    observation = Observation(f"__ivm_observed_{next(_numbers)}")
    columns = [F.expr(m.sql(DIALECT)).alias(n) for m, n in zip(metrics, names, strict=True)]
    pinned = frame.observe(observation, *columns).localCheckpoint(eager=True)
    pinned.createOrReplaceTempView(view)
    values = _delivered(observation, names)
    if values is None or any(n not in values for n in names):  # late, or dropped by Spark
        query = exp.select(*(m.copy() for m in metrics)).from_(exp.table_(view, quoted=True))
        return pinned, tuple(frame.sparkSession.sql(query.sql(DIALECT)).collect()[0])
    return pinned, tuple(values[n] for n in names)


def free(pinned: Any) -> None:
    """Drop the blocks that hold `pinned`'s rows now, not when the JVM collects the DataFrame (in a
    long-lived application, every refresh's pinned rows would stay until then)."""
    plan = pinned._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":  # what localCheckpoint returns
        plan.rdd().unpersist(False)


def _delivered(observation: Any, names: list[str]) -> dict[str, Any] | None:
    """The observation's values of `names`, or None when they did not arrive in `WAIT_SECONDS`."""
    found: dict[str, Any] = {}

    def wait() -> None:
        # What Observation.get waits on (without a timeout), read by name: Observation.get iterates
        # the Java map, which costs a JVM exception at its end (`jvm`).
        found.update(values_of(observation._jo.getAsJava(), names))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(WAIT_SECONDS)
    return found if not waiter.is_alive() else None
