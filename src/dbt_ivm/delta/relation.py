"""The FROM/WHERE part of a query as terms: `after` (its rows once the batch is applied), `before`
(its rows before the batch, where the backend can read earlier states) and `delta` (its change over
the batch), by dispatching each operator to its rule in `rules/`.

Four tables joined, all changed in one batch, with no earlier state to read (PostgreSQL): one term
per changed table, each later table read `undone` (2⁴ − 1 = 15 terms, expanded as after − delta):

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.plan import build_plan
>>> tables = [TableInfo("public", n, (Column("x", "int"),)) for n in "abcd"]
>>> plan = build_plan("SELECT a.x FROM a JOIN b ON a.x = b.x JOIN c ON b.x = c.x JOIN d ON c.x = d.x",
...                   StaticCatalog(tables), "m")
>>> ctx = Context(Bindings.named({t.qualified: t.name for t in tables}, {t.qualified: "d_" + t.name for t in tables}))
>>> [[r.mode for r in t.reads] for t in delta(plan.input, ctx)]
[['delta', 'undone', 'undone', 'undone'], ['current', 'delta', 'undone', 'undone'], ['current', 'current', 'delta', 'undone'], ['current', 'current', 'current', 'delta']]
"""

from __future__ import annotations

from collections.abc import Callable

from dbt_ivm.delta.rules.existence import after_existence, delta_existence
from dbt_ivm.delta.rules.filter import filtered
from dbt_ivm.delta.rules.inner_join import after_inner_join, delta_inner_join
from dbt_ivm.delta.rules.item import after_item, before_item, delta_item, undone_item
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


def undone(relation: Relation, ctx: Context) -> list[Term] | None:
    """Its rows before the batch as a Z-set, where the backend cannot read them: every changed item
    read `undone`, and a partner found by a positive sum of weights, not by its presence (None: the
    backend reads them, `before`)."""
    if ctx.bindings.before is not None:
        return None
    return _state(relation, ctx, lambda item: undone_item(item, ctx), counted=True)


def _state(
    relation: Relation, ctx: Context, leaf: Callable[[Item], list[Term]], counted: bool = False
) -> list[Term]:
    """The relation's rows with every item read by `leaf` (its state after, or before, the batch;
    `counted`: rows with weights)."""
    if isinstance(relation, Scan | Derived):
        return leaf(relation)
    if isinstance(relation, Filter):
        return filtered(_state(relation.input, ctx, leaf, counted), relation.predicate)
    left, right = _state(relation.left, ctx, leaf, counted), _state(relation.right, ctx, leaf, counted)
    if relation.kind == "inner":
        return after_inner_join(left, right, relation.condition)
    if relation.kind in ("semi", "anti"):
        return after_existence(relation.kind, left, right, relation.condition, ctx, counted)
    left_items, right_items = items_of(relation.left), items_of(relation.right)
    return after_outer_join(
        relation.kind, left, left_items, right, right_items, relation.condition, ctx, counted
    )


def delta(relation: Relation, ctx: Context) -> list[Term]:
    if isinstance(relation, Scan | Derived):
        return delta_item(relation, ctx)
    if isinstance(relation, Filter):
        return filtered(delta(relation.input, ctx), relation.predicate)
    return _delta_join(relation, ctx)


def _side(relation: Relation, ctx: Context) -> Side:
    return Side(
        delta(relation, ctx),
        after(relation, ctx),
        before(relation, ctx),
        tuple(items_of(relation)),
        undone(relation, ctx),
    )


def _delta_join(join: Join, ctx: Context) -> list[Term]:
    left, right = _side(join.left, ctx), _side(join.right, ctx)
    if not left.delta and not right.delta:
        return []
    if join.kind == "inner":
        return delta_inner_join(left, right, join.condition)
    if join.kind in ("semi", "anti"):
        return delta_existence(join.kind, left, right, join.condition, ctx)
    return delta_outer_join(join.kind, left, right, join.condition, ctx)
