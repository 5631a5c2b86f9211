"""Planner rewrite: the first rows of a set operation.

``SELECT a FROM t UNION SELECT a FROM u ORDER BY a LIMIT 3`` orders and limits the union's rows.
It is planned as a SELECT of the union's columns from the union as a derived table, with the same
ORDER BY and LIMIT, which the TopK rule maintains like any other first rows. A set operation's ORDER
BY may name only its output columns (qualify has made positions names already). Runs after qualify.

>>> import sqlglot
>>> q = sqlglot.parse_one('SELECT t.a AS a FROM t UNION SELECT u.a AS a FROM u ORDER BY "a" DESC LIMIT 3')
>>> print(ordered_set_operation_as_select(q).sql())
SELECT "__ivm_set"."a" AS "a" FROM (SELECT t.a AS a FROM t UNION SELECT u.a AS a FROM u) AS "__ivm_set" ORDER BY "__ivm_set"."a" DESC LIMIT 3
"""

from __future__ import annotations

from sqlglot import exp

DERIVED_ALIAS = "__ivm_set"
ROW_LIMITS = ("limit", "offset")


def ordered_set_operation_as_select(tree: exp.Expr) -> exp.Expr:
    """`tree` as a SELECT over its set operation when it is a set operation with a LIMIT or OFFSET
    ordered by its output columns; else `tree` as it is (ORDER BY alone on a table changes nothing,
    and anything else is refused by name later)."""
    if not isinstance(tree, exp.SetOperation) or not any(tree.args.get(c) for c in ROW_LIMITS):
        return tree
    names = [s.alias_or_name for s in tree.selects]
    order = tree.args.get("order")
    keys = [] if order is None else [o.this for o in order.expressions]
    if len(set(names)) != len(names) or not all(_is_output(k, names) for k in keys):
        return tree
    rows = tree.copy()
    for clause in ("order", *ROW_LIMITS):
        rows.set(clause, None)
    derived = exp.Subquery(
        this=rows, alias=exp.TableAlias(this=exp.to_identifier(DERIVED_ALIAS, quoted=True))
    )
    select = exp.select(
        *[exp.alias_(exp.column(n, DERIVED_ALIAS, quoted=True), n, quoted=True) for n in names]
    ).from_(derived)
    if order is not None:
        ordered = order.copy()
        for term in ordered.expressions:
            term.set("this", exp.column(term.this.name, DERIVED_ALIAS, quoted=True))
        select.set("order", ordered)
    for clause in ROW_LIMITS:
        if tree.args.get(clause):
            select.set(clause, tree.args[clause].copy())
    return select


def _is_output(key: exp.Expr, names: list[str]) -> bool:
    return isinstance(key, exp.Column) and not key.table and key.name in names
