"""Counts kept nowhere, recounted only for the groups a batch may have emptied: SUM's non-NULL count,
and the group's row count.

SUM(x) over a column that may be NULL is NULL for a group where no row has x set, so its running
state needs to know when that count reaches 0. The stored sum itself tells most of it: a group whose
batch adds non-NULL values (or removes none) is non-NULL after it exactly when it was before or gains
one; a group left with a sum other than 0 has some value set. Only a group whose batch removes
non-NULL values and leaves its sum at exactly 0 is in doubt, and for those groups alone `x` is
counted again over their rows.

The row count says when a group's row goes. A stored group whose batch removes no rows keeps some;
one the batch removes rows from keeps some where a SUM after the batch is not 0 or a COUNT(x) is
above 0. Only the others are in doubt and counted again; a group of them that has no rows left gets
no recount row, and goes.

Following one row: ``SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer`` stores
(alice, 30.00): orders of 10.00, 20.00 and one without an amount. Deleting the 10.00 order leaves
20.00: not in doubt, nothing is read. Deleting then the 20.00 order leaves the sum at 0 after a
value and a row left: alice's orders are read, one is left and none has an amount, her total is
NULL. Deleting the last one, her orders are read again: none is left, her row goes.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.layout import layout_of
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> plan = build_plan(POSTGRES, "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer",
...                   StaticCatalog([orders]), "customer_totals")
>>> layout_of(plan).hidden, layout_of(plan).recounted
((), ('__ivm_count', '__ivm_a0_nn'))
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta import grouping, non_finite
from dbt_ivm.delta.aggregates.count import COUNT as COUNT_NON_NULL
from dbt_ivm.delta.aggregates.sum import SUM
from dbt_ivm.delta.terms import Context, aliased
from dbt_ivm.keys import match
from dbt_ivm.layout import COUNT, PROVING, Layout
from dbt_ivm.plan.aggregation import group_placeholder
from dbt_ivm.plan.nodes import AggCall, Aggregate, Filter, Join, Relation, Scan, scans_in
from dbt_ivm.target import Target

CHANGE, STORED, RECOUNT = "__ivm_change", "__ivm_stored", "__ivm_recount"
IN_DOUBT = "__ivm_in_doubt"  # a flag on the change: the group must be counted again


def recount_column(state: str) -> str:
    """The column of a group's change that carries the recounted `state` (NULL: not recounted)."""
    return f"{state}_recount"


def recounted_calls(plan: Aggregate, layout: Layout) -> list[tuple[AggCall, str, str]]:
    """Each SUM whose non-NULL count is recounted, with its sum and count state names."""
    found = []
    for call in plan.calls:
        if call.func == SUM.name:
            total, count = grouping.state_names(call)
            if count in layout.recounted:
                found.append((call, total, count))
    return found


def _after(layout: Layout, state: str, stored: str, change: str) -> exp.Expr:
    """A state's value after the batch, NULLs as 0: the stored value plus the change."""
    return exp.Add(
        this=exp.func(
            "COALESCE", exp.column(layout.stored(state), stored, quoted=True), exp.Literal.number(0)
        ),
        expression=exp.func("COALESCE", exp.column(state, change, quoted=True), exp.Literal.number(0)),
    )


def _has_rows(plan: Aggregate, layout: Layout, stored: str, change: str, non_finite_sums: bool) -> exp.Expr:
    """True where a state after the batch proves the group has rows: a sum other than 0 (of exact
    numbers: SUM over floating point is refused; with `non_finite_sums`, a finite one), or a count of
    values above 0."""
    proofs: list[exp.Expr] = []
    for call in plan.calls:
        if call.func in PROVING:
            first = grouping.state_names(call)[0]  # the sum of SUM and AVG, COUNT(x)'s count
            after = _after(layout, first, stored, change)
            zero = exp.Literal.number(0)
            proofs.append(
                exp.GT(this=after, expression=zero)
                if call.func == COUNT_NON_NULL.name
                else exp.NEQ(this=after, expression=zero)
            )
            if non_finite_sums and call.func != COUNT_NON_NULL.name:
                # NaN or ±Infinity after a removal proves nothing (NaN − NaN is NaN): `non_finite`
                proofs[-1] = exp.and_(proofs[-1], non_finite.finite(after.copy()))
    return exp.or_(*proofs)


def _removes(change: str, count: str) -> exp.Expr:
    return exp.LT(this=exp.column(count, change, quoted=True), expression=exp.Literal.number(0))


def _changes_something(plan: Aggregate, change: exp.Select) -> exp.Select:
    """`change` without groups whose every change is 0. A group not stored yet that the batch leaves
    empty can still be in it (a join's delta adds a pair and takes it back when one side came and the
    other went); without a stored row count its row could not be told from a stored one's."""
    names = [str(e.alias_or_name) for e in change.expressions]
    states = [COUNT, *(n for call in plan.calls for n in grouping.state_names(call))]
    some = exp.or_(
        *[
            exp.NEQ(
                this=exp.func("COALESCE", exp.column(n, "__ivm_grouped", quoted=True), exp.Literal.number(0)),
                expression=exp.Literal.number(0),
            )
            for n in states
        ]
    )
    return (
        exp.select(*[exp.column(n, "__ivm_grouped", quoted=True) for n in names])
        .from_(aliased(change, "__ivm_grouped"))
        .where(some)
    )


def with_recounts(
    plan: Aggregate, layout: Layout, change: exp.Select, ctx: Context, stream_table: exp.Table, target: Target
) -> exp.Query:
    """`change` (a group's keys, count and state changes) with each recounted count, for the groups
    in doubt, read from their rows now: for SUM's count, a removed non-NULL value and a sum left at
    0; for the row count, removed rows and no state proving some are left."""
    calls = recounted_calls(plan, layout)
    rows_recounted = COUNT in layout.recounted
    if not calls and not rows_recounted:
        return change
    if rows_recounted:
        change = _changes_something(plan, change)
    names = [str(e.alias_or_name) for e in change.expressions]
    states = ([COUNT] if rows_recounted else []) + [count for _, _, count in calls]
    if _cannot_remove(plan.input, ctx):  # an append: no count can drop, no group is in doubt
        return _without_recounts(change, names, states)
    keys = [exp.column(group_placeholder(i), CHANGE, quoted=True) for i in range(len(plan.group_by))]
    in_doubt, removals = [], []
    for _, total, count in calls:
        left = _after(layout, total, STORED, CHANGE)
        removals.append(_removes(CHANGE, count))
        in_doubt.append(exp.and_(removals[-1], exp.EQ(this=left, expression=exp.Literal.number(0))))
    if rows_recounted:
        removals.append(_removes(CHANGE, COUNT))
        has_rows = _has_rows(plan, layout, STORED, CHANGE, non_finite.possible(plan, ctx))
        in_doubt.append(exp.and_(removals[-1], exp.not_(has_rows)))
    # The change with each group's doubt, decided in one look at its stored row (a group not stored
    # yet removes nothing: never in doubt); pinned, it is read again for the doubtful groups and as
    # the change, and counted as it is pinned where the backend can.
    doubt = exp.func("COALESCE", exp.or_(*in_doubt), exp.false())
    flagged = exp.select(
        *[exp.column(n, CHANGE, quoted=True) for n in names], exp.alias_(doubt, IN_DOUBT, quoted=True)
    ).from_(aliased(change, CHANGE))
    found = match(STORED, layout.key, keys, target)
    flagged = _with_stored_rows(flagged, stream_table, found, exp.or_(*removals), ctx.bindings.target)
    pinned, doubtful_count = ctx.pinned_counting(flagged, IN_DOUBT)
    if doubtful_count == 0:  # the usual batch: no group is in doubt, none is read again
        return _without_recounts(pinned, names, states)
    doubtful = (
        exp.select(
            *[exp.column(group_placeholder(i), CHANGE, quoted=True) for i in range(len(plan.group_by))]
        )
        .from_(aliased(pinned.copy(), CHANGE))
        .where(exp.column(IN_DOUBT, CHANGE, quoted=True))
    )
    doubtful_groups = ctx.pinned(doubtful)
    rows = grouping.input_rows(
        plan, "after", ctx, grouping.in_groups(plan, doubtful_groups, ctx.bindings.target)
    )
    assert rows is not None
    source = "__ivm_rows"
    values = [exp.func("COUNT", exp.Star())] if rows_recounted else []
    values += [
        exp.func("COUNT", exp.column(grouping.arg_column(c), source, quoted=True)) for c, _, _ in calls
    ]
    counted = list(zip(values, states, strict=True))
    recount = exp.select(
        *grouping.group_columns(plan, source),
        *[exp.alias_(value, recount_column(state), quoted=True) for value, state in counted],
    )
    recount = recount.from_(aliased(rows, source)).group_by(*grouping.group_columns(plan, source))
    joined = exp.select(
        *[exp.column(n, CHANGE, quoted=True) for n in names],
        *[exp.column(recount_column(state), RECOUNT, quoted=True) for _, state in counted],
    ).from_(aliased(pinned, CHANGE))
    groups = [group_placeholder(i) for i in range(len(plan.group_by))]
    never_null = grouping.never_null_groups(plan)
    target = ctx.bindings.target
    return grouping.left_joined_on_keys(joined, recount, groups, (CHANGE, RECOUNT), never_null, target, True)


def _with_stored_rows(
    flagged: exp.Select, stream_table: exp.Table, found: exp.Expr, removes: exp.Expr, target: Target
) -> exp.Select:
    """`flagged` with each group's stored row (alias STORED), NULLs where it has none or, on
    PostgreSQL, where the batch removes nothing from the group: only a removal can put a group in
    doubt. PostgreSQL looks the removing groups' rows up by the key index, one probe each, where a
    join would hash the whole stored table for a batch that touches a few of its groups; Spark joins
    (a broadcast of the change, or a shuffle either way)."""
    stored = aliased(stream_table.copy(), STORED)
    if not target.index_probes:
        return flagged.join(stored, on=found, join_type="left")
    # LIMIT 1 (a key has one row) keeps the planner from turning the probe back into a join.
    probe = exp.select(exp.Star()).from_(stored).where(found).where(removes).limit(1)
    lateral = exp.Lateral(
        this=exp.Subquery(this=probe), alias=exp.TableAlias(this=exp.to_identifier(STORED, True))
    )
    return flagged.join(lateral, on=exp.true(), join_type="left")


def _without_recounts(change: exp.Expr, names: list[str], states: list[str]) -> exp.Select:
    """`change` as it is, each recount NULL: no group was counted again."""
    return exp.select(
        *[exp.column(n, CHANGE, quoted=True) for n in names],
        *[exp.alias_(exp.cast(exp.null(), "bigint"), recount_column(s), quoted=True) for s in states],
    ).from_(aliased(change, CHANGE))


def _cannot_remove(relation: Relation, ctx: Context) -> bool:
    """No row can leave `relation` in this batch: every changed table it reads only gained rows,
    through scans, filters and inner or semi joins, where a new row can only bring rows."""

    def monotone(node: Relation) -> bool:
        if isinstance(node, Scan):
            return True
        if isinstance(node, Filter):
            return monotone(node.input)
        if isinstance(node, Join):
            return node.kind in ("inner", "semi") and monotone(node.left) and monotone(node.right)
        return False  # a derived table: an aggregate's groups change, −old +new

    return monotone(relation) and ctx.bindings.only_insertions([s.table for s in scans_in(relation)])


def rows_after(plan: Aggregate, layout: Layout, stored: str, change: str, non_finite_sums: bool) -> exp.Expr:
    """A stand-in for the group's row count after the batch, right wherever it is 0: the recount
    where there is one; else, where the batch removed rows, 1 if a state proves some are left and 0
    if none does (a group in doubt whose rows are all gone has no recount row); else 1 (a stored
    group, or one the batch brings rows: groups whose change is all 0 were left out)."""
    recounted = exp.column(recount_column(COUNT), change, quoted=True)
    proven = exp.Case(
        ifs=[
            exp.If(this=_has_rows(plan, layout, stored, change, non_finite_sums), true=exp.Literal.number(1))
        ],
        default=exp.Literal.number(0),
    )
    return exp.Case(
        ifs=[
            exp.If(this=exp.not_(exp.Is(this=recounted.copy(), expression=exp.null())), true=recounted),
            exp.If(this=_removes(change, COUNT), true=proven),
        ],
        default=exp.Literal.number(1),
    )


def count_after(stored_total: exp.Expr, change: str, count: str) -> exp.Expr:
    """A stand-in for the group's non-NULL count after the batch, right wherever it is 0: the
    recount where there is one; else 1 when the batch removed values (the sum left is not 0); else
    1 for a stored non-NULL sum, plus what the batch added."""
    recounted = exp.column(recount_column(count), change, quoted=True)
    changed = exp.column(count, change, quoted=True)
    was_set = exp.Case(
        ifs=[exp.If(this=exp.Is(this=stored_total, expression=exp.null()), true=exp.Literal.number(0))],
        default=exp.Literal.number(1),
    )
    return exp.Case(
        ifs=[
            exp.If(this=exp.not_(exp.Is(this=recounted.copy(), expression=exp.null())), true=recounted),
            exp.If(
                this=exp.LT(this=changed.copy(), expression=exp.Literal.number(0)), true=exp.Literal.number(1)
            ),
        ],
        default=exp.Add(this=was_set, expression=exp.func("COALESCE", changed, exp.Literal.number(0))),
    )
