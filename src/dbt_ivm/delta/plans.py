"""A plan's contents (its rows after the batch) and its delta (its change over the batch, rows with
``__ivm_weight``), as sqlglot queries whose columns are the plan's output names. This is what a
subquery in FROM is read as: a derived item's current rows or its change set.

* Project: the relation's terms, each projected (`relation`).
* Aggregate: a subquery has no stored state, so its delta recomputes the groups a batch touches:
  their state now, over the current rows of those groups only, and their state before, now minus the
  batch's own contribution (the `weighted` forms of `aggregates/`). −old and +new rows per group.
* UnionAll: the union of the inputs' deltas.
* Rows (`VALUES`): the rows as written; no delta.
* Window: the partitions a batch touches, recomputed before and after it (`window.py`).
* SetOp: per row value touched by the batch, its multiplicity in each input now and before (now
  minus the batch), and the operation's output multiplicity from those (`setop.py`).
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta import grouping, relation, unchanged, window
from dbt_ivm.delta.aggregates import REGISTRY
from dbt_ivm.delta.aggregates.base import plus
from dbt_ivm.delta.setop import delta_setop, setop_contents
from dbt_ivm.delta.terms import Context, Mode, aliased, term_select, union_all
from dbt_ivm.plan.nodes import (
    Aggregate,
    Derived,
    Filter,
    Plan,
    Project,
    Rows,
    SetOp,
    TopK,
    UnionAll,
    Window,
    unknown_node,
)
from dbt_ivm.sqltext import WEIGHT

INPUT, NOW, CHANGED, BEFORE = "__ivm_in", "__ivm_now", "__ivm_chg", "__ivm_before"


def context(ctx: Context) -> Context:
    """`ctx` able to render derived items through this module."""
    ctx.render_derived = _render_derived
    return ctx


def _render_derived(
    item: Derived, mode: Mode, ctx: Context, restrict: exp.Exists | None, ahead: bool
) -> exp.Expr:
    if mode == "delta":
        found = delta(item.plan, ctx, restrict)
        assert found is not None, "a changed derived item has a delta"
        return ctx.pinned(found)  # read by several terms
    state = ctx.as_before() if mode == "before" else ctx
    if restrict is not None:  # only the groups a term's change set can join (`sideways`)
        assert isinstance(item.plan, Aggregate)
        rows = grouping.input_rows(item.plan, "after", context(state), restrict)
        assert rows is not None
        return ctx.pinned(grouping.from_scratch(item.plan, rows))
    found = contents(item.plan, state)
    # Several terms read it whole, and no engine pushes a join's keys into it: computed once.
    return ctx.pinned(found) if ahead and sealed(item.plan) else found


def sealed(plan: Plan) -> bool:
    """Whether a database computes `plan` whole however it is joined: grouping, ranking and set
    operations take no join key from outside (a projection of a sealed subquery is sealed too)."""
    if isinstance(plan, Aggregate | TopK | Window | SetOp):
        return True
    if isinstance(plan, Project):
        inner = plan.input
        while isinstance(inner, Filter):
            inner = inner.input
        return isinstance(inner, Derived) and sealed(inner.plan)
    return False


def renamed(
    query: exp.Query, names: tuple[str, ...], to: tuple[str, ...], weighted: bool = False
) -> exp.Query:
    """`query`'s columns `names` (by position) as `to`, plus the weight when `weighted`."""
    alias = "__ivm_branch"
    columns = [
        exp.alias_(exp.column(n, alias, quoted=True), t, quoted=True) for n, t in zip(names, to, strict=True)
    ]
    if weighted:
        columns.append(exp.column(WEIGHT, alias, quoted=True))
    return exp.select(*columns).from_(aliased(query, alias))


def contents(plan: Plan, ctx: Context) -> exp.Query:
    context(ctx)
    match plan:
        case Project():
            outputs = [exp.alias_(o.expression, o.name, quoted=True) for o in plan.outputs]
            return union_all(
                [term_select(t, outputs, ctx, weighted=False) for t in relation.after(plan.input, ctx)]
            )
        case Aggregate():
            rows = grouping.input_rows(plan, "after", ctx)
            assert rows is not None
            return grouping.from_scratch(plan, rows)
        case UnionAll():
            return union_all([renamed(contents(p, ctx), p.names, plan.names) for p in plan.inputs])
        case Window():
            return window.contents(plan, ctx)
        case Rows():
            return plan.query.copy()
        case SetOp():
            return setop_contents(plan, contents(plan.left, ctx), contents(plan.right, ctx))
        case TopK():
            raise AssertionError("a TopK is read by delta/topk.py")
        case _:
            unknown_node(plan)


def delta(plan: Plan, ctx: Context, restrict: exp.Exists | None = None) -> exp.Query | None:
    """The plan's change over the batch (None: no input changed); a grouping's, only for the groups
    `restrict` keeps (the ones a term can join, `sideways`), the batch's other groups left out."""
    context(ctx)
    match plan:
        case Project():
            outputs = [exp.alias_(o.expression, o.name, quoted=True) for o in plan.outputs]
            terms = relation.delta(plan.input, ctx)
            return union_all([term_select(t, outputs, ctx) for t in terms]) if terms else None
        case Aggregate():
            found = _delta_aggregate(plan, ctx, restrict if plan.group_by else None)
            if found is None or not unchanged.comparable(plan):
                return found
            return unchanged.without_unchanged(found, plan.names, ctx.pinned)
        case UnionAll():
            parts = [(p, delta(p, ctx)) for p in plan.inputs]
            changed = [renamed(d, p.names, plan.names, weighted=True) for p, d in parts if d is not None]
            return union_all(changed) if changed else None
        case Window():
            return window.delta(plan, ctx)
        case Rows():  # written in the query: no batch changes them
            return None
        case SetOp():
            return _delta_setop(plan, ctx)
        case TopK():
            raise AssertionError("a TopK is read by delta/topk.py")
        case _:
            unknown_node(plan)


def _delta_setop(plan: SetOp, ctx: Context) -> exp.Query | None:
    left, right = delta(plan.left, ctx), delta(plan.right, ctx)
    if left is None and right is None:
        return None
    pinned_left = None if left is None else ctx.pinned(left)
    pinned_right = None if right is None else ctx.pinned(right)
    return delta_setop(
        plan,
        pinned_left,
        pinned_right,
        contents(plan.left, ctx),
        contents(plan.right, ctx),
        ctx.bindings.target,
    )


def _delta_recomputed(plan: Aggregate, ctx: Context, narrowed: exp.Exists | None) -> exp.Query | None:
    """The touched groups recomputed over their rows now (+1) and before the batch (−1)."""
    changes = grouping.input_rows(plan, "delta", ctx, narrowed)
    if changes is None:
        return None
    restrict: grouping.Alternatives | None = None
    if plan.group_by:
        restrict = grouping.in_groups(
            plan, ctx.pinned(grouping.touched_groups(plan, changes)), ctx.bindings.target
        )
    now_rows = grouping.input_rows(plan, "after", ctx, restrict)
    assert now_rows is not None
    sides = []
    for weight, rows in ((-1, grouping.input_rows_before(plan, ctx, restrict)), (1, now_rows)):
        columns: list[exp.Expr] = [exp.column(n, INPUT, quoted=True) for n in plan.names]
        columns.append(exp.alias_(exp.Literal.number(weight), WEIGHT, quoted=True))
        sides.append(exp.select(*columns).from_(aliased(grouping.from_scratch(plan, rows), INPUT)))
    return union_all(sides)


def _delta_aggregate(plan: Aggregate, ctx: Context, narrowed: exp.Exists | None) -> exp.Query | None:
    if plan.recomputed:
        return _delta_recomputed(plan, ctx, narrowed)
    found = grouping.input_rows(plan, "delta", ctx, narrowed)
    if found is None:
        return None
    changes = ctx.pinned(found)  # read twice: the touched keys, and the batch's own contribution
    keys = [grouping.group_columns(plan)[i].name for i in range(len(plan.group_by))]
    # Only the touched groups' current rows: a semi-join with the changed keys.
    touched = grouping.touched_groups(plan, changes)
    restrict = grouping.in_groups(plan, touched, ctx.bindings.target) if keys else None
    now_rows = grouping.input_rows(plan, "after", ctx, restrict)
    assert now_rows is not None
    one = exp.Literal.number(1)
    now = exp.select(*grouping.group_columns(plan, NOW), *grouping.weighted_states(plan, one, NOW)).from_(
        aliased(now_rows, NOW)
    )
    undo = exp.Neg(this=exp.column(WEIGHT, CHANGED, quoted=True))
    before_change = exp.select(
        *grouping.group_columns(plan, CHANGED), *grouping.weighted_states(plan, undo, CHANGED)
    ).from_(aliased(changes, CHANGED))
    if keys:
        now = now.group_by(*grouping.group_columns(plan, NOW))
        before_change = before_change.group_by(*grouping.group_columns(plan, CHANGED))
    now_state = ctx.pinned(now)  # read twice: the state before (now − batch), and after
    types = ctx.call_types.get(id(plan), {})
    # Before = now + (−batch), for every touched group (a group may have no rows now).
    merged: list[exp.Expr] = [exp.column(k, CHANGED, quoted=True) for k in keys]
    merged.append(
        exp.alias_(
            plus(
                exp.column(grouping.COUNT, NOW, quoted=True), exp.column(grouping.COUNT, CHANGED, quoted=True)
            ),
            grouping.COUNT,
            quoted=True,
        )
    )
    for call in plan.calls:
        names = grouping.state_names(call)
        olds: list[exp.Expr] = [exp.column(n, NOW, quoted=True) for n in names]
        deltas: list[exp.Expr] = [exp.column(n, CHANGED, quoted=True) for n in names]
        for name, value in zip(names, REGISTRY[call.func].merge(olds, deltas), strict=True):
            merged.append(exp.alias_(value, name, quoted=True))
    before = grouping.left_joined_on_keys(
        exp.select(*merged).from_(aliased(before_change, CHANGED)),
        now_state.copy(),
        keys,
        (CHANGED, NOW),
        grouping.never_null_groups(plan),
        ctx.bindings.target,
    )
    new_rows = exp.select(
        *grouping.finalized_outputs(plan, NOW, types), exp.alias_(one.copy(), WEIGHT, quoted=True)
    )
    new_rows = new_rows.from_(aliased(now_state, NOW))
    old_rows = exp.select(
        *grouping.finalized_outputs(plan, BEFORE, types),
        exp.alias_(exp.Literal.number(-1), WEIGHT, quoted=True),
    ).from_(aliased(before, BEFORE))
    if keys:
        new_rows = new_rows.where(
            exp.GT(this=exp.column(grouping.COUNT, NOW, quoted=True), expression=exp.Literal.number(0))
        )
        old_rows = old_rows.where(
            exp.GT(this=exp.column(grouping.COUNT, BEFORE, quoted=True), expression=exp.Literal.number(0))
        )
    return union_all([old_rows, new_rows])
