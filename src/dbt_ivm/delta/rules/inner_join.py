"""Delta rule for an inner join: with new states L' = L + ΔL and R' = R + ΔR,

    Δ(L ⋈ R) = ΔL ⋈ R' + L' ⋈ ΔR − ΔL ⋈ ΔR

correct when both sides change in one batch. Applied down a chain of joins this is the
inclusion–exclusion sum over the changed inputs; an unchanged side contributes no term, so a batch
touching one table of an n-way join yields one term.

>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.delta.rules.item import after_item, delta_item
>>> from dbt_ivm.plan.nodes import Scan
>>> o, c = Scan(0, "o", TableInfo("public", "orders", ())), Scan(1, "c", TableInfo("public", "customers", ()))
>>> ctx = Context(Bindings({}, {"public.orders": "do", "public.customers": "dc"}))
>>> terms = delta_inner_join(delta_item(o, ctx), after_item(o), delta_item(c, ctx), after_item(c), None)
>>> [(t.sign, [r.mode for r in t.reads]) for t in terms]
[(1, ['delta', 'current']), (1, ['current', 'delta']), (-1, ['delta', 'delta'])]
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.terms import Term


def product(left: list[Term], right: list[Term], condition: exp.Expr | None) -> list[Term]:
    """Every left term joined with every right term on `condition`."""
    joined = [lt.times(rt) for lt in left for rt in right]
    return [t.where(condition) for t in joined] if condition is not None else joined


def after_inner_join(left: list[Term], right: list[Term], condition: exp.Expr | None) -> list[Term]:
    return product(left, right, condition)


def delta_inner_join(
    left_delta: list[Term],
    left_after: list[Term],
    right_delta: list[Term],
    right_after: list[Term],
    condition: exp.Expr | None,
) -> list[Term]:
    terms = product(left_delta, right_after, condition)
    terms += product(left_after, right_delta, condition)
    terms += [t.negated() for t in product(left_delta, right_delta, condition)]
    return terms
