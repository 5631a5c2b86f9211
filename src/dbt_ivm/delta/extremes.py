"""MIN / MAX stream tables: a group that a batch only adds rows to takes its new extreme from the
stored one and the batch's (LEAST / GREATEST); only a group that lost a row is recomputed from its
rows. Applies to a stored aggregate whose every call is MIN or MAX, shown as is, without HAVING.

Following one row: ``SELECT customer, MIN(amount) AS low FROM orders GROUP BY customer`` stores
(alice, 20.00). Inserting (alice, 5.00) marks alice insert-only with a batch minimum of 5.00: the
stored row leaves (−1) and (alice, LEAST(20.00, 5.00)) enters (+1); alice's orders are not read.
Deleting alice's 5.00 order marks her as losing a row: her orders are read and the minimum recomputed.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> def plan(sql): return build_plan(POSTGRES, sql, StaticCatalog([orders]), "m")
>>> applies(plan("SELECT customer, MIN(amount) AS low, MAX(id) AS last FROM orders GROUP BY customer"))
True
>>> applies(plan("SELECT customer, MIN(amount) + 1 AS low FROM orders GROUP BY customer"))
False
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta import grouping
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import match
from dbt_ivm.layout import Layout
from dbt_ivm.plan.aggregation import agg_placeholder, group_placeholder
from dbt_ivm.plan.nodes import Aggregate
from dbt_ivm.sqltext import WEIGHT
from dbt_ivm.target import Target

LOSES = "__ivm_loses"  # 1: the group lost a row in this batch (its extreme may be gone)
COMBINE: dict[type[exp.Expr], type[exp.Func]] = {exp.Min: exp.Least, exp.Max: exp.Greatest}


def applies(plan: Aggregate) -> bool:
    """Every output is a group key or a plain MIN / MAX call, and there is no HAVING."""
    if plan.having is not None or not plan.calls:
        return False
    if any(type(c.original) not in COMBINE for c in plan.calls):
        return False
    shown = {group_placeholder(i) for i in range(len(plan.group_by))}
    shown |= {agg_placeholder(c.index) for c in plan.calls}
    return all(isinstance(o.expression, exp.Column) and o.expression.name in shown for o in plan.outputs)


def touched(plan: Aggregate, changes: exp.Expr) -> exp.Select:
    """Per group the batch touches: its keys, whether it lost a row, and each call over the batch."""
    alias = "__ivm_chg"
    loses = exp.Case(
        ifs=[exp.If(this=exp.column(WEIGHT, alias, quoted=True) < 0, true=exp.Literal.number(1))],
        default=exp.Literal.number(0),
    )
    columns: list[exp.Expr] = [*grouping.group_columns(plan, alias)]
    columns.append(exp.alias_(exp.Max(this=loses), LOSES, quoted=True))
    columns += [
        exp.alias_(grouping.call_over(c, alias), agg_placeholder(c.index), quoted=True) for c in plan.calls
    ]
    query = exp.select(*columns).from_(aliased(changes, alias))
    return query.group_by(*grouping.group_columns(plan, alias)) if plan.group_by else query


def combined(
    plan: Aggregate, layout: Layout, groups: exp.Expr, table: exp.Table, target: Target
) -> exp.Select:
    """The new rows of the insert-only groups among `groups` (`touched`): stored extreme and the
    batch's combined; a group not stored yet takes the batch's."""
    keys = [exp.column(group_placeholder(i), "d", quoted=True) for i in range(len(plan.group_by))]
    values: dict[str, exp.Expr] = {}
    for i, column in enumerate(layout.group_columns):
        values[column] = keys[i]
    calls = {agg_placeholder(c.index): c for c in plan.calls}
    for output in plan.outputs:
        call = calls.get(output.expression.name)
        if call is not None:
            stored = exp.column(output.name, "s", quoted=True)
            batch = exp.column(agg_placeholder(call.index), "d", quoted=True)
            values[output.name] = COMBINE[type(call.original)](this=stored, expressions=[batch])
    columns = [exp.alias_(values[c].copy(), c, quoted=True) for c in layout.columns]
    columns.append(exp.alias_(exp.Literal.number(1), WEIGHT, quoted=True))
    query = exp.select(*columns).from_(aliased(groups, "d"))
    query = query.join(aliased(table, "s"), on=match("s", layout.key, keys, target), join_type="left")
    return query.where(exp.column(LOSES, "d", quoted=True).eq(0))
