"""COUNT(x): the summed weights of rows whose x is not NULL.

>>> [e.sql() for e in COUNT.weighted(exp.column("x"), exp.column("w"))]
['SUM(CASE WHEN x IS NULL THEN 0 ELSE w END)']
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.aggregates.base import Aggregator, non_null_weight, plus


def _weighted(argument: exp.Expr | None, weight: exp.Expr) -> list[exp.Expr]:
    assert argument is not None
    return [exp.func("SUM", non_null_weight(argument, weight))]


COUNT = Aggregator(
    name="count",
    call=exp.Count,
    states=("count",),
    weighted=_weighted,
    merge=lambda old, delta: [plus(old[0], delta[0])],
    finalize=lambda states, count, type_: states[0],
    from_scratch=lambda argument: [exp.func("COUNT", argument)],
)
