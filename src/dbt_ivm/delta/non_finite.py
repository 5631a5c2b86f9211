"""Running sums that meet NaN or ±Infinity: summed again from the group's rows, for that group only.

PostgreSQL's numeric holds NaN, Infinity and -Infinity, and a running sum cannot take them back out:
NaN − NaN and Infinity − Infinity are NaN. A batch whose own sum for a group is finite can neither
move a non-finite stored sum (Infinity + 5 is Infinity) nor make a finite one non-finite, so only a
group whose batch sum is not finite needs its sum read again, from its rows after the batch.

Following one row: ``SELECT g, SUM(x) AS s FROM m GROUP BY g`` over (1, 1.5) and (1, NaN) stores
(1, NaN). Deleting the NaN row, the batch's sum for group 1 is −NaN, which is NaN: group 1's rows are
summed again (1.5), where NaN + NaN would have kept NaN forever. Spark's decimal has no such values.

>>> print(finite(exp.Add(this=exp.column("s"), expression=exp.column("d"))).sql())
(s + d) - (s + d) = 0
>>> print(summed_again(exp.column("d"), exp.column("s"), exp.column("r")).sql())
CASE WHEN (d) - (d) <> 0 THEN r ELSE s END
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta import grouping
from dbt_ivm.delta.aggregates.avg import AVG
from dbt_ivm.delta.aggregates.sum import SUM
from dbt_ivm.delta.terms import Context, aliased
from dbt_ivm.plan.aggregation import group_placeholder
from dbt_ivm.plan.nodes import AggCall, Aggregate

CHANGE = "__ivm_resum_change"  # the change row a sum read again belongs to (renamed where used)
ROWS = "__ivm_resum_rows"


def finite(value: exp.Expr) -> exp.Expr:
    """True where `value` is a finite number: x − x is 0 for those alone (NaN for NaN and ±Infinity)."""
    return exp.EQ(this=_difference(value), expression=exp.Literal.number(0))


def summed_again(change: exp.Expr, merged: exp.Expr, again: exp.Expr) -> exp.Expr:
    """The merged running sum, or where the batch's own sum `change` is not finite, `again`."""
    not_finite = exp.NEQ(this=_difference(change), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=not_finite, true=again)], default=merged)


def _difference(value: exp.Expr) -> exp.Expr:
    return exp.Sub(this=exp.paren(value.copy()), expression=exp.paren(value.copy()))


def possible(plan: Aggregate, ctx: Context) -> bool:
    """Whether a running sum of `plan` may meet NaN or ±Infinity (a SUM or AVG over numeric on
    PostgreSQL; Spark's decimal has neither)."""
    return bool(_summed(plan, ctx))


def _summed(plan: Aggregate, ctx: Context) -> list[AggCall]:
    if not ctx.bindings.target.non_finite_numerics:
        return []
    types = ctx.call_types.get(id(plan), {})
    return [
        c
        for c in plan.calls
        if c.func in (SUM.name, AVG.name)
        and types.get(c.index) is not None
        and types[c.index].is_type("decimal")
    ]


def sums_again(plan: Aggregate, ctx: Context) -> dict[str, exp.Expr]:
    """By sum state of each SUM and AVG that may meet NaN or ±Infinity (`possible`): that sum over
    the rows, after the batch, of the group of a change row (alias CHANGE)."""
    calls = _summed(plan, ctx)
    if not calls:
        return {}
    rows = grouping.input_rows(plan, "after", ctx)
    assert rows is not None
    groups = [group_placeholder(i) for i in range(len(plan.group_by))]
    # `=` where a key cannot be NULL: an index on the source's column can find the group's rows.
    same_group = grouping.matching(groups, ROWS, CHANGE, grouping.never_null_groups(plan))
    found: dict[str, exp.Expr] = {}
    for call in calls:
        total = exp.func("SUM", exp.column(grouping.arg_column(call), ROWS, quoted=True))
        query = exp.select(total).from_(aliased(rows.copy(), ROWS)).where(same_group.copy())
        found[grouping.state_names(call)[0]] = exp.Subquery(this=query)
    return found


def for_change(again: exp.Expr, change: str) -> exp.Expr:
    """`again` for the change row read as `change`."""

    def rename(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.table == CHANGE:
            return exp.column(node.name, change, quoted=True)
        return node

    return again.copy().transform(rename)
