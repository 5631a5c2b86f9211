"""COUNT(*): the group's own reference count, which every aggregate group keeps anyway.

>>> from sqlglot import exp
>>> COUNT_STAR.finalize([], exp.column("__ivm_count", "s"), None).sql()
's.__ivm_count'
"""

from __future__ import annotations

from dbt_ivm.delta.aggregates.base import Aggregator

COUNT_STAR = Aggregator(
    name="count_star",
    states=(),
    weighted=lambda argument, weight: [],
    merge=lambda old, delta: [],
    finalize=lambda states, count, type_: count,
    from_scratch=lambda argument: [],
)
