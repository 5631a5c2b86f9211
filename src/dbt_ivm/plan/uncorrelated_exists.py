"""Planner pass: an EXISTS that reads nothing of its query, inside an expression, read as a count.

``WHERE o.amount > 10 OR EXISTS (SELECT 1 FROM customers c WHERE c.tier = 'x')`` asks one question
of the whole table. Written ``(SELECT COUNT(*) FROM customers c WHERE c.tier = 'x') > 0`` it is a
one-row aggregate the planner joins and the delta rules keep as a running count; every row it is
shown on changes when the answer does. An EXISTS that is a WHERE conjunct of its own is left to
the semi- and anti-joins.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.id FROM orders AS o WHERE o.amount > 10 OR "
...                       "NOT EXISTS (SELECT 1 FROM customers AS c WHERE c.tier = 'x')")
>>> print(uncorrelated_exists_as_counts(q).sql())
SELECT o.id FROM orders AS o WHERE o.amount > 10 OR NOT (SELECT COUNT(*) FROM customers AS c WHERE c.tier = 'x') > 0
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.plan.correlation import correlated
from dbt_ivm.plan.plain_subqueries import rows_of
from dbt_ivm.plan.positions import where_conjunct

DERIVED_ALIAS = "__ivm_exists"


def uncorrelated_exists_as_counts(select: exp.Select) -> exp.Select:
    """`select` with each uncorrelated EXISTS of its own inside an expression counted (in place)."""
    for exists in list(select.find_all(exp.Exists)):
        query = exists.this
        if (
            exists.find_ancestor(exp.Select) is not select
            or where_conjunct(exists, select)
            or not isinstance(query, exp.Query)
            or correlated(query)
        ):
            continue
        read = rows_of(query, DERIVED_ALIAS)
        assert read is not None  # an uncorrelated query always reads as a derived table
        counted = read[0]
        counted.set("expressions", [exp.Count(this=exp.Star())])
        exists.replace(exp.GT(this=exp.Subquery(this=counted), expression=exp.Literal.number(0)))
    return select
