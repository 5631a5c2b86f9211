"""The FROM/WHERE part of a query as terms: `after` (its rows once the batch is applied), `before`
(its rows before the batch, where the backend can read earlier states) and `delta` (its change over
the batch), by dispatching each operator to its rule in `rules/`."""

from __future__ import annotations

from collections.abc import Callable

from dbt_ivm.delta.rules.existence import after_existence, delta_existence
from dbt_ivm.delta.rules.filter import filtered
from dbt_ivm.delta.rules.inner_join import after_inner_join, delta_inner_join
from dbt_ivm.delta.rules.item import after_item, before_item, delta_item
from dbt_ivm.delta.rules.outer_join import after_outer_join, delta_outer_join
from dbt_ivm.delta.terms import Context, Side, Term
from dbt_ivm.plan.nodes import Derived, Filter, Item, Join, Relation, Scan, items_of


def after(relation: Relation, ctx: Context) -> list[Term]:
    return _state(relation, ctx, after_item)


def before(relation: Relation, ctx: Context) -> list[Term] | None:
    """Its rows before the batch, read from the sources' earlier states (None: not readable)."""
    if ctx.bindings.before is None:
        return None
    return _state(relation, ctx, lambda item: before_item(item, ctx))


def _state(relation: Relation, ctx: Context, leaf: Callable[[Item], list[Term]]) -> list[Term]:
    """The relation's rows with every item read by `leaf` (its state after, or before, the batch)."""
    if isinstance(relation, Scan | Derived):
        return leaf(relation)
    if isinstance(relation, Filter):
        return filtered(_state(relation.input, ctx, leaf), relation.predicate)
    left, right = _state(relation.left, ctx, leaf), _state(relation.right, ctx, leaf)
    if relation.kind == "inner":
        return after_inner_join(left, right, relation.condition)
    if relation.kind in ("semi", "anti"):
        return after_existence(relation.kind, left, right, relation.condition, ctx)
    return after_outer_join(
        relation.kind, left, items_of(relation.left), right, items_of(relation.right), relation.condition, ctx
    )


def delta(relation: Relation, ctx: Context) -> list[Term]:
    if isinstance(relation, Scan | Derived):
        return delta_item(relation, ctx)
    if isinstance(relation, Filter):
        return filtered(delta(relation.input, ctx), relation.predicate)
    return _delta_join(relation, ctx)


def _side(relation: Relation, ctx: Context) -> Side:
    return Side(delta(relation, ctx), after(relation, ctx), before(relation, ctx), tuple(items_of(relation)))


def _delta_join(join: Join, ctx: Context) -> list[Term]:
    left, right = _side(join.left, ctx), _side(join.right, ctx)
    if not left.delta and not right.delta:
        return []
    if join.kind == "inner":
        return delta_inner_join(left, right, join.condition)
    if join.kind in ("semi", "anti"):
        return delta_existence(join.kind, left, right, join.condition, ctx)
    return delta_outer_join(join.kind, left, right, join.condition, ctx)
