"""Planner pass: calls in a SELECT list that yield several rows per input row.

PostgreSQL's set-returning functions (``unnest``, ``generate_series``, ``jsonb_array_elements``, a
user's ``RETURNS SETOF``) and Spark's generators (``explode``, ``posexplode``, ``inline``,
``stack``) multiply a projection's rows, so no key of its input identifies them: such a projection
is stored as a multiset. Over an aggregate or beside a window function they are refused, and so is
a generator that yields several columns (``posexplode(tags) AS (p, tag)``): the stream table could not name them.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "o", (Column("id", "int"), Column("tags", "text[]")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> build_plan(POSTGRES, "SELECT id, unnest(tags) AS tag FROM o", StaticCatalog([orders]), "tags").multiplies
True
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp

from dbt_ivm.catalog import Catalog, FunctionCall
from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.plan.source_positions import position_of
from dbt_ivm.plan.volatility import call_of, function_calls

# By name, where the catalog cannot tell (Spark's, a StaticCatalog): the built-in generators.
GENERATOR_NAMES = frozenset(
    {
        "explode",
        "explode_outer",
        "posexplode",
        "posexplode_outer",
        "inline",
        "inline_outer",
        "stack",
        "unnest",
        "generate_series",
        "generate_subscripts",
        "json_array_elements",
        "json_array_elements_text",
        "jsonb_array_elements",
        "jsonb_array_elements_text",
        "json_each",
        "json_each_text",
        "jsonb_each",
        "jsonb_each_text",
        "json_object_keys",
        "jsonb_object_keys",
        "jsonb_path_query",
        "regexp_matches",
        "regexp_split_to_table",
        "string_to_table",
    }
)
# Generators whose columns Spark names itself when the query does not (c0, c1, …).
SEVERAL_COLUMNS = GENERATOR_NAMES | {"json_tuple"}
MULTIPLYING_FIX = "move the call into a subquery that the query reads, or use refresh_mode='auto' (FULL)"


def set_returning_calls(tree: exp.Expr, catalog: Catalog) -> frozenset[FunctionCall]:
    """The calls in `tree` that may return a set: as the catalog says, else by name."""
    calls = function_calls(tree)
    if not calls:
        return frozenset()
    found = catalog.set_returning(calls)
    return frozenset(c for c in calls if (c[1] in GENERATOR_NAMES if found[c] is None else found[c]))


def multiplying(expressions: Iterable[exp.Expr], set_returning: frozenset[FunctionCall]) -> exp.Func | None:
    """The first call among `expressions` that yields several rows per input row (None: none does)."""
    for expression in expressions:
        for node in expression.find_all(exp.Func):
            if isinstance(node.find_ancestor(exp.Subquery, exp.Select), exp.Subquery):
                continue  # a subquery's own rows
            if isinstance(node, exp.UDTF) or call_of(node) in set_returning:
                return node
    return None


def refuse_several_columns(selects: list[exp.Expr], model: str, output_count: int | None = None) -> None:
    """Refuse a SELECT item that yields several columns (a generator with `AS (a, b)`, or `inline`).

    `output_count`: how many columns the engine says the query has. More than its SELECT items means
    a call without `AS (…)` yielded several (`json_tuple(j, 'a', 'b')`, `posexplode(tags)`): the
    first call among the items is named."""
    for item in selects:
        if isinstance(item, exp.Aliases) or isinstance(item.unalias(), exp.Inline):
            raise UnsupportedQuery(model, _several(item), MULTIPLYING_FIX, position_of(item))
    if output_count is not None and output_count > len(selects):
        calls = [item for item in selects if isinstance(item.unalias(), exp.Func)]
        # The generators first: `upper(g)` beside `json_tuple(…)` yields one column.
        calls.sort(key=lambda item: not _generator(item.unalias()))
        if calls:
            raise UnsupportedQuery(model, _several(calls[0]), MULTIPLYING_FIX, position_of(calls[0]))


def _generator(node: exp.Expr) -> bool:
    called = call_of(node) if isinstance(node, exp.Func) else None
    return isinstance(node, exp.UDTF) or (called is not None and called[1].lower() in SEVERAL_COLUMNS)


def _several(item: exp.Expr) -> str:
    return f"a call that yields several columns `{item.sql('spark')}`"
