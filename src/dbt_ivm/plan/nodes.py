"""Logical plan operators.

A defining query becomes ``Project(Filter(Join(Scan, Scan, ...)))`` or, with GROUP BY / aggregates /
DISTINCT, ``Aggregate(Filter(Join(...)))``. Expressions stay sqlglot trees whose columns are
qualified by the scan aliases, so every operator can be re-rendered over deltas unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from dbt_ivm.catalog import TableInfo

AggFunc = Literal["count_star", "count", "sum", "avg"]


@dataclass(frozen=True)
class Scan:
    """One occurrence of a base table in FROM (a self-join has two scans of one table)."""

    position: int
    alias: str
    table: TableInfo


@dataclass(frozen=True)
class Join:
    """An n-way inner join. Its join conditions live in the Filter above it."""

    inputs: tuple[Scan, ...]


@dataclass(frozen=True)
class Filter:
    input: Join
    predicate: exp.Expr


Relation = Join | Filter


@dataclass(frozen=True)
class Output:
    """One column of the query result."""

    name: str
    expression: exp.Expr  # over scan columns (Project) or group keys and aggregates (Aggregate)


@dataclass(frozen=True)
class Project:
    input: Relation
    outputs: tuple[Output, ...]


@dataclass(frozen=True)
class AggCall:
    """One distinct aggregate call; `index` names its state columns."""

    index: int
    func: AggFunc
    argument: exp.Expr | None  # None for COUNT(*)
    original: exp.Expr  # the call as written, for recomputing from scratch


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY (possibly no keys: one global row) with invertible aggregates only.

    `outputs` expressions reference group keys and aggregate calls through placeholders
    (`__ivm_g<i>` / `__ivm_agg<i>` columns) so they can be evaluated over maintained state.
    """

    input: Relation
    group_by: tuple[exp.Expr, ...]
    calls: tuple[AggCall, ...]
    outputs: tuple[Output, ...]  # templated with placeholders
    original_outputs: tuple[Output, ...]  # as written, for recomputing from scratch


Plan = Project | Aggregate


def scans_of(relation: Relation) -> tuple[Scan, ...]:
    join = relation.input if isinstance(relation, Filter) else relation
    return join.inputs


def predicate_of(relation: Relation) -> exp.Expr | None:
    return relation.predicate if isinstance(relation, Filter) else None
