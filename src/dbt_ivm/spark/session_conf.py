"""Session settings a refresh needs, set for its duration and put back when the last refresh that
needs them ends (dbt threads share one SparkSession, so a plain set-and-restore per refresh would let
one thread restore a value while another still relies on the override).

Two are used: Spark 3.5's constraint propagation fails ("key not found") on a UNION ALL whose
branches filter with correlated EXISTS over differently-aliased reads of one table — the shape of the
existence and outer-join delta rules — and Iceberg's runtime group filter scans the stream table once
more before a MERGE.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CONSTRAINT_PROPAGATION = "spark.sql.constraintPropagation.enabled"
GROUP_FILTER = "spark.sql.optimizer.runtime.rowLevelOperationGroupFilter.enabled"

_guard = threading.Lock()
_holders: dict[tuple[int, str], int] = {}
_saved: dict[tuple[int, str], str | None] = {}


@contextmanager
def overridden(spark: Any, key: str, value: str) -> Iterator[None]:
    """`key` set to `value` in `spark`'s session while any caller is inside this block."""
    slot = (id(spark), key)
    with _guard:
        if _holders.get(slot, 0) == 0:
            _saved[slot] = spark.conf.get(key, None)
            spark.conf.set(key, value)
        _holders[slot] = _holders.get(slot, 0) + 1
    try:
        yield
    finally:
        with _guard:
            _holders[slot] -= 1
            if _holders[slot] == 0:
                previous = _saved.pop(slot)
                if previous is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, previous)
