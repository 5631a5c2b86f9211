"""Planner rewrites: joins in parentheses.

PostgreSQL writes a view's joins in parentheses (pg_get_viewdef), and users nest joins on the right
of others. Where the parentheses change nothing (inner joins all the way down) the joins are lifted
into one chain before qualify (`flatten_join_parentheses`). Elsewhere they change the rows:
``a LEFT JOIN (b CROSS JOIN c) ON a.x = b.x`` pads a row of `a` that no `b` matches once, the chain
``a LEFT JOIN b ON a.x = b.x CROSS JOIN c`` once per row of `c`. Those stay, and after qualify become
derived tables projecting the columns the rest of the query reads from them, under names of their
own (`nested_joins_as_subqueries`); the planner maintains them as any subquery in FROM.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from sqlglot import exp

PREFIX = "__ivm_nest"


def flatten_join_parentheses(tree: exp.Expr) -> exp.Expr:
    """`FROM (a JOIN b ON …)` as `FROM a JOIN b ON …`, in place, where that keeps the join's meaning.
    The planner keeps every join condition as a conjunct over all scans, which is what an inner join
    means wherever its parentheses stand.

    >>> import sqlglot
    >>> flatten_join_parentheses(sqlglot.parse_one("SELECT 1 FROM (a JOIN b ON a.x = b.x) JOIN c ON b.y = c.y")).sql()
    'SELECT 1 FROM a JOIN b ON a.x = b.x JOIN c ON b.y = c.y'
    >>> flatten_join_parentheses(sqlglot.parse_one("SELECT 1 FROM a LEFT JOIN (b CROSS JOIN c) ON a.x = b.x")).sql()
    'SELECT 1 FROM a LEFT JOIN (b CROSS JOIN c) ON a.x = b.x'
    """
    for select in list(tree.find_all(exp.Select)):
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            continue
        joins: list[exp.Expr] = []
        from_.set("this", _unparenthesized(from_.this, joins))
        for join in select.args.get("joins") or []:
            lifted: list[exp.Expr] = []
            _lift_if_inner(join, lifted)
            joins.extend([join, *lifted])
        if joins:
            select.set("joins", joins)
    return tree


def nested_joins_as_subqueries(tree: exp.Expr) -> exp.Expr:
    """`tree` with every join in parentheses left in a join (`is_parenthesized`) as a derived table.
    Runs after qualify: every column names its table.

    >>> import sqlglot
    >>> q = sqlglot.parse_one(
    ...     'SELECT "a"."x" AS "x", "c"."y" AS "y" FROM "a" AS "a" LEFT JOIN ("b" AS "b" CROSS JOIN "c" AS "c") '
    ...     'ON "a"."x" = "b"."x"')
    >>> print(nested_joins_as_subqueries(q).sql())
    SELECT "a"."x" AS "x", "__ivm_nest0"."__ivm_nest0_0" AS "y" FROM "a" AS "a" LEFT JOIN (SELECT "c"."y" AS "__ivm_nest0_0", "b"."x" AS "__ivm_nest0_1" FROM "b" AS "b" CROSS JOIN "c" AS "c") AS "__ivm_nest0" ON "a"."x" = "__ivm_nest0"."__ivm_nest0_1"
    """
    counter = itertools.count()
    for select in reversed(list(tree.find_all(exp.Select))):
        _rewrite_select(select, lambda: f"{PREFIX}{next(counter)}")
    return tree


def is_parenthesized(item: exp.Expr) -> bool:
    """A FROM or join item that is a join in parentheses (sqlglot hangs its joins on its first
    table, or on the unaliased parentheses around it)."""
    if isinstance(item, exp.Subquery) and not item.alias:
        return isinstance(item.this, exp.Table | exp.Subquery)
    return isinstance(item, exp.Table) and bool(item.args.get("joins"))


def _is_inner(join: exp.Expr) -> bool:
    return not join.args.get("side") and str(join.args.get("kind") or "").upper() in ("", "INNER", "CROSS")


def _lift_if_inner(join: exp.Expr, lifted: list[exp.Expr]) -> None:
    """Lift the joins of `join`'s parenthesized right side into `lifted` where it and every join
    inside it are inner."""
    if _is_inner(join) and all(_is_inner(j) for j in join.this.find_all(exp.Join)):
        join.set("this", _unparenthesized(join.this, lifted))


def _unparenthesized(item: exp.Expr, lifted: list[exp.Expr]) -> exp.Expr:
    """The first item of a parenthesized join (appending its joins, in order, to `lifted`: those on
    the right of them in parentheses of their own where `_lift_if_inner` leaves them), else `item`.
    Parentheses on the left change nothing: `(a LEFT JOIN b ON …) JOIN c` is `a LEFT JOIN b ON … JOIN c`."""
    if isinstance(item, exp.Subquery) and not item.alias and isinstance(item.this, exp.Table | exp.Subquery):
        first = _unparenthesized(item.this, lifted)
        own = item.args.get("joins") or []
    elif isinstance(item, exp.Table) and item.args.get("joins"):
        first, own = item, item.args["joins"]
    else:
        return item
    item.set("joins", None)
    for join in list(own):
        inner: list[exp.Expr] = []
        _lift_if_inner(join, inner)
        lifted.extend([join, *inner])  # each join before the joins it brought along
    return first


def _rewrite_select(select: exp.Select, fresh: Callable[[], str]) -> None:
    for join in select.args.get("joins") or []:
        if is_parenthesized(join.this):
            _as_subquery(select, join, fresh)


def _as_subquery(select: exp.Select, join: exp.Join, fresh: Callable[[], str]) -> None:
    nest = join.this
    alias = fresh()
    inside = set(_aliases(nest))
    joins: list[exp.Expr] = []
    body = exp.select().from_(_unparenthesized(nest.copy(), joins), copy=False)
    if joins:
        body.set("joins", joins)
    names: dict[tuple[str, str], str] = {}
    for column in _columns_outside(select, nest):
        if column.table in inside:
            key = (column.table, column.name)
            if key not in names:
                names[key] = f"{alias}_{len(names)}"
            column.set("table", exp.to_identifier(alias, quoted=True))
            column.set("this", exp.to_identifier(names[key], quoted=True))
    projections = [
        exp.alias_(exp.column(name, table, quoted=True), new, quoted=True)
        for (table, name), new in names.items()
    ]
    # Nothing read from it (joined for its rows alone): one constant column keeps it a SELECT.
    body.select(*(projections or [exp.alias_(exp.Literal.number(1), f"{alias}_0", quoted=True)]), copy=False)
    _rewrite_select(body, fresh)  # a join in parentheses inside this one
    join.set(
        "this", exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    )


def _aliases(nest: exp.Expr) -> Iterator[str]:
    """The names the nest's own items go by (not those inside its derived tables)."""
    for node in nest.walk(prune=lambda n: isinstance(n, exp.Subquery) and bool(n.alias)):
        if isinstance(node, exp.Table) or (isinstance(node, exp.Subquery) and node.alias):
            yield node.alias_or_name


def _columns_outside(select: exp.Select, nest: exp.Expr) -> list[exp.Column]:
    """The columns of `select` (and of its subqueries, which may be correlated to it) outside
    `nest`, but not those a subquery's own FROM item of the same name shadows."""
    found = []
    for column in select.find_all(exp.Column):
        if not _within(column, nest) and not _shadowed(column, select):
            found.append(column)
    return found


def _shadowed(column: exp.Column, select: exp.Select) -> bool:
    scope = column.find_ancestor(exp.Select)
    while scope is not None and scope is not select:
        if column.table in _own_aliases(scope):
            return True
        scope = scope.find_ancestor(exp.Select)
    return False


def _own_aliases(select: exp.Select) -> set[str]:
    from_ = select.args.get("from_") or select.args.get("from")
    items = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
    names: set[str] = set()
    for item in items:
        names.update(_aliases(item) if is_parenthesized(item) else [item.alias_or_name])
    return names


def _within(node: exp.Expr, ancestor: exp.Expr) -> bool:
    parent: exp.Expr | None = node
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.parent
    return False
