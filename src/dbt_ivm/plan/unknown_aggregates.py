"""Planner pass: refuse an aggregate that sqlglot parses as a plain function.

sqlglot knows ``sum``, ``bool_and`` or ``max_by`` as aggregates, but not ``every``, Spark's
``some``/``any``/``try_sum``, nor a user's ``CREATE AGGREGATE``: it parses them as calls of a per-row function.
Planned so, the aggregate would be taken for a grouping value, splitting each group by it, and the
stream table would be wrong from its first build. The catalog says which calls are aggregates
(PostgreSQL's ``prokind``, Spark's function registry), else a list of names does; each one is refused
by name, so AUTO refreshes FULL.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> t = TableInfo("public", "t", (Column("g", "text"), Column("b", "boolean")), ())
>>> from dbt_ivm.target import POSTGRES
>>> build_plan(POSTGRES, "SELECT g, every(b) AS e FROM t GROUP BY g", StaticCatalog([t]), "flags")
Traceback (most recent call last):
...
dbt_ivm.errors.UnsupportedQuery: aggregate `EVERY("t"."b")` that dbt-ivm does not know in model flags ...
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.catalog import Catalog
from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.plan.messages import shown
from dbt_ivm.plan.source_positions import position_of
from dbt_ivm.plan.volatility import call_of

# By name, where the catalog cannot tell: aggregates of PostgreSQL and Spark that sqlglot parses as
# plain calls.
AGGREGATE_NAMES = frozenset(
    {
        "every",
        "some",
        "any",
        "bit_and",
        "bit_or",
        "bit_xor",
        "jsonb_agg",
        "jsonb_object_agg",
        "json_object_agg",
        "range_agg",
        "range_intersect_agg",
        "xmlagg",
        "regr_count",
        "collect_list",
        "collect_set",
    }
)
FIX = (
    "use an aggregate dbt-ivm maintains (bool_and for every, bool_or for some or any), aggregate in a "
    "model downstream, or use refresh_mode='auto' (FULL)"
)


def refuse_unknown_aggregates(tree: exp.Expr, catalog: Catalog, model: str) -> None:
    """Raise UnsupportedQuery naming the first call in `tree` that is an aggregate sqlglot does not
    know as one."""
    calls = {node: call for node in tree.find_all(exp.Anonymous) if (call := call_of(node)) is not None}
    answers = catalog.aggregates(sorted(set(calls.values()), key=str)) if calls else {}
    for node in tree.walk():
        if isinstance(node, exp.Any) and not isinstance(node.parent, exp.Predicate):
            _refuse(node, model)  # Spark's any(b), a bool_or; not `x = ANY (…)`
        call = calls.get(node) if isinstance(node, exp.Anonymous) else None
        if call is None:
            continue
        said = answers.get(call)
        if said or (said is None and call[1].lower() in AGGREGATE_NAMES):
            _refuse(node, model)


def _refuse(node: exp.Expr, model: str) -> None:
    raise UnsupportedQuery(
        model, f"aggregate `{shown(node)}` that dbt-ivm does not know", FIX, position_of(node)
    )
