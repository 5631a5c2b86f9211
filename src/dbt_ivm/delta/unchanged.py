"""Delta rule: an ungrouped aggregate whose value the batch left as it was has no change.

An aggregate without GROUP BY has one row before the batch and one after, so its delta is the pair
−old, +new. When the two are equal the pair cancels, but only once summed: a scalar subquery's pair
would first be joined with every row it is compared with (``HAVING SUM(x) > (SELECT 0.0001 *
SUM(x) …)``, TPC-H Q11), twice, before the rows cancel. Dropping the pair when its rows are equal
(NULL equal to NULL) makes such a term empty before it joins anything.

Only for values whose type compares by equality on both engines (numbers, text, booleans, dates
and times, by the types sqlglot's annotate_types gave the query): PostgreSQL's json has no ``=``,
Spark's ``<=>`` refuses maps, and a box's ``=`` compares areas. Equal is not always identical
(numeric 1.0 and 1.00): the value read before stays, as a stored row with an unchanged key does.

>>> import sqlglot
>>> pair = sqlglot.parse_one("SELECT 1 AS t, -1 AS __ivm_weight UNION ALL SELECT 1 AS t, 1 AS __ivm_weight")
>>> print(without_unchanged(pair, ("t",), lambda q: q).sql(pretty=False))  # doctest: +ELLIPSIS
SELECT "__ivm_pair"."t", "__ivm_pair"."__ivm_weight" FROM (SELECT 1 AS t, ...) AS "__ivm_pair" WHERE NOT EXISTS(...)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlglot import exp

from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import same_values
from dbt_ivm.plan.nodes import Aggregate
from dbt_ivm.sqltext import WEIGHT, all_of, columns

PAIR, OTHER = "__ivm_pair", "__ivm_other"
COMPARED_TYPES = (
    exp.DataType.NUMERIC_TYPES
    | exp.DataType.TEXT_TYPES
    | {exp.DataType.Type.BOOLEAN, exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP}
    | {exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.TIME}
)


def comparable(plan: Aggregate) -> bool:
    """Can the aggregate's old and new rows be compared for equality? (Ungrouped only, outputs of
    distinct names and of known types that compare.)"""
    if plan.group_by:
        return False
    names = [o.name.lower() for o in plan.original_outputs]
    if len(set(names)) != len(names):  # a column the pair could not name
        return False
    types = [o.expression.type for o in plan.original_outputs]
    return all(t is not None and t.this in COMPARED_TYPES for t in types)


def without_unchanged(
    pair: exp.Query, names: Sequence[str], pinned: Callable[[exp.Query], exp.Expr]
) -> exp.Query:
    """The rows of `pair` (−old and +new, columns `names` and the weight) that no row of opposite
    weight equals: none when the value did not change. `pinned` computes `pair` once."""
    rows = pinned(pair)
    opposite = exp.NEQ(
        this=exp.column(WEIGHT, OTHER, quoted=True), expression=exp.column(WEIGHT, PAIR, quoted=True)
    )
    equal = (
        exp.select(exp.Literal.number(1))
        .from_(aliased(rows, OTHER))
        .where(all_of(same_values(PAIR, OTHER, names), opposite))
    )
    return (
        exp.select(*columns(names, PAIR), exp.column(WEIGHT, PAIR, quoted=True))
        .from_(aliased(rows, PAIR))
        .where(exp.Not(this=exp.Exists(this=equal)))
    )
