"""Window functions: a batch changes only the partitions its rows fall in, so those partitions are
recomputed, over their rows before the batch (−1) and after it (+1); rows of untouched partitions
are never read. Unchanged rows of a touched partition cancel before the apply. A filter right above
the window (its `keep`) is applied with it, so only kept rows are ranked out and carried. A stream
table that holds the window's rows and shows its partition columns gives the rows before the batch
itself (`stored_delta`).

Following one row through the latest-row-per-key pattern, ``ROW_NUMBER() OVER (PARTITION BY
customer ORDER BY updated_at DESC) AS rn`` filtered to ``rn = 1``: an update of alice's address
puts alice's old version (−1) and new one (+1) among the changes. The touched partitions are
{alice}; alice's rows are ranked before (old version first: rn 1) and after (new version: rn 1,
old: gone), so the delta is −(old, rn 1), +(new, rn 1); the filter keeps both and the stream table
swaps one row. Bob's rows are not read.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.plan import build_plan
>>> events = TableInfo("public", "events", (Column("id", "int", False), Column("k", "int", False),
...                    Column("ts", "int")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> plan = build_plan(POSTGRES, "SELECT id, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM events",
...                   StaticCatalog([events]), "ranked")
>>> ctx = Context(Bindings.named(POSTGRES, {"public.events": "events"}, {"public.events": "d"}))
>>> print(contents(plan, ctx).sql("postgres"))
SELECT "__ivm_win"."__ivm_w1" AS "id", ROW_NUMBER() OVER (PARTITION BY "__ivm_win"."__ivm_w0" ORDER BY "__ivm_win"."__ivm_w2" DESC) AS "rn" FROM (SELECT "events"."k" AS "__ivm_w0", "events"."id" AS "__ivm_w1", "events"."ts" AS "__ivm_w2" FROM events AS "events") AS "__ivm_win"
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dbt_ivm.delta import grouping, plans, relation
from dbt_ivm.delta.terms import Context, aliased, term_select, union_all
from dbt_ivm.layout import Layout, key_never_null, layout_of, plan_key
from dbt_ivm.plan.aggregation import group_placeholder
from dbt_ivm.plan.nodes import Aggregate, Derived, Plan, Project, Window
from dbt_ivm.sqltext import WEIGHT
from dbt_ivm.target import Target

INPUT, KEPT = "__ivm_win", "__ivm_ranked"


def contents(plan: Window, ctx: Context, touched: exp.Expr | None = None) -> exp.Select:
    """The window's rows over the input as `ctx` binds it (only `touched` partitions, if given)."""
    rows = plans.contents(plan.input, ctx) if touched is None else _partitions(plan, ctx, touched)
    return _over(plan, rows)


def _over(plan: Window, rows: exp.Expr) -> exp.Select:
    def qualified(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table:
            return exp.column(node.name, INPUT, quoted=True)
        return node

    outputs = [exp.alias_(o.expression.transform(qualified), o.name, quoted=True) for o in plan.outputs]
    ranked = exp.select(*outputs).from_(aliased(rows, INPUT))
    if plan.keep is None:
        return ranked

    def kept(node: exp.Expr) -> exp.Expr:
        return exp.column(node.name, KEPT, quoted=True) if isinstance(node, exp.Column) else node

    columns = [exp.column(n, KEPT, quoted=True) for n in plan.names]
    return exp.select(*columns).from_(aliased(ranked, KEPT)).where(plan.keep.transform(kept))


def delta(plan: Window, ctx: Context) -> exp.Query | None:
    """The touched partitions recomputed before the batch (−1) and after it (+1)."""
    found = plans.delta(plan.input, ctx)
    if found is None:
        return None
    changes = ctx.pinned(found)
    touched = ctx.pinned(_touched(plan, changes)) if plan.partition_by else None
    if ctx.bindings.before is not None:
        before = contents(plan, ctx.as_before(), touched)
    else:
        rows = plans.contents(plan.input, ctx) if touched is None else _partitions(plan, ctx, touched)
        now_rows = _star(ctx.pinned(rows))  # read twice: now, and now − batch
        source, key = plan.input, plan_key(plan.input)
        if key:
            never_null = isinstance(source, Project) and key_never_null(source, layout_of(source))
            keyed = _keyed_now_minus_batch(
                now_rows, changes, source.names, key, key if never_null else (), ctx.bindings.target
            )
            before = _over(plan, keyed)
        else:
            before = _over(plan, grouping.now_minus_batch(now_rows, _star(changes), plan.input.names))
    after = contents(plan, ctx, touched)
    sides: list[exp.Query] = []
    for weight, side in ((-1, before), (1, after)):
        values: list[exp.Expr] = [exp.column(n, "__ivm_side", quoted=True) for n in plan.names]
        values.append(exp.alias_(exp.Literal.number(weight), WEIGHT, quoted=True))
        sides.append(exp.select(*values).from_(aliased(side, "__ivm_side")))
    return union_all(sides)


def _touched(plan: Window, changes: exp.Expr) -> exp.Select:
    """The partitions among the input's `changes`, each once."""
    columns = [exp.column(n, "__ivm_chg", quoted=True) for n in plan.partition_by]
    return exp.select(*columns).from_(aliased(changes, "__ivm_chg")).group_by(*[c.copy() for c in columns])


def stored_partitions(plan: Plan) -> dict[str, str] | None:
    """For a stream table that is a projection of one window subquery and shows each partition
    column as it is (`SELECT id, customer FROM (… ROW_NUMBER() OVER (PARTITION BY customer …) AS rn
    …) WHERE rn = 1`), the stream-table column that holds each partition column (None: another
    shape). Its stored rows are then the window's rows before the batch, partition by partition."""
    if not isinstance(plan, Project) or not isinstance(plan.input, Derived):
        return None
    item = plan.input
    if not isinstance(item.plan, Window) or not item.plan.partition_by:
        return None
    shown = {  # window output -> stream-table column
        o.expression.name: o.name
        for o in plan.outputs
        if isinstance(o.expression, exp.Column) and o.expression.table == item.alias
    }
    passed = {o.expression.name: o.name for o in item.plan.outputs if isinstance(o.expression, exp.Column)}
    stored = {p: shown.get(passed.get(p, ""), "") for p in item.plan.partition_by}
    return None if not all(stored.values()) else stored


def stored_delta(
    plan: Project,
    layout: Layout,
    columns: list[exp.Expr],
    ctx: Context,
    stream_table: exp.Table,
    stored: dict[str, str],
) -> exp.Query | None:
    """A stream table's change when it holds a window's rows (`stored_partitions`): the stored rows of
    the touched partitions leave (−1) and those partitions, recomputed, enter (+1) as the table's
    `columns` over the window's rows. The rows before the batch are read from the stream table, one
    row per kept window row, instead of ranked again.

    Following one row: `latest_order` stores alice's order 7 (rn 1). Her new order 9 touches the
    partition {alice}: the stored row (7) leaves, her orders are ranked again and order 9 enters.
    """
    assert isinstance(plan.input, Derived) and isinstance(plan.input.plan, Window)
    item, window = plan.input, plan.input.plan
    found = plans.delta(window.input, ctx)
    if found is None:
        return None
    touched = ctx.pinned(_touched(window, found))
    table = "__ivm_stored"
    partitions = [exp.column(stored[p], table, quoted=True) for p in window.partition_by]
    among = grouping.among(touched, window.partition_by, partitions, None, ctx.bindings.target)
    leaving = exp.select(
        *[exp.column(c, table, quoted=True) for c in layout.columns],
        exp.alias_(exp.Literal.number(-1), WEIGHT, quoted=True),
    ).from_(aliased(stream_table, table))
    removed = union_all([leaving.where(a) for a in among])
    added = exp.select(*columns, exp.alias_(exp.Literal.number(1), WEIGHT, quoted=True))
    added = added.from_(aliased(contents(window, ctx, touched), item.alias))
    return union_all([removed, added])


def _keyed_now_minus_batch(
    now_rows: exp.Query,
    changes: exp.Expr,
    names: Sequence[str],
    key: Sequence[str],
    not_null: Sequence[str],
    target: Target,
) -> exp.Query:
    """The input's rows before the batch when `key` identifies them: the rows now, less those the
    batch added (found by key), plus those it removed. A multiset needs a sum of weights over every
    row of the touched partitions instead (`grouping.now_minus_batch`):

    >>> from dbt_ivm.target import POSTGRES
    >>> print(_keyed_now_minus_batch(exp.select("*").from_("now"), exp.to_table("chg"), ["id", "v"],
    ...       ["id"], ["id"], POSTGRES).sql("postgres"))  # doctest: +ELLIPSIS
    SELECT "__ivm_kept"."id", "__ivm_kept"."v" FROM (SELECT ... FROM (SELECT * FROM now) AS "__ivm_now" LEFT JOIN (SELECT "__ivm_net"."id", 1 AS "__ivm_added" FROM (...) AS "__ivm_net" WHERE "__ivm_net"."__ivm_weight" > 0) AS "__ivm_added" ON "__ivm_now"."id" = "__ivm_added"."id") AS "__ivm_kept" WHERE "__ivm_kept"."__ivm_added" IS NULL UNION ALL SELECT "__ivm_net"."id", "__ivm_net"."v" FROM (...) AS "__ivm_net" WHERE "__ivm_net"."__ivm_weight" < 0
    """
    net_alias, now_alias, kept_alias, change, added = (
        "__ivm_net",
        "__ivm_now",
        "__ivm_kept",
        "__ivm_c",
        "__ivm_added",
    )

    def columns(table: str, which: Sequence[str]) -> list[exp.Expr]:
        return [exp.column(n, table, quoted=True) for n in which]

    weight = exp.func("SUM", exp.column(WEIGHT, change, quoted=True))
    net = exp.select(*columns(change, names), exp.alias_(weight, WEIGHT, quoted=True))
    net = net.from_(aliased(changes, change)).group_by(*columns(change, names))
    net_weight = exp.column(WEIGHT, net_alias, quoted=True)
    zero = exp.Literal.number(0)
    added_keys = exp.select(*columns(net_alias, key), exp.alias_(exp.Literal.number(1), added, quoted=True))
    added_keys = added_keys.from_(aliased(net.copy(), net_alias))
    added_keys = added_keys.where(exp.GT(this=net_weight.copy(), expression=zero))
    marked = exp.select(*columns(now_alias, names), exp.column(added, added, quoted=True))
    joined = grouping.left_joined_on_keys(
        marked.from_(aliased(now_rows, now_alias)), added_keys, key, (now_alias, added), not_null, target
    )
    kept = exp.select(*columns(kept_alias, names)).from_(aliased(joined, kept_alias))
    kept = kept.where(exp.Is(this=exp.column(added, kept_alias, quoted=True), expression=exp.null()))
    removed = exp.select(*columns(net_alias, names)).from_(aliased(net, net_alias))
    return union_all([kept, removed.where(exp.LT(this=net_weight, expression=zero.copy()))])


def _star(relation: exp.Expr) -> exp.Query:
    return relation if isinstance(relation, exp.Query) else exp.select("*").from_(relation.copy())


def _partitions(plan: Window, ctx: Context, touched: exp.Expr) -> exp.Query:
    """The input's rows in the `touched` partitions, the restriction pushed below the input's own
    operator where it can be (to the base tables of a projection, to an aggregate's group keys)."""
    source = plan.input
    if isinstance(source, Project):
        by_name = {o.name: o.expression for o in source.outputs}
        restrict = _in_touched(
            plan, touched, [by_name[n] for n in plan.partition_by], source, ctx.bindings.target
        )
        outputs = [exp.alias_(o.expression, o.name, quoted=True) for o in source.outputs]
        terms = relation.after(source.input, ctx)
        return union_all(
            [term_select(t, outputs, ctx, weighted=False) for t in grouping.restricted(terms, restrict)]
        )
    if isinstance(source, Aggregate):
        by_name = {o.name: o.expression for o in source.outputs}
        keys = [_group_key(source, by_name[n]) for n in plan.partition_by]
        if all(k is not None for k in keys):
            restrict = _in_touched(
                plan, touched, [k for k in keys if k is not None], source, ctx.bindings.target
            )
            rows = grouping.input_rows(source, "after", ctx, restrict)
            assert rows is not None
            return grouping.from_scratch(source, rows)
    every = "__ivm_all"
    columns: list[exp.Expr] = [exp.column(n, every, quoted=True) for n in plan.partition_by]
    return grouping.restricted_rows(
        plans.contents(source, ctx), every, _in_touched(plan, touched, columns, None, ctx.bindings.target)
    )


def _group_key(source: Aggregate, output: exp.Expr) -> exp.Expr | None:
    """The group key expression an aggregate's output shows as is (None: a computed output)."""
    for index, key in enumerate(source.group_by):
        if output == exp.column(group_placeholder(index), quoted=True):
            return key
    return None


def _in_touched(
    plan: Window, touched: exp.Expr, values: list[exp.Expr], source: Plan | None, target: Target
) -> grouping.Alternatives:
    """A row's partition values are among `touched`."""
    over = source.input if isinstance(source, Project | Aggregate) else None
    return grouping.among(touched, plan.partition_by, values, over, target)
