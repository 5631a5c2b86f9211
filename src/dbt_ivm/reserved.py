"""Names the engine keeps for itself, and how user names are kept apart from them.

Generated SQL puts a source's columns next to bookkeeping columns (a change's weight, its writer's
transaction id) in one relation. Every bookkeeping name starts with ``__ivm_``; a source column
whose name starts with it too (say ``__ivm_weight``) is carried under a positional name,
``__ivm_c<n>`` for the n-th column, inside the engine. That name cannot clash with ours (none of
ours is ``__ivm_c`` followed by digits only) nor with another user column (those do not start with
``__ivm_``). The model's own query is rewritten to the internal names, and the sources are read
through a relation that renames them.

>>> from dbt_ivm.catalog import Column, TableInfo
>>> t = TableInfo("public", "t", (Column("id", "int"), Column("__ivm_weight", "int")))
>>> internal_columns(t)
['id', '__ivm_c2']
>>> source_relation(t).sql("postgres")
'(SELECT "id", "__ivm_weight" AS "__ivm_c2" FROM "public"."t")'
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlglot import exp

from dbt_ivm.catalog import TableInfo
from dbt_ivm.sqltext import HIDDEN_PREFIX

# Why a stream table is rebuilt when only its `__ivm_*` columns differ from the query's layout.
BOOKKEEPING_DIFFERS = (
    "its bookkeeping columns differ from those this version of dbt-ivm keeps for the query (a source's "
    "key changed, or an earlier dbt-ivm built it)"
)


def is_reserved(name: str) -> bool:
    """Does a user name start like the engine's own names? (Spark folds case: compare folded.)"""
    return name.lower().startswith(HIDDEN_PREFIX)


def internal_column(table: TableInfo, column: str) -> str:
    """The name the engine uses for `column` of `table`."""
    return internal_name(table.column_names(), column)


def internal_name(names: Sequence[str], column: str) -> str:
    """The name the engine uses for `column` of a table whose columns are `names`, in table order.

    >>> internal_name(["id", "__ivm_weight"], "__ivm_weight"), internal_name(["id"], "id")
    ('__ivm_c2', 'id')
    """
    if not is_reserved(column):
        return column
    return f"{HIDDEN_PREFIX}c{list(names).index(column) + 1}"


def internal_columns(table: TableInfo, only: Collection[str] | None = None) -> list[str]:
    """The internal names of the table's columns (`only`: of those columns only), in table order."""
    return [internal_column(table, c) for c in table.column_names() if only is None or c in only]


def needs_renaming(table: TableInfo) -> bool:
    return any(is_reserved(c) for c in table.column_names())


def renamed_select(table: TableInfo, only: Collection[str] | None = None) -> list[exp.Expr]:
    """A select list of the table's columns (`only`: of those columns only) under their internal names."""
    columns: list[exp.Expr] = []
    for name in table.column_names():
        if only is not None and name not in only:
            continue
        internal = internal_column(table, name)
        column = exp.column(name, quoted=True)
        columns.append(column if name == internal else exp.alias_(column, internal, quoted=True))
    return columns


def table_of(table: TableInfo) -> exp.Table:
    """The table itself, by its quoted name."""
    return exp.table_(table.name, table.schema, quoted=True)


def source_relation(table: TableInfo) -> exp.Expr:
    """The table's current rows under internal column names, to alias in a FROM clause (the table
    itself when no column needs renaming)."""
    if not needs_renaming(table):
        return table_of(table)
    return exp.Subquery(this=exp.select(*renamed_select(table)).from_(table_of(table)))
