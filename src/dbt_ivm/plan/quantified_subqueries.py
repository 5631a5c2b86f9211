"""`x op ANY (subquery)`, `x op ALL (subquery)` and `(x, y) IN (subquery)` conjuncts of a WHERE,
written as EXISTS and NOT EXISTS, which the planner maintains as semi- and anti-joins.

A WHERE drops a row whose condition is NULL as it drops one that is false, so only when the
comparison is true counts: ANY holds when some row compares true; ALL when none compares false
or NULL; NOT ANY when none compares true or NULL; NOT ALL when some row compares false.

>>> import sqlglot
>>> def show(sql):
...     return quantified_as_exists(sqlglot.parse_one(sql, read="postgres")).sql("postgres")
>>> show("SELECT t.a FROM t WHERE t.a = ANY (SELECT u.b AS b FROM u AS u WHERE u.k = 1)")
'SELECT t.a FROM t WHERE EXISTS(SELECT 1 FROM u AS u WHERE u.k = 1 AND t.a = u.b)'
>>> show("SELECT t.a FROM t WHERE t.a > ALL (SELECT u.b AS b FROM u AS u)")
'SELECT t.a FROM t WHERE NOT EXISTS(SELECT 1 FROM u AS u WHERE NOT t.a > u.b OR t.a IS NULL OR u.b IS NULL)'

A row compares as its pairs do: equal when every pair is, NULL when none differs but one is NULL.

>>> show("SELECT t.a FROM t WHERE NOT (t.a, t.k) IN (SELECT u.b AS b, u.k AS k FROM u AS u)")
'SELECT t.a FROM t WHERE NOT EXISTS(SELECT 1 FROM u AS u WHERE COALESCE(t.a = u.b AND t.k = u.k, TRUE))'

A subquery that groups, limits or combines is read as a derived table (when it reads nothing of
the query around it):

>>> show("SELECT t.a FROM t WHERE NOT t.a < ANY (SELECT MAX(u.b) AS m FROM u AS u GROUP BY u.k)")
'SELECT t.a FROM t WHERE NOT EXISTS(SELECT 1 FROM (SELECT MAX(u.b) AS m FROM u AS u GROUP BY u.k) AS "__ivm_q1" WHERE t.a < "__ivm_q1"."m" OR t.a IS NULL OR "__ivm_q1"."m" IS NULL)'
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from dbt_ivm.plan.plain_subqueries import rows_of

COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
DERIVED_ALIAS = "__ivm_q"


def quantified_as_exists(tree: exp.Expr) -> exp.Expr:
    """Every WHERE conjunct `[NOT] x op ANY|ALL (subquery)` rewritten; others left as they are."""
    numbers = itertools.count(1)
    # Innermost first: an outer rewrite copies its subquery, rewritten already.
    for where in reversed(list(tree.find_all(exp.Where))):
        condition = where.this
        conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
        for conjunct in conjuncts:
            rewritten = _as_exists(conjunct, numbers)
            if rewritten is not None:
                conjunct.replace(rewritten)
    return tree


def _as_exists(conjunct: exp.Expr, numbers: itertools.count[int]) -> exp.Expr | None:
    negated = isinstance(conjunct, exp.Not)
    comparison = conjunct.this if negated else conjunct
    while isinstance(comparison, exp.Paren):
        comparison = comparison.this
    form = _quantified(comparison)
    if form is None:
        return None
    operator, probes, every, query = form
    found = rows_of(query, f"{DERIVED_ALIAS}{next(numbers)}")
    if found is None:
        return None
    inner, values = found
    compared = _compared(operator, probes, values)
    # ANY and NOT ALL ask for a row that compares true / false; ALL and NOT ANY for none that
    # compares false / true or NULL.
    wanted: exp.Expr = exp.Not(this=compared) if every else compared
    absent = every != negated  # NOT EXISTS
    if absent and len(probes) == 1:
        wanted = exp.or_(
            wanted,
            exp.Is(this=probes[0].copy(), expression=exp.Null()),
            exp.Is(this=values[0].copy(), expression=exp.Null()),
        )
    elif absent:
        wanted = exp.func("COALESCE", wanted, exp.true())
    inner.set("expressions", [exp.Literal.number(1)])
    inner.where(wanted, copy=False)
    exists = exp.Exists(this=inner)
    return exp.Not(this=exists) if absent else exists


def _quantified(
    comparison: exp.Expr,
) -> tuple[type[exp.Expr], list[exp.Expr], bool, exp.Query] | None:
    """(operator, the compared values, ALL?, the subquery) of `x op ANY|ALL (subquery)` or a
    row-valued `(x, y) IN (subquery)`; None for anything else. A row compares only by = and <>."""
    if isinstance(comparison, exp.In) and isinstance(comparison.this, exp.Tuple):
        operator: type[exp.Expr] = exp.EQ
        every, query = False, comparison.args.get("query")
    elif isinstance(comparison, COMPARISONS) and isinstance(comparison.expression, exp.Any | exp.All):
        operator, every, query = (
            type(comparison),
            isinstance(comparison.expression, exp.All),
            comparison.expression.this,
        )
    else:
        return None
    while isinstance(query, exp.Subquery | exp.Paren):
        query = query.this
    left = comparison.this
    probes = list(left.expressions) if isinstance(left, exp.Tuple) else [left]
    if not isinstance(query, exp.Query) or len(query.selects) != len(probes):
        return None
    if len(probes) > 1 and operator not in (exp.EQ, exp.NEQ):
        return None
    return operator, probes, every, query


def _compared(operator: type[exp.Expr], probes: list[exp.Expr], values: list[exp.Expr]) -> exp.Expr:
    """`probe op value`; for rows, = as every pair equal and <> as not that (SQL's three values)."""
    if len(probes) == 1:
        return operator(this=probes[0].copy(), expression=values[0].copy())
    equal = exp.and_(
        *[exp.EQ(this=p.copy(), expression=v.copy()) for p, v in zip(probes, values, strict=True)]
    )
    return exp.Not(this=exp.paren(equal)) if operator is exp.NEQ else equal
