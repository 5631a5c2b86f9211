"""AVG(x): SUM's state; the value is the sum over the non-NULL count, in AVG's own result type
(over a Spark decimal, whole part and remainder apart, so the quotient keeps its decimals).

>>> AVG.finalize([exp.column("t"), exp.column("n")], exp.column("c"), exp.DataType.build("numeric")).sql()
'CASE WHEN n = 0 THEN NULL ELSE CAST(CAST(t AS DECIMAL) / CAST(n AS DECIMAL) AS DECIMAL) END'
>>> spark = exp.DataType.build("decimal(14, 6)", dialect="spark")
>>> print(AVG.finalize([exp.column("t"), exp.column("n")], exp.column("c"), spark).sql("spark"))
CASE WHEN n = 0 THEN NULL ELSE CAST(CAST(CAST(CAST(t AS DECIMAL(20, 2)) / CAST(n AS DECIMAL(20, 0)) AS DECIMAL(18, 0)) AS DECIMAL(14, 6)) + CAST(CAST(CAST(t AS DECIMAL(20, 2)) - CAST(CAST(CAST(t AS DECIMAL(20, 2)) / CAST(n AS DECIMAL(20, 0)) AS DECIMAL(18, 0)) * CAST(n AS DECIMAL(20, 0)) AS DECIMAL(18, 0)) AS DECIMAL(22, 2)) / CAST(n AS DECIMAL(20, 0)) AS DECIMAL(14, 6)) AS DECIMAL(14, 6)) END
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.aggregates.base import Aggregator
from dbt_ivm.delta.aggregates.sum import (
    FLOATS,
    bounded_sum_type,
    decimal_digits,
    merge_sum,
    sum_from_scratch,
    weighted_sum,
)


def _finalize(states: list[exp.Expr], count: exp.Expr, type_: exp.DataType | None) -> exp.Expr:
    total, non_null = states
    result = type_ or exp.DataType.build("numeric")
    summed = bounded_sum_type("avg", type_)
    if summed is None:
        quotient: exp.Expr = exp.Div(this=exp.cast(total, result), expression=exp.cast(non_null, result))
    else:
        quotient = _decimal_quotient(total, non_null, summed, result)
    empty = exp.EQ(this=non_null.copy(), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=empty, true=exp.Null())], default=exp.cast(quotient, result))


def _decimal_quotient(
    total: exp.Expr, count: exp.Expr, summed: exp.DataType, result: exp.DataType
) -> exp.Expr:
    """sum / count over bounded decimals with 18 decimals to spare. Spark divides two decimals with
    at most 38 digits in all, so a sum with many integer digits keeps few decimals (or overflows, cast
    to the result type first). Its whole part q and then the remainder's share, (sum − q·count) /
    count, are divided apart: the remainder is smaller than the count, and leaves room for decimals."""
    digits = decimal_digits(summed)
    assert digits is not None  # bounded_sum_type gives a decimal that states its digits
    precision, scale = digits
    whole_type = exp.DataType.build(f"DECIMAL({precision - scale}, 0)")
    divisor = _cast(count, exp.DataType.build("DECIMAL(20, 0)"))
    total = _cast(total, summed)
    # Any whole number near the quotient serves: the remainder's share corrects it.
    whole = _cast(exp.Div(this=total, expression=divisor), whole_type)
    taken = _cast(exp.Mul(this=whole.copy(), expression=divisor.copy()), whole_type.copy())
    remainder = exp.Sub(this=total.copy(), expression=taken)
    small = exp.DataType.build(f"DECIMAL({min(38, 20 + scale)}, {scale})")
    share = exp.Div(this=_cast(remainder, small), expression=divisor.copy())
    return exp.Add(this=_cast(whole.copy(), result), expression=_cast(share, result.copy()))


def _cast(value: exp.Expr, to: exp.DataType) -> exp.Cast:
    # Always a cast: exp.cast skips one whose operand is a cast to another decimal.
    return exp.Cast(this=value, to=to.copy())


AVG = Aggregator(
    name="avg",
    call=exp.Avg,
    states=("sum", "nn"),
    weighted=weighted_sum,
    merge=merge_sum,
    finalize=_finalize,
    from_scratch=sum_from_scratch,
    inexact_types=FLOATS,
)
