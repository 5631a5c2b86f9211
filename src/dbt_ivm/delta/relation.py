"""The FROM/WHERE part of a query as terms: `after` (its rows once the batch is applied) and
`delta` (its change over the batch), by dispatching each operator to its rule in `rules/`."""

from __future__ import annotations

from dbt_ivm.delta.rules.existence import after_existence, delta_existence
from dbt_ivm.delta.rules.filter import filtered
from dbt_ivm.delta.rules.inner_join import after_inner_join, delta_inner_join
from dbt_ivm.delta.rules.item import after_item, delta_item
from dbt_ivm.delta.rules.outer_join import after_outer_join, delta_outer_join
from dbt_ivm.delta.terms import Context, Term
from dbt_ivm.plan.nodes import Derived, Filter, Join, Relation, Scan, items_of


def after(relation: Relation, ctx: Context) -> list[Term]:
    if isinstance(relation, Scan | Derived):
        return after_item(relation)
    if isinstance(relation, Filter):
        return filtered(after(relation.input, ctx), relation.predicate)
    left, right = after(relation.left, ctx), after(relation.right, ctx)
    if relation.kind == "inner":
        return after_inner_join(left, right, relation.condition)
    if relation.kind in ("semi", "anti"):
        return after_existence(relation.kind, left, right, relation.condition, ctx)
    return after_outer_join(
        relation.kind,
        left,
        items_of(relation.left),
        right,
        items_of(relation.right),
        relation.condition,
        ctx,
    )


def delta(relation: Relation, ctx: Context) -> list[Term]:
    if isinstance(relation, Scan | Derived):
        return delta_item(relation, ctx)
    if isinstance(relation, Filter):
        return filtered(delta(relation.input, ctx), relation.predicate)
    return _delta_join(relation, ctx)


def _delta_join(join: Join, ctx: Context) -> list[Term]:
    left_delta, right_delta = delta(join.left, ctx), delta(join.right, ctx)
    if not left_delta and not right_delta:
        return []
    left_after, right_after = after(join.left, ctx), after(join.right, ctx)
    if join.kind == "inner":
        return delta_inner_join(left_delta, left_after, right_delta, right_after, join.condition)
    if join.kind in ("semi", "anti"):
        return delta_existence(
            join.kind, left_delta, left_after, right_delta, right_after, join.condition, ctx
        )
    return delta_outer_join(
        join.kind,
        left_delta,
        left_after,
        items_of(join.left),
        right_delta,
        right_after,
        items_of(join.right),
        join.condition,
        ctx,
    )
