"""AUTO's choice by cost on Spark (dbt_ivm.cost), from the refresh history alone: Catalyst's cost
model has no useful absolute cost to compare a delta with a recompute, so only measured seconds count.

Until history holds both a differential refresh and one computed from scratch (the CREATE counts),
the threshold rule alone decides: the first differential refresh is the measurement.
"""

from __future__ import annotations

from typing import Any

from dbt_ivm import cost
from dbt_ivm.spark import registry
from dbt_ivm.spec import StreamTableSpec


def choose(spark: Any, spec: StreamTableSpec, stream_table: str, changes: int) -> cost.Choice | None:
    """DIFFERENTIAL or FULL for a bound batch of `changes` (its net changes, counted as its change sets
    were pinned); None when history cannot tell yet."""
    history = registry.recent_refreshes(spark, spec.catalog_schema, stream_table)
    if not cost.history_decides(history):
        return None
    return cost.choose(changes, history)
