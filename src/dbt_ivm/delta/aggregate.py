"""Delta rule for GROUP BY with COUNT / SUM / AVG, by reference counting.

Following one row: ``INSERT INTO orders VALUES (7, 'alice', 49.99)`` with
``customer_totals = SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer``:

1. changes:      customer=alice, amount=49.99, weight=+1
2. group delta:  alice: __ivm_count +1, sum +49.99, non-NULL count +1
3. new state:    stored alice row (count 2, sum 80.00) + delta -> count 3, sum 129.99
4. row delta:    -1 · (alice, 80.00, 2, ...)   +1 · (alice, 129.99, 3, ...)

A group whose count reaches 0 gets only its −1 row (it vanishes); a SUM whose non-NULL count is 0 is
NULL, as SUM over only NULLs is. Without GROUP BY there is always exactly one row, even over an
empty table. Unchanged groups produce identical −1/+1 rows that cancel before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from dbt_ivm.delta.filter import delta_relation
from dbt_ivm.delta.terms import Bindings, Term
from dbt_ivm.keys import match_sql
from dbt_ivm.layout import COUNT, Layout, state_columns
from dbt_ivm.plan.build import agg_placeholder, group_placeholder
from dbt_ivm.plan.nodes import AggCall, Aggregate
from dbt_ivm.sqltext import WEIGHT, expr_sql, q

CHANGES, GROUP_DELTA, STORED, NEW = "__ivm_changes", "__ivm_group_delta", "__ivm_stored", "__ivm_new"


def _arg(call: AggCall) -> str:
    return f"__ivm_arg{call.index}"


def _changes_select(plan: Aggregate, term: Term, bindings: Bindings) -> str:
    columns = [f"{expr_sql(k)} AS {q(group_placeholder(i))}" for i, k in enumerate(plan.group_by)]
    columns += [f"{expr_sql(c.argument)} AS {q(_arg(c))}" for c in plan.calls if c.argument is not None]
    columns.append(f"{term.weight_sql()} AS {q(WEIGHT)}")
    return f"SELECT {', '.join(columns)} FROM {term.from_sql(bindings)}{term.where_sql()}"


def _group_delta(plan: Aggregate) -> str:
    keys = [q(group_placeholder(i)) for i in range(len(plan.group_by))]
    weight = q(WEIGHT)
    columns = [*keys, f"SUM({weight}) AS {q(COUNT)}"]
    for call in plan.calls:
        names = state_columns(call)
        if call.argument is None:
            continue
        non_null = f"SUM(CASE WHEN {q(_arg(call))} IS NULL THEN 0 ELSE {weight} END)"
        if call.func == "count":
            columns.append(f"{non_null} AS {q(names[0])}")
        else:
            columns.append(f"SUM({weight} * {q(_arg(call))}) AS {q(names[0])}")
            columns.append(f"{non_null} AS {q(names[1])}")
    group_by = f" GROUP BY {', '.join(keys)}" if keys else ""
    return f"SELECT {', '.join(columns)} FROM {q(CHANGES)}{group_by}"


def _new_states(plan: Aggregate, layout: Layout) -> list[str]:
    def plus(column: str) -> str:
        return f"COALESCE(s.{q(column)}, 0) + COALESCE(d.{q(column)}, 0)"

    columns = [f"d.{q(group_placeholder(i))}" for i in range(len(plan.group_by))]
    columns.append(f"{plus(COUNT)} AS {q(COUNT)}")
    for call in plan.calls:
        names = state_columns(call)
        if call.func == "count":
            columns.append(f"{plus(names[0])} AS {q(names[0])}")
        elif call.func in ("sum", "avg"):
            total, non_null = names
            columns.append(f"CASE WHEN {plus(non_null)} = 0 THEN NULL ELSE {plus(total)} END AS {q(total)}")
            columns.append(f"{plus(non_null)} AS {q(non_null)}")
    return columns


def finalize(call: AggCall, state: str, call_types: Mapping[int, str]) -> str:
    """The aggregate's value from its state columns (relation alias `state`)."""
    names = state_columns(call)
    if call.func == "count_star":
        return f"{state}.{q(COUNT)}"
    if call.func in ("count", "sum"):
        return f"{state}.{q(names[0])}"
    result_type = call_types.get(call.index, "numeric")
    total, non_null = (f"{state}.{q(n)}" for n in names)
    return (
        f"CASE WHEN {non_null} = 0 THEN NULL ELSE "
        f"CAST(CAST({total} AS {result_type}) / CAST({non_null} AS {result_type}) AS {result_type}) END"
    )


def output_sql(expression: exp.Expr, plan: Aggregate, state: str, call_types: Mapping[int, str]) -> str:
    """An output expression evaluated over maintained state (placeholders replaced)."""
    replacements: dict[str, exp.Expr] = {}
    for i in range(len(plan.group_by)):
        replacements[group_placeholder(i)] = exp.column(group_placeholder(i), table=state, quoted=True)
    for call in plan.calls:
        replacements[agg_placeholder(call.index)] = exp.maybe_parse(
            f"({finalize(call, q(state), call_types)})", dialect="postgres"
        )

    def substitute(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in replacements:
            return replacements[node.name].copy()
        return node

    return expr_sql(expression.copy().transform(substitute))


def delta_aggregate(
    plan: Aggregate,
    layout: Layout,
    bindings: Bindings,
    stream_table: str,
    use_hash: bool,
    call_types: Mapping[int, str],
) -> str | None:
    """The row delta of an aggregate stream table, or None when no source changed."""
    delta = delta_relation(plan.input, bindings)
    if delta.empty:
        return None
    changes = "\nUNION ALL\n".join(_changes_select(plan, t, bindings) for t in delta.terms)
    delta_keys = [f"d.{q(group_placeholder(i))}" for i in range(len(plan.group_by))]
    match = match_sql("s", layout.key, delta_keys, use_hash)
    stored_columns = ", ".join(f"s.{q(c)}" for c in layout.columns)
    new_values = {o.name: output_sql(o.expression, plan, "n", call_types) for o in plan.outputs}
    for column in layout.hidden:
        new_values.setdefault(column, f"n.{q(column)}")
    new_columns = ", ".join(f"{new_values[c]} AS {q(c)}" for c in layout.columns)
    surviving = "" if layout.is_global_aggregate else f" WHERE n.{q(COUNT)} > 0"
    return (
        f"WITH {q(CHANGES)} AS ({changes}),\n"
        f"{q(GROUP_DELTA)} AS ({_group_delta(plan)}),\n"
        f"{q(NEW)} AS (SELECT {', '.join(_new_states(plan, layout))} "
        f"FROM {q(GROUP_DELTA)} AS d LEFT JOIN {stream_table} AS s ON {match})\n"
        f"SELECT {stored_columns}, -1 AS {q(WEIGHT)} FROM {stream_table} AS s "
        f"JOIN {q(GROUP_DELTA)} AS d ON {match}\n"
        f"UNION ALL\n"
        f"SELECT {new_columns}, 1 AS {q(WEIGHT)} FROM {q(NEW)} AS n{surviving}"
    )
