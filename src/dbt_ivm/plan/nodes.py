"""Logical plan operators: a recursive tree in which any operator can take any operator as input.

A query is a `Plan`: a projection or an aggregate over a `Relation` (the FROM/WHERE part), or a
set operation over plans. A relation is a tree of joins over items, each item a base table (`Scan`)
or a subquery in FROM (`Derived`, itself a plan). Expressions stay sqlglot trees whose columns are
qualified by item aliases, so every operator can be re-rendered over deltas unchanged.

    SELECT c.name, o.amount FROM orders o LEFT JOIN customers c ON o.customer_id = c.id
    ->  Project(Join("left", Scan(o), Scan(c), o.customer_id = c.id), [c.name, o.amount])
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, NoReturn

from sqlglot import exp

from dbt_ivm.catalog import TableInfo
from dbt_ivm.target import Target

# The name of an aggregator the delta rules keep a running state for (`delta.aggregates.REGISTRY`:
# count_star, count, sum, avg, …), or "recomputed": any other aggregate (MIN, MAX, COUNT(DISTINCT …),
# STRING_AGG …): no running state; the groups a batch touches are recomputed from their rows.
AggFunc = str
JoinKind = Literal["inner", "left", "right", "full", "semi", "anti"]
SetKind = Literal["union", "intersect", "except"]


@dataclass(frozen=True)
class Scan:
    """One occurrence of a base table in FROM (a self-join has two scans of one table)."""

    position: int
    alias: str
    table: TableInfo


@dataclass(frozen=True)
class Derived:
    """A subquery or CTE read in FROM under `alias`; its columns are the plan's output names."""

    position: int
    alias: str
    plan: Plan


Item = Scan | Derived


@dataclass(frozen=True)
class Join:
    """`left` joined with `right` on `condition` (None: a cross join).

    semi / anti keep the rows of `left` that have (semi) or lack (anti) a partner in `right`: EXISTS,
    IN, NOT EXISTS and NOT IN subqueries. For them `right` is the subquery's FROM/WHERE, in its own
    scope, and `condition` may refer to both sides."""

    kind: JoinKind
    left: Relation
    right: Relation
    condition: exp.Expr | None


@dataclass(frozen=True)
class Filter:
    input: Relation
    predicate: exp.Expr


Relation = Scan | Derived | Join | Filter


@dataclass(frozen=True)
class Output:
    """One column of the query result."""

    name: str
    expression: exp.Expr  # over item columns (Project) or group keys and aggregates (Aggregate)


@dataclass(frozen=True)
class Project:
    input: Relation
    outputs: tuple[Output, ...]
    multiplies: bool = False  # a set-returning call yields several rows per input row (`generators`)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)


@dataclass(frozen=True)
class AggCall:
    """One distinct aggregate call; `index` names its state columns."""

    index: int
    func: AggFunc
    argument: exp.Expr | None  # None for COUNT(*) and recomputed calls
    original: exp.Expr  # the call as written, for recomputing from scratch
    columns: tuple[exp.Column, ...] = ()  # a recomputed call's input columns, each projected once


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY (possibly no keys: one global row), with HAVING.

    `outputs` and `having` reference group keys and aggregate calls through placeholders
    (`__ivm_g<i>` / `__ivm_agg<i>` columns) so they can be evaluated over maintained state.
    With only invertible calls (COUNT, SUM, AVG) and no HAVING, a group's state is updated from its
    changes; otherwise (`recomputed`) the groups a batch touches are recomputed from their rows.
    """

    input: Relation
    group_by: tuple[exp.Expr, ...]
    calls: tuple[AggCall, ...]
    outputs: tuple[Output, ...]  # templated with placeholders
    original_outputs: tuple[Output, ...]  # as written, for recomputing from scratch
    having: exp.Expr | None = None  # templated like `outputs`

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    @property
    def recomputed(self) -> bool:
        """Its touched groups are recomputed (a call without running state, or HAVING)."""
        return self.having is not None or any(c.func == "recomputed" for c in self.calls)


@dataclass(frozen=True)
class UnionAll:
    """The rows of every input, by position; columns named as `names`."""

    inputs: tuple[Plan, ...]
    names: tuple[str, ...]


@dataclass(frozen=True)
class SetOp:
    """UNION / INTERSECT / EXCEPT, distinct or ALL, of two inputs (by position)."""

    kind: SetKind
    all: bool
    left: Plan
    right: Plan
    names: tuple[str, ...]


@dataclass(frozen=True)
class TopK:
    """`ORDER BY order LIMIT limit OFFSET offset` over `input`, the query's last step. `order` refers
    to the input's output names (unqualified columns)."""

    input: Plan
    order: tuple[exp.Ordered, ...]
    limit: int
    offset: int
    # Input columns it orders by but does not show (`ORDER BY amount DESC, id` showing no `id`).
    hidden: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in self.input.names if n not in self.hidden)


@dataclass(frozen=True)
class Window:
    """Window functions over `input`'s rows. `outputs` refer to the input's output names (unqualified
    columns); `partition_by` names the input columns every window function partitions by, so a batch
    changes only the partitions its rows fall in (empty: one partition, the whole input)."""

    input: Plan
    partition_by: tuple[str, ...]
    outputs: tuple[Output, ...]
    # The WHERE of the query right above it, over its output names (`rn = 1`), evaluated with the
    # window: a database can stop ranking a partition early, and a delta carries only kept rows.
    keep: exp.Expr | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)


@dataclass(frozen=True)
class Rows:
    """Rows written in the query itself (`VALUES`): the same at every refresh, so they never change.
    `query` selects them under `names`."""

    query: exp.Query
    names: tuple[str, ...]


Plan = Project | Aggregate | UnionAll | SetOp | TopK | Window | Rows


def unknown_node(node: NoReturn) -> NoReturn:
    """The last case of a `match` over every kind of `Plan` or `Relation`: mypy reports a kind a
    dispatch leaves out (`node` is then not of type NoReturn), and at run time it cannot be reached."""
    raise AssertionError(f"no case for {type(node).__name__}")


def items_of(relation: Relation) -> tuple[Item, ...]:
    """The items whose columns a relation's rows carry (a semi/anti join's right side carries none)."""
    if isinstance(relation, Scan | Derived):
        return (relation,)
    if isinstance(relation, Filter):
        return items_of(relation.input)
    if relation.kind in ("semi", "anti"):
        return items_of(relation.left)
    return items_of(relation.left) + items_of(relation.right)


def padded_aliases(relation: Relation) -> set[str]:
    """The aliases of items an outer join may pad with NULLs (their columns can be NULL in any row)."""
    if isinstance(relation, Scan | Derived):
        return set()
    if isinstance(relation, Filter):
        return padded_aliases(relation.input)
    padded = padded_aliases(relation.left) | padded_aliases(relation.right)
    if relation.kind in ("left", "full"):
        padded |= {i.alias for i in items_of(relation.right)}
    if relation.kind in ("right", "full"):
        padded |= {i.alias for i in items_of(relation.left)}
    return padded


def never_null(expression: exp.Expr, relation: Relation) -> bool:
    """`expression` is a column of a base table declared NOT NULL (or in its primary key) that no
    outer join pads: equality on it may use `=`, which an index or a hash can serve."""
    if not isinstance(expression, exp.Column) or expression.table in padded_aliases(relation):
        return False
    scan = next((i for i in items_of(relation) if i.alias == expression.table), None)
    if not isinstance(scan, Scan):
        return False
    column = next((c for c in scan.table.columns if c.name == expression.name), None)
    return column is not None and (not column.nullable or column.name in scan.table.primary_key)


def all_items(relation: Relation) -> Iterator[Item]:
    """Every item a relation reads, subquery sides included (not looking into derived plans)."""
    if isinstance(relation, Scan | Derived):
        yield relation
    elif isinstance(relation, Filter):
        yield from all_items(relation.input)
    else:
        yield from all_items(relation.left)
        yield from all_items(relation.right)


def children(node: Plan | Relation) -> tuple[Plan | Relation, ...]:
    """The operators a node reads (a derived item's plan, a join's two sides, a branch's inputs)."""
    if isinstance(node, Scan | Rows):
        return ()
    if isinstance(node, Derived):
        return (node.plan,)
    if isinstance(node, Filter | Project | Aggregate | TopK | Window):
        return (node.input,)
    if isinstance(node, UnionAll):
        return node.inputs
    return (node.left, node.right)


def whole_input_reason(node: Plan | Relation, target: Target) -> str | None:
    """Why every batch makes a differential refresh recompute a whole input, which AUTO then
    recomputes instead (None: it follows the batch): a window function without PARTITION BY ranks
    every row of its input again. (An ORDER BY … LIMIT by columns it does not show reads only its
    input's top again: benchmarks/bench_whole_input.py measured it 3× cheaper than a recompute, so
    AUTO weighs it as any other query; a window over 1M rows, or over 1,000 totals, 0.81×.)"""
    if isinstance(node, Window) and not node.partition_by:
        window = next(w for o in node.outputs for w in o.expression.find_all(exp.Window))
        return f"window function `{window.sql(target.dialect)}` has no PARTITION BY: every batch recomputes its input"
    return next((r for c in children(node) if (r := whole_input_reason(c, target)) is not None), None)


def scans_in(node: Plan | Relation) -> Iterator[Scan]:
    """Every base-table scan anywhere under `node`, derived plans and subqueries included."""
    if isinstance(node, Scan):
        yield node
    for child in children(node):
        yield from scans_in(child)
