"""Planner pass: source columns named like the engine's own columns are read under internal names.

A source column ``__ivm_weight`` would meet the weight column of its change relation in one select
list. The sources are bound through relations that carry such columns as ``__ivm_c<n>``
(`dbt_ivm.reserved`), so the query must say the same.

>>> import sqlglot
>>> from dbt_ivm.catalog import Column, TableInfo
>>> t = TableInfo("public", "t", (Column("id", "int"), Column("__ivm_weight", "int")))
>>> tree = sqlglot.parse_one('SELECT "o"."id", "o"."__ivm_weight" AS w FROM "public"."t" AS "o"')
>>> rename_reserved_columns(tree, {"public.t": t}).sql()
'SELECT "o"."id", "o"."__ivm_c2" AS w FROM "public"."t" AS "o"'
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.catalog import TableInfo, qualified_name
from dbt_ivm.reserved import internal_column, is_reserved, needs_renaming


def rename_reserved_columns(tree: exp.Expr, tables: dict[str, TableInfo]) -> exp.Expr:
    """Rename qualified references to reserved-named source columns, in place; returns `tree`."""
    by_alias: dict[str, TableInfo] = {}
    for table in tree.find_all(exp.Table):
        info = tables.get(qualified_name(table.db, table.name))
        if info is not None and needs_renaming(info):
            by_alias[table.alias_or_name] = info
    if not by_alias:
        return tree
    for column in list(tree.find_all(exp.Column)):
        info = by_alias.get(column.table)
        if info is None or not is_reserved(column.name):
            continue
        # Spark folds case: match the catalog's spelling without regard to it.
        spelled = next((c for c in info.column_names() if c.lower() == column.name.lower()), None)
        if spelled is not None:
            column.set("this", exp.to_identifier(internal_column(info, spelled), quoted=True))
    return tree
