"""Apply a row delta to a stream table whose rows may repeat (no key identifies them).

Identical rows are stored as they are: a value the query yields n times is n identical rows, and the
table holds only the model's columns. A value whose net weight is +k gets k copies inserted; −k
removes k of its copies, any k, as nothing tells them apart. Following one row: ``SELECT kind FROM
events`` over three events of kind ``a`` stores three rows ``a``; deleting two of the events sums to
(``a``, −2), and two of the three rows go.

PostgreSQL removes exactly k by their ``ctid``, found through the index on the values (their hash),
``LIMIT k`` per value, in one statement with the insert:

>>> from dbt_ivm.target import POSTGRES, SPARK
>>> layout = Layout("multiset", ("note",), (), ("note",))
>>> print(apply(layout, exp.to_table("rows"), exp.to_table("notes"), POSTGRES).sql("postgres", pretty=True))
WITH "__ivm_gone" AS (
  DELETE FROM notes
  WHERE
    "ctid" = ANY(
      ARRAY(SELECT
        "g"."ctid"
      FROM rows AS "r"
      CROSS JOIN LATERAL (
        SELECT
          "t"."ctid"
        FROM notes AS "t"
        WHERE
          HASH_RECORD_EXTENDED(ROW("t"."note"), 0) = "r"."__ivm_hash"
          AND "t"."note" IS NOT DISTINCT FROM "r"."note"
        LIMIT CAST(-"r"."__ivm_weight" AS BIGINT)
      ) AS "g"
      WHERE
        "r"."__ivm_weight" < 0)
    )
  RETURNING 1
)
INSERT INTO notes (
  "note"
)
SELECT
  "r"."note"
FROM rows AS "r"
CROSS JOIN LATERAL GENERATE_SERIES(1, CAST("r"."__ivm_weight" AS BIGINT)) AS "n"
WHERE
  "r"."__ivm_weight" > 0

Spark's MERGE cannot tell identical stored rows apart: there a value that loses copies loses all n
of them (one ``D`` row matches every copy) and gets n − k inserted again (``I`` rows match nothing):

>>> print(replacing_merge(layout, exp.to_table("ops"), exp.to_table("notes")).sql("spark", pretty=True))
MERGE INTO notes AS `t`
USING ops AS `o`
ON `o`.`__ivm_action` = 'D' AND `t`.`note` IS NOT DISTINCT FROM `o`.`note`
WHEN MATCHED THEN DELETE
WHEN NOT MATCHED AND `o`.`__ivm_action` = 'I' THEN INSERT (`note`) VALUES (`o`.`note`)
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.apply.statements import STORED, count_where, delete_when, insert_when, merge_into, weight_is
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import hash_column, same_key, same_values, with_hash
from dbt_ivm.layout import Layout
from dbt_ivm.sqltext import WEIGHT, all_of, columns
from dbt_ivm.target import Target

ROWS, OPS = "r", "o"  # the summed rows' alias, the MERGE source's (Spark)
SUMMED = "__ivm_summed"  # the summed rows, when given as a query
GONE, ADDED = "__ivm_gone", "__ivm_added"  # the writable CTEs that delete and insert copies
ACTION = "__ivm_action"  # Spark: 'D' deletes every stored copy of a value, 'I' inserts one copy
STORED_COUNT = "__ivm_n"  # how many copies of a value the stream table held before the batch


def summed_rows(layout: Layout, row_delta: exp.Expr, target: Target) -> exp.Select:
    """Each value's net weight, where it is not 0 (and its hash, where the target finds rows by it)."""
    total = exp.func("SUM", exp.column(WEIGHT, quoted=True))
    return (
        exp.select(
            *columns(layout.columns), exp.alias_(total, WEIGHT, quoted=True), *hash_column(layout.key, target)
        )
        .from_(aliased(row_delta, "__ivm_delta"))
        .group_by(*columns(layout.columns), copy=False)
        .having(exp.NEQ(this=total.copy(), expression=exp.Literal.number(0)), copy=False)
    )


def weight_totals(rows: exp.Expr) -> exp.Select:
    """How many copies the summed `rows` insert, and how many they delete."""
    return exp.select(*weight_total_metrics()).from_(rows)


def weight_total_metrics(alias: str | None = None) -> list[exp.Expr]:
    """`weight_totals`' two sums, over the rows' columns (qualified by `alias`)."""
    weight = exp.column(WEIGHT, alias, quoted=True)

    def total(comparison: type[exp.Binary], value: exp.Expr) -> exp.Expr:
        case = exp.Case().when(weight_is(comparison, alias), value).else_(exp.Literal.number(0))
        return exp.func("COALESCE", exp.func("SUM", case), exp.Literal.number(0))

    return [total(exp.GT, weight.copy()), total(exp.LT, exp.Neg(this=weight.copy()))]


def _ctid(alias: str) -> exp.Column:
    return exp.column("ctid", alias, quoted=True)


def _copies(sign: int) -> exp.Expr:
    """How many copies a summed row inserts (`sign` 1) or deletes (−1), as the bigint LIMIT and
    generate_series take (a sum of weights may be numeric)."""
    weight: exp.Expr = exp.column(WEIGHT, ROWS, quoted=True)
    return exp.cast(weight if sign > 0 else exp.Neg(this=weight), exp.DataType.build("bigint"))


def delete(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Delete:
    """PostgreSQL: DELETE k copies of each value whose weight is −k, by their ``ctid``."""
    copies = (
        exp.select(_ctid(STORED))
        .from_(aliased(stream_table, STORED))
        .where(same_key(STORED, layout.columns, ROWS, target))
        .limit(_copies(-1))
    )
    found = (
        exp.select(_ctid("g"))
        .from_(aliased(rows, ROWS))
        .join(
            exp.Lateral(
                this=exp.Subquery(this=copies), alias=exp.TableAlias(this=exp.to_identifier("g", True))
            ),
            join_type="cross",
        )
        .where(weight_is(exp.LT, ROWS))
    )
    ctids = exp.Anonymous(this="ANY", expressions=[exp.Array(expressions=[found])])
    return exp.delete(
        stream_table.copy(), where=exp.EQ(this=exp.column("ctid", quoted=True), expression=ctids)
    )


def insert(layout: Layout, rows: exp.Expr, stream_table: exp.Table) -> exp.Insert:
    """PostgreSQL: INSERT k copies of each value whose weight is +k."""
    copies = exp.Lateral(
        this=exp.func("generate_series", exp.Literal.number(1), _copies(1)),
        alias=exp.TableAlias(this=exp.to_identifier("n", quoted=True)),
    )
    added = (
        exp.select(*columns(layout.columns, ROWS))
        .from_(aliased(rows, ROWS))
        .join(copies, join_type="cross")
        .where(weight_is(exp.GT, ROWS))
    )
    into = exp.Schema(this=stream_table.copy(), expressions=columns(layout.columns))
    return exp.Insert(this=into, expression=added)


def apply(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Insert:
    """PostgreSQL: one statement that deletes and inserts the copies the summed `rows` ask for (a
    table, or a query: bound once as a MATERIALIZED CTE, as both halves read it). The insert does not
    see the delete (one snapshot); it only adds rows, so neither depends on the other."""
    bound: list[exp.CTE] = []
    if not isinstance(rows, exp.Table):
        alias = exp.TableAlias(this=exp.to_identifier(SUMMED, quoted=True))
        bound.append(
            exp.CTE(
                this=rows.unnest() if isinstance(rows, exp.Subquery) else rows, alias=alias, materialized=True
            )
        )
        rows = exp.table_(SUMMED, quoted=True)
    removal = delete(layout, rows, stream_table, target)
    removal.set("returning", exp.Returning(expressions=[exp.Literal.number(1)]))
    gone = exp.CTE(
        this=removal,
        alias=exp.TableAlias(this=exp.to_identifier(GONE, quoted=True)),
    )
    statement = insert(layout, rows, stream_table)
    statement.set("with_", exp.With(expressions=[*bound, gone]))
    return statement


def counted_apply(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Select:
    """PostgreSQL: `apply`, as a query of how many rows it inserted and deleted."""
    statement = apply(layout, rows, stream_table, target)
    cte_list = statement.args["with_"]
    statement.set("with_", None)
    statement.set("returning", exp.Returning(expressions=[exp.Literal.number(1)]))
    cte_list.append(
        "expressions", exp.CTE(this=statement, alias=exp.TableAlias(this=exp.to_identifier(ADDED, True)))
    )

    def counted(cte: str) -> exp.Expr:
        return exp.Subquery(
            this=exp.select(exp.func("count", exp.Star())).from_(exp.table_(cte, quoted=True))
        )

    select = exp.select(counted(ADDED), counted(GONE))
    select.set("with_", cte_list)
    return select


def counted_rows(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Select:
    """The summed `rows` with how many copies of each value the stream table holds now (before they
    are applied): what `mismatches` compares with afterwards."""
    return exp.select(
        *columns([*with_hash(layout.columns, layout.key, target), WEIGHT], ROWS),
        exp.alias_(exp.Subquery(this=_stored_count(layout, stream_table, target)), STORED_COUNT, quoted=True),
    ).from_(aliased(rows, ROWS))


def _stored_count(layout: Layout, stream_table: exp.Table, target: Target) -> exp.Select:
    return (
        exp.select(exp.func("count", exp.Star()))
        .from_(aliased(stream_table, STORED))
        .where(same_key(STORED, layout.columns, ROWS, target))
    )


def mismatches(layout: Layout, counted: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Select:
    """After the writes: how many values are not held as many times as their stored count plus their
    weight (a BEFORE trigger changed or skipped copies). `counted`: `counted_rows`."""
    expected = exp.Add(
        this=exp.column(STORED_COUNT, ROWS, quoted=True), expression=exp.column(WEIGHT, ROWS, quoted=True)
    )
    differs = exp.NEQ(
        this=exp.Subquery(this=_stored_count(layout, stream_table, target)), expression=expected
    )
    return exp.select(count_where(differs)).from_(aliased(counted, ROWS))


def replacing_merge(layout: Layout, ops: exp.Expr, stream_table: exp.Table) -> exp.Merge:
    """Spark: delete every copy of a value a ``D`` row names, insert the ``I`` rows (see the module)."""
    action = exp.column(ACTION, OPS, quoted=True)

    def is_action(code: str) -> exp.Expr:
        return exp.EQ(this=action.copy(), expression=exp.Literal.string(code))

    on = all_of(is_action("D"), same_values(STORED, OPS, layout.columns))
    whens = [delete_when(), insert_when(is_action("I"), layout.columns, OPS)]
    return merge_into(stream_table, ops, OPS, on, whens)
