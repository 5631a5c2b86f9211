"""Planner pass: an uncorrelated aggregate in a SELECT list, read from a joined subquery.

``SELECT o.id, (SELECT MAX(amount) FROM orders) AS top FROM orders o`` shows one value on every
row. An aggregate without GROUP BY or HAVING yields exactly one row, so the subquery can be cross
joined and its value read as a column: a derived aggregate the delta rules maintain (when it
changes, each row it is shown on changes). In a grouped query the value joins the group keys
(one value: the groups stay the same). sqlglot's ``unnest_subqueries`` does the same for a subquery
in a condition, not in a SELECT list. Runs after qualify.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.id AS id, (SELECT MAX(p.amount) AS m FROM orders AS p) AS top FROM orders AS o")
>>> print(joined_scalar_aggregates(q, iter(["__ivm_v1"])).sql())
SELECT o.id AS id, "__ivm_v1"."m" AS top FROM orders AS o CROSS JOIN (SELECT MAX(p.amount) AS m FROM orders AS p) AS "__ivm_v1"

A correlated subquery (decorrelated by the planner), one that may yield no row or several (GROUP
BY, HAVING, LIMIT, no aggregate), and one beside a global aggregate (joining it would lose the row
an empty input still gives) stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from dbt_ivm.plan.correlation import correlated


def joined_scalar_aggregates(select: exp.Select, aliases: Iterator[str]) -> exp.Select:
    """`select` with each uncorrelated one-row aggregate in its SELECT list cross joined (in place)."""
    grouped = bool(select.args.get("group"))
    if not grouped and (select.args.get("having") or any(_aggregates(s) for s in select.selects)):
        return select  # a global aggregate
    for projection in select.selects:
        for subquery in list(projection.find_all(exp.Subquery)):
            inner = subquery.this
            if subquery.find_ancestor(exp.Select) is not select or not _one_row(inner):
                continue
            alias = next(aliases)
            value = exp.column(inner.selects[0].alias_or_name, alias, quoted=True)
            joined = exp.Subquery(
                this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))
            )
            select.join(joined, join_type="cross", copy=False)
            subquery.replace(value)
            if grouped:
                select.args["group"].append("expressions", value.copy())
    return select


def _one_row(query: exp.Expr) -> bool:
    """An uncorrelated SELECT of one aggregate column, without GROUP BY, HAVING, LIMIT or OFFSET."""
    if not isinstance(query, exp.Select) or len(query.selects) != 1 or not _aggregates(query.selects[0]):
        return False
    if any(query.args.get(clause) for clause in ("group", "having", "limit", "offset", "distinct")):
        return False
    if not query.args.get("from_") and not query.args.get("from"):
        return False
    return not correlated(query)


def _aggregates(node: exp.Expr) -> bool:
    """An aggregate call of `node`'s own query (not of a subquery inside it)."""
    owner = node if isinstance(node, exp.Select) else node.find_ancestor(exp.Select)
    return any(
        a.find_ancestor(exp.Select) is owner and not a.find_ancestor(exp.Window)
        for a in node.find_all(exp.AggFunc)
    )
