"""Apply a row delta to a stream table identified by a row key.

Consolidation sums weights of identical rows (an unchanged group's −1 and +1 rows cancel), then for
each key keeps the row to write (+1, the new values) or, failing that, the row to remove (−1).

>>> from dbt_ivm.target import POSTGRES
>>> layout = Layout("aggregate", ("customer", "total"), ("__ivm_count",), ("customer",))
>>> print(merge(layout, exp.to_table("rows"), exp.to_table("totals"), POSTGRES).sql("postgres", pretty=True))
MERGE INTO totals AS "t"
USING rows AS "r"
ON HASH_RECORD_EXTENDED(ROW("t"."customer"), 0) = "r"."__ivm_hash"
AND "t"."customer" IS NOT DISTINCT FROM "r"."customer"
WHEN MATCHED AND "r"."__ivm_weight" < 0 THEN DELETE
WHEN MATCHED AND "r"."__ivm_weight" > 0 AND NOT (
  "t"."customer" IS NOT DISTINCT FROM "r"."customer"
  AND "t"."total" IS NOT DISTINCT FROM "r"."total"
  AND "t"."__ivm_count" IS NOT DISTINCT FROM "r"."__ivm_count"
) THEN UPDATE SET "customer" = "r"."customer", "total" = "r"."total", "__ivm_count" = "r"."__ivm_count"
WHEN NOT MATCHED AND "r"."__ivm_weight" > 0 THEN INSERT ("customer", "total", "__ivm_count") VALUES ("r"."customer", "r"."total", "r"."__ivm_count")
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.apply.key_span import KeySpan
from dbt_ivm.apply.statements import (
    STORED,
    assignments,
    count_where,
    delete_when,
    insert_when,
    merge_into,
    weight_is,
)
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import changed, hash_column, same_key, with_hash
from dbt_ivm.layout import Layout
from dbt_ivm.sqltext import WEIGHT, all_of, columns
from dbt_ivm.target import Target

RANK, ACTION, PRESENT = "__ivm_rank", "__ivm_action", "__ivm_present"
# Per key of a checked delta: how many rows add, how many remove, the largest |weight|.
ADDING, REMOVING, WIDEST = "__ivm_adding", "__ivm_removing", "__ivm_widest"
VIOLATES = "X"  # the action of a row that shows the key is not unique (see `classified_rows`)
ROWS = "r"  # the rows' alias in the statements below


def consolidated_rows(
    layout: Layout, row_delta: exp.Expr, target: Target, checked: bool = False
) -> exp.Select:
    """One row per affected key: its columns, weight (>0 upsert, <0 delete) and, where the target
    stores one, its key hash. `row_delta`: a query or relation of layout columns + weight.

    `checked`: also what `classified_rows` needs to tell that the key is not unique in the sources
    (a declared key nothing enforces): how many of the key's rows add and remove, and the largest
    weight among them."""
    weight = exp.column(WEIGHT, quoted=True)
    summed = (
        exp.select(*columns(layout.columns), exp.alias_(exp.func("SUM", weight), WEIGHT, quoted=True))
        .from_(aliased(row_delta, "__ivm_delta"))
        .group_by(*columns(layout.columns), copy=False)
    )
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=columns(layout.key) or None,
        order=exp.Order(expressions=[exp.Ordered(this=weight.copy(), desc=True, nulls_first=True)]),
    )
    tallies = _key_tallies(layout) if checked else []
    ranked = (
        exp.select(*columns(layout.columns), weight.copy(), exp.alias_(rank, RANK, quoted=True), *tallies)
        .from_(aliased(summed, "__ivm_summed"))
        .where(exp.NEQ(this=weight.copy(), expression=exp.Literal.number(0)), copy=False)
    )
    carried = columns([ADDING, REMOVING, WIDEST]) if checked else []
    return (
        exp.select(*columns(layout.columns), weight.copy(), *hash_column(layout.key, target), *carried)
        .from_(aliased(ranked, "__ivm_ranked"))
        .where(exp.EQ(this=exp.column(RANK, quoted=True), expression=exp.Literal.number(1)), copy=False)
    )


def _key_tallies(layout: Layout) -> list[exp.Expr]:
    weight = exp.column(WEIGHT, quoted=True)

    def per_key(aggregate: exp.Expr, name: str) -> exp.Expr:
        return exp.alias_(
            exp.Window(this=aggregate, partition_by=columns(layout.key) or None), name, quoted=True
        )

    def counted(comparison: type[exp.Binary]) -> exp.Expr:
        return exp.Count(this=exp.Case().when(weight_is(comparison), exp.Literal.number(1)))

    return [
        per_key(counted(exp.GT), ADDING),
        per_key(counted(exp.LT), REMOVING),
        per_key(exp.Max(this=exp.Abs(this=weight.copy())), WIDEST),
    ]


def _violates_key(layout: Layout, present: exp.Expr) -> exp.Expr:
    """A consolidated row that cannot happen while every source row's key is unique. The stored table
    holds each key once, so a key's batch removes at most its stored row (the same values) and adds
    at most one row, and a key stored already can only gain a row if its stored row goes."""

    def tally(name: str) -> exp.Column:
        return exp.column(name, ROWS, quoted=True)

    one = exp.Literal.number(1)
    return exp.or_(
        exp.GT(this=tally(ADDING), expression=one.copy()),
        exp.GT(this=tally(REMOVING), expression=one.copy()),
        exp.GT(this=tally(WIDEST), expression=one.copy()),
        all_of(
            weight_is(exp.GT, ROWS),
            present.copy(),
            exp.EQ(this=tally(REMOVING), expression=exp.Literal.number(0)),
        ),
        all_of(
            weight_is(exp.LT, ROWS),
            exp.or_(
                exp.Is(this=present.copy(), expression=exp.null()), changed(STORED, ROWS, layout.columns)
            ),
        ),
    )


def _with_stored(
    layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target, span: KeySpan | None = None
) -> exp.Select:
    """The rows LEFT JOINed to their stored row, if any (whose ``__ivm_present`` is then TRUE);
    `span`: the rows' key span, which the stored rows are read through."""
    stored = exp.select(exp.Star(), exp.alias_(exp.true(), PRESENT, quoted=True)).from_(stream_table)
    if span is not None:
        stored = stored.where(span.covers())
    return (
        exp.select()
        .from_(aliased(rows, ROWS))
        .join(aliased(stored, STORED), on=same_key(STORED, layout.key, ROWS, target), join_type="left")
    )


def counts(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Select:
    """How many rows the MERGE will insert, update and delete (the unchanged-row guard included)."""
    present = exp.column(PRESENT, STORED, quoted=True)
    inserted = all_of(weight_is(exp.GT, ROWS), exp.Is(this=present.copy(), expression=exp.null()))
    updated = all_of(weight_is(exp.GT, ROWS), present.copy(), changed(STORED, ROWS, layout.columns))
    deleted = all_of(weight_is(exp.LT, ROWS), present.copy())
    return _with_stored(layout, rows, stream_table, target).select(
        *[count_where(c) for c in (inserted, updated, deleted)]
    )


def merge(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Merge:
    """One MERGE: delete removed keys, update changed rows only, insert new keys."""
    update_when = all_of(weight_is(exp.GT, ROWS), changed(STORED, ROWS, layout.columns))
    return _merge(
        layout, rows, stream_table, target, weight_is(exp.LT, ROWS), update_when, weight_is(exp.GT, ROWS)
    )


def _merge(
    layout: Layout,
    rows: exp.Expr,
    stream_table: exp.Table,
    target: Target,
    delete_if: exp.Expr,
    update_if: exp.Expr,
    insert_if: exp.Expr,
    span: KeySpan | None = None,
) -> exp.Merge:
    updates = assignments(layout.columns, ROWS)
    inserted = list(layout.columns)
    whens = [
        delete_when(delete_if),
        exp.When(matched=True, condition=update_if, then=exp.Update(expressions=updates)),
        insert_when(insert_if, inserted, ROWS),
    ]
    on = same_key(STORED, layout.key, ROWS, target)
    return merge_into(
        stream_table, rows, ROWS, on if span is None else exp.and_(on, span.covers(STORED)), whens
    )


def classified_rows(
    layout: Layout,
    rows: exp.Expr,
    stream_table: exp.Table,
    target: Target,
    checked: bool = False,
    span: KeySpan | None = None,
) -> exp.Select:
    """The consolidated rows that change something, each with what the MERGE will do to it:
    'I' insert, 'U' update (values differ), 'D' delete. Decided once against the stream table, so
    counting them and the MERGE (`classified_merge`) need no second look at its rows.

    `checked` (rows from `consolidated_rows(..., checked=True)`): a row that shows a source key is
    not unique is classified `VIOLATES` instead, so the caller can refuse the batch rather than
    write a table that silently lost a row. `span`: the rows' `KeySpan`, to read fewer stored rows."""
    present = exp.column(PRESENT, STORED, quoted=True)
    action = exp.Case()
    if checked:
        action = action.when(_violates_key(layout, present), exp.Literal.string(VIOLATES))
    action = (
        action.when(weight_is(exp.LT, ROWS), exp.Case().when(present.copy(), exp.Literal.string("D")))
        .when(exp.Is(this=present.copy(), expression=exp.null()), exp.Literal.string("I"))
        .when(changed(STORED, ROWS, layout.columns), exp.Literal.string("U"))
    )
    carried = with_hash(layout.columns, layout.key, target)
    classified = _with_stored(layout, rows, stream_table, target, span).select(
        *columns(carried, ROWS), exp.alias_(action, ACTION, quoted=True)
    )
    return (
        exp.select(exp.Star())
        .from_(aliased(classified, "__ivm_classified"))
        .where(exp.not_(exp.Is(this=exp.column(ACTION, quoted=True), expression=exp.null())))
    )


def _action_is(letter: str) -> exp.Expr:
    return exp.EQ(this=exp.column(ACTION, ROWS, quoted=True), expression=exp.Literal.string(letter))


def classified_merge(
    layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target, span: KeySpan | None = None
) -> exp.Merge:
    """The MERGE of `classified_rows`' rows: each does what its action says. `span`: the rows'
    `KeySpan`, which no stored row outside can match (so the MERGE need not read it).

    >>> from dbt_ivm.target import SPARK
    >>> layout = Layout("keyed", ("id",), (), ("id",))
    >>> span = KeySpan("id", exp.Literal.number(7), exp.Literal.number(9), holds_null=False)
    >>> sql = classified_merge(layout, exp.to_table("rows"), exp.to_table("st"), SPARK, span).sql("spark")
    >>> print(sql[sql.index(" ON ") : sql.index(" WHEN")])
     ON `t`.`id` IS NOT DISTINCT FROM `r`.`id` AND `t`.`id` BETWEEN 7 AND 9
    """
    actions = (_action_is("D"), _action_is("U"), _action_is("I"))
    return _merge(layout, rows, stream_table, target, *actions, span=span)


MERGED, DONE = "__ivm_merged", "__ivm_done"


def counted_merge(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Select:
    """PostgreSQL ≥ 17: `merge`, answering how many rows it inserted, updated and deleted — one look
    at the stream table's rows where `counts` then `merge` take two.

    >>> from dbt_ivm.target import POSTGRES
    >>> layout = Layout("aggregate", ("customer", "total"), ("__ivm_count",), ("customer",))
    >>> sql = counted_merge(layout, exp.to_table("rows"), exp.to_table("totals"), POSTGRES).sql("postgres")
    >>> print(sql[: sql.index(" USING")])
    WITH "__ivm_merged" AS (MERGE INTO totals AS "t"
    >>> print(sql[sql.index("RETURNING") :])
    RETURNING MERGE_ACTION() AS "__ivm_done") SELECT COUNT(*) FILTER(WHERE "__ivm_done" = 'INSERT'), COUNT(*) FILTER(WHERE "__ivm_done" = 'UPDATE'), COUNT(*) FILTER(WHERE "__ivm_done" = 'DELETE') FROM "__ivm_merged"
    """
    statement = merge(layout, rows, stream_table, target)
    action = exp.alias_(exp.Anonymous(this="merge_action"), DONE, quoted=True)
    statement.set("returning", exp.Returning(expressions=[action]))
    done = exp.column(DONE, quoted=True)
    counts = [
        exp.Filter(
            this=exp.Count(this=exp.Star()),
            expression=exp.Where(this=exp.EQ(this=done.copy(), expression=exp.Literal.string(kind))),
        )
        for kind in ("INSERT", "UPDATE", "DELETE")
    ]
    named = exp.to_identifier(MERGED, quoted=True)
    return exp.select(*counts).from_(exp.table_(MERGED, quoted=True)).with_(named, as_=statement)
