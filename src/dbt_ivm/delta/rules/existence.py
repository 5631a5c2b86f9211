"""Delta rule for semi- and anti-joins (EXISTS, IN, NOT EXISTS, NOT IN): a row of L is kept when a
partner in R satisfies the condition c (semi), or when none does (anti).

A row's fate depends on R only through "has a partner", so with L_before = L' − ΔL:

    Δ(L ⋉ R) = ΔL · [∃ partner in R']  +  L_before · ([∃ in R'] − [∃ in R_before])
    Δ(L ▷ R) = ΔL · [∄ partner in R']  −  L_before · ([∃ in R'] − [∃ in R_before])

The second part only concerns rows of L with a partner among R's changed rows: only they can have
gained their first partner or lost their last. Where the backend can read R as it was, R_before is
probed like R'; otherwise R_before has a partner when the partners counted in R' outnumber the
weights of the changed partners (R_before = R' − ΔR, as a Z-set). Following one
row: with ``orders o WHERE NOT EXISTS (returns r WHERE r.order_id = o.id)``, inserting the first
return of order 7 finds order 7 among L's rows with a changed partner; it has one partner now and
had none before, so it gets weight −1 and leaves the stream table.

>>> from sqlglot import exp
>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context, Side, term_select
>>> from dbt_ivm.delta.rules.item import after_item, delta_item
>>> from dbt_ivm.plan.nodes import Scan
>>> o, r = Scan(0, "o", TableInfo("public", "orders", ())), Scan(1, "r", TableInfo("public", "returns", ()))
>>> from dbt_ivm.target import POSTGRES
>>> ctx = Context(Bindings.named(POSTGRES, {"public.orders": "orders", "public.returns": "returns"}, {"public.orders": "d_o"}))
>>> c = exp.condition("r.order_id = o.id")
>>> orders, returns = Side(delta_item(o, ctx), after_item(o), None, (o,)), Side([], after_item(r), None, (r,))
>>> [term] = delta_existence("anti", orders, returns, c, ctx)
>>> print(term_select(term, [exp.column("id", "o")], ctx).sql("postgres"))
SELECT o.id, "o"."__ivm_weight" AS "__ivm_weight" FROM d_o AS "o" WHERE NOT EXISTS(SELECT 1 FROM returns AS "r" WHERE r.order_id = o.id)
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.rules.partners import changed_partners, gained_partner
from dbt_ivm.delta.terms import Context, Side, Term, term_from


def exists(
    terms: list[Term], condition: exp.Expr | None, ctx: Context, outer: Term | None = None
) -> exp.Expr:
    """True when some row of `terms` satisfies `condition` (correlated to the enclosing row, a row of
    `outer` where known: a grouped item then reads only the groups `outer`'s changes can reach)."""
    checks: list[exp.Expr] = []
    for term in terms:
        scoped = term.where(condition) if condition is not None else term
        checks.append(exp.Exists(this=term_from(scoped, exp.select("1"), ctx, outer)))
    if not checks:
        return exp.false()
    result = checks[0]
    for check in checks[1:]:
        result = exp.or_(result, check, copy=False)
    return exp.paren(result, copy=False) if len(checks) > 1 else result


def weight_sum(
    terms: list[Term], condition: exp.Expr | None, ctx: Context, outer: Term | None = None
) -> exp.Expr:
    """The summed weight of the rows of `terms` that satisfy `condition` (0 when none), correlated to
    a row of `outer` where known (as in `exists`)."""
    total: exp.Expr = exp.Literal.number(0)
    for term in terms:
        scoped = term.where(condition) if condition is not None else term
        summed = term_from(scoped, exp.select(exp.func("SUM", scoped.weight())), ctx, outer)
        part = exp.func("COALESCE", exp.Subquery(this=summed), exp.Literal.number(0))
        total = part if isinstance(total, exp.Literal) else exp.Add(this=total, expression=part)
    return total


def _indicator(condition: exp.Expr) -> exp.Expr:
    return exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1))], default=exp.Literal.number(0))


def after_existence(
    kind: str, left_after: list[Term], right_after: list[Term], condition: exp.Expr | None, ctx: Context
) -> list[Term]:
    kept: list[Term] = []
    for term in left_after:  # each its own probe: its changes narrow what the probe reads
        found = exists(right_after, condition, ctx, term)
        kept.append(term.where(found if kind == "semi" else exp.not_(found)))
    return kept


def delta_existence(
    kind: str, left: Side, right: Side, condition: exp.Expr | None, ctx: Context
) -> list[Term]:
    terms = after_existence(kind, left.delta, right.after, condition, ctx)
    if not right.delta:
        return terms
    sign = 1 if kind == "semi" else -1
    grouped = None if right.before is not None else changed_partners(left, right, condition, ctx)
    if grouped is not None:
        # Equi-join: the rows of L joined with R's changes summed per join key (one row per key).
        partners, on = grouped
        for term in left.before_terms:  # the count probe of each sees the keys its rows are joined to
            joined = term.times(partners).where(on.copy())
            terms.append(
                joined.scaled(gained_partner(weight_sum(right.after, condition, ctx, joined), partners, sign))
            )
        return terms
    zero = exp.Literal.number(0)
    if right.before is not None:
        has_now, had = exists(right.after, condition, ctx), exists(right.before, condition, ctx)
    else:
        partners_now = weight_sum(right.after, condition, ctx)
        changed = weight_sum(right.delta, condition, ctx)
        partners_before = exp.Sub(this=partners_now.copy(), expression=changed)
        has_now = exp.GT(this=partners_now, expression=zero)
        had = exp.GT(this=exp.paren(partners_before, copy=False), expression=zero.copy())
    gained = exp.Sub(this=_indicator(has_now), expression=_indicator(had))  # [∃ in R'] − [∃ in R_before]
    flip = gained if sign > 0 else exp.Neg(this=exp.paren(gained, copy=False))
    touched = exists(right.delta, condition, ctx)
    terms += [t.where(touched.copy()).scaled(flip.copy()) for t in left.before_terms]
    return terms
