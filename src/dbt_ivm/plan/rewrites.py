"""Rewrites of one qualified SELECT into forms the planner maps onto operators it has: grouping sets
as a UNION ALL of plain aggregates, DISTINCT ON as a window, and window functions lifted over a
subquery that holds everything else. Each is a pure function over a sqlglot tree.
"""

from __future__ import annotations

import itertools

from sqlglot import exp

MAX_CUBE_COLUMNS = 8  # 2**8 aggregates per CUBE is already more than a report shows
WINDOW_INPUT = "__ivm_win"
RANK = "__ivm_rn"


def grouping_sets(select: exp.Select) -> list[list[exp.Expr]] | None:
    """The grouping sets a GROUP BY with ROLLUP, CUBE or GROUPING SETS stands for (None: plain).

    >>> import sqlglot
    >>> sets = grouping_sets(sqlglot.parse_one("SELECT 1 FROM t GROUP BY a, ROLLUP (b, c)"))
    >>> [[k.sql() for k in s] for s in sets]
    [['a', 'b', 'c'], ['a', 'b'], ['a']]
    """
    group = select.args.get("group")
    if group is None:
        return None
    plain = [e for e in group.expressions if not isinstance(e, exp.GroupingSets | exp.Cube | exp.Rollup)]
    factors = [
        _sets_of(e, plain)
        for e in group.expressions
        if isinstance(e, exp.GroupingSets | exp.Cube | exp.Rollup)
    ]
    for key, kind in (("grouping_sets", exp.GroupingSets), ("cube", exp.Cube), ("rollup", exp.Rollup)):
        for node in group.args.get(key) or []:
            factors.append(_sets_of(node if isinstance(node, kind) else kind(expressions=[node]), plain))
            if not node.expressions:  # `GROUP BY a, b WITH ROLLUP`: over the plain keys
                plain = []
    if not factors:
        return None
    sets = []
    for combination in itertools.product(*factors):
        keys: list[exp.Expr] = []
        for key in [*plain, *itertools.chain.from_iterable(combination)]:
            if key not in keys:
                keys.append(key)
        sets.append(keys)
    return sets


def _sets_of(node: exp.Expr, plain: list[exp.Expr]) -> list[list[exp.Expr]]:
    columns = list(node.expressions) or list(plain)
    if isinstance(node, exp.Rollup):
        return [columns[:n] for n in range(len(columns), -1, -1)]
    if isinstance(node, exp.Cube):
        if len(columns) > MAX_CUBE_COLUMNS:
            raise ValueError(f"CUBE over {len(columns)} columns")
        return [list(c) for n in range(len(columns), -1, -1) for c in itertools.combinations(columns, n)]
    sets: list[list[exp.Expr]] = []
    for item in node.expressions:
        if isinstance(item, exp.Cube | exp.Rollup):
            sets.extend(_sets_of(item, []))
        elif isinstance(item, exp.Tuple):
            sets.append(list(item.expressions))
        else:
            sets.append([item.unnest()])
    return sets


def as_union_of_groupings(select: exp.Select, sets: list[list[exp.Expr]]) -> exp.Query:
    """One aggregate per grouping set, unioned: a key outside the set reads NULL and GROUPING(…)
    its bit mask, as the grouped query computes them.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT a, b, SUM(x) AS s, GROUPING(b) AS g FROM t GROUP BY ROLLUP (a, b)")
    >>> print(as_union_of_groupings(q, grouping_sets(q)).sql())
    SELECT a, b, SUM(x) AS s, 0 AS g FROM t GROUP BY a, b UNION ALL SELECT a, NULL AS "b", SUM(x) AS s, 1 AS g FROM t GROUP BY a UNION ALL SELECT NULL AS "a", NULL AS "b", SUM(x) AS s, 1 AS g FROM t
    """
    every: list[exp.Expr] = []
    for key in (k for s in sets for k in s):
        if key not in every:
            every.append(key)
    branches: list[exp.Select] = []
    for keys in sets:
        absent = [k for k in every if k not in keys]
        branch = select.copy()
        branch.set("order", None)
        branch.set("group", exp.Group(expressions=[k.copy() for k in keys]) if keys else None)
        columns: list[exp.Expr] = []
        for projection in branch.selects:
            value = _grouped(projection.unalias(), keys, absent, every)
            if isinstance(projection, exp.Alias):
                projection.set("this", value)
                columns.append(projection)
            else:
                columns.append(
                    value
                    if value.alias_or_name == projection.alias_or_name
                    else exp.alias_(value, projection.alias_or_name, quoted=True)
                )
        branch.set("expressions", columns)
        having = branch.args.get("having")
        if having is not None:
            having.set("this", _grouped(having.this, keys, absent, every))
        branches.append(branch)
    union: exp.Query = branches[0]
    for branch in branches[1:]:
        union = exp.union(union, branch, distinct=False, copy=False)
    return union


def _grouped(
    expression: exp.Expr, keys: list[exp.Expr], absent: list[exp.Expr], every: list[exp.Expr]
) -> exp.Expr:
    """`expression` in the branch grouped by `keys`: absent keys (outside aggregate calls) NULL,
    GROUPING(k1, k2 …) the bits of the absent ones (k1 the highest); Spark's GROUPING_ID() without
    arguments is over `every` grouping key."""

    def rewrite(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Grouping | exp.GroupingId):
            mask = 0
            for argument in node.expressions or every:
                mask = mask * 2 + (0 if argument in keys else 1)
            return exp.Literal.number(mask)
        if node in absent and not node.find_ancestor(exp.AggFunc):
            # Typed where the key's type is known: a bare NULL in a subquery would be text.
            if node.type is None or node.type.is_type(exp.DataType.Type.UNKNOWN):
                return exp.Null()
            return exp.cast(exp.Null(), node.type.copy())
        return node

    return expression.copy().transform(rewrite)


def distinct_on_as_window(select: exp.Select) -> exp.Select:
    """`SELECT DISTINCT ON (k) … ORDER BY k, o` as the first row per k by o: a ROW_NUMBER over the
    same ORDER BY, filtered to 1. The caller checks there is an ORDER BY beyond the keys.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT DISTINCT ON (t.k) t.k AS k, t.v AS v FROM t ORDER BY t.k, t.ts DESC")
    >>> print(distinct_on_as_window(q).sql())
    SELECT "__ivm_don"."k" AS "k", "__ivm_don"."v" AS "v" FROM (SELECT t.k AS k, t.v AS v, ROW_NUMBER() OVER (PARTITION BY t.k ORDER BY t.k, t.ts DESC) AS "__ivm_rn" FROM t) AS "__ivm_don" WHERE "__ivm_don"."__ivm_rn" = 1
    """
    distinct = select.args["distinct"]
    keys = distinct.args["on"]
    keys = list(keys.expressions) if isinstance(keys, exp.Tuple) else [keys]
    by_alias = {s.alias_or_name: s.unalias() for s in select.selects}

    def resolved(node: exp.Expr) -> exp.Expr:
        # ORDER BY and DISTINCT ON may name an output: the window sees the input's columns only.
        if isinstance(node, exp.Column) and not node.table and node.name in by_alias:
            return by_alias[node.name].copy()
        return node.copy()

    order = [o.copy() for o in select.args["order"].expressions]
    for ordered in order:
        ordered.set("this", resolved(ordered.this))
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[resolved(k) for k in keys],
        order=exp.Order(expressions=order),
    )
    inner = select.copy()
    for clause in ("distinct", "order", "limit", "offset"):
        inner.set(clause, None)
    inner.select(exp.alias_(rank, RANK, quoted=True), copy=False)
    alias = "__ivm_don"
    names = [s.alias_or_name for s in select.selects]
    outer = exp.select(*[exp.alias_(exp.column(n, alias, quoted=True), n, quoted=True) for n in names])
    outer = outer.from_(
        exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    )
    return outer.where(exp.column(RANK, alias, quoted=True).eq(1))


def lifted_windows(select: exp.Select, grouped: bool) -> tuple[exp.Select, list[exp.Expr], tuple[str, ...]]:
    """A SELECT with window functions as (the SELECT without them, which exposes every value they
    and the other outputs read as ``__ivm_w<i>``; the outputs over those; the exposed names every
    window partitions by). In a `grouped` SELECT the aggregate calls are computed below the windows.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT t.k AS k, RANK() OVER (PARTITION BY t.k ORDER BY t.v) AS r FROM t WHERE t.v > 0")
    >>> inner, outputs, partition = lifted_windows(q, grouped=False)
    >>> print(inner.sql()); print([o.sql() for o in outputs], partition)
    SELECT t.k AS "__ivm_w0", t.v AS "__ivm_w1" FROM t WHERE t.v > 0
    ['"__ivm_w0"', 'RANK() OVER (PARTITION BY "__ivm_w0" ORDER BY "__ivm_w1")'] ('__ivm_w0',)
    """
    select = _named_windows_inlined(select)
    exposed: list[exp.Expr] = []

    def expose(node: exp.Expr) -> exp.Column:
        if node not in exposed:
            exposed.append(node.copy())
        return exp.column(f"__ivm_w{exposed.index(node)}", quoted=True)

    windows = [w for s in select.selects for w in s.find_all(exp.Window)]
    partitions = [{expose(p).name for p in w.args.get("partition_by") or []} for w in windows]
    common = set.intersection(*partitions) if partitions else set()

    def lift(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name.startswith("__ivm_w"):
            return node  # already exposed
        if isinstance(node, exp.Window):  # partitions whole, so that a batch's partitions are named
            node.set("partition_by", [expose(p) for p in node.args.get("partition_by") or []] or None)
            return node
        is_call = isinstance(node, exp.AggFunc) and not is_window_function(node)
        if isinstance(node, exp.Column) or (grouped and is_call):
            return expose(node)
        return node

    outputs = [s.unalias().transform(lift) for s in select.selects]
    inner = select.copy()
    for clause in ("distinct", "order", "limit", "offset", "qualify", "windows"):
        inner.set(clause, None)
    inner.set(
        "expressions",
        [exp.alias_(e, f"__ivm_w{i}", quoted=True) for i, e in enumerate(exposed)]
        or [exp.alias_(exp.Literal.number(1), "__ivm_w0", quoted=True)],
    )
    return inner, outputs, tuple(n for n in (f"__ivm_w{i}" for i in range(len(exposed))) if n in common)


# What may stand between a window and its function: `first_value(v) IGNORE NULLS OVER (…)`,
# `count(*) FILTER (WHERE …) OVER (…)`.
WINDOW_FUNCTION_WRAPPERS = (exp.IgnoreNulls, exp.RespectNulls, exp.Filter)


def is_window_function(node: exp.Expr) -> bool:
    """Whether `node` is the function a window computes (an aggregate call is one when it is)."""
    while isinstance(node.parent, WINDOW_FUNCTION_WRAPPERS) and node.arg_key == "this":
        node = node.parent
    return isinstance(node.parent, exp.Window) and node.arg_key == "this"


def _named_windows_inlined(select: exp.Select) -> exp.Select:
    """`OVER w` and `OVER (w ORDER BY …)` with the `WINDOW w AS (…)` definition written out."""
    definitions = {d.name: d for d in select.args.get("windows") or []}
    if not definitions:
        return select
    select = select.copy()
    for window in select.find_all(exp.Window):
        name = window.args.get("alias")
        if window.parent is None or not isinstance(name, exp.Identifier) or name.name not in definitions:
            continue
        definition = definitions[name.name]
        for clause in ("partition_by", "order", "spec"):
            if not window.args.get(clause) and definition.args.get(clause):
                window.set(
                    clause,
                    definition.args[clause].copy()
                    if clause != "partition_by"
                    else [p.copy() for p in definition.args[clause]],
                )
        window.set("alias", None)
    select.set("windows", None)
    return select
