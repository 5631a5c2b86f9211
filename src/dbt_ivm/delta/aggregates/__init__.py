"""The aggregate functions the delta rules maintain: one module per function, each an `Aggregator`
(`base.py`) registered here by the planner's name for it. Adding one is adding a module."""

from __future__ import annotations

from dbt_ivm.delta.aggregates.avg import AVG
from dbt_ivm.delta.aggregates.base import Aggregator
from dbt_ivm.delta.aggregates.count import COUNT
from dbt_ivm.delta.aggregates.count_star import COUNT_STAR
from dbt_ivm.delta.aggregates.sum import SUM

REGISTRY: dict[str, Aggregator] = {a.name: a for a in (COUNT_STAR, COUNT, SUM, AVG)}

__all__ = ["REGISTRY", "Aggregator"]
