"""TopK (`ORDER BY … LIMIT n OFFSET m`, the query's last step): the stream table holds the n rows
ranked m+1 … m+n. A batch can change them only if a changed row ranks at or above the last stored
row, or the input holds fewer rows than the table can (every change then shows). Otherwise the
delta is empty; if so, the stored rows leave and the top n are recomputed from the input. A TopK
ordered by columns it does not show recomputes for every batch that changes its input.

Following one row: the top 3 orders by amount are 120.00, 75.50, 50.00. Deleting an order of 5.00
puts (5.00, −1) among the changes; ranked together with the stored rows (a changed row first among
equals) it comes 4th, after the 3 stored rows, so nothing is read. Inserting 80.00 ranks 2nd: the
stored rows leave (−1) and the new top 3 enter (+1); the two unchanged rows cancel before the apply.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("amount", "numeric")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> plan = build_plan(POSTGRES, "SELECT id, amount FROM orders ORDER BY amount DESC, id LIMIT 3",
...                   StaticCatalog([orders]), "top_orders")
>>> ctx = Context(Bindings.named(POSTGRES, {"public.orders": "orders"}, {"public.orders": "d"}))
>>> print(contents(plan, ctx).sql("postgres"))
SELECT * FROM (SELECT "orders"."id" AS "id", "orders"."amount" AS "amount" FROM orders AS "orders") AS "__ivm_top" ORDER BY "amount" DESC, "id" LIMIT 3
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta import plans
from dbt_ivm.delta.terms import Context, aliased, union_all
from dbt_ivm.plan.nodes import TopK
from dbt_ivm.sqltext import WEIGHT

TOP, UNION, CHANGED, POSITION = "__ivm_top", "__ivm_candidates", "__ivm_changed", "__ivm_pos"


def contents(plan: TopK, ctx: Context) -> exp.Select:
    """The top rows of the input as it is now."""
    shown: list[exp.Expr] = (
        [exp.column(n, TOP, quoted=True) for n in plan.names] if plan.hidden else [exp.Star()]
    )
    query = exp.select(*shown).from_(aliased(plans.contents(plan.input, ctx), TOP))
    query = query.order_by(*[o.copy() for o in plan.order]).limit(plan.limit)
    return query.offset(plan.offset) if plan.offset else query


def delta(plan: TopK, ctx: Context, stream_table: exp.Table) -> exp.Query | None:
    """The stored rows out and the recomputed top in, both only when the batch can reach the top."""
    found = plans.delta(plan.input, ctx)
    if found is None:
        return None
    names = [exp.column(n, quoted=True) for n in plan.names]
    # Ordered by what it does not store, the stored rows cannot be ranked against the changes: any
    # change recomputes the top (a top-n read, by an index on the order keys where there is one).
    affected = exp.true() if plan.hidden else _reaches_top(plan, ctx.pinned(found), names, stream_table)
    removed = exp.select(*[c.copy() for c in names], exp.alias_(exp.Literal.number(-1), WEIGHT, quoted=True))
    removed = removed.from_(aliased(stream_table, "__ivm_stored")).where(affected.copy())
    added = exp.select(*[c.copy() for c in names], exp.alias_(exp.Literal.number(1), WEIGHT, quoted=True))
    added = added.from_(aliased(contents(plan, ctx), "__ivm_new")).where(affected)
    return union_all([removed, added])


def _reaches_top(plan: TopK, changes: exp.Expr, names: list[exp.Column], stream_table: exp.Table) -> exp.Expr:
    """Whether a changed row ranks among the stored top, or the top has room for more."""

    def flagged(relation: exp.Expr, flag: int) -> exp.Select:
        columns = [c.copy() for c in names]
        return exp.select(*columns, exp.alias_(exp.Literal.number(flag), CHANGED, quoted=True)).from_(
            aliased(relation, "__ivm_r")
        )

    # A changed row ranks first among equal rows, so a tie with the last stored row counts as reaching it.
    order = [o.copy() for o in plan.order] + [exp.Ordered(this=exp.column(CHANGED, quoted=True), desc=True)]
    position = exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=order))
    ranked = exp.select(exp.column(CHANGED, quoted=True), exp.alias_(position, POSITION, quoted=True)).from_(
        aliased(union_all([flagged(stream_table, 0), flagged(changes, 1)]), UNION)
    )
    stored = exp.Subquery(this=exp.select(exp.func("COUNT", exp.Star())).from_(stream_table.copy()))
    reached = exp.Exists(
        this=exp.select("1")
        .from_(aliased(ranked, "__ivm_ranked"))
        .where(exp.column(CHANGED, quoted=True).eq(1))
        .where(exp.column(POSITION, quoted=True) <= stored.copy())
    )
    return exp.or_(reached, exp.LT(this=stored, expression=exp.Literal.number(plan.limit)))
