"""What the engine needs to know about source tables, independent of the database.

A `Catalog` answers "which columns and primary key does this table have" and "how volatile is this
function"; the PostgreSQL and Spark runtimes implement it against their system catalogs, tests may
use `StaticCatalog`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


def qualified_name(schema: str, name: str) -> str:
    """`schema.name` as the catalogs key tables by: plain when neither part holds a dot or a double
    quote, quoted otherwise, so "x.y".z and x."y.z" never share a key.

    >>> qualified_name("public", "orders"), qualified_name("x.y", "z"), qualified_name("x", "y.z")
    ('public.orders', '"x.y"."z"', '"x"."y.z"')
    """
    if any(c in part for part in (schema, name) for c in '."'):
        return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))
    return f"{schema}.{name}"


def split_qualified(key: str) -> tuple[str, str]:
    """The (schema, name) that `qualified_name` made `key` of.

    >>> split_qualified("public.orders"), split_qualified('"x.y"."z"'), split_qualified('"a""b"."c"')
    (('public', 'orders'), ('x.y', 'z'), ('a"b', 'c'))
    """
    if not key.startswith('"'):
        schema, _, name = key.partition(".")
        return schema, name
    parts: list[str] = []
    at = 0
    while at < len(key) and len(parts) < 2:
        end = at + 1
        while not (key[end] == '"' and key[end + 1 : end + 2] != '"'):
            end += 2 if key[end] == '"' else 1
        parts.append(key[at + 1 : end].replace('""', '"'))
        at = end + 2  # past the closing quote and the dot
    return parts[0], parts[1]


FunctionCall = tuple[str | None, str, int]  # (schema or None, name, argument count)


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # the database's own spelling, e.g. "numeric(10,2)" or "decimal(10,2)"
    nullable: bool = True
    # Its collation, quoted and qualified, where it is not its type's default ("" otherwise): a copy
    # of its values (a change buffer) must compare and order them alike.
    collation: str = ""

    def declared_type(self) -> str:
        """The type as a column definition declares it, collation included."""
        return f"{self.type} COLLATE {self.collation}" if self.collation else self.type


@dataclass(frozen=True)
class TableInfo:
    schema: str
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()  # empty: rows are identified by value (duplicates allowed)
    kind: str = "table"  # "table" | "view" | "other"
    view_sql: str | None = None  # a view's definition, when kind == "view"
    identity: str = ""  # something that changes when the table is dropped and recreated (oid, uuid)

    @property
    def qualified(self) -> str:
        return qualified_name(self.schema, self.name)

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


class Catalog(Protocol):
    def lookup(self, schema: str | None, name: str) -> TableInfo | None:
        """The table `schema.name` (schema None: the search path), or None if it does not exist."""

    def function_volatilities(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, str | None]:
        """How volatile each call of `schema.name` (exact spellings; schema None: the search path)
        with `arg_count` arguments is: 'i' immutable, 's' stable, 'v' volatile, the worst of the
        overloads such a call could resolve to. None when the catalog cannot tell (no such function,
        or a database without volatility in its catalog): the caller judges by name."""

    def set_returning(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        """Whether each call may return a set (several rows per input row), as `function_volatilities`
        resolves calls. None when the catalog cannot tell: the caller judges by name."""

    def aggregates(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        """Whether each call may be an aggregate (several rows in, one value out), as
        `function_volatilities` resolves calls. None when the catalog cannot tell: judged by name."""


class StaticCatalog:
    """A catalog held in memory, for doctests and pure-engine tests.

    >>> cat = StaticCatalog([TableInfo("public", "t", (Column("a", "int"),), ("a",))])
    >>> cat.lookup(None, "t").primary_key
    ('a',)
    """

    def __init__(self, tables: list[TableInfo], default_schema: str = "public") -> None:
        self._tables = {(t.schema, t.name): t for t in tables}
        self._default_schema = default_schema

    def lookup(self, schema: str | None, name: str) -> TableInfo | None:
        return self._tables.get((schema or self._default_schema, name))

    def function_volatilities(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, str | None]:
        return dict.fromkeys(calls)  # holds no functions: calls are judged by name

    def set_returning(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        return dict.fromkeys(calls)

    def aggregates(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        return dict.fromkeys(calls)


def views_digest(tables: Iterable[TableInfo], functions: Iterable[str] = ()) -> str:
    """A hash of the views among `tables`, names and bodies, and of the user `functions` the query
    calls, as their definitions ("" when there are none). A view or function redefined changes what
    a query means without changing its text."""
    bodies = sorted(
        f"{t.qualified}\n{' '.join((t.view_sql or '').split())}" for t in tables if t.kind == "view"
    ) + sorted(set(functions))
    return hashlib.sha256("\n\n".join(bodies).encode()).hexdigest() if bodies else ""
