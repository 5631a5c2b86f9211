"""Net effect of a source's raw changes in one batch: the sum of their weights per row image.

Raw changes are rows with ``__ivm_weight`` −1 (a row image that stopped existing: DELETE, or an
UPDATE's old image) or +1 (INSERT, or an UPDATE's new image). Their net effect is the Z-set sum of
the weights of identical images, which does not depend on the order the changes are listed or were
captured in. Following key 3 through ``UPDATE 75→10; UPDATE 10→20; DELETE``, in any order:
−(3, 75) +(3, 10) −(3, 10) +(3, 20) −(3, 20) sums to −(3, 75): the delta is just −75. INSERT then
DELETE sums to nothing. A row trigger that updates the row again (its capture fires before the outer
statement's) contributes its −/+ pair just the same.

A key whose row existed before the batch and after it thus keeps at most one −1 image (the old row)
and one +1 image (the new one): every committed transaction leaves at most one row per key, and the
sum telescopes across them. A row removed and put back unchanged (an update that set the same values,
a copy-on-write rewrite carrying a row over into a new file) sums to 0 and disappears. Without a
key, identical rows are interchangeable: a net weight of n becomes n rows of weight sign(n).

With the table's key, only the changes of keys changed more than once are compared image by image:
a row whose key no other change has is already its net effect.

`image` identifies a row image. By default it is the columns themselves; PostgreSQL passes the row's
text form, which every type has (json and point have no equality operator to partition by) and which
tells apart values that compare equal but differ (1.0 and 1.00).

>>> print(compacted(exp.to_table("raw"), ["id", "amount"]).sql("postgres"))  # doctest: +NORMALIZE_WHITESPACE
SELECT "id", "amount", "__ivm_weight" FROM (SELECT "id", "amount", "__ivm_weight",
SUM("__ivm_weight") OVER (PARTITION BY "id", "amount") AS "__ivm_net",
ROW_NUMBER() OVER (PARTITION BY "id", "amount", "__ivm_weight" ORDER BY "__ivm_weight") AS "__ivm_rank"
FROM raw AS "__ivm_raw") AS "__ivm_netted"
WHERE SIGN("__ivm_weight") = SIGN("__ivm_net") AND "__ivm_rank" <= ABS("__ivm_net")
>>> row_image(["id", "amount"]).sql("postgres")
'CAST(ROW("id", "amount") AS TEXT)'

A plan that sums its changes per group does not need them netted (`needs_netting`): identical images
that cancel add nothing to a sum of weights times values, whichever rows they sit among.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dbt_ivm.catalog import TableInfo
from dbt_ivm.delta.terms import aliased
from dbt_ivm.plan.nodes import Aggregate, Filter, Plan, Scan
from dbt_ivm.reserved import internal_columns
from dbt_ivm.sqltext import WEIGHT, columns

IMAGE, NET, RANK, KEY_ROWS = "__ivm_image", "__ivm_net", "__ivm_rank", "__ivm_key_rows"


def compacted(
    raw: exp.Expr, names: Sequence[str], image: exp.Expr | None = None, key: Sequence[str] = ()
) -> exp.Select:
    """SELECT of the columns `names` + weight (±1 rows): the net effect of the raw change relation `raw`.

    `image`: an expression over `raw`'s columns that identifies a row image (default: the columns).
    `key`: columns among `names` no two rows of the table share (its primary key): a row whose key
    no other change has is its own net effect, and its image is not computed (most rows of a batch;
    PostgreSQL's text image of a wide row cost more than the rest of netting it)."""
    carried = [*names, WEIGHT]
    source = aliased(raw, "__ivm_raw")
    # Several partition columns: carried as they are, the window partitions by all of them.
    partition = list(names)
    if image is not None:
        if key:
            counted = exp.Window(this=exp.func("COUNT", exp.Star()), partition_by=columns(key))
            counting = exp.select(*columns(carried), exp.alias_(counted, KEY_ROWS, quoted=True)).from_(source)
            shared = exp.GT(this=exp.column(KEY_ROWS, quoted=True), expression=exp.Literal.number(1))
            source, image = (
                aliased(counting, "__ivm_counted"),
                exp.Case(ifs=[exp.If(this=shared, true=image)]),
            )
        imaged = exp.select(*columns(carried), exp.alias_(image, IMAGE, quoted=True)).from_(source)
        source, partition = aliased(imaged, "__ivm_imaged"), [*key, IMAGE]
    [weight, net_sum, rank_number] = columns([WEIGHT, NET, RANK])
    net = exp.Window(this=exp.func("SUM", weight.copy()), partition_by=columns(partition))
    # Raw weights are ±1: keep |net| of the rows whose sign is the net's.
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=columns([*partition, WEIGHT]),
        order=exp.Order(expressions=[exp.Ordered(this=weight.copy(), nulls_first=False)]),
    )
    netted = exp.select(
        *columns(carried), exp.alias_(net, NET, quoted=True), exp.alias_(rank, RANK, quoted=True)
    ).from_(source)
    return (
        exp.select(*columns(carried))
        .from_(aliased(netted, "__ivm_netted"))
        .where(
            exp.EQ(this=exp.Sign(this=weight.copy()), expression=exp.Sign(this=net_sum.copy())), copy=False
        )
        .where(exp.LTE(this=rank_number, expression=exp.Abs(this=net_sum)), copy=False)
    )


def text_netted(raw: exp.Expr, table: TableInfo) -> exp.Select:
    """PostgreSQL: the net effect of `table`'s raw changes `raw` (its internal columns + weight),
    rows compared by their text image, its primary key first."""
    names = internal_columns(table)
    return compacted(raw, names, row_image(names), internal_columns(table, table.primary_key))


def text_changes(raw: exp.Expr, table: TableInfo, netted: bool) -> exp.Select:
    """PostgreSQL: `table`'s raw changes `raw` as a pending table holds them, `text_netted`, or as
    they are where the plan does not need them `netted` (`needs_netting`)."""
    if netted:
        return text_netted(raw, table)
    return exp.select(*columns([*internal_columns(table), WEIGHT])).from_(raw)


def row_image(names: Sequence[str]) -> exp.Expr:
    """PostgreSQL: a row image as text (every type has a text form; equal text, identical image)."""
    row = exp.Anonymous(this="ROW", expressions=columns(names))
    return exp.cast(row, exp.DataType.build("text"))


def needs_netting(plan: Plan) -> bool:
    """Whether `plan`'s delta rules must see a batch's net effect. Not for GROUP BY with running sums
    (COUNT, SUM, AVG) over one table, filtered or not: each group's change is the sum of its raw
    changes' weights times values, and −(3, 75) +(3, 75) or +(3, 10) −(3, 10) +(3, 10) add to it what
    their net effect adds. Over inner joins the same holds (each join term is linear in each change
    set it reads), but TPC-H's join queries ran slower on raw changes (docs/benchmarks.md), so they
    stay netted. Every other rule may read a key's changes as "gone" and "come" (the rows before the
    batch, a recomputed group's keys), which only holds once they are netted.

    >>> from dbt_ivm.catalog import Column, StaticCatalog
    >>> from dbt_ivm.plan import build_plan
    >>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("amount", "int")), ("id",))
    >>> from dbt_ivm.target import POSTGRES
    >>> def plan(sql): return build_plan(POSTGRES, sql, StaticCatalog([orders]), "model")
    >>> needs_netting(plan("SELECT id % 10 AS k, SUM(amount) AS s FROM orders WHERE amount > 0 GROUP BY 1"))
    False
    >>> needs_netting(plan("SELECT id % 10 AS k, MAX(amount) AS m FROM orders GROUP BY 1"))
    True
    """
    if not isinstance(plan, Aggregate) or plan.recomputed:
        return True
    relation = plan.input
    while isinstance(relation, Filter):
        relation = relation.input
    return not isinstance(relation, Scan)
