"""Where in its SELECT an expression stands: only tested for truth, or a WHERE conjunct of its own.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT a IN (SELECT b FROM u) AS f FROM t WHERE c OR a IN (SELECT b FROM u)")
>>> [in_truth_position(n) for n in q.find_all(sqlglot.exp.In)]
[False, True]
>>> q = sqlglot.parse_one("SELECT a FROM t WHERE NOT (a IN (SELECT b FROM u)) AND c")
>>> where_conjunct(q.find(sqlglot.exp.In), q)
True
"""

from __future__ import annotations

from sqlglot import exp


def in_truth_position(node: exp.Expr) -> bool:
    """`node` is only ever tested for truth (a WHERE, ON, HAVING or CASE WHEN condition, through AND
    and OR): there NULL acts as false, so a semi-join flag (matched or not) may stand for it."""
    while isinstance(node.parent, exp.And | exp.Or | exp.Paren):
        node = node.parent
    parent = node.parent
    if isinstance(parent, exp.Where | exp.Having):
        return True
    return (isinstance(parent, exp.Join) and node.arg_key == "on") or (
        isinstance(parent, exp.If) and node.arg_key == "this"
    )


def where_conjunct(node: exp.Expr, select: exp.Select) -> bool:
    """A top-level conjunct of `select`'s WHERE, under NOT or not (a semi- or anti-join)."""
    where = select.args.get("where")
    if where is None:
        return False
    while isinstance(node.parent, exp.Paren):
        node = node.parent
    if isinstance(node.parent, exp.Not):
        node = node.parent
    while isinstance(node.parent, exp.Paren | exp.And):
        node = node.parent
    return node.parent is where
