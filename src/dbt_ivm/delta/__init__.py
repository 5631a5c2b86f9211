"""Delta rules, one operator per module: scan, join, filter, project, aggregate.

`row_delta` turns a plan into the SQL of the stream table's row delta: its columns (user + hidden)
plus ``__ivm_weight``, +1 for a row to add and −1 for a row to remove.
"""

from __future__ import annotations

from collections.abc import Mapping

from dbt_ivm.delta.aggregate import delta_aggregate
from dbt_ivm.delta.project import delta_project
from dbt_ivm.delta.terms import Bindings, DeltaUnion, Term
from dbt_ivm.layout import Layout
from dbt_ivm.plan.nodes import Aggregate, Plan

__all__ = ["Bindings", "DeltaUnion", "Term", "row_delta"]


def row_delta(
    plan: Plan,
    layout: Layout,
    bindings: Bindings,
    stream_table: str,
    use_hash: bool = True,
    call_types: Mapping[int, str] | None = None,
) -> str | None:
    """SQL of the stream table's row delta for this batch, or None when no source changed."""
    if isinstance(plan, Aggregate):
        return delta_aggregate(plan, layout, bindings, stream_table, use_hash, call_types or {})
    return delta_project(plan, layout, bindings)
