"""The graph of stream tables and their sources, laid out in columns.

A node is a relation: a source table nobody maintains, or a stream table. An edge runs from each
source of a stream table to it, so a stream table that reads another one sits in a column to the
right of it. A node's column is the longest path from a plain source to it; within a column, nodes
are ordered by the mean row of their inputs (one barycentre pass), so few edges cross.

>>> g = layout({"s.totals": ["s.orders"], "s.big": ["s.totals"], "s.mix": ["s.orders", "s.people"]})
>>> [(n.name, n.column, n.row, n.maintained) for n in g.nodes]
[('s.orders', 0, 0, False), ('s.people', 0, 1, False), ('s.totals', 1, 0, True), \
('s.mix', 1, 1, True), ('s.big', 2, 0, True)]
>>> g.edges
[('s.orders', 's.totals'), ('s.totals', 's.big'), ('s.orders', 's.mix'), ('s.people', 's.mix')]
>>> g.columns, g.rows
(3, 2)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    name: str
    column: int
    row: int
    maintained: bool  # a stream table (else a source nobody maintains)


@dataclass(frozen=True)
class Graph:
    nodes: list[Node]
    edges: list[tuple[str, str]]  # (source, stream table)

    @property
    def columns(self) -> int:
        return 1 + max((n.column for n in self.nodes), default=-1)

    @property
    def rows(self) -> int:
        return 1 + max((n.row for n in self.nodes), default=-1)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


def layout(sources: Mapping[str, Sequence[str]]) -> Graph:
    """The graph of stream tables (`sources`' keys) and what each reads, laid out."""
    column: dict[str, int] = {}

    def depth(name: str, path: frozenset[str]) -> int:
        if name not in column:
            inputs = [s for s in sources.get(name, ()) if s not in path]  # a cycle cannot be; stay finite
            column[name] = 1 + max((depth(s, path | {name}) for s in inputs), default=-1)
        return column[name]

    for name in sources:
        depth(name, frozenset())
    edges = [(source, name) for name, inputs in sources.items() for source in inputs]
    rows: dict[str, int] = {}
    for current in range(1 + max(column.values(), default=-1)):
        members = [n for n in column if column[n] == current]  # first seen first: a stable order

        def barycentre(name: str) -> float:
            above = [rows[s] for s in sources.get(name, ()) if s in rows]
            return sum(above) / len(above) if above else 0.0

        if current == 0:
            members.sort()
        else:
            members.sort(key=barycentre)  # stable: ties keep the order they were named in
        rows.update({name: row for row, name in enumerate(members)})
    nodes = sorted(
        (Node(name, column[name], rows[name], name in sources) for name in column),
        key=lambda n: (n.column, n.row),
    )
    return Graph(nodes, edges)
