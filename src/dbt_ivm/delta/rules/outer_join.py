"""Delta rule for outer joins, as an inner join plus the unmatched rows padded with NULLs:

    L ⟕ R = (L ⋈ R) + pad_R(L ▷ R)
    L ⟖ R = (L ⋈ R) + pad_L(R ▷ L)
    L ⟗ R = (L ⋈ R) + pad_R(L ▷ R) + pad_L(R ▷ L)

so Δ(L ⟕ R) = Δ(L ⋈ R) + pad_R(Δ(L ▷ R)), each part by its own rule. Following one row: with
``orders o LEFT JOIN customers c ON o.customer_id = c.id``, inserting customer 7 adds +1 for each
order of customer 7 joined with it (inner part) and −1 for each of those orders padded with NULLs
(the anti-join part: they just found their first partner); the null-extended row is replaced. The
anti-join part reads the orders joined to the customers' changes summed per key (`partners`).

>>> from sqlglot import exp
>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context, Side
>>> from dbt_ivm.delta.rules.item import after_item, delta_item
>>> from dbt_ivm.plan.nodes import Scan
>>> o, c = Scan(0, "o", TableInfo("public", "orders", ())), Scan(1, "c", TableInfo("public", "customers", ()))
>>> from dbt_ivm.target import POSTGRES
>>> ctx = Context(Bindings.named(POSTGRES, {"public.orders": "orders", "public.customers": "customers"}, {"public.customers": "d_c"}))
>>> sides = [Side(delta_item(s, ctx), after_item(s), None, (s,)) for s in (o, c)]
>>> terms = delta_outer_join("left", *sides, exp.condition("o.customer_id = c.id"), ctx)
>>> [([r.mode for r in t.reads], len(t.factors)) for t in terms]
[(['current', 'delta'], 0), (['current', 'current', 'null'], 1)]
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dbt_ivm.delta.rules.existence import after_existence, delta_existence
from dbt_ivm.delta.rules.inner_join import after_inner_join, delta_inner_join
from dbt_ivm.delta.terms import Context, Side, Term
from dbt_ivm.plan.nodes import Item


def _padded(terms: list[Term], items: Sequence[Item]) -> list[Term]:
    return [t.padded(items) for t in terms]


def after_outer_join(
    kind: str,
    left_after: list[Term],
    left_items: Sequence[Item],
    right_after: list[Term],
    right_items: Sequence[Item],
    condition: exp.Expr | None,
    ctx: Context,
) -> list[Term]:
    terms = after_inner_join(left_after, right_after, condition)
    if kind in ("left", "full"):
        terms += _padded(after_existence("anti", left_after, right_after, condition, ctx), right_items)
    if kind in ("right", "full"):
        terms += _padded(after_existence("anti", right_after, left_after, condition, ctx), left_items)
    return terms


def delta_outer_join(
    kind: str, left: Side, right: Side, condition: exp.Expr | None, ctx: Context
) -> list[Term]:
    terms = delta_inner_join(left, right, condition)
    if kind in ("left", "full"):
        terms += _padded(delta_existence("anti", left, right, condition, ctx), right.items)
    if kind in ("right", "full"):
        terms += _padded(delta_existence("anti", right, left, condition, ctx), left.items)
    return terms
