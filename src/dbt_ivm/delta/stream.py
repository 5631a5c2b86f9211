"""A stream table's row delta and its contents from scratch, with the bookkeeping columns its layout
(`dbt_ivm.layout`) keeps: row keys for a keyed projection, group state for an aggregate.

An aggregate stream table stores its groups' state, so its delta reads the stored state instead of
recomputing. Following one row: ``INSERT INTO orders VALUES (7, 'alice', 49.99)`` with
``SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer``:

1. changes:      customer=alice, amount=49.99, weight=+1
2. group delta:  alice: __ivm_count +1, sum +49.99, non-NULL count +1
3. new state:    stored alice row (count 2, sum 80.00) + delta -> count 3, sum 129.99
4. row delta:    -1 · (alice, 80.00, 2, ...)   +1 · (alice, 129.99, 3, ...)

A group whose count reaches 0 gets only its −1 row (it vanishes). Without GROUP BY there is always
exactly one row, even over an empty table. Unchanged groups produce identical −1/+1 rows that cancel
before anything is written. A recomputed aggregate (MIN, MAX, HAVING …) stores no state: the groups
a batch touches are read back from the stream table (−1) and recomputed from their rows (+1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlglot import exp

from dbt_ivm.delta import extremes, grouping, non_finite, plans, recount, relation, topk, window
from dbt_ivm.delta.aggregates import REGISTRY
from dbt_ivm.delta.aggregates.base import plus
from dbt_ivm.delta.aggregates.sum import bounded_sum_type
from dbt_ivm.delta.terms import Context, aliased, term_select, union_all
from dbt_ivm.keys import match
from dbt_ivm.layout import COUNT, Layout, stored_keys
from dbt_ivm.plan.aggregation import group_placeholder
from dbt_ivm.plan.nodes import Aggregate, Plan, Project, Relation, TopK, children
from dbt_ivm.sqltext import WEIGHT
from dbt_ivm.target import Target

GROUP_DELTA, STORED, NEW, ROWS = "__ivm_group_delta", "__ivm_stored", "__ivm_new", "__ivm_rows"


def _key_projections(plan: Project) -> list[exp.Expr]:
    """The hidden key columns of a keyed projection (those its own outputs do not carry)."""
    return [
        exp.alias_(exp.column(pk, scan.alias, quoted=True), name, quoted=True)
        for scan, pk, name in stored_keys(plan)
        if name not in plan.names
    ]


def _outputs(plan: Project) -> list[exp.Expr]:
    return [exp.alias_(o.expression, o.name, quoted=True) for o in plan.outputs]


def contents(plan: Plan, layout: Layout, ctx: Context) -> exp.Query:
    """SELECT of every layout column over the sources' current state."""
    plans.context(ctx)
    if layout.kind == "keyed" and isinstance(plan, Project):
        columns = _outputs(plan) + _key_projections(plan)
        return union_all(
            [term_select(t, columns, ctx, weighted=False) for t in relation.after(plan.input, ctx)]
        )
    if isinstance(plan, TopK):
        return topk.contents(plan, ctx)
    if not isinstance(plan, Aggregate):
        return plans.contents(plan, ctx)
    rows = grouping.input_rows(plan, "after", ctx)
    assert rows is not None
    if plan.recomputed:
        return grouping.from_scratch(plan, rows, hidden_groups=True)
    values = {str(o.alias): o for o in grouping.from_scratch_outputs(plan, ROWS)}
    for i in range(len(plan.group_by)):
        values.setdefault(
            group_placeholder(i),
            exp.alias_(
                exp.column(group_placeholder(i), ROWS, quoted=True), group_placeholder(i), quoted=True
            ),
        )
    values[COUNT] = exp.alias_(exp.func("COUNT", exp.Star()), COUNT, quoted=True)
    for call in plan.calls:
        argument = (
            exp.column(grouping.arg_column(call), ROWS, quoted=True) if call.argument is not None else None
        )
        for name, value in zip(
            grouping.state_names(call), REGISTRY[call.func].from_scratch(argument), strict=True
        ):
            values[name] = exp.alias_(value, name, quoted=True)
    query = exp.select(*[values[c] for c in layout.columns]).from_(aliased(rows, ROWS))
    if plan.group_by:
        query = query.group_by(*grouping.group_columns(plan, ROWS))
    return query


def row_delta(
    plan: Plan, layout: Layout, ctx: Context, stream_table: exp.Table, target: Target
) -> exp.Query | None:
    """The stream table's row delta for this batch (layout columns + weight), or None when no source
    changed. An aggregate's delta reads its groups' stored state from `stream_table`, matched on the
    key as `target` stores it."""
    plans.context(ctx)
    stored_partitions = window.stored_partitions(plan)
    if stored_partitions is not None and isinstance(plan, Project):
        columns = _outputs(plan) + _key_projections(plan)
        return window.stored_delta(plan, layout, columns, ctx, stream_table, stored_partitions)
    if layout.kind == "keyed" and isinstance(plan, Project):
        columns = _outputs(plan) + _key_projections(plan)
        terms = relation.delta(plan.input, ctx)
        return union_all([term_select(t, columns, ctx) for t in terms]) if terms else None
    if isinstance(plan, TopK):
        return topk.delta(plan, ctx, stream_table)
    if layout.kind != "aggregate":  # a multiset, a keyed window, a distinct set operation
        return plans.delta(plan, ctx)
    assert isinstance(plan, Aggregate)
    if plan.recomputed:
        return _recomputed_aggregate_delta(plan, layout, ctx, stream_table, target)
    return _stored_aggregate_delta(plan, layout, ctx, stream_table, target)


def _recomputed_aggregate_delta(
    plan: Aggregate, layout: Layout, ctx: Context, table: exp.Table, target: Target
) -> exp.Query | None:
    """The stored rows of the groups a batch touches (−1) and those groups recomputed from their
    current rows (+1): a group that stops qualifying for HAVING, or loses its last row, only leaves."""
    found = grouping.input_rows(plan, "delta", ctx)
    if found is None:
        return None
    changes = ctx.pinned(found)
    shortcut = extremes.applies(plan)
    removed = exp.select(
        *[exp.column(c, "s", quoted=True) for c in layout.columns],
        exp.alias_(exp.Literal.number(-1), WEIGHT, quoted=True),
    ).from_(aliased(table, "s"))
    keys = [exp.column(group_placeholder(i), "d", quoted=True) for i in range(len(plan.group_by))]
    if not shortcut and not plan.group_by:  # the one global row, recomputed
        return union_all([removed, _recomputed_groups(plan, layout, ctx, None)])
    touched = ctx.pinned(
        extremes.touched(plan, changes) if shortcut else grouping.touched_groups(plan, changes)
    )
    removed = removed.join(aliased(touched, "d"), on=match("s", layout.key, keys, target), join_type="inner")
    if not shortcut:
        return union_all(
            [
                removed,
                _recomputed_groups(plan, layout, ctx, grouping.in_groups(plan, touched, ctx.bindings.target)),
            ]
        )
    # Only the groups that lost a row are recomputed; the others combine their extremes.
    loses = exp.column(extremes.LOSES, "d", quoted=True)
    lost_groups = exp.select(*grouping.group_columns(plan, "d"), loses.copy()).from_(aliased(touched, "d"))
    lost = ctx.pinned(lost_groups.where(loses.eq(1)))
    if plan.group_by:
        added = _recomputed_groups(plan, layout, ctx, grouping.in_groups(plan, lost, ctx.bindings.target))
    else:
        added = _recomputed_groups(plan, layout, ctx, None).where(
            exp.Exists(this=exp.select("1").from_(aliased(lost, "__ivm_lost")))
        )
    return union_all([removed, added, extremes.combined(plan, layout, touched, table, target)])


def _recomputed_groups(
    plan: Aggregate, layout: Layout, ctx: Context, restrict: grouping.Alternatives | None
) -> exp.Select:
    """The groups whose rows pass `restrict` (all: None), recomputed as stored rows (+1)."""
    rows = grouping.input_rows(plan, "after", ctx, restrict)
    assert rows is not None
    return exp.select(
        *[exp.column(c, ROWS, quoted=True) for c in layout.columns],
        exp.alias_(exp.Literal.number(1), WEIGHT, quoted=True),
    ).from_(aliased(grouping.from_scratch(plan, rows, hidden_groups=True), ROWS))


@dataclass(frozen=True)
class GroupChange:
    """A stored aggregate's batch, per group: `delta` holds each touched group's keys (group
    placeholders) and the change of its count and states. `merged(stored, change)` adds a stored row
    (alias `stored`; NULL columns for a group not stored yet) to a delta row (alias `change`), by
    state column; `outputs(row)` gives every layout column over such a merged row (alias `row`)."""

    plan: Aggregate
    layout: Layout
    delta: exp.Query
    types: dict[int, exp.DataType]
    # By sum state: the sum read again from the group's rows where the batch's is not finite.
    again: dict[str, exp.Expr] = field(default_factory=dict)

    def merged(self, stored: str, change: str) -> dict[str, exp.Expr]:
        plan = self.plan
        values: dict[str, exp.Expr] = {
            group_placeholder(i): exp.column(group_placeholder(i), change, quoted=True)
            for i in range(len(plan.group_by))
        }
        if COUNT in self.layout.recounted:  # kept nowhere: a stand-in, right where 0
            values[COUNT] = recount.rows_after(plan, self.layout, stored, change, bool(self.again))
        else:
            stored_count = exp.column(self.layout.stored(COUNT), stored, quoted=True)
            values[COUNT] = plus(stored_count, exp.column(COUNT, change, quoted=True))
        for call in plan.calls:
            names = grouping.state_names(call)
            old: list[exp.Expr] = [exp.column(self.layout.stored(n), stored, quoted=True) for n in names]
            new: list[exp.Expr] = [exp.column(n, change, quoted=True) for n in names]
            if names and names[-1] in self.layout.recounted:  # SUM's count: a stand-in, right where 0
                new[-1] = recount.count_after(old[0].copy(), change, names[-1])
                old[-1] = exp.Literal.number(0)
            summed = bounded_sum_type(call.func, self.types.get(call.index))
            if summed is not None:  # the batch's sum in the stored sum's type: their sum keeps its scale
                new[0] = exp.Cast(this=new[0], to=summed)
            values.update(zip(names, REGISTRY[call.func].merge(old, new), strict=True))
            if names and names[0] in self.again:
                again = non_finite.for_change(self.again[names[0]], change)
                values[names[0]] = non_finite.summed_again(new[0].copy(), values[names[0]], again)
        return values

    def outputs(self, row: str) -> dict[str, exp.Expr]:
        values = {str(o.alias): o for o in grouping.finalized_outputs(self.plan, row, self.types)}
        for column in self.layout.hidden:
            values.setdefault(column, exp.alias_(exp.column(column, row, quoted=True), column, quoted=True))
        return {c: values[c] for c in self.layout.columns}

    def new_values(self, stored: str, change: str) -> dict[str, exp.Expr]:
        """Every layout column's value once the change (alias `change`) is added to the stored row
        (alias `stored`), as one expression over both."""
        merged, row = self.merged(stored, change), "__ivm_row"

        def substitute(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column) and node.table == row and node.name in merged:
                return exp.paren(merged[node.name].copy(), copy=False)
            return node

        return {c: o.this.transform(substitute) for c, o in self.outputs(row).items()}

    def group_keys(self, change: str) -> list[exp.Expr]:
        return [exp.column(group_placeholder(i), change, quoted=True) for i in range(len(self.plan.group_by))]

    def key_match(self, stored: str, change: str, target: Target) -> exp.Expr:
        """Stream-table rows (alias `stored`) of the delta row's group (alias `change`)."""
        return match(stored, self.layout.key, self.group_keys(change), target)


def group_change(
    plan: Plan, layout: Layout, ctx: Context, stream_table: exp.Table, target: Target
) -> GroupChange | None:
    """The batch as a change per group, for an aggregate that keeps its state (None: any other plan,
    or no source changed). Counts it keeps nowhere are recounted for the groups in doubt, whose stored
    rows `stream_table` holds (`recount`)."""
    plans.context(ctx)
    if layout.kind != "aggregate" or not isinstance(plan, Aggregate) or plan.recomputed:
        return None
    changes = grouping.input_rows(plan, "delta", ctx)
    if changes is None:
        return None
    changes_alias = "__ivm_changes"
    weight = exp.column(WEIGHT, changes_alias, quoted=True)
    delta = exp.select(
        *grouping.group_columns(plan, changes_alias), *grouping.weighted_states(plan, weight, changes_alias)
    ).from_(aliased(changes, changes_alias))
    if plan.group_by:
        delta = delta.group_by(*grouping.group_columns(plan, changes_alias))
    counted = recount.with_recounts(plan, layout, delta, ctx, stream_table, target)
    types = ctx.call_types.get(id(plan), {})
    return GroupChange(plan, layout, counted, types, non_finite.sums_again(plan, ctx))


def _stored_aggregate_delta(
    plan: Aggregate, layout: Layout, ctx: Context, table: exp.Table, target: Target
) -> exp.Query | None:
    change = group_change(plan, layout, ctx, table, target)
    if change is None:
        return None
    pinned = ctx.pinned(change.delta)  # read twice: the groups' old rows and their new ones
    merged = [exp.alias_(value, name, quoted=True) for name, value in change.merged("s", "d").items()]
    new = (
        exp.select(*merged)
        .from_(aliased(pinned.copy(), "d"))
        .join(aliased(table, "s"), on=change.key_match("s", "d", target), join_type="left")
    )
    removed = (
        exp.select(
            *[exp.column(c, "s", quoted=True) for c in layout.columns],
            exp.alias_(exp.Literal.number(-1), WEIGHT, quoted=True),
        )
        .from_(aliased(table, "s"))
        .join(aliased(pinned, "d"), on=change.key_match("s", "d", target), join_type="inner")
    )
    added = exp.select(
        *change.outputs("n").values(), exp.alias_(exp.Literal.number(1), WEIGHT, quoted=True)
    ).from_(aliased(new, "n"))
    if not layout.is_global_aggregate:
        added = added.where(
            exp.GT(this=exp.column(COUNT, "n", quoted=True), expression=exp.Literal.number(0))
        )
    return union_all([removed, added])


def aggregates_in(node: Plan | Relation) -> Iterator[Aggregate]:
    """Every Aggregate in the tree (the plan itself, subqueries in FROM, set operation inputs)."""
    if isinstance(node, Aggregate):
        yield node
    for child in children(node):
        yield from aggregates_in(child)


def call_probes(plan: Plan, ctx: Context) -> list[tuple[Aggregate, exp.Query]]:
    """For each aggregate with calls, a query whose columns have its calls' result types."""
    plans.context(ctx)
    probes: list[tuple[Aggregate, exp.Query]] = []
    for aggregate in aggregates_in(plan):
        if not aggregate.calls:
            continue
        rows = grouping.input_rows(aggregate, "after", ctx)
        assert rows is not None
        columns = [
            exp.alias_(grouping.call_over(call, ROWS), f"c{call.index}", quoted=True)
            for call in aggregate.calls
        ]
        probes.append((aggregate, exp.select(*columns).from_(aliased(rows, ROWS))))
    return probes
