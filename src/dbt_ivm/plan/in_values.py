"""Planner pass: `x IN (subquery)` used as a value, written as the EXISTS tests SQL's three values
come from.

As a condition, IN is true when some row matches and otherwise dropped (false and NULL alike),
which a semi-join says. As a value (`customer_id IN (SELECT …) AS churned`) it is NULL, not
false, when nothing matches but `x` is NULL (and the subquery has rows) or the subquery holds a
NULL. So it is written as a CASE over three EXISTS: a match, any row, a NULL row; the planner
maintains each (correlated by equalities: a join of the matched keys; uncorrelated: a count).

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.id, o.customer IN (SELECT c.name FROM customers AS c) AS known "
...                       "FROM orders AS o")
>>> from dbt_ivm.target import POSTGRES
>>> print(in_values_as_exists(q, POSTGRES).sql())
SELECT o.id, CASE WHEN EXISTS(SELECT 1 FROM customers AS c WHERE c.name = o.customer) THEN TRUE WHEN o.customer IS NULL AND EXISTS(SELECT 1 FROM customers AS c) THEN NULL WHEN EXISTS(SELECT 1 FROM customers AS c WHERE c.name IS NULL) THEN NULL ELSE FALSE END AS known FROM orders AS o
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.plan.plain_subqueries import rows_of
from dbt_ivm.plan.positions import in_truth_position, where_conjunct
from dbt_ivm.target import Target

DERIVED_ALIAS = "__ivm_in"
# Spark 3.5 rewrites IN (subquery) outside a condition into an existence join and shows false where
# SQL has NULL (a NULL value, a NULL in the subquery): the stream table could not equal the query.
SPARK_IN_VALUES = "Spark shows false where SQL has NULL: a NULL value, or a NULL in the subquery"


def in_values_as_exists(select: exp.Select, target: Target) -> exp.Select:
    """`select` with each single-column `IN (subquery)` of its own that is not only tested for
    truth rewritten (in place); a subquery that groups or combines must be uncorrelated. Not where
    the engine rewrites them itself, whose answer is not SQL's (Spark: SPARK_IN_VALUES)."""
    if target.rewrites_in_values:
        return select
    for found in list(select.find_all(exp.In)):
        query = found.args.get("query")
        if (
            query is None
            or isinstance(found.this, exp.Tuple)
            or found.find_ancestor(exp.Select) is not select
        ):
            continue
        if in_truth_position(found) or where_conjunct(found, select):
            continue  # a semi- or anti-join
        while isinstance(query, exp.Subquery | exp.Paren):
            query = query.this
        if not isinstance(query, exp.Query) or len(query.selects) != 1:
            continue
        read = rows_of(query, DERIVED_ALIAS)
        if read is None:
            continue  # refused by name by the planner
        rows, (value,) = read
        probe = found.this
        if not (isinstance(probe, exp.Column) and isinstance(value, exp.Column)):
            continue  # the match would correlate by more than an equality of columns: refused
        found.replace(
            exp.Case(
                ifs=[
                    exp.If(
                        this=_exists(rows, exp.EQ(this=value.copy(), expression=probe.copy())),
                        true=exp.true(),
                    ),
                    exp.If(
                        this=exp.and_(exp.Is(this=probe.copy(), expression=exp.Null()), _exists(rows, None)),
                        true=exp.null(),
                    ),
                    exp.If(
                        this=_exists(rows, exp.Is(this=value.copy(), expression=exp.Null())), true=exp.null()
                    ),
                ],
                default=exp.false(),
            )
        )
    return select


def _exists(rows: exp.Select, condition: exp.Expr | None) -> exp.Exists:
    inner = rows.copy()
    inner.set("expressions", [exp.Literal.number(1)])
    if condition is not None:
        inner.where(condition, copy=False)
    return exp.Exists(this=inner)
