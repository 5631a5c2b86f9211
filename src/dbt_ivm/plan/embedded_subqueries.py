"""Planner pass: a correlated scalar subquery inside an expression of a SELECT list, decorrelated
as sqlglot's ``unnest_subqueries`` decorrelates one that is a whole column.

sqlglot turns ``(SELECT COUNT(*) FROM orders o WHERE o.customer_id = c.id) AS n`` into a LEFT JOIN
of the counts per customer, but leaves ``… + 1 AS n`` or ``COALESCE((SELECT …), 'none')`` alone.
Each such subquery is moved into a column of its own, unnested, and what it became is put back
where it was; one sqlglot cannot decorrelate goes back as it was (and is refused by name later).
A grouped or aggregate SELECT is left alone: the joined value would stand outside its aggregates.

>>> import sqlglot
>>> q = sqlglot.parse_one(
...     "SELECT c.id AS id, (SELECT COUNT(*) AS n FROM orders AS o WHERE o.customer_id = c.id) + 1 AS n "
...     "FROM customers AS c")
>>> print(unnested_in_expressions(q, iter(["__ivm_s1"])).sql())
SELECT c.id AS id, COALESCE("__ivm_s1".n, 0) + 1 AS n FROM customers AS c LEFT JOIN (SELECT COUNT(*) AS n, o.customer_id AS _u_1 FROM orders AS o WHERE TRUE GROUP BY o.customer_id) AS "__ivm_s1" ON "__ivm_s1"._u_1 = c.id
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries

from dbt_ivm.plan.correlation import correlated

HOISTED = "__ivm_hoisted"


def unnested_in_expressions(select: exp.Select, aliases: Iterator[str]) -> exp.Select:
    """`select` with each correlated scalar subquery inside a SELECT-list expression decorrelated
    (in place); each table joined for one is named from `aliases`."""
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None or select.args.get("group") or any(_aggregates(s, select) for s in select.selects):
        return select
    embedded = [
        subquery
        for projection in select.selects
        for subquery in projection.find_all(exp.Subquery)
        if subquery.find_ancestor(exp.Select) is select
        and not isinstance(_holder(subquery), exp.Select)
        and correlated(subquery.this)
    ]
    if not embedded:
        return select
    # Unnested on their own over the same FROM: the rest of the query (its WHERE's subqueries) is
    # the planner's to decorrelate, after its own checks.
    probe = exp.Select(
        expressions=[exp.alias_(s.copy(), f"{HOISTED}{n}", quoted=True) for n, s in enumerate(embedded)]
    )
    probe.set("from_", from_.copy())
    joins = select.args.get("joins") or []
    probe.set("joins", [j.copy() for j in joins])
    unnest_subqueries(probe)
    added = (probe.args.get("joins") or [])[len(joins) :]
    renamed = {}
    for join in added:
        renamed[join.this.alias] = next(aliases)
        join.this.set("alias", exp.TableAlias(this=exp.to_identifier(renamed[join.this.alias], quoted=True)))

    def rename(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.table in renamed:
            node.set("table", exp.to_identifier(renamed[node.table], quoted=True))
        return node

    for projection, subquery in zip(probe.selects, embedded, strict=True):
        value = projection.unalias()
        if not isinstance(value, exp.Subquery):  # one sqlglot could not decorrelate stays
            subquery.replace(value.transform(rename))
    for join in added:
        select.append("joins", join.transform(rename))
    return select


def _aggregates(projection: exp.Expr, select: exp.Select) -> bool:
    return any(a.find_ancestor(exp.Select) is select for a in projection.find_all(exp.AggFunc))


def _holder(node: exp.Expr) -> exp.Expr | None:
    """What holds `node`, past an alias: the SELECT itself when it is a whole column."""
    parent = node.parent
    return parent.parent if isinstance(parent, exp.Alias) else parent
