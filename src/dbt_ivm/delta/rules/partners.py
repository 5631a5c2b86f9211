"""For the existence rule over an equi-join: R's changes summed per join key, joined to L's rows.

When the condition of ``L ⋉ R`` is a conjunction of ``r_expr = l_expr`` pairs (plus filters on one
side), whether a row of L has a partner depends only on its key. The batch's changes to R are summed
per key, ``P(k, w)``, with ``w`` the net change in k's partner count, and L's rows are joined to P on
the key: one row of P per key, so L's rows are not repeated, and no per-row scan of R's changes
(PostgreSQL would rescan an unindexed change table for every row of L it probes). With ``n`` the
partner count now, the count before was ``n − w`` (≥ 0), so a row gained its first partner when
``w > 0 ∧ n ≤ w``, and lost its last when ``w < 0 ∧ n = 0``.

>>> from sqlglot import exp
>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context, Side, term_select
>>> from dbt_ivm.delta.rules.item import after_item, delta_item
>>> from dbt_ivm.plan.nodes import Scan
>>> c, o = Scan(0, "c", TableInfo("public", "customers", ())), Scan(1, "o", TableInfo("public", "orders", ()))
>>> from dbt_ivm.target import POSTGRES
>>> ctx = Context(Bindings.named(POSTGRES, {"public.customers": "customers", "public.orders": "orders"}, {"public.orders": "d_o"}))
>>> customers, orders = Side([], after_item(c), None, (c,)), Side(delta_item(o, ctx), after_item(o), None, (o,))
>>> partners, on = changed_partners(customers, orders, exp.condition("o.customer_id = c.id AND o.amount > 0"), ctx)
>>> print(term_select(partners, [exp.column("__ivm_k0", "__ivm_partners1", quoted=True)], ctx, weighted=False).sql("postgres"))
SELECT "__ivm_partners1"."__ivm_k0" FROM (SELECT "__ivm_changed"."__ivm_k0", SUM("__ivm_changed"."__ivm_weight") AS "__ivm_weight" FROM (SELECT o.customer_id AS "__ivm_k0", "o"."__ivm_weight" AS "__ivm_weight" FROM d_o AS "o" WHERE o.amount > 0) AS "__ivm_changed" GROUP BY "__ivm_changed"."__ivm_k0" HAVING SUM("__ivm_changed"."__ivm_weight") <> 0) AS "__ivm_partners1"
>>> on.sql("postgres")
'c.id = "__ivm_partners1"."__ivm_k0"'
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from dbt_ivm.delta.terms import (
    Computed,
    Context,
    Read,
    Side,
    Term,
    aliased,
    conjunction,
    term_select,
    union_all,
)
from dbt_ivm.sqltext import WEIGHT

CHANGED = "__ivm_changed"


def _aliases(side: Side) -> set[str]:
    return {item.alias for item in side.items}


def _conjuncts(predicates: list[exp.Expr]) -> list[exp.Expr]:
    """The AND-ed parts of `predicates`, parentheses removed."""
    parts: list[exp.Expr] = []
    for predicate in predicates:
        bare = predicate.unnest()
        if isinstance(bare, exp.And):
            parts += _conjuncts([bare.this, bare.expression])
        else:
            parts.append(bare)
    return parts


def _split(
    parts: list[exp.Expr], left: set[str], right: set[str]
) -> tuple[list[tuple[exp.Expr, exp.Expr]], list[exp.Expr], list[exp.Expr]] | None:
    """(right key, left key) pairs, right-only filters and left-only filters; None when a conjunct
    is none of these (a correlated non-equality, a subquery)."""
    keys: list[tuple[exp.Expr, exp.Expr]] = []
    right_only: list[exp.Expr] = []
    left_only: list[exp.Expr] = []
    for part in parts:
        # A subquery's own FROM items are its business: a nested EXISTS over R's columns filters R.
        declared = _declared(part)
        tables = {c.table for c in part.find_all(exp.Column)} - declared
        if "" in tables or declared & left:
            return None  # (a nested scope reusing one of L's aliases: which one a column means is unclear)
        if isinstance(part, exp.EQ) and part.find(exp.Query, exp.Subquery) is None:
            a = {c.table for c in part.this.find_all(exp.Column)}
            b = {c.table for c in part.expression.find_all(exp.Column)}
            if a and b and a <= right and b <= left:
                keys.append((part.this, part.expression))
                continue
            if a and b and a <= left and b <= right:
                keys.append((part.expression, part.this))
                continue
        if tables <= right:
            right_only.append(part)
        elif tables <= left:
            left_only.append(part)
        else:
            return None
    return (keys, right_only, left_only) if keys else None


def _declared(part: exp.Expr) -> set[str]:
    """The aliases `part`'s subqueries declare (their FROM items; none in a plain comparison)."""
    inner = {t.alias_or_name for t in part.find_all(exp.Table)}
    return inner | {s.alias for s in part.find_all(exp.Subquery) if s.alias}


def _texts(expressions: list[exp.Expr]) -> list[str]:
    return [e.sql() for e in expressions]


def changed_partners(
    left: Side, right: Side, condition: exp.Expr | None, ctx: Context
) -> tuple[Term, exp.Expr] | None:
    """P(k, w) as a term, and the condition joining L's rows to it; None: not an equi-join.

    The correlation may be the join's condition or, for a subquery, a filter inside R: each of R's
    change terms is split, and all must correlate on the same keys of L."""
    left_aliases, right_aliases = _aliases(left), _aliases(right)
    if left_aliases & right_aliases or not right.items:
        return None
    given = _conjuncts([condition] if condition is not None else [])
    splits = []
    for term in right.delta:
        factor_tables = {c.table for f in term.factors for c in f.find_all(exp.Column)}
        # A rule inside R may read rows it computed itself (an inner semi-join's changed partners).
        computed = {r.item.alias for r in term.reads if isinstance(r.item, Computed)}
        split = _split(given + _conjuncts(list(term.predicates)), left_aliases, right_aliases | computed)
        if split is None or factor_tables & left_aliases:
            return None
        splits.append((term, split))
    first_keys, _, first_left_only = splits[0][1]
    left_keys = _texts([lk for _, lk in first_keys])
    for _, (keys, _, left_only) in splits[1:]:
        if _texts([lk for _, lk in keys]) != left_keys or _texts(left_only) != _texts(first_left_only):
            return None
    names = [f"__ivm_k{i}" for i in range(len(first_keys))]
    selects = []
    for term, (keys, right_only, _) in splits:
        projections = [exp.alias_(r.copy(), n, quoted=True) for (r, _), n in zip(keys, names, strict=True)]
        selects.append(term_select(replace(term, predicates=tuple(right_only)), projections, ctx))
    summed = exp.func("SUM", exp.column(WEIGHT, CHANGED, quoted=True))
    grouped = (
        exp.select(*[exp.column(n, CHANGED, quoted=True) for n in names])
        .select(exp.alias_(summed, WEIGHT, quoted=True))
        .from_(aliased(union_all(selects), CHANGED))
        .group_by(*[exp.column(n, CHANGED, quoted=True) for n in names])
        .having(exp.NEQ(this=summed.copy(), expression=exp.Literal.number(0)))
    )
    alias = f"__ivm_partners{right.items[0].position}"
    matches = [
        exp.EQ(this=lk.copy(), expression=exp.column(n, alias, quoted=True))
        for (_, lk), n in zip(first_keys, names, strict=True)
    ]
    on = conjunction([*matches, *[p.copy() for p in first_left_only]])
    assert on is not None
    return Term((Read(Computed(alias, grouped), "current"),)), on


def gained_partner(count_now: exp.Expr, partners: Term, sign: int) -> exp.Expr:
    """sign · ([has a partner now] − [had one before]) for a row joined to `partners`' key. The count
    appears in both arms of the CASE, and each row evaluates one (a correlated count, which an index
    answers: an EXISTS here could be planned as a hash of all of R)."""
    [read] = partners.reads
    net = exp.column(WEIGHT, read.item.alias, quoted=True)
    zero = exp.Literal.number(0)
    gained = exp.case().when(exp.LTE(this=count_now.copy(), expression=net.copy()), exp.Literal.number(sign))
    lost = exp.case().when(exp.EQ(this=count_now, expression=zero.copy()), exp.Literal.number(-sign))
    return (
        exp.case()
        .when(exp.GT(this=net, expression=zero), gained.else_(zero.copy()))
        .else_(lost.else_(zero.copy()))
    )
