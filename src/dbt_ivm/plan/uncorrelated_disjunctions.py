"""Planner pass: an OR among a correlated subquery's own conditions, written as NOT (NOT … AND NOT …).

sqlglot's `unnest_subqueries` decorrelates a subquery correlated by equalities among its WHERE's
conjuncts, but leaves any subquery whose WHERE holds an OR, although an OR of the subquery's own
columns (`i.c = 'x' OR i.c = 'y'`) does not touch the correlation. De Morgan's laws hold in SQL's
three-valued logic, so the same rows pass. With `common_conjuncts_factored`, this decorrelates TPC-DS
Q41's `(SELECT COUNT(*) FROM item WHERE (i_manufact = i1.i_manufact AND …) OR (i_manufact = i1.i_manufact
AND …)) > 0`. Runs on each SELECT before its subqueries are unnested.

>>> import sqlglot
>>> q = sqlglot.parse_one(
...     "SELECT i1.a FROM item AS i1 WHERE (SELECT COUNT(*) FROM item AS i "
...     "WHERE i.m = i1.m AND (i.c = 'x' OR i.c = 'y')) > 0"
... )
>>> print(uncorrelated_disjunctions_negated(q).sql())
SELECT i1.a FROM item AS i1 WHERE (SELECT COUNT(*) FROM item AS i WHERE i.m = i1.m AND (NOT (NOT (i.c = 'x') AND NOT (i.c = 'y')))) > 0

An OR that reads the outer row stays as it is (the subquery is then not decorrelated, and refused).
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.plan.correlation import correlated, outer_columns


def uncorrelated_disjunctions_negated(select: exp.Select) -> exp.Select:
    """`select` with the ORs of its correlated subqueries' own WHERE conjuncts rewritten (in place)."""
    for subquery in list(select.find_all(exp.Select)):
        where = subquery.args.get("where")
        if subquery is select or where is None or not correlated(subquery):
            continue
        conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
        for conjunct in conjuncts:
            if (
                conjunct.find(exp.Or)
                and not conjunct.find(exp.Query)
                and not outer_columns(subquery, conjunct)
            ):
                conjunct.replace(conjunct.copy().transform(_without_or))
    return select


def _without_or(node: exp.Expr) -> exp.Expr:
    if not isinstance(node, exp.Or):
        return node
    branches = [branch.copy().transform(_without_or) for branch in node.flatten()]
    negated = [exp.Not(this=exp.paren(branch, copy=False)) for branch in branches]
    return exp.Not(this=exp.paren(exp.and_(*negated, copy=False), copy=False))
