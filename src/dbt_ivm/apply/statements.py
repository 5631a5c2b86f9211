"""What both backends apply from, as sqlglot trees: FULL refresh as a row delta, and the pieces of the
strategies' MERGE and counts."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dbt_ivm.delta.terms import aliased
from dbt_ivm.layout import Layout
from dbt_ivm.sqltext import WEIGHT, columns

STORED = "t"  # the stream table's alias in every statement


def full_delta(stream_table: exp.Table, layout: Layout, contents: exp.Expr) -> exp.Query:
    """New contents (+1) against stored contents (−1): FULL refresh as a row delta. `contents`: a
    query or a relation."""

    def weighted(source: exp.Expr, weight: int) -> exp.Select:
        return exp.select(
            *columns(layout.columns), exp.alias_(exp.Literal.number(weight), WEIGHT, quoted=True)
        ).from_(source)

    return exp.union(weighted(aliased(contents, "__ivm_new"), 1), weighted(stream_table, -1), distinct=False)


def weight_is(comparison: type[exp.Binary], alias: str | None = None) -> exp.Expr:
    """The weight compared with 0 (`exp.GT`: rows to write, `exp.LT`: rows to remove)."""
    return comparison(this=exp.column(WEIGHT, alias, quoted=True), expression=exp.Literal.number(0))


def count_where(condition: exp.Expr) -> exp.Expr:
    """How many rows satisfy `condition` (0, not NULL, over no rows)."""
    case = exp.Case().when(condition, exp.Literal.number(1)).else_(exp.Literal.number(0))
    return exp.func("COALESCE", exp.func("SUM", case), exp.Literal.number(0))


def assignments(names: Sequence[str], source: str) -> list[exp.Expr]:
    """``SET name = source.name`` for each column. Target columns of an UPDATE are never qualified."""
    return [exp.EQ(this=a, expression=b) for a, b in zip(columns(names), columns(names, source), strict=True)]


def delete_when(condition: exp.Expr | None = None) -> exp.When:
    return exp.When(matched=True, condition=condition, then=exp.var("DELETE"))


def insert_when(condition: exp.Expr, names: Sequence[str], source: str) -> exp.When:
    """Insert the columns `names` of the source row (alias `source`) when nothing matched."""
    values = exp.Insert(
        this=exp.Tuple(expressions=columns(names)), expression=exp.Tuple(expressions=columns(names, source))
    )
    return exp.When(matched=False, condition=condition, then=values)


def merge_into(
    stream_table: exp.Table, source: exp.Expr, alias: str, on: exp.Expr, whens: Sequence[exp.When]
) -> exp.Merge:
    """MERGE INTO the stream table (alias `STORED`) USING `source` (alias `alias`)."""
    return exp.Merge(
        this=aliased(stream_table, STORED),
        using=aliased(source, alias),
        on=on,
        whens=exp.Whens(expressions=list(whens)),
    )
