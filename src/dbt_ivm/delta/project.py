"""Delta rule for a projection (a query without aggregates): project every term of the delta.

    Δ(π_{name, amount} (orders ⋈ customers))  =  π_{name, amount, keys, weight}(Δ(orders ⋈ customers))

Each term also carries the sources' primary keys (hidden ``__ivm_k*`` columns) that identify the
result row in the stream table, and its Z-set weight.
"""

from __future__ import annotations

from dbt_ivm.delta.filter import delta_relation
from dbt_ivm.delta.terms import Bindings, Term
from dbt_ivm.layout import Layout, key_column
from dbt_ivm.plan.nodes import Project, scans_of
from dbt_ivm.reserved import internal_column
from dbt_ivm.sqltext import WEIGHT, expr_sql, q


def project_select(plan: Project, layout: Layout, term: Term, bindings: Bindings, weight: str) -> str:
    columns = [f"{expr_sql(o.expression)} AS {q(o.name)}" for o in plan.outputs]
    if layout.kind == "keyed":
        for scan in scans_of(plan.input):
            for index, pk in enumerate(scan.table.primary_key, 1):
                source_column = q(internal_column(scan.table, pk))
                columns.append(f"{q(scan.alias)}.{source_column} AS {q(key_column(scan.position, index))}")
    columns.append(f"{weight} AS {q(WEIGHT)}")
    return f"SELECT {', '.join(columns)} FROM {term.from_sql(bindings)}{term.where_sql()}"


def delta_project(plan: Project, layout: Layout, bindings: Bindings) -> str | None:
    """The row delta of the stream table (layout columns + weight), or None when nothing changed."""
    delta = delta_relation(plan.input, bindings)
    if delta.empty:
        return None
    return "\nUNION ALL\n".join(
        project_select(plan, layout, term, bindings, term.weight_sql()) for term in delta.terms
    )
