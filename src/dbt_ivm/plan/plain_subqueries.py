"""Whether a subquery's rows are its FROM and WHERE as they are: what EXISTS and IN may read
through a semi-join without planning the subquery as a derived table of its own; and a SELECT
over a subquery's rows for the rewrites that test them.

>>> import sqlglot
>>> is_plain(sqlglot.parse_one("SELECT DISTINCT u.b FROM u WHERE u.k = 1"))
True
>>> is_plain(sqlglot.parse_one("SELECT MAX(u.b) FROM u")), is_plain(sqlglot.parse_one("SELECT u.b FROM u OFFSET 2"))
(False, False)
>>> rows, values = rows_of(sqlglot.parse_one("SELECT DISTINCT u.b AS c FROM u"), "d")
>>> rows.sql(), [v.sql() for v in values]
('SELECT u.b AS c FROM u', ['u.b'])
>>> rows, values = rows_of(sqlglot.parse_one("SELECT MAX(u.b) AS m FROM u"), "d")
>>> rows.sql(), [v.sql() for v in values]
('SELECT * FROM (SELECT MAX(u.b) AS m FROM u) AS "d"', ['"d"."m"'])
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.plan.correlation import correlated


def is_plain(select: exp.Select) -> bool:
    """No grouping, aggregates, windows or row limits (DISTINCT changes nothing under EXISTS)."""
    if any(select.args.get(clause) for clause in ("group", "having", "limit", "offset", "qualify")):
        return False
    return not any(s.find(exp.AggFunc, exp.Window) for s in select.selects)


def rows_of(query: exp.Query, alias: str) -> tuple[exp.Select, list[exp.Expr]] | None:
    """A SELECT over `query`'s rows and the expressions of its columns there: a copy of a plain
    query without DISTINCT (it may read the outer row), else `query` as a derived table named
    `alias`; None for a correlated query that is not plain (a derived table cannot read the outer
    row, so the planner refuses it by name)."""
    if isinstance(query, exp.Select) and is_plain(query):
        rows = query.copy()
        rows.set("distinct", None)
        return rows, [s.unalias() for s in rows.selects]
    if correlated(query):
        return None
    derived = exp.Subquery(this=query.copy(), alias=exp.to_identifier(alias, quoted=True))
    values: list[exp.Expr] = [exp.column(s.alias_or_name, alias, quoted=True) for s in query.selects]
    return exp.select("*").from_(derived), values
