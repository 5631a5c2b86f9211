"""Apply a stored aggregate's change per group straight onto its groups: one MERGE, one look per group.

An aggregate's row delta is −old +new per touched group, which the keyed strategy then sums per key
and matches to the stream table again: three looks at each group's stored row. Here the batch's
change per group (`stream.GroupChange`) is the MERGE's source and each new value is written as the
stored state plus the change, so each group's row is found once:

* a stored group whose count drops to 0 is deleted;
* a stored group whose values change is updated (one whose values stay, e.g. after an UPDATE that
  moved nothing between groups, is not touched);
* a group not stored yet is inserted when the change brings it rows.

Where the refresh must say how many rows it inserted, updated and deleted before it merges (Spark's
MERGE reports nothing), `classified_rows` decides it per group in the one join with the stored rows,
and `keyed.classified_merge` applies the classified rows.

A new group's values are the same expressions with every stored column read as NULL (a MERGE's
insert cannot read the target row; each state's merge treats NULL as "no state yet"):

>>> print(without_stored(exp.column("n", STORED) + exp.column("n", CHANGE)).sql())
NULL + d.n
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.apply.key_span import KeySpan
from dbt_ivm.apply.keyed import ACTION, PRESENT
from dbt_ivm.apply.statements import STORED, delete_when, merge_into
from dbt_ivm.delta.stream import GroupChange
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import key_hash
from dbt_ivm.layout import COUNT, HASH
from dbt_ivm.target import Target

CHANGE = "d"  # the change per group's alias in the MERGE


def without_stored(value: exp.Expr) -> exp.Expr:
    """`value` for a group not stored yet: every stream-table column read as NULL."""
    return value.copy().transform(
        lambda node: exp.null() if isinstance(node, exp.Column) and node.table == STORED else node
    )


def group_merge(change: GroupChange, stream_table: exp.Table, target: Target) -> exp.Merge:
    """The MERGE of the change per group (alias `CHANGE`) into `stream_table` (alias `STORED`)."""
    layout, values = change.layout, change.new_values(STORED, CHANGE)
    names = list(layout.columns)
    differs = exp.or_(
        *[
            exp.NullSafeNEQ(this=exp.column(n, STORED, quoted=True), expression=values[n].copy())
            for n in names
        ]
    )
    update = exp.Update(
        expressions=[exp.EQ(this=exp.column(n, quoted=True), expression=values[n].copy()) for n in names]
    )
    count = change.merged(STORED, CHANGE)[COUNT]
    whens = [exp.When(matched=True, condition=differs, then=update)]
    if layout.key:  # a global aggregate keeps its one row, even at count 0
        empty = exp.LTE(this=count.copy(), expression=exp.Literal.number(0))
        inserted = [without_stored(values[n]) for n in names]
        insert = exp.Insert(
            this=exp.Tuple(expressions=[exp.column(n, quoted=True) for n in names]),
            expression=exp.Tuple(expressions=inserted),
        )
        whens = [
            delete_when(empty),
            *whens,
            exp.When(matched=False, condition=exp.not_(without_stored(empty)), then=insert),
        ]
    on = change.key_match(STORED, CHANGE, target)
    return merge_into(stream_table, change.delta, CHANGE, on, whens)


def classified_rows(
    change: GroupChange,
    rows: exp.Expr,
    stream_table: exp.Table,
    target: Target,
    span: KeySpan | None = None,
) -> exp.Select:
    """Each touched group's row as the change per group (`rows`, alias `CHANGE`) leaves it, with what
    `keyed.classified_merge` must do to it (`keyed.ACTION`: 'I' a group not stored yet that gains
    rows, 'D' a stored group whose count drops to 0, 'U' a stored group whose values change); groups
    left as they were are left out. One look at each group's stored row, read through `span`.

    A group not stored yet reads every stored column as NULL, which each state's merge takes for
    "no state yet", as `group_merge`'s insert does.
    """
    layout = change.layout
    values = change.new_values(STORED, CHANGE)
    present = exp.column(PRESENT, STORED, quoted=True)
    count = change.merged(STORED, CHANGE)[COUNT]
    differs = exp.or_(
        *[
            exp.NullSafeNEQ(this=exp.column(n, STORED, quoted=True), expression=values[n].copy())
            for n in layout.columns
        ]
    )
    action = exp.Case()
    if layout.key:  # a global aggregate keeps its one row, even at count 0
        gains = exp.GT(this=count.copy(), expression=exp.Literal.number(0))
        action = action.when(
            exp.Is(this=present.copy(), expression=exp.null()),
            exp.Case().when(gains, exp.Literal.string("I")),
        )
        action = action.when(exp.not_(gains.copy()), exp.Literal.string("D"))
    action = action.when(differs, exp.Literal.string("U"))
    stored = exp.select(exp.Star(), exp.alias_(exp.true(), PRESENT, quoted=True)).from_(stream_table)
    if span is not None:
        stored = stored.where(span.covers())
    hashed = [key_hash([values[k] for k in layout.key])] if target.hashed(layout.key) else []
    classified = (
        exp.select(
            *[exp.alias_(values[n], n, quoted=True) for n in layout.columns],
            *[exp.alias_(h, HASH, quoted=True) for h in hashed],
            exp.alias_(action, ACTION, quoted=True),
        )
        .from_(aliased(rows, CHANGE))
        .join(aliased(stored, STORED), on=change.key_match(STORED, CHANGE, target), join_type="left")
    )
    return (
        exp.select(exp.Star())
        .from_(aliased(classified, "__ivm_classified"))
        .where(exp.not_(exp.Is(this=exp.column(ACTION, quoted=True), expression=exp.null())))
    )
