"""Apply a row delta to a stream table whose rows may repeat (a source without a primary key).

Identical rows are told apart by an ordinal ``__ivm_dup`` (1..n). A value whose weight is +k gets
ordinals n+1..n+k inserted; −k removes ordinals n−k+1..n, so ordinals stay 1..n without gaps.

>>> from dbt_ivm.keys import SPARK
>>> layout = Layout("multiset", ("note",), (), ("note",))
>>> print(merge(layout, exp.to_table("ops"), exp.to_table("notes"), SPARK).sql("spark", pretty=True))
MERGE INTO notes AS `t`
USING ops AS `o`
ON `t`.`note` IS NOT DISTINCT FROM `o`.`note` AND `t`.`__ivm_dup` = `o`.`__ivm_dup`
WHEN MATCHED AND `o`.`__ivm_weight` < 0 THEN DELETE
WHEN NOT MATCHED AND `o`.`__ivm_weight` > 0 THEN INSERT (`note`, `__ivm_dup`) VALUES (`o`.`note`, `o`.`__ivm_dup`)
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.apply.statements import STORED, count_where, delete_when, insert_when, merge_into, weight_is
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import Target, hash_column, same_key, with_hash
from dbt_ivm.layout import DUP, Layout
from dbt_ivm.sqltext import WEIGHT, all_of, columns

OPS = "o"  # the operations' alias in the MERGE


def _positive(weight: exp.Expr) -> exp.Expr:
    return exp.GT(this=weight.copy(), expression=exp.Literal.number(0))


def summed_rows(layout: Layout, row_delta: exp.Expr, target: Target) -> exp.Select:
    """Each value's net weight, where it is not 0 (and its hash, where the target stores one)."""
    total = exp.func("SUM", exp.column(WEIGHT, quoted=True))
    return (
        exp.select(
            *columns(layout.columns), exp.alias_(total, WEIGHT, quoted=True), *hash_column(layout.key, target)
        )
        .from_(aliased(row_delta, "__ivm_delta"))
        .group_by(*columns(layout.columns))
        .having(exp.NEQ(this=total.copy(), expression=exp.Literal.number(0)))
    )


def ordinal_range(weight: exp.Expr, stored: exp.Expr) -> tuple[exp.Expr, exp.Expr]:
    """The first and last ordinal a value stored `stored` times gains (weight > 0) or loses (< 0)."""
    one = exp.Literal.number(1)
    first = (
        exp.Case()
        .when(_positive(weight), exp.Add(this=stored.copy(), expression=one.copy()))
        .else_(exp.Add(this=exp.Add(this=stored.copy(), expression=weight.copy()), expression=one.copy()))
    )
    last = (
        exp.Case()
        .when(_positive(weight), exp.Add(this=stored.copy(), expression=weight.copy()))
        .else_(stored.copy())
    )
    return first, last


def signed(weight: exp.Expr) -> exp.Expr:
    """±1 as an integer: one ordinal's operation."""
    return exp.cast(exp.Sign(this=weight.copy()), exp.DataType.build("int"))


def ordinal_ops(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Select:
    """PostgreSQL: one row per ordinal to insert (weight +1) or delete (weight −1)."""
    weight, count = exp.column(WEIGHT, "r", quoted=True), exp.column("n", "cur", quoted=True)
    same = same_key(STORED, layout.columns, "r", target)
    stored = exp.select(exp.func("count", exp.Star())).from_(aliased(stream_table, STORED)).where(same)
    current = exp.select(exp.alias_(exp.Subquery(this=stored), "n", quoted=True))
    first, last = ordinal_range(weight, count)
    ordinals = exp.Lateral(
        this=exp.func("generate_series", first, last, dialect="postgres"),
        alias=exp.TableAlias(
            this=exp.to_identifier("g", quoted=True), columns=[exp.to_identifier(DUP, quoted=True)]
        ),
    )
    carried = with_hash(layout.columns, layout.key, target)
    return (
        exp.select(
            *columns(carried, "r"),
            exp.column(DUP, "g", quoted=True),
            exp.alias_(signed(weight), WEIGHT, quoted=True),
        )
        .from_(aliased(rows, "r"))
        .join(
            exp.Lateral(
                this=exp.Subquery(this=current),
                alias=exp.TableAlias(this=exp.to_identifier("cur", quoted=True)),
            ),
            join_type="cross",
        )
        .join(ordinals, join_type="cross")
    )


def ops_counts(ops: exp.Expr) -> exp.Select:
    """How many ordinals the operations insert, and how many they delete."""
    return exp.select(*ops_count_metrics()).from_(ops)


def ops_count_metrics() -> list[exp.Expr]:
    """`ops_counts`' two aggregates, over the operations' unqualified columns."""
    return [count_where(weight_is(exp.GT)), count_where(weight_is(exp.LT))]


def same_ordinal(layout: Layout, alias: str, target: Target) -> exp.Expr:
    """Stream-table rows ("t") with the values and ordinal of the operation `alias`."""
    ordinal = exp.EQ(
        this=exp.column(DUP, STORED, quoted=True), expression=exp.column(DUP, alias, quoted=True)
    )
    return all_of(same_key(STORED, layout.columns, alias, target), ordinal)


def merge(layout: Layout, ops: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Merge:
    """Delete the ordinals that go, insert the ordinals that come."""
    on = same_ordinal(layout, OPS, target)
    inserted = [*layout.columns, DUP]
    whens = [delete_when(weight_is(exp.LT, OPS)), insert_when(weight_is(exp.GT, OPS), inserted, OPS)]
    return merge_into(stream_table, ops, OPS, on, whens)
