"""Sideways restriction: a term that joins a grouped subquery on a group key to a change set reads
only the groups that change set can reach.

A decorrelated subquery (``l_quantity < (SELECT avg(...) WHERE l_partkey = p_partkey)``) becomes a
grouped derived item joined on its key. No engine pushes a join key into a GROUP BY, so a term
``Δpart ⋈ lineitem ⋈ avg_per_part`` would compute the average of every part to keep those of the few
parts in Δpart. The term's own equalities say which groups can survive: the restriction is implied by
the term, so adding it to the subquery's input changes no row of the term. A subquery correlated to
a term's rows (EXISTS, IN, a partner count) is rendered knowing that term (`term_from`'s `outer`), so
``Δsupplier ⋉ (partsupp ⋈ qty_per_part_and_supplier)`` reads the quantities of the changed suppliers
only; rows a rule computed from the batch (`Computed`, e.g. changed partners) narrow like a change set.

>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.plan.nodes import Aggregate, Derived, Output, Scan
>>> from dbt_ivm.delta.terms import Read, Term
>>> part = Scan(0, "part", TableInfo("public", "part", ()))
>>> lineitem = Scan(1, "lineitem", TableInfo("public", "lineitem", ()))
>>> grouped = Aggregate(Scan(3, "li", TableInfo("public", "lineitem", ())),
...     (exp.column("l_partkey", "li"),), (), (Output("k", exp.column("__ivm_g0")),), ())
>>> avg = Derived(2, "_u_0", grouped)
>>> term = Term((Read(part, "delta"), Read(lineitem, "current"), Read(avg, "current")),
...     predicates=(exp.condition("part.p_partkey = lineitem.l_partkey AND _u_0.k = lineitem.l_partkey"),))
>>> found = reachable_groups(term, term.reads[2])
>>> [r.item.alias for r in found.path], found.keys
(['part'], ((0, 'p_partkey'),))

A table the term filters and joins on the same key narrows it further: a change to lineitem reaches
the average of its part only if that part passes the query's filters on part.

>>> term = Term((Read(part, "current"), Read(lineitem, "delta"), Read(avg, "current")),
...     predicates=(exp.condition("part.p_partkey = lineitem.l_partkey AND _u_0.k = part.p_partkey "
...         "AND part.p_brand = 'Brand#23'"),))
>>> found = reachable_groups(term, term.reads[2])
>>> [r.item.alias for r in found.path], found.keys, [link.sql() for link in found.links]
(['lineitem', 'part'], ((0, 'p_partkey'),), ['lineitem.l_partkey = part.p_partkey', "part.p_brand = 'Brand#23'"])

The averages' own change (the batch's parts, recomputed before and after) is narrowed the same way:

>>> term = Term((Read(part, "current"), Read(lineitem, "current"), Read(avg, "delta")),
...     predicates=term.predicates)
>>> found = reachable_groups(term, term.reads[2])
>>> [r.item.alias for r in found.path], found.keys
(['part'], ((0, 'p_partkey'),))

A change set may reach the groups through a table: a change to nation reaches the quantities per
supplier through the suppliers of that nation.

>>> nation, supplier = Scan(4, "n", TableInfo("public", "nation", ())), Scan(5, "s", TableInfo("public", "supplier", ()))
>>> per_supplier = Derived(6, "q", Aggregate(Scan(7, "li", TableInfo("public", "lineitem", ())),
...     (exp.column("l_suppkey", "li"),), (), (Output("k", exp.column("__ivm_g0")),), ()))
>>> term = Term((Read(nation, "delta"), Read(supplier, "current"), Read(per_supplier, "current")),
...     predicates=(exp.condition("n.n_nationkey = s.s_nationkey AND q.k = s.s_suppkey"),))
>>> found = reachable_groups(term, term.reads[2])
>>> [r.item.alias for r in found.path], found.keys
(['n', 's'], ((0, 's_suppkey'),))
>>> restriction(found, per_supplier.plan, lambda r, alias: exp.to_table(r.item.table.name).as_(alias)).sql()
'EXISTS(SELECT 1 FROM nation AS __ivm_reach CROSS JOIN supplier AS __ivm_reach1 WHERE "__ivm_reach"."n_nationkey" = "__ivm_reach1"."s_nationkey" AND "__ivm_reach1"."s_suppkey" = li.l_suppkey)'

Another subquery's change (its pinned rows, few) narrows it too: a change to the orders per customer
reaches only those customers' payments (jaffle_shop's `customers`: 285 → 76 ms at 200,000 orders).

>>> def per_customer(n, alias, table):
...     grouped = Aggregate(Scan(n + 1, table, TableInfo("public", table, ())),
...         (exp.column("customer_id", table),), (), (Output("customer_id", exp.column("__ivm_g0")),), ())
...     return Derived(n, alias, grouped)
>>> orders, payments = per_customer(8, "o", "orders"), per_customer(10, "p", "payments")
>>> customers = Scan(12, "c", TableInfo("public", "customers", ()))
>>> term = Term((Read(customers, "current"), Read(orders, "delta"), Read(payments, "current")),
...     predicates=(exp.condition("c.id = o.customer_id AND c.id = p.customer_id"),))
>>> found = reachable_groups(term, term.reads[2])
>>> [r.item.alias for r in found.path], found.keys
(['o'], ((0, 'customer_id'),))
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from dbt_ivm.plan.aggregation import group_placeholder
from dbt_ivm.plan.nodes import Aggregate, Derived

if TYPE_CHECKING:
    from dbt_ivm.delta.terms import Read, Term


# The longest chain of reads a restriction joins: a change set and two tables (a change to nation
# reaches lineitem's groups by supplier through supplier); longer ones cost more than they save.
MAX_PATH = 3


@dataclass(frozen=True)
class Reachable:
    """The groups of a derived aggregate a term can join: `path` starts at rows from the batch, each
    next read joined to the one before by `links` (over the reads' aliases), and a group is kept when
    its key `i` equals column `name` of the path's last read, for each (i, name) in `keys`."""

    path: tuple[Read, ...]
    links: tuple[exp.Expr, ...]  # and the term's own conditions on a single read of the path
    keys: tuple[tuple[int, str], ...]


def reachable_groups(term: Term, read: Read) -> Reachable | None:
    """How `term` restricts the groups of `read` (a grouped derived item read whole), or None: the
    shortest chain of equalities from one of the term's batch reads, through base tables, to a group
    key (the most keys at the shortest length)."""
    item = read.item
    if read.mode not in ("current", "before", "delta") or not isinstance(item, Derived):
        return None
    plan = item.plan
    if not isinstance(plan, Aggregate) or not plan.group_by:
        return None
    classes = _equal_columns(term.predicates)
    aliases = [r.item.alias for r in term.reads]
    # A subquery may reuse an outer alias: such a name cannot say which read a column belongs to.
    usable = {
        r.item.alias: r
        for r in term.reads
        if r is not read
        and r.mode != "null"
        and (not isinstance(r.item, Derived) or r.mode == "delta")  # a subquery's change: few rows
        and aliases.count(r.item.alias) == 1
    }
    if item.alias not in aliases or aliases.count(item.alias) != 1:
        return None
    placeholders = {group_placeholder(i): i for i in range(len(plan.group_by))}
    groups = [
        (i, o.name) for o in plan.outputs if (i := _plain_group(o.expression, placeholders)) is not None
    ]
    if read.mode == "delta":  # the item's own change: only the term's filtered tables narrow it
        return _through_filtered(None, term, classes, usable, (item.alias, groups))
    paths: list[tuple[str, ...]] = [(alias,) for alias, r in usable.items() if r.from_batch]
    seen = {path[0] for path in paths}
    for _ in range(MAX_PATH):
        best: Reachable | None = None
        for path in paths:
            keys = _keys(classes, item.alias, groups, path[-1])
            if keys and (best is None or len(keys) > len(best.keys)):
                links = _links(classes, path) + _filters(term.predicates, path)
                best = Reachable(tuple(usable[a] for a in path), links, keys)
        if best is not None:
            return _through_filtered(best, term, classes, usable, (item.alias, groups))
        longer = []
        for path in paths:
            for alias in usable:
                if alias not in seen and _linked(classes, path[-1], alias):
                    seen.add(alias)
                    longer.append((*path, alias))
        paths = longer
    return None


def _through_filtered(
    found: Reachable | None,
    term: Term,
    classes: list[set[tuple[str, str]]],
    usable: dict[str, Read],
    grouped: tuple[str, list[tuple[int, str]]],
) -> Reachable | None:
    """`found` (None: nothing yet) continued through the term's tables that it filters and joins on
    the same group keys: a change to lineitem reaches the average of its part only when that part
    passes the query's filters on part, so Δlineitem's thousands of parts shrink to the few the term
    keeps. A grouped item's own change is narrowed by such tables alone."""
    path = [] if found is None else [r.item.alias for r in found.path]
    wanted = set() if found is None else {index for index, _ in found.keys}
    for alias in sorted(usable):
        if len(path) >= MAX_PATH or alias in path or not _filters(term.predicates, (alias,)):
            continue
        keys = _keys(classes, *grouped, alias)
        linked = not path or _linked(classes, path[-1], alias)
        if keys and {index for index, _ in keys} >= wanted and linked:
            wanted = {index for index, _ in keys}
            path.append(alias)
            found = Reachable(
                tuple(usable[a] for a in path),
                _links(classes, tuple(path)) + _filters(term.predicates, tuple(path)),
                keys,
            )
    return found


REACH = "__ivm_reach"  # the path's first read's alias inside the restriction (then __ivm_reach1, …)


def restriction(found: Reachable, plan: Aggregate, relation: Callable[[Read, str], exp.Expr]) -> exp.Exists:
    """The filter on `plan`'s input rows keeping the reachable groups (`relation`: what a read of the
    path stands for, under a given alias)."""
    names = {r.item.alias: REACH + (str(i) if i else "") for i, r in enumerate(found.path)}

    def renamed(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.table in names:
            return exp.column(node.name, names[node.table], quoted=True)
        return node

    last = names[found.path[-1].item.alias]
    keys = [
        exp.EQ(this=exp.column(name, last, quoted=True), expression=plan.group_by[index].copy())
        for index, name in found.keys
    ]
    query = exp.select("1").from_(relation(found.path[0], names[found.path[0].item.alias]))
    for read in found.path[1:]:
        query = query.join(relation(read, names[read.item.alias]), join_type="cross")
    links = [link.transform(renamed) for link in found.links]
    return exp.Exists(this=query.where(exp.and_(*links, *keys)))


def _keys(
    classes: list[set[tuple[str, str]]], grouped: str, groups: list[tuple[int, str]], alias: str
) -> tuple[tuple[int, str], ...]:
    """(group key index, column of `alias` equal to it), each key once."""
    keys: list[tuple[int, str]] = []
    for index, output in groups:
        partner = _partner(classes, (grouped, output), alias)
        if partner is not None and index not in {k for k, _ in keys}:
            keys.append((index, partner))
    return tuple(keys)


def _linked(classes: list[set[tuple[str, str]]], a: str, b: str) -> bool:
    return any({t for t, _ in members} >= {a, b} for members in classes)


def _links(classes: list[set[tuple[str, str]]], path: tuple[str, ...]) -> tuple[exp.Expr, ...]:
    """One equality per class joining each read of `path` to the one before it."""
    links: list[exp.Expr] = []
    for before, after in itertools.pairwise(path):
        for members in classes:
            left = next((c for t, c in sorted(members) if t == before), None)
            right = next((c for t, c in sorted(members) if t == after), None)
            if left is not None and right is not None:
                links.append(exp.EQ(this=exp.column(left, before), expression=exp.column(right, after)))
    return tuple(links)


def _filters(predicates: tuple[exp.Expr, ...], path: tuple[str, ...]) -> tuple[exp.Expr, ...]:
    """The term's plain conditions on one read of `path` (a change to a nation the query filters out
    reaches no group)."""
    kept: list[exp.Expr] = []
    for conjunct in (c for p in predicates for c in _conjuncts(p)):
        tables = {c.table for c in conjunct.find_all(exp.Column)}
        if len(tables) == 1 and tables <= set(path) and conjunct.find(exp.Query, exp.Subquery) is None:
            kept.append(conjunct.copy())
    return tuple(kept)


def _plain_group(expression: exp.Expr, placeholders: dict[str, int]) -> int | None:
    if isinstance(expression, exp.Column) and not expression.table:
        return placeholders.get(expression.name)
    return None


def _partner(classes: list[set[tuple[str, str]]], column: tuple[str, str], alias: str) -> str | None:
    """A column of `alias` known equal to `column` (by the term's `=` predicates)."""
    for members in classes:
        if column in members:
            return next((name for table, name in sorted(members) if table == alias), None)
    return None


def _equal_columns(predicates: tuple[exp.Expr, ...]) -> list[set[tuple[str, str]]]:
    """Classes of (table, column) that the conjunction of `predicates` makes equal (NULLs never are)."""
    classes: list[set[tuple[str, str]]] = []
    for conjunct in (c for p in predicates for c in _conjuncts(p)):
        if not (
            isinstance(conjunct, exp.EQ)
            and isinstance(conjunct.this, exp.Column)
            and isinstance(conjunct.expression, exp.Column)
            and conjunct.this.table
            and conjunct.expression.table
        ):
            continue
        pair = {
            (conjunct.this.table, conjunct.this.name),
            (conjunct.expression.table, conjunct.expression.name),
        }
        joined = [c for c in classes if c & pair]
        merged = set(pair).union(*joined)
        classes = [c for c in classes if not c & pair] + [merged]
    return classes


def _conjuncts(predicate: exp.Expr) -> Iterator[exp.Expr]:
    if isinstance(predicate, exp.Paren):
        yield from _conjuncts(predicate.this)
    elif isinstance(predicate, exp.And):
        yield from _conjuncts(predicate.this)
        yield from _conjuncts(predicate.expression)
    else:
        yield predicate
