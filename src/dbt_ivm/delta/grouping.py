"""An aggregate's input rows, reduced to what aggregating needs: each group key as ``__ivm_g<i>``
and each call's argument as ``__ivm_arg<j>``, one SELECT per term, unioned.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> plan = build_plan("SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer",
...                   StaticCatalog([orders]), "customer_totals")
>>> ctx = Context(Bindings.named({"public.orders": "orders"}, {"public.orders": "d"}))
>>> print(input_rows(plan, "delta", ctx).sql("postgres"))
SELECT "orders"."customer" AS "__ivm_g0", "orders"."amount" AS "__ivm_arg0", "orders"."__ivm_weight" AS "__ivm_weight" FROM d AS "orders"
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sqlglot import exp

from dbt_ivm.delta import relation
from dbt_ivm.delta.aggregates import REGISTRY
from dbt_ivm.delta.terms import Context, Term, term_select, union_all
from dbt_ivm.plan.build import agg_placeholder, group_placeholder
from dbt_ivm.plan.nodes import AggCall, Aggregate

COUNT = "__ivm_count"


def arg_column(call: AggCall) -> str:
    return f"__ivm_arg{call.index}"


def state_names(call: AggCall) -> list[str]:
    return [f"__ivm_a{call.index}_{suffix}" for suffix in REGISTRY[call.func].states]


def _projections(plan: Aggregate) -> list[exp.Expr]:
    columns = [exp.alias_(k.copy(), group_placeholder(i), quoted=True) for i, k in enumerate(plan.group_by)]
    columns += [
        exp.alias_(c.argument.copy(), arg_column(c), quoted=True)
        for c in plan.calls
        if c.argument is not None
    ]
    return columns


def input_rows(
    plan: Aggregate, which: Literal["after", "delta"], ctx: Context, restrict: exp.Expr | None = None
) -> exp.Query | None:
    """The input's rows (after the batch, or its delta with weights), keys and arguments only;
    `restrict` is added to every term (a correlated filter). None: no changed rows."""
    terms: list[Term] = (
        relation.after(plan.input, ctx) if which == "after" else relation.delta(plan.input, ctx)
    )
    if not terms:
        return None
    if restrict is not None:
        terms = [t.where(restrict.copy()) for t in terms]
    return union_all([term_select(t, _projections(plan), ctx, weighted=which == "delta") for t in terms])


def group_columns(plan: Aggregate, table: str | None = None) -> list[exp.Column]:
    return [exp.column(group_placeholder(i), table, quoted=True) for i in range(len(plan.group_by))]


def weighted_states(plan: Aggregate, weight: exp.Expr, table: str | None = None) -> list[exp.Expr]:
    """The group's count and every call's state over weighted rows (aliased), to select per group."""
    columns = [exp.alias_(_zero_if_empty(exp.func("SUM", weight.copy())), COUNT, quoted=True)]
    for call in plan.calls:
        argument = exp.column(arg_column(call), table, quoted=True) if call.argument is not None else None
        for name, value in zip(
            state_names(call), REGISTRY[call.func].weighted(argument, weight.copy()), strict=True
        ):
            # A count over no rows is 0; a sum over none stays NULL (as SUM's own value is).
            columns.append(
                exp.alias_(value if name.endswith("_sum") else _zero_if_empty(value), name, quoted=True)
            )
    return columns


def _zero_if_empty(total: exp.Expr) -> exp.Expr:
    return exp.func("COALESCE", total, exp.Literal.number(0))


def finalized_outputs(
    plan: Aggregate, state: str, types: dict[int, exp.DataType], names: Sequence[str] | None = None
) -> list[exp.Expr]:
    """The plan's outputs evaluated over maintained state (relation alias `state`), aliased."""
    replacements: dict[str, exp.Expr] = {}
    for i in range(len(plan.group_by)):
        replacements[group_placeholder(i)] = exp.column(group_placeholder(i), state, quoted=True)
    count = exp.column(COUNT, state, quoted=True)
    for call in plan.calls:
        states: list[exp.Expr] = [exp.column(n, state, quoted=True) for n in state_names(call)]
        value = REGISTRY[call.func].finalize(states, count.copy(), types.get(call.index))
        replacements[agg_placeholder(call.index)] = exp.paren(value, copy=False)

    def substitute(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in replacements:
            return replacements[node.name].copy()
        return node

    outputs = []
    for index, output in enumerate(plan.outputs):
        name = names[index] if names is not None else output.name
        outputs.append(exp.alias_(output.expression.copy().transform(substitute), name, quoted=True))
    return outputs


def from_scratch_outputs(plan: Aggregate, rows: str) -> list[exp.Expr]:
    """The plan's outputs as written, over `input_rows` (alias `rows`): each call re-aimed at its
    argument column, so the values and types are the query's own."""
    replacements: dict[str, exp.Expr] = {}
    for i in range(len(plan.group_by)):
        replacements[group_placeholder(i)] = exp.column(group_placeholder(i), rows, quoted=True)
    for call in plan.calls:
        original = call.original.copy()
        if call.argument is not None:
            original.set("this", exp.column(arg_column(call), rows, quoted=True))
        replacements[agg_placeholder(call.index)] = original

    def substitute(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in replacements:
            return replacements[node.name].copy()
        return node

    return [exp.alias_(o.expression.copy().transform(substitute), o.name, quoted=True) for o in plan.outputs]


def matching(keys: Sequence[str], left: str, right: str) -> exp.Expr:
    """Rows of `left` and `right` whose group keys are equal or both NULL."""
    parts: list[exp.Expr] = [
        exp.NullSafeEQ(this=exp.column(k, left, quoted=True), expression=exp.column(k, right, quoted=True))
        for k in keys
    ]
    if not parts:
        return exp.true()
    result = parts[0]
    for part in parts[1:]:
        result = exp.and_(result, part, copy=False)
    return result
