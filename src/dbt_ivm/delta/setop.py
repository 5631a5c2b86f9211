"""Delta rule for UNION / INTERSECT / EXCEPT, distinct or ALL, by counting per row value.

A value's multiplicity in the result is a function of its counts a and b in the two inputs:
UNION [a+b>0], INTERSECT [a>0 ∧ b>0], INTERSECT ALL min(a, b), EXCEPT [a>0 ∧ b=0], EXCEPT ALL
max(a−b, 0). For each value the batch touches, the counts now are read from the inputs' current
rows (those values only) and the counts before are those minus the batch's weights; the value's
weight in the delta is f(now) − f(before). Following one row: with ``SELECT k FROM a EXCEPT SELECT
k FROM b``, inserting k=3 into b (a holds k=3 twice) gives a=2, b=1 now and a=2, b=0 before: f goes
1 → 0, so k=3 gets weight −1.
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.grouping import among, left_joined_on_keys, restricted_rows
from dbt_ivm.delta.terms import aliased, union_all
from dbt_ivm.plan.nodes import SetOp
from dbt_ivm.sqltext import WEIGHT
from dbt_ivm.target import Target

SIDE, A, B = "__ivm_side", "__ivm_a", "__ivm_b"
CHANGES, NOW, DELTA, COUNTS = (
    "__ivm_changes",
    "__ivm_now",
    "__ivm_d",
    "__ivm_counts",
)


def setop_contents(plan: SetOp, left: exp.Query, right: exp.Query) -> exp.Query:
    distinct = not plan.all
    if plan.kind == "union":
        return exp.union(left, right, distinct=distinct)
    if plan.kind == "intersect":
        return exp.intersect(left, right, distinct=distinct)
    return exp.except_(left, right, distinct=distinct)


def _cols(plan: SetOp, table: str | None) -> list[exp.Column]:
    return [exp.column(n, table, quoted=True) for n in plan.names]


def _sided(plan: SetOp, query: exp.Expr, names: tuple[str, ...], side: int, weighted: bool) -> exp.Query:
    alias = "__ivm_branch"
    columns: list[exp.Expr] = [
        exp.alias_(exp.column(n, alias, quoted=True), t, quoted=True)
        for n, t in zip(names, plan.names, strict=True)
    ]
    weight: exp.Expr = exp.column(WEIGHT, alias, quoted=True) if weighted else exp.Literal.number(1)
    columns += [
        exp.alias_(weight, WEIGHT, quoted=True),
        exp.alias_(exp.Literal.number(side), SIDE, quoted=True),
    ]
    return exp.select(*columns).from_(aliased(query, alias))


def _count(side: int, table: str) -> exp.Expr:
    weight = exp.Case(
        ifs=[
            exp.If(
                this=exp.EQ(this=exp.column(SIDE, table, quoted=True), expression=exp.Literal.number(side)),
                true=exp.column(WEIGHT, table, quoted=True),
            )
        ],
        default=exp.Literal.number(0),
    )
    return exp.func("COALESCE", exp.func("SUM", weight), exp.Literal.number(0))


def _multiplicity(plan: SetOp, a: exp.Expr, b: exp.Expr) -> exp.Expr:
    zero, one = exp.Literal.number(0), exp.Literal.number(1)

    def flag(condition: exp.Expr) -> exp.Expr:
        return exp.Case(ifs=[exp.If(this=condition, true=one.copy())], default=zero.copy())

    if plan.kind == "union":
        return flag(exp.GT(this=exp.Add(this=a, expression=b), expression=zero.copy()))
    if plan.kind == "intersect":
        if plan.all:
            return exp.func("LEAST", a, b)
        return flag(exp.and_(exp.GT(this=a, expression=zero.copy()), exp.GT(this=b, expression=zero.copy())))
    if plan.all:
        return exp.func("GREATEST", exp.Sub(this=a, expression=b), zero.copy())
    return flag(exp.and_(exp.GT(this=a, expression=zero.copy()), exp.EQ(this=b, expression=zero.copy())))


def delta_setop(
    plan: SetOp,
    left_delta: exp.Expr | None,
    right_delta: exp.Expr | None,
    left_now: exp.Query,
    right_now: exp.Query,
    target: Target,
) -> exp.Query:
    changed = []
    if left_delta is not None:
        changed.append(_sided(plan, left_delta, plan.left.names, 1, weighted=True))
    if right_delta is not None:
        changed.append(_sided(plan, right_delta, plan.right.names, 2, weighted=True))
    changes = union_all(changed)
    delta = exp.select(*_cols(plan, CHANGES), exp.alias_(_count(1, CHANGES), A, quoted=True)).select(
        exp.alias_(_count(2, CHANGES), B, quoted=True)
    )
    delta = delta.from_(aliased(changes.copy(), CHANGES)).group_by(*_cols(plan, CHANGES))
    # The current rows of the touched values only.
    touched = among(changes, plan.names, _cols(plan, NOW), None, target)
    rows = union_all(
        [
            _sided(plan, left_now, plan.left.names, 1, weighted=False),
            _sided(plan, right_now, plan.right.names, 2, weighted=False),
        ]
    )
    now = exp.select(*_cols(plan, NOW), exp.alias_(_count(1, NOW), A, quoted=True)).select(
        exp.alias_(_count(2, NOW), B, quoted=True)
    )
    now = now.from_(aliased(restricted_rows(rows, NOW, touched), NOW)).group_by(*_cols(plan, NOW))
    zero = exp.Literal.number(0)
    a_now = exp.func("COALESCE", exp.column(A, NOW, quoted=True), zero)
    b_now = exp.func("COALESCE", exp.column(B, NOW, quoted=True), zero.copy())
    a_before = exp.Sub(this=a_now.copy(), expression=exp.column(A, DELTA, quoted=True))
    b_before = exp.Sub(this=b_now.copy(), expression=exp.column(B, DELTA, quoted=True))
    weight = exp.Sub(
        this=_multiplicity(plan, a_now, b_now),
        expression=_multiplicity(plan, exp.paren(a_before, copy=False), exp.paren(b_before, copy=False)),
    )
    counted = left_joined_on_keys(
        exp.select(*_cols(plan, DELTA), exp.alias_(weight, WEIGHT, quoted=True)).from_(aliased(delta, DELTA)),
        now,
        plan.names,
        (DELTA, NOW),
        (),
        target,
    )
    return (
        exp.select(*_cols(plan, COUNTS), exp.column(WEIGHT, COUNTS, quoted=True))
        .from_(aliased(counted, COUNTS))
        .where(exp.NEQ(this=exp.column(WEIGHT, COUNTS, quoted=True), expression=zero.copy()))
    )
