"""The FROM/WHERE part of a query as terms: `after` (its rows once the batch is applied), `before`
(its rows before the batch, where the backend can read earlier states) and `delta` (its change over
the batch), by dispatching each operator to its rule in `rules/`.

A subquery in FROM changed by the batch, joined after a changed table, with no earlier state to
read (PostgreSQL): the subquery read `undone`, one relation, where expanding it as its rows now
minus its change would add a term for every term of the table's change:

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.plan import build_plan
>>> tables = [TableInfo("public", n, (Column("x", "int"),)) for n in "ab"]
>>> from dbt_ivm.target import POSTGRES
>>> plan = build_plan(POSTGRES, "SELECT a.x, s.n FROM a JOIN (SELECT b.x, count(*) AS n FROM b GROUP BY b.x) AS s ON s.x = a.x",
...                   StaticCatalog(tables), "m")
>>> ctx = Context(Bindings.named(POSTGRES, {t.qualified: t.name for t in tables}, {t.qualified: "d_" + t.name for t in tables}))
>>> [[r.mode for r in t.reads] for t in delta(plan.input, ctx)]
[['delta', 'undone'], ['current', 'delta']]
"""

from __future__ import annotations

from collections.abc import Callable

from dbt_ivm.delta.rules.existence import after_existence, delta_existence
from dbt_ivm.delta.rules.filter import filtered
from dbt_ivm.delta.rules.inner_join import after_inner_join, delta_inner_join
from dbt_ivm.delta.rules.item import after_item, before_item, delta_item, undone_item
from dbt_ivm.delta.rules.outer_join import after_outer_join, delta_outer_join
from dbt_ivm.delta.terms import Context, Side, Term
from dbt_ivm.plan.nodes import Derived, Filter, Item, Join, Relation, Scan, items_of, unknown_node


def after(relation: Relation, ctx: Context) -> list[Term]:
    return _state(relation, ctx, after_item)


def before(relation: Relation, ctx: Context) -> list[Term] | None:
    """Its rows before the batch, read from the sources' earlier states (None: not readable)."""
    if ctx.bindings.before is None:
        return None
    return _state(relation, ctx, lambda item: before_item(item, ctx))


def undone(relation: Relation, ctx: Context) -> list[Term] | None:
    """Its rows before the batch as a Z-set, where the backend cannot read them and the relation is
    items under filters and inner joins: each changed subquery read `undone` (one relation), each
    changed table as its rows now minus its changes (None: the backend reads them, `before`; or an
    outer or existence join, whose rows before are not a product of its inputs' Z-sets; or no changed
    subquery, where after − delta is the same terms, without building them on every join level)."""
    if ctx.bindings.before is not None or not _linear(relation):
        return None
    if not any(isinstance(i, Derived) and ctx.item_changed(i) for i in items_of(relation)):
        return None
    return _state(relation, ctx, lambda item: undone_item(item, ctx))


def _linear(relation: Relation) -> bool:
    match relation:
        case Scan() | Derived():
            return True
        case Filter():
            return _linear(relation.input)
        case Join():
            return relation.kind == "inner" and _linear(relation.left) and _linear(relation.right)
        case _:
            unknown_node(relation)


def _state(relation: Relation, ctx: Context, leaf: Callable[[Item], list[Term]]) -> list[Term]:
    """The relation's rows with every item read by `leaf` (its state after, or before, the batch)."""
    match relation:
        case Scan() | Derived():
            return leaf(relation)
        case Filter():
            return filtered(_state(relation.input, ctx, leaf), relation.predicate)
        case Join():
            return _joined_state(relation, ctx, leaf)
        case _:
            unknown_node(relation)


def _joined_state(relation: Join, ctx: Context, leaf: Callable[[Item], list[Term]]) -> list[Term]:
    left, right = _state(relation.left, ctx, leaf), _state(relation.right, ctx, leaf)
    if relation.kind == "inner":
        return after_inner_join(left, right, relation.condition)
    if relation.kind in ("semi", "anti"):
        return after_existence(relation.kind, left, right, relation.condition, ctx)
    return after_outer_join(
        relation.kind, left, items_of(relation.left), right, items_of(relation.right), relation.condition, ctx
    )


def delta(relation: Relation, ctx: Context) -> list[Term]:
    match relation:
        case Scan() | Derived():
            return delta_item(relation, ctx)
        case Filter():
            return filtered(delta(relation.input, ctx), relation.predicate)
        case Join():
            return _delta_join(relation, ctx)
        case _:
            unknown_node(relation)


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
