"""SUM's non-NULL count, kept nowhere: recounted only for the groups a batch may have left without one.

SUM(x) over a column that may be NULL is NULL for a group where no row has x set, so its running
state needs to know when that count reaches 0. The stored sum itself tells most of it: a group whose
batch adds non-NULL values (or removes none) is non-NULL after it exactly when it was before or gains
one; a group left with a sum other than 0 has some value set. Only a group whose batch removes
non-NULL values and leaves its sum at exactly 0 is in doubt, and for those groups alone `x` is
counted again over their rows.

Following one row: ``SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY
customer`` stores (alice, 30.00, 3): orders of 10.00, 20.00 and one without an amount. Deleting
the 10.00 order leaves 20.00: not in doubt, nothing is read. Deleting then the 20.00 order leaves
the sum at 0 after a value left: alice's orders are read, none has an amount, her total is NULL.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.layout import layout_of
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> plan = build_plan("SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer",
...                   StaticCatalog([orders]), "customer_totals")
>>> layout_of(plan).hidden, layout_of(plan).recounted
((), ('__ivm_a0_nn',))
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta import grouping
from dbt_ivm.delta.aggregates.sum import SUM
from dbt_ivm.delta.terms import Context, aliased
from dbt_ivm.keys import Target, match
from dbt_ivm.layout import Layout
from dbt_ivm.plan.build import group_placeholder
from dbt_ivm.plan.nodes import AggCall, Aggregate

CHANGE, STORED, RECOUNT = "__ivm_change", "__ivm_stored", "__ivm_recount"


def recount_column(state: str) -> str:
    """The column of a group's change that carries the recounted `state` (NULL: not recounted)."""
    return f"{state}_recount"


def recounted_calls(plan: Aggregate, layout: Layout) -> list[tuple[AggCall, str, str]]:
    """Each SUM whose non-NULL count is recounted, with its sum and count state names."""
    found = []
    for call in plan.calls:
        if call.func == SUM.name:
            total, count = grouping.state_names(call)
            if count in layout.recounted:
                found.append((call, total, count))
    return found


def with_recounts(
    plan: Aggregate, layout: Layout, change: exp.Select, ctx: Context, stream_table: exp.Table, target: Target
) -> exp.Query:
    """`change` (a group's keys, count and state changes) with each recounted count, for the groups
    in doubt (a removed non-NULL value, a sum left at 0), read from their rows now."""
    calls = recounted_calls(plan, layout)
    if not calls:
        return change
    names = [str(e.alias_or_name) for e in change.expressions]
    pinned = ctx.pinned(change)  # read twice: for the doubt, and as the change
    keys = [exp.column(group_placeholder(i), CHANGE, quoted=True) for i in range(len(plan.group_by))]
    in_doubt = []
    for _, total, count in calls:
        removed = exp.LT(this=exp.column(count, CHANGE, quoted=True), expression=exp.Literal.number(0))
        left = exp.Add(
            this=exp.func(
                "COALESCE", exp.column(layout.stored(total), STORED, quoted=True), exp.Literal.number(0)
            ),
            expression=exp.func("COALESCE", exp.column(total, CHANGE, quoted=True), exp.Literal.number(0)),
        )
        in_doubt.append(exp.and_(removed, exp.EQ(this=left, expression=exp.Literal.number(0))))
    doubtful = (
        exp.select(*[k.copy() for k in keys])
        .from_(aliased(pinned.copy(), CHANGE))
        .join(aliased(stream_table.copy(), STORED), on=match(STORED, layout.key, keys, target))
        .where(exp.or_(*in_doubt))
    )
    rows = grouping.input_rows(
        plan, "after", ctx, grouping.in_groups(plan, ctx.pinned(doubtful), ctx.bindings.dialect)
    )
    assert rows is not None
    source = "__ivm_rows"
    recount = exp.select(
        *grouping.group_columns(plan, source),
        *[
            exp.alias_(
                exp.func("COUNT", exp.column(grouping.arg_column(call), source, quoted=True)),
                recount_column(count),
                quoted=True,
            )
            for call, _, count in calls
        ],
    )
    recount = recount.from_(aliased(rows, source)).group_by(*grouping.group_columns(plan, source))
    joined = exp.select(
        *[exp.column(n, CHANGE, quoted=True) for n in names],
        *[exp.column(recount_column(count), RECOUNT, quoted=True) for _, _, count in calls],
    ).from_(aliased(pinned, CHANGE))
    groups = [group_placeholder(i) for i in range(len(plan.group_by))]
    never_null = grouping.never_null_groups(plan)
    dialect = ctx.bindings.dialect
    return grouping.left_joined_on_keys(joined, recount, groups, (CHANGE, RECOUNT), never_null, dialect, True)


def count_after(stored_total: exp.Expr, change: str, count: str) -> exp.Expr:
    """A stand-in for the group's non-NULL count after the batch, right wherever it is 0: the
    recount where there is one; else 1 when the batch removed values (the sum left is not 0); else
    1 for a stored non-NULL sum, plus what the batch added."""
    recounted = exp.column(recount_column(count), change, quoted=True)
    changed = exp.column(count, change, quoted=True)
    was_set = exp.Case(
        ifs=[exp.If(this=exp.Is(this=stored_total, expression=exp.null()), true=exp.Literal.number(0))],
        default=exp.Literal.number(1),
    )
    return exp.Case(
        ifs=[
            exp.If(this=exp.not_(exp.Is(this=recounted.copy(), expression=exp.null())), true=recounted),
            exp.If(
                this=exp.LT(this=changed.copy(), expression=exp.Literal.number(0)), true=exp.Literal.number(1)
            ),
        ],
        default=exp.Add(this=was_set, expression=exp.func("COALESCE", changed, exp.Literal.number(0))),
    )
