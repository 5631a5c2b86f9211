"""AVG(x): SUM's state; the value is the sum over the non-NULL count, in AVG's own result type.

>>> AVG.finalize([exp.column("t"), exp.column("n")], exp.column("c"), exp.DataType.build("numeric")).sql()
'CASE WHEN n = 0 THEN NULL ELSE CAST(CAST(t AS DECIMAL) / CAST(n AS DECIMAL) AS DECIMAL) END'
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.aggregates.base import Aggregator
from dbt_ivm.delta.aggregates.sum import FLOATS, merge_sum, sum_from_scratch, weighted_sum


def _finalize(states: list[exp.Expr], count: exp.Expr, type_: exp.DataType | None) -> exp.Expr:
    total, non_null = states
    result = type_ or exp.DataType.build("numeric")
    quotient = exp.Div(this=exp.cast(total, result), expression=exp.cast(non_null, result))
    empty = exp.EQ(this=non_null.copy(), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=empty, true=exp.Null())], default=exp.cast(quotient, result))


AVG = Aggregator(
    name="avg",
    states=("sum", "nn"),
    weighted=weighted_sum,
    merge=merge_sum,
    finalize=_finalize,
    from_scratch=sum_from_scratch,
    inexact_types=FLOATS,
)
