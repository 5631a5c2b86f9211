"""Which columns of each source a plan reads, so a backend reads (and compares) no others.

A change set is netted by comparing whole row images, and a source read as of a snapshot is carried
through every term: a column the query never reads only costs there — and one Spark cannot compare (a
``map``) makes the netting fail. Every expression of the plan is looked through (all scopes, derived
plans, join conditions, aggregate calls), so a name read anywhere keeps that column of every source
that has it: too many columns is only slower, too few would be wrong. A source's primary key is
always kept (keyed layouts and rules identify rows by it), and a source nothing reads by name (``SELECT
COUNT(*) FROM t``) keeps one column so its rows still exist.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric"), Column("notes", "text")), ("id",))
>>> events = TableInfo("public", "events", (Column("kind", "text"), Column("props", "json")))
>>> from dbt_ivm.target import POSTGRES
>>> def reads(sql):
...     plan = build_plan(POSTGRES, sql, StaticCatalog([orders, events]), "st")
...     return {table: list(names) for table, names in columns_read(plan).items()}
>>> reads("SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer")
{'public.orders': ['id', 'customer', 'amount']}
>>> reads("SELECT COUNT(*) AS n FROM events WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer = kind)")
{'public.events': ['kind'], 'public.orders': ['id', 'customer']}
>>> reads("SELECT COUNT(*) AS n FROM events")
{'public.events': ['kind']}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from sqlglot import exp

from dbt_ivm.catalog import TableInfo
from dbt_ivm.plan.nodes import Plan, scans_in
from dbt_ivm.reserved import internal_column, is_reserved


def columns_read(plan: Plan) -> dict[str, tuple[str, ...]]:
    """Per source (qualified name), the names of the columns to read, in table order."""
    named = {name.lower() for name in _column_names(plan)}
    found: dict[str, tuple[str, ...]] = {}
    for scan in scans_in(plan):
        found[scan.table.qualified] = _kept(scan.table, named)
    return found


def narrowed(table: TableInfo, read: tuple[str, ...]) -> TableInfo:
    """`table` with only the columns `read` (from `columns_read`), in table order, and every column
    before a read one carried under a positional name (``__ivm_c<n>``, `reserved`): dropping one of
    those would change that name.

    >>> from dbt_ivm.catalog import Column, TableInfo
    >>> t = TableInfo("public", "t", (Column("id", "int"), Column("note", "text"), Column("__ivm_x", "int"),
    ...               Column("v", "int")))
    >>> narrowed(t, ("id", "v")).column_names()
    ['id', 'v']
    >>> narrowed(t, ("id", "__ivm_x")).column_names()
    ['id', 'note', '__ivm_x']
    """
    positional = [i for i, c in enumerate(table.columns) if c.name in read and is_reserved(c.name)]
    last = max(positional, default=-1)
    return dataclasses.replace(
        table, columns=tuple(c for i, c in enumerate(table.columns) if c.name in read or i < last)
    )


def _kept(table: TableInfo, named: set[str]) -> tuple[str, ...]:
    kept = tuple(
        c
        for c in table.column_names()
        if c in table.primary_key or c.lower() in named or internal_column(table, c).lower() in named
    )
    return kept or tuple(table.column_names()[:1])


def _column_names(node: object) -> Iterator[str]:
    """The name of every column reference in a plan node, its fields and their children."""
    if isinstance(node, exp.Expr):
        yield from (column.name for column in node.find_all(exp.Column))
    elif isinstance(node, tuple | list):
        for item in node:
            yield from _column_names(item)
    elif dataclasses.is_dataclass(node) and not isinstance(node, TableInfo | type):
        for field in dataclasses.fields(node):
            yield from _column_names(getattr(node, field.name))
