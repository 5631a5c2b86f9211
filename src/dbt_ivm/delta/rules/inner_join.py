"""Delta rule for an inner join. With L' = L + ΔL and R' = R + ΔR (L, R: the states before):

    Δ(L ⋈ R) = ΔL ⋈ R + L' ⋈ ΔR                       where R can be read as it was, or undone
    Δ(L ⋈ R) = ΔL ⋈ R' + L' ⋈ ΔR − ΔL ⋈ ΔR            otherwise (R = R' − ΔR expanded)

both correct when both sides change in one batch. Down a left-deep chain of n joins the first form
telescopes: one term per changed input, ``A' ⋈ … ⋈ ΔAᵢ ⋈ Aᵢ₊₁ ⋈ … ⋈ Aₙ`` (later inputs as they
were). The second is the inclusion–exclusion sum, up to 2ᵏ − 1 terms for k changed inputs, which a
planner like Catalyst pays for in every term. Where R cannot be read as it was (PostgreSQL), a
changed subquery in R is read `undone`: its rows now at weight +1 and its change negated in one
relation, a Z-set equal to its rows before the batch (`relation.undone`), so it adds one term, not
one per term of ΔL; a changed table keeps R' − ΔR, the terms PostgreSQL plans well (read undone,
TPC-H Q21's refresh took 151 s instead of 7). A value IN (subquery) is planned as three subqueries
(`plan/in_values.py`): two in one query made a 2.3 MB refresh function. An unchanged side
contributes no term.

>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context, Side
>>> from dbt_ivm.delta.rules.item import after_item, before_item, delta_item
>>> from dbt_ivm.plan.nodes import Scan
>>> o, c = Scan(0, "o", TableInfo("public", "orders", ())), Scan(1, "c", TableInfo("public", "customers", ()))
>>> from dbt_ivm.target import POSTGRES
>>> ctx = Context(Bindings.named(POSTGRES, {}, {"public.orders": "do", "public.customers": "dc"}))
>>> sides = [Side(delta_item(s, ctx), after_item(s), None, (s,)) for s in (o, c)]
>>> [(t.sign, [r.mode for r in t.reads]) for t in delta_inner_join(*sides, None)]
[(1, ['delta', 'current']), (1, ['current', 'delta']), (-1, ['delta', 'delta'])]
>>> ctx = Context(Bindings.named(POSTGRES, {}, {"public.orders": "do", "public.customers": "dc"}, before={}))
>>> sides = [Side(delta_item(s, ctx), after_item(s), before_item(s, ctx), (s,)) for s in (o, c)]
>>> [(t.sign, [r.mode for r in t.reads]) for t in delta_inner_join(*sides, None)]
[(1, ['delta', 'before']), (1, ['current', 'delta'])]
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.terms import Side, Term


def product(left: list[Term], right: list[Term], condition: exp.Expr | None) -> list[Term]:
    """Every left term joined with every right term on `condition`."""
    joined = [lt.times(rt) for lt in left for rt in right]
    return [t.where(condition) for t in joined] if condition is not None else joined


def after_inner_join(left: list[Term], right: list[Term], condition: exp.Expr | None) -> list[Term]:
    return product(left, right, condition)


def delta_inner_join(left: Side, right: Side, condition: exp.Expr | None) -> list[Term]:
    if right.before is not None or right.undone is not None:
        return product(left.delta, right.before_terms, condition) + product(
            left.after, right.delta, condition
        )
    terms = product(left.delta, right.after, condition)
    terms += product(left.after, right.delta, condition)
    terms += [t.negated() for t in product(left.delta, right.delta, condition)]
    return terms
