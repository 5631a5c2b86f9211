"""Planner rewrite: the first rows ordered by something the query does not show.

``SELECT customer, amount FROM orders ORDER BY amount DESC, id LIMIT 5`` orders by `id`, which is
not an output column. The query is planned with each hidden order key as one more column, named
``__ivm_order<position>``, which the TopK ranks by and does not show (`TopK.hidden`). Runs after
qualify (outputs are aliased, columns qualified).

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.customer AS customer, o.amount AS amount FROM orders AS o "
...                       "ORDER BY o.amount DESC, o.id LIMIT 5")
>>> print(with_hidden_order(q).sql())
SELECT o.customer AS customer, o.amount AS amount, o.id AS "__ivm_order1" FROM orders AS o ORDER BY o.amount DESC, "__ivm_order1" LIMIT 5
"""

from __future__ import annotations

from sqlglot import exp

ORDER_ALIAS = "__ivm_order"


def with_hidden_order(select: exp.Select) -> exp.Select | None:
    """A copy of `select` with its hidden order keys as trailing columns; None when every order key
    is an output already, there is no LIMIT / OFFSET to rank for, or the SELECT is DISTINCT (SQL
    asks a DISTINCT's order keys to be outputs)."""
    order = select.args.get("order")
    if order is None or not (select.args.get("limit") or select.args.get("offset")):
        return None
    if select.args.get("distinct"):
        return None
    names = [s.alias_or_name for s in select.selects]
    shown = [s.unalias() for s in select.selects]
    hidden = [
        position
        for position, ordered in enumerate(order.expressions)
        if not _is_output(ordered.this, names, shown)
    ]
    if not hidden:
        return None
    ordered_by = select.copy()
    for position in hidden:
        ordered = ordered_by.args["order"].expressions[position]
        alias = f"{ORDER_ALIAS}{position}"
        ordered_by.select(exp.alias_(ordered.this.copy(), alias, quoted=True), copy=False)
        ordered.set("this", exp.column(alias, quoted=True))
    return ordered_by


def _is_output(key: exp.Expr, names: list[str], shown: list[exp.Expr]) -> bool:
    if isinstance(key, exp.Column) and not key.table and key.name in names:
        return True
    return any(key == s for s in shown)
