"""Delta rule for a filter: filter the delta. σ(ΔR) = Δσ(R), since the predicate looks at one row.

    Δ(σ_{amount > 10} orders)  =  SELECT * FROM <orders' changes> WHERE amount > 10

The predicate is attached to every term, so join conditions become the terms' WHERE clauses.
"""

from __future__ import annotations

from dbt_ivm.delta.join import delta_join
from dbt_ivm.delta.terms import Bindings, DeltaUnion
from dbt_ivm.plan.nodes import Filter, Join, Relation


def delta_filter(node: Filter, bindings: Bindings) -> DeltaUnion:
    inner = delta_join(node.input, bindings)
    return DeltaUnion(tuple(t.with_predicate(node.predicate) for t in inner.terms))


def delta_relation(node: Relation, bindings: Bindings) -> DeltaUnion:
    """The delta of the FROM/WHERE part of a query."""
    if isinstance(node, Join):
        return delta_join(node, bindings)
    return delta_filter(node, bindings)
