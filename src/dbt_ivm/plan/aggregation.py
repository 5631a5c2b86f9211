"""An aggregate SELECT as the planner keeps it: each aggregate call once (`AggCall`: maintained from
running state when an aggregator names it, else recomputed for the groups a batch touches), and each
output a template over placeholders for the group keys and the calls, which the delta rules fill in
(`group_placeholder`, `agg_placeholder`)."""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.aggregates import MAINTAINED_CALLS
from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.plan.messages import shown
from dbt_ivm.plan.nodes import (
    AggCall,
    Aggregate,
    Output,
    Relation,
)
from dbt_ivm.plan.source_positions import position_of


def is_aggregate(tree: exp.Select) -> bool:
    if tree.args.get("group") or tree.args.get("distinct") or tree.args.get("having"):
        return True
    # An aggregate inside a subquery is the subquery's.
    return any(a.find_ancestor(exp.Select) is tree for s in tree.selects for a in s.find_all(exp.AggFunc))


def aggregate_of(tree: exp.Select, relation: Relation, outputs: tuple[Output, ...], model: str) -> Aggregate:
    if tree.args.get("distinct"):
        keys: list[exp.Expr] = [o.expression for o in outputs]
        if any(k.find(exp.AggFunc) for k in keys):
            raise UnsupportedQuery(model, "`DISTINCT` over aggregates", "drop DISTINCT")
    else:
        group = tree.args.get("group")
        keys = list(group.expressions) if group is not None else []
    having_clause = tree.args.get("having")
    having = having_clause.this if having_clause is not None else None
    calls: list[AggCall] = []
    templated = [_template(o.expression, keys, calls, model) for o in outputs]
    templated_having = _template(having, keys, calls, model) if having is not None else None
    # Columns functionally dependent on a grouped primary key are legal in PostgreSQL; grouping by them
    # too changes no group and lets us keep them as state.
    for expression in [*templated, *([templated_having] if templated_having is not None else [])]:
        for column in expression.find_all(exp.Column):
            if column.table and not column.name.startswith("__ivm_") and column not in keys:
                keys.append(column.copy())
    if len(keys) > len(tree.args["group"].expressions if tree.args.get("group") else []):
        calls = []
        templated = [_template(o.expression, keys, calls, model) for o in outputs]
        templated_having = _template(having, keys, calls, model) if having is not None else None
    return Aggregate(
        input=relation,
        group_by=tuple(keys),
        calls=tuple(calls),
        outputs=tuple(Output(o.name, t) for o, t in zip(outputs, templated, strict=True)),
        original_outputs=outputs,
        having=templated_having,
    )


def group_placeholder(index: int) -> str:
    return f"__ivm_g{index}"


def agg_placeholder(index: int) -> str:
    return f"__ivm_agg{index}"


def _template(expression: exp.Expr, keys: list[exp.Expr], calls: list[AggCall], model: str) -> exp.Expr:
    """Replace aggregate calls and group keys in an output expression by placeholder columns."""
    if isinstance(expression, exp.AggFunc) or _wraps_aggregate(expression):
        call = _agg_call(expression, calls, model)
        return exp.column(agg_placeholder(call.index), quoted=True)
    for index, key in enumerate(keys):
        if expression == key:
            return exp.column(group_placeholder(index), quoted=True)
    copy = expression.copy()
    for name, value in list(copy.args.items()):
        if isinstance(value, exp.Expr):
            copy.set(name, _template(value, keys, calls, model))
        elif isinstance(value, list):
            copy.set(
                name,
                [_template(v, keys, calls, model) if isinstance(v, exp.Expr) else v for v in value],
            )
    return copy


def _wraps_aggregate(node: exp.Expr) -> bool:
    """`agg(…) FILTER (WHERE …)` or `agg(…) WITHIN GROUP (ORDER BY …)`: one call, as written."""
    return isinstance(node, exp.Filter | exp.WithinGroup) and isinstance(node.this, exp.AggFunc)


def _agg_call(node: exp.Expr, calls: list[AggCall], model: str) -> AggCall:
    """The call `node` (an aggregate, or one wrapped by FILTER / WITHIN GROUP), added to `calls` once.

    COUNT, SUM and AVG keep running state, FILTER folded into their argument (`SUM(x) FILTER (WHERE
    p)` is `SUM(CASE WHEN p THEN x END)`); any other call is recomputed for the groups a batch
    touches, over the columns it reads."""
    text = shown(node)
    if any(inner is not node and isinstance(inner, exp.AggFunc | exp.Window) for inner in _inside(node)):
        raise UnsupportedQuery(
            model, f"nested aggregate `{text}`", "aggregate in a subquery first", position_of(node)
        )
    function, condition = node, None
    if isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc):
        function, condition = node.this, node.expression.this
    func = MAINTAINED_CALLS.get(type(function))
    argument: exp.Expr | None = function.this
    if func is not None and not isinstance(argument, exp.Distinct) and not isinstance(node, exp.WithinGroup):
        if func == "count" and (argument is None or isinstance(argument, exp.Star)):
            func, argument = ("count_star", None) if condition is None else ("count", exp.Literal.number(1))
        if condition is not None:
            assert argument is not None
            argument = exp.Case(ifs=[exp.If(this=condition.copy(), true=argument.copy())])
            function = function.copy()
            function.set("this", argument)
        for existing in calls:
            if existing.func == func and existing.argument == argument:
                return existing
        call = AggCall(index=len(calls), func=func, argument=argument, original=function.copy())
    else:
        for existing in calls:
            if existing.func == "recomputed" and existing.original == node:
                return existing
        columns = tuple(dict.fromkeys(c.copy() for c in node.find_all(exp.Column)))
        call = AggCall(len(calls), "recomputed", None, node.copy(), columns)
    calls.append(call)
    return call


def _inside(node: exp.Expr) -> list[exp.Expr]:
    """The nodes under an aggregate call, without the call itself and its FILTER / WITHIN GROUP."""
    own = {id(node), id(node.this)} if _wraps_aggregate(node) else {id(node)}
    return [n for n in node.walk() if id(n) not in own]
