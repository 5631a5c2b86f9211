"""Delta rule for a scan: the source's change set, or nothing when it did not change.

    Δ(Scan orders)  =  SELECT * FROM <orders' changes> AS orders      -- weights ±1

>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.plan.nodes import Scan
>>> orders = Scan(0, "o", TableInfo("public", "orders", ()))
>>> delta_scan(orders, Bindings({"public.orders": "orders"}, {"public.orders": "d_orders"})).terms[0].reads
((Scan(position=0, alias='o', table=TableInfo(schema='public', name='orders', columns=(), primary_key=(), kind='table', view_sql=None, identity='')), True),)
>>> delta_scan(orders, Bindings({"public.orders": "orders"})).empty
True
"""

from __future__ import annotations

from dbt_ivm.delta.terms import Bindings, DeltaUnion, Term
from dbt_ivm.plan.nodes import Scan


def delta_scan(scan: Scan, bindings: Bindings) -> DeltaUnion:
    if not bindings.changed(scan.table):
        return DeltaUnion(())
    return DeltaUnion((Term(reads=((scan, True),)),))
