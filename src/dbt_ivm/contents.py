"""The stream table's full contents computed from scratch: the defining query plus hidden columns.

Used to create the table, and for FULL refresh (which then applies only the difference).
"""

from __future__ import annotations

from dbt_ivm.delta.project import project_select
from dbt_ivm.delta.terms import Bindings, Term
from dbt_ivm.layout import COUNT, Layout, state_columns
from dbt_ivm.plan.build import group_placeholder
from dbt_ivm.plan.nodes import Aggregate, Plan, predicate_of, scans_of
from dbt_ivm.sqltext import expr_sql, q


def _current_term(plan: Plan) -> Term:
    return Term(reads=tuple((s, False) for s in scans_of(plan.input)), predicate=predicate_of(plan.input))


def contents_sql(plan: Plan, layout: Layout, bindings: Bindings) -> str:
    """SELECT of every layout column over the sources' current state."""
    term = _current_term(plan)
    if not isinstance(plan, Aggregate):
        select = project_select(plan, layout, term, bindings, "1")
        return f"SELECT {', '.join(q(c) for c in layout.columns)} FROM ({select}) AS {q('__ivm_contents')}"
    values = {o.name: expr_sql(o.expression) for o in plan.original_outputs}
    for i, key in enumerate(plan.group_by):
        values.setdefault(group_placeholder(i), expr_sql(key))
    values[COUNT] = "COUNT(*)"
    for call in plan.calls:
        names = state_columns(call)
        argument = expr_sql(call.argument) if call.argument is not None else ""
        if call.func == "count":
            values[names[0]] = f"COUNT({argument})"
        elif call.func in ("sum", "avg"):
            values[names[0]] = f"SUM({argument})"
            values[names[1]] = f"COUNT({argument})"
    columns = ", ".join(f"{values[c]} AS {q(c)}" for c in layout.columns)
    group_by = f" GROUP BY {', '.join(expr_sql(k) for k in plan.group_by)}" if plan.group_by else ""
    return f"SELECT {columns} FROM {term.from_sql(bindings)}{term.where_sql()}{group_by}"


def call_probe_sql(plan: Aggregate, bindings: Bindings) -> str | None:
    """A query whose columns have the result types of the aggregate calls (to finalize AVG exactly)."""
    if not plan.calls:
        return None
    term = _current_term(plan)
    columns = ", ".join(f"{expr_sql(c.original)} AS {q(f'c{c.index}')}" for c in plan.calls)
    return f"SELECT {columns} FROM {term.from_sql(bindings)}{term.where_sql()}"
