"""Planner passes: user names that look like the engine's own are kept apart from them.

Source columns named like the engine's own columns are read under internal names.

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
from sqlglot.optimizer.scope import Scope, traverse_scope

from dbt_ivm.catalog import TableInfo, qualified_name
from dbt_ivm.reserved import internal_column, is_reserved, needs_renaming
from dbt_ivm.sqltext import HIDDEN_PREFIX

USER_PREFIX = "user_"


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


def rename_reserved_names(tree: exp.Expr) -> exp.Expr:
    """`rename_reserved_aliases` then `rename_reserved_outputs`, sharing the fresh names; nothing
    when no identifier of the (qualified) tree is spelled like the engine's, as in most queries."""
    if not any(is_reserved(i.name) for i in tree.find_all(exp.Identifier)):
        return tree
    fresh = _FreshNames(tree)
    return rename_reserved_outputs(rename_reserved_aliases(tree, fresh), fresh)


def rename_reserved_aliases(tree: exp.Expr, fresh: _FreshNames | None = None) -> exp.Expr:
    """Give table and subquery aliases spelled like the engine's own (``__ivm_reach``) other names,
    in place; returns `tree` (qualified: every column names its source's alias).

    Delta SQL wraps a query's tables in relations aliased ``__ivm_…``; a user alias spelled the same
    would capture the engine's column references (a correlated EXISTS turned uncorrelated).
    Each such alias gets one fresh name, used by no other alias, table or column in the tree.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one('SELECT "__ivm_reach"."g" FROM "t" AS "__ivm_reach"')
    >>> rename_reserved_aliases(tree).sql()
    'SELECT "user_reach"."g" FROM "t" AS "user_reach"'
    """
    fresh = fresh or _FreshNames(tree)
    for alias in tree.find_all(exp.TableAlias):
        if is_reserved(alias.name):
            alias.set("this", exp.to_identifier(fresh.of(alias.name), quoted=True))
    for column in tree.find_all(exp.Column):
        if column.table in fresh.given:
            column.set("table", exp.to_identifier(fresh.given[column.table], quoted=True))
    return tree


def rename_reserved_outputs(tree: exp.Expr, fresh: _FreshNames | None = None) -> exp.Expr:
    """Give a subquery's output columns spelled like the engine's own (``__ivm_weight``) other names,
    in place, and the references to them; returns `tree` (qualified).

    The delta of a subquery carries its outputs next to the engine's weight column: an output
    ``__ivm_weight`` would be read as the weight. The query's own outputs are left alone (they
    name the stream table's columns, where such names are refused).

    >>> import sqlglot
    >>> tree = sqlglot.parse_one('SELECT "a"."__ivm_weight" AS "w" FROM '
    ...     '(SELECT SUM("t"."v") AS "__ivm_weight" FROM "t" AS "t") AS "a"')
    >>> rename_reserved_outputs(tree).sql()
    'SELECT "a"."user_weight" AS "w" FROM (SELECT SUM("t"."v") AS "user_weight" FROM "t" AS "t") AS "a"'
    """
    top: set[int] = set()  # the query's own outputs: its SELECT, or its set operations' leftmost one
    node: exp.Expr = tree
    while True:
        top.add(id(node))
        if not isinstance(node, exp.SetOperation | exp.Subquery):
            break
        node = node.this
    fresh = fresh or _FreshNames(tree)
    scopes = traverse_scope(tree)
    # All names first: a set operation is named by its leftmost SELECT, renamed as a scope of its own.
    renamed: dict[int, dict[str, str]] = {}
    for scope in scopes:
        if id(scope.expression) in top or not isinstance(scope.expression, exp.Query):
            continue
        reserved = [
            s.alias for s in scope.expression.selects if isinstance(s, exp.Alias) and is_reserved(s.alias)
        ]
        if reserved:
            renamed[id(scope.expression)] = {name: fresh.of(name) for name in reserved}
    if not renamed:
        return tree
    for scope in scopes:
        names = renamed.get(id(scope.expression), {})
        if isinstance(scope.expression, exp.Select):
            for select in scope.expression.selects:
                if isinstance(select, exp.Alias) and select.alias in names:
                    select.set("alias", exp.to_identifier(names[select.alias], quoted=True))
    for scope in scopes:
        for column in scope.columns:
            source = _declaring_source(scope, column.table)
            names = renamed.get(id(source.expression), {}) if isinstance(source, Scope) else {}
            if column.name in names:
                column.set("this", exp.to_identifier(names[column.name], quoted=True))
    return tree


def _declaring_source(scope: Scope, alias: str) -> object:
    """The source `alias` names where `scope` reads it: its own, or an enclosing scope's."""
    found: Scope | None = scope
    while found is not None:
        if alias in found.sources:
            return found.sources[alias]
        found = found.parent
    return None


class _FreshNames:
    """One new name per reserved name, ``user_`` and its rest, taken by no identifier of `tree`."""

    def __init__(self, tree: exp.Expr) -> None:
        self.taken = {i.name.lower() for i in tree.find_all(exp.Identifier)}
        self.given: dict[str, str] = {}

    def of(self, name: str) -> str:
        if name not in self.given:
            base = USER_PREFIX + name[len(HIDDEN_PREFIX) :]
            candidate, n = base, 1
            while candidate.lower() in self.taken:
                n += 1
                candidate = f"{base}_{n}"
            self.taken.add(candidate.lower())
            self.given[name] = candidate
        return self.given[name]
