"""Sideways restriction: a term that joins a grouped subquery on a group key to a change set reads
only the groups that change set can reach.

A decorrelated subquery (``l_quantity < (SELECT avg(...) WHERE l_partkey = p_partkey)``) becomes a
grouped derived item joined on its key. No engine pushes a join key into a GROUP BY, so a term
``Δpart ⋈ lineitem ⋈ avg_per_part`` would compute the average of every part to keep those of the few
parts in Δpart. The term's own equalities say which groups can survive: the restriction is implied by
the term, so adding it to the subquery's input changes no row of the term.

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
>>> found.source.item.alias, found.keys
('part', ((0, 'p_partkey'),))
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from dbt_ivm.plan.build import group_placeholder
from dbt_ivm.plan.nodes import Aggregate, Derived

if TYPE_CHECKING:
    from dbt_ivm.delta.terms import Read, Term


@dataclass(frozen=True)
class Reachable:
    """The groups of a derived aggregate a term can join: those whose key `i` equals column `name` of
    a row of `source` (a change set the term reads), for each (i, name) in `keys`."""

    source: Read
    keys: tuple[tuple[int, str], ...]


def reachable_groups(term: Term, read: Read) -> Reachable | None:
    """How `term` restricts the groups of `read` (a grouped derived item read whole), or None."""
    item = read.item
    if read.mode not in ("current", "before") or not isinstance(item, Derived):
        return None
    plan = item.plan
    if not isinstance(plan, Aggregate) or not plan.group_by:
        return None
    classes = _equal_columns(term.predicates)
    changes = {r.item.alias: r for r in term.reads if r.mode == "delta"}
    placeholders = {group_placeholder(i): i for i in range(len(plan.group_by))}
    best: Reachable | None = None
    for alias, source in changes.items():
        keys: list[tuple[int, str]] = []
        for output in plan.outputs:
            index = _plain_group(output.expression, placeholders)
            if index is None:
                continue
            partner = _partner(classes, (item.alias, output.name), alias)
            if partner is not None and index not in {k for k, _ in keys}:
                keys.append((index, partner))
        if keys and (best is None or len(keys) > len(best.keys)):
            best = Reachable(source, tuple(keys))
    return best


REACH = "__ivm_reach"  # the change set's alias inside the restriction


def restriction(found: Reachable, plan: Aggregate, source: exp.Expr) -> exp.Exists:
    """The filter on `plan`'s input rows keeping the reachable groups (`source`: the change set,
    aliased `REACH`)."""
    keys = [
        exp.EQ(this=exp.column(name, REACH, quoted=True), expression=plan.group_by[index].copy())
        for index, name in found.keys
    ]
    return exp.Exists(this=exp.select("1").from_(source).where(exp.and_(*keys)))


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
