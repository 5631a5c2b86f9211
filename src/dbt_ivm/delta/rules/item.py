"""Delta rule for an item (a base table, or a subquery in FROM): its change set, if it changed.

    Δ(Scan orders)  =  SELECT * FROM <orders' changes> AS orders      -- weights ±1

A derived item's change set is its plan's delta (`dbt_ivm.delta.plans`), read under the item's alias.
Where the backend can read a source's state before the batch (Iceberg's frontier snapshot), a changed
item can also be read as it was (`before_item`); a derived item is then its plan over those states.

>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.plan.nodes import Scan
>>> orders = Scan(0, "o", TableInfo("public", "orders", ()))
>>> from dbt_ivm.target import POSTGRES
>>> [r.mode for t in delta_item(orders, Context(Bindings.named(POSTGRES, {}, {"public.orders": "d"}))) for r in t.reads]
['delta']
>>> delta_item(orders, Context(Bindings.named(POSTGRES, {"public.orders": "orders"})))
[]
"""

from __future__ import annotations

from dbt_ivm.delta.terms import Context, Read, Term
from dbt_ivm.plan.nodes import Derived, Item


def after_item(item: Item) -> list[Term]:
    return [Term((Read(item, "current"),))]


def before_item(item: Item, ctx: Context) -> list[Term]:
    """Its rows before the batch, where the backend can read them (an unchanged item: its rows)."""
    return [Term((Read(item, "before"),))] if ctx.item_changed(item) else after_item(item)


def undone_item(item: Item, ctx: Context) -> list[Term]:
    """Its rows before the batch as a Z-set where the backend cannot read them: a changed subquery
    read `undone` (`terms._undone`), a changed table as its rows now minus its changes (PostgreSQL
    plans those two terms as it always has), an unchanged item as its rows."""
    if not ctx.item_changed(item):
        return after_item(item)
    if isinstance(item, Derived):
        return [Term((Read(item, "undone"),))]
    return after_item(item) + [t.negated() for t in delta_item(item, ctx)]


def delta_item(item: Item, ctx: Context) -> list[Term]:
    return [Term((Read(item, "delta"),))] if ctx.item_changed(item) else []
