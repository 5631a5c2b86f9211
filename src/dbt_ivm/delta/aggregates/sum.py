"""SUM(x): the weighted sum, and the count of non-NULL rows (SUM over only NULLs is NULL).

>>> [e.sql() for e in SUM.weighted(exp.column("x"), exp.column("w"))]
['SUM(w * x)', 'SUM(CASE WHEN x IS NULL THEN 0 ELSE w END)']
>>> SUM.finalize([exp.column("t"), exp.column("n")], exp.column("c"), None).sql()
't'
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.aggregates.base import Aggregator, non_null_weight, plus

FLOATS = frozenset({"double precision", "real", "double", "float"})


def weighted_sum(argument: exp.Expr | None, weight: exp.Expr) -> list[exp.Expr]:
    assert argument is not None
    return [
        exp.func("SUM", exp.Mul(this=weight, expression=argument)),
        exp.func("SUM", non_null_weight(argument, weight.copy())),
    ]


def merge_sum(old: list[exp.Expr], delta: list[exp.Expr]) -> list[exp.Expr]:
    non_null = plus(old[1], delta[1])
    empty = exp.EQ(this=non_null.copy(), expression=exp.Literal.number(0))
    total = exp.Case(ifs=[exp.If(this=empty, true=exp.Null())], default=plus(old[0], delta[0]))
    return [total, non_null]


def decimal_digits(type_: exp.DataType | None) -> tuple[int, int] | None:
    """(precision, scale) of a decimal type that states them (Spark's always do; PostgreSQL's SUM and
    AVG give an unbounded numeric): None otherwise."""
    if type_ is None or not type_.is_type("decimal") or len(type_.expressions) != 2:
        return None
    precision, scale = (int(p.this.this) for p in type_.expressions)
    return precision, scale


def bounded_sum_type(func: str, result: exp.DataType | None) -> exp.DataType | None:
    """The type of the running sum behind SUM or AVG over a bounded decimal: the SUM's own result,
    decimal(p + 10, s) at most 38 digits; for AVG, whose result is decimal(p + 4, s + 4), the same
    sum. None for any other type (a sum whose additions can lose no digits)."""
    digits = decimal_digits(result)
    if digits is None or func not in ("sum", "avg"):
        return None
    precision, scale = digits
    if func == "avg":
        precision, scale = min(38, precision + 6), scale - 4
    return exp.DataType.build(f"DECIMAL({precision}, {scale})")


def sum_from_scratch(argument: exp.Expr | None) -> list[exp.Expr]:
    return [exp.func("SUM", argument), exp.func("COUNT", argument)]


SUM = Aggregator(
    name="sum",
    call=exp.Sum,
    states=("sum", "nn"),
    weighted=weighted_sum,
    merge=merge_sum,
    finalize=lambda states, count, type_: states[0],
    from_scratch=sum_from_scratch,
    inexact_types=FLOATS,
)
