"""A disjunction whose every branch requires the same condition, with that condition factored out:
``(a AND x) OR (a AND y)`` → ``a AND (x OR y)``. Distributivity holds in SQL's three-valued logic,
so the rows kept are the same. Why: a correlated subquery is decorrelated through the equalities
among its WHERE's conjuncts; TPC-DS Q41 repeats its correlation in each branch of an OR, where no
conjunct holds it.

>>> import sqlglot
>>> sql = "SELECT * FROM t WHERE (t.a = u.a AND t.c = 'x') OR (t.a = u.a AND t.c = 'y')"
>>> common_conjuncts_factored(sqlglot.parse_one(sql)).sql()
"SELECT * FROM t WHERE t.a = u.a AND (t.c = 'x' OR t.c = 'y')"
>>> common_conjuncts_factored(sqlglot.parse_one("SELECT * FROM t WHERE (a AND b) OR a")).sql()
'SELECT * FROM t WHERE a'
>>> common_conjuncts_factored(sqlglot.parse_one("SELECT * FROM t WHERE (a AND b) OR c")).sql()
'SELECT * FROM t WHERE (a AND b) OR c'
"""

from __future__ import annotations

from sqlglot import exp


def common_conjuncts_factored(tree: exp.Expr) -> exp.Expr:
    """`tree` with each outermost OR whose branches share conjuncts rewritten (see the module)."""
    outermost = [o for o in tree.find_all(exp.Or) if not isinstance(_parent(o), exp.Or)]
    for disjunction in outermost:
        factored = _factored(disjunction)
        if factored is not None:
            if disjunction is tree:
                return factored
            disjunction.replace(factored)
    return tree


def _parent(node: exp.Expr) -> exp.Expr | None:
    """The nearest ancestor that is not a parenthesis."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return parent


def _conjuncts(branch: exp.Expr) -> list[exp.Expr]:
    inner = branch.unnest()
    return [c.unnest() for c in inner.flatten()] if isinstance(inner, exp.And) else [inner]


def _factored(disjunction: exp.Or) -> exp.Expr | None:
    branches = [_conjuncts(b) for b in disjunction.flatten()]
    common = [c for c in branches[0] if all(any(c == o for o in other) for other in branches[1:])]
    if not common:
        return None
    rests = [[c for c in branch if not any(c == k for k in common)] for branch in branches]
    kept = [c.copy() for c in common]
    if all(rests):  # else a branch is the common part alone, which absorbs the others
        alternatives = [exp.and_(*[c.copy() for c in rest]) for rest in rests]
        kept.append(exp.paren(exp.or_(*alternatives), copy=False))
    return exp.and_(*kept)
