"""The planner's rewrites of a defining query, declared in the order they run. Each is a function of
its own module (with a doctest there showing a query before and after); here they are only listed.

`QUERY_PASSES` run once over the whole query, after its views are expanded and its CTEs inlined:
sqlglot's `qualify` first (every column named by its table), then rewrites that need the whole tree.
`SELECT_PASSES` run on each SELECT as the planner reaches it (a subquery's own SELECT when the planner
plans it), because what they rewrite is read in that SELECT's scope: a subquery in its expressions,
an `IN` used as a value.

>>> [name for name, _ in QUERY_PASSES]
['qualify', 'rename_reserved_names', 'common_conjuncts_factored', 'quantified_as_exists', 'ordered_set_operation_as_select', 'merge_subqueries', 'nested_joins_as_subqueries', 'from_generators', 'annotate_types']
>>> [name for name, _ in SELECT_PASSES]
['uncorrelated_disjunctions_negated', 'in_values_as_exists', 'uncorrelated_exists_as_counts', 'joined_scalar_aggregates', 'unnested_in_expressions']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from dbt_ivm.plan.common_conjuncts import common_conjuncts_factored
from dbt_ivm.plan.embedded_subqueries import unnested_in_expressions
from dbt_ivm.plan.in_values import in_values_as_exists
from dbt_ivm.plan.internal_names import rename_reserved_names
from dbt_ivm.plan.join_parentheses import nested_joins_as_subqueries
from dbt_ivm.plan.lateral import from_generators
from dbt_ivm.plan.ordered_set_operations import ordered_set_operation_as_select
from dbt_ivm.plan.quantified_subqueries import quantified_as_exists
from dbt_ivm.plan.scalar_subqueries import joined_scalar_aggregates
from dbt_ivm.plan.uncorrelated_disjunctions import uncorrelated_disjunctions_negated
from dbt_ivm.plan.uncorrelated_exists import uncorrelated_exists_as_counts
from dbt_ivm.target import Target


@dataclass(frozen=True)
class Setting:
    """What a pass may need besides the tree: the model (named in refusals), the target, the
    tables' columns (sqlglot's schema) and fresh aliases for the derived tables a pass adds."""

    model: str
    target: Target
    schema: MappingSchema
    aliases: Iterator[str]


QUERY_PASSES: tuple[tuple[str, Callable[[exp.Expr, Setting], exp.Expr]], ...] = (
    (
        "qualify",
        lambda tree, s: qualify(
            tree,
            schema=s.schema,
            dialect=s.target.dialect,
            quote_identifiers=True,
            validate_qualify_columns=True,
        ),
    ),
    ("rename_reserved_names", lambda tree, _: rename_reserved_names(tree)),
    ("common_conjuncts_factored", lambda tree, _: common_conjuncts_factored(tree)),
    ("quantified_as_exists", lambda tree, _: quantified_as_exists(tree)),
    ("ordered_set_operation_as_select", lambda tree, _: ordered_set_operation_as_select(tree)),
    ("merge_subqueries", lambda tree, _: merge_subqueries(tree)),
    ("nested_joins_as_subqueries", lambda tree, _: nested_joins_as_subqueries(tree)),
    ("from_generators", lambda tree, s: from_generators(tree, s.model)),
    # Typed NULLs of grouping sets.
    ("annotate_types", lambda tree, s: annotate_types(tree, schema=s.schema, dialect=s.target.dialect)),
)

SELECT_PASSES: tuple[tuple[str, Callable[[exp.Select, Setting], exp.Select]], ...] = (
    ("uncorrelated_disjunctions_negated", lambda select, _: uncorrelated_disjunctions_negated(select)),
    ("in_values_as_exists", lambda select, s: in_values_as_exists(select, s.target)),
    ("uncorrelated_exists_as_counts", lambda select, _: uncorrelated_exists_as_counts(select)),
    ("joined_scalar_aggregates", lambda select, s: joined_scalar_aggregates(select, s.aliases)),
    ("unnested_in_expressions", lambda select, s: unnested_in_expressions(select, s.aliases)),
)


def rewritten_query(tree: exp.Expr, setting: Setting) -> exp.Expr:
    """`tree` after every query pass, in order."""
    for _, rewrite in QUERY_PASSES:
        tree = rewrite(tree, setting)
    return tree


def rewrite_select(select: exp.Select, setting: Setting) -> None:
    """Rewrite `select` in place with every SELECT pass, in order."""
    for _, rewrite in SELECT_PASSES:
        rewrite(select, setting)
