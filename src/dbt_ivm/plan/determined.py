"""Which scans of a join the others determine, so that their keys need not identify its rows.

A join row is identified by the primary keys of the rows it came from. When a condition equates a
table's whole primary key with columns of other tables (``o.customer_id = c.id``), each row of the
others meets at most one of its rows: its key adds nothing to the row's identity, and a stream table
need not store it. An order joined to its customer is identified by the order alone.

A condition counts only where it holds for every row it lets through: a WHERE conjunct, an inner
join's ON, or an outer join's ON for the side it pads (a padded row holds NULLs there, still one per
row of the other side); never for the side an outer join keeps. Both columns must have one type, so
equality is the key's own. Determination chains (a line item's order, that order's customer) but not
in a circle: the scans kept must determine all the others.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer_id", "int")), ("id",))
>>> customers = TableInfo("public", "customers", (Column("id", "int"), Column("name", "text")), ("id",))
>>> catalog = StaticCatalog([orders, customers])
>>> def kept(sql):
...     return [s.alias for s in identifying_scans(build_plan(sql, catalog, "st").input)]
>>> kept("SELECT o.id, c.name FROM orders o JOIN customers c ON o.customer_id = c.id")
['o']
>>> kept("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON o.customer_id = c.id")
['o']
>>> kept("SELECT o.id, c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id")
['c', 'o']
>>> kept("SELECT o.id, c.name FROM orders o JOIN customers c ON o.customer_id = c.id OR c.id = 0")
['o', 'c']
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dbt_ivm.plan.nodes import Derived, Filter, Join, Relation, Scan, items_of
from dbt_ivm.reserved import internal_column


@dataclass(frozen=True)
class _Equality:
    """`alias.column = other.column` holding for every row the node it belongs to lets through."""

    alias: str
    column: str
    other: str  # the alias of the item whose column decides this one


def identifying_scans(relation: Relation, shown: frozenset[str] = frozenset()) -> tuple[Scan, ...]:
    """The keyed scans whose primary keys identify `relation`'s rows, in FROM order: every keyed scan
    but those the kept ones determine. `shown`: aliases whose keys the query selects anyway; the
    others are dropped first, as each dropped key is a hidden column less."""
    scans = [i for i in items_of(relation) if isinstance(i, Scan) and i.table.primary_key]
    equalities = _equalities(relation)
    kept = {s.alias for s in scans}
    by_preference = sorted(reversed(scans), key=lambda s: s.alias in shown)
    for scan in by_preference:
        if len(kept) > 1 and _closure(kept - {scan.alias}, scans, equalities) == {s.alias for s in scans}:
            kept.discard(scan.alias)
    return tuple(s for s in scans if s.alias in kept)


def _closure(kept: set[str], scans: list[Scan], equalities: list[_Equality]) -> set[str]:
    """The aliases whose rows `kept` determines, through the equalities, until nothing changes."""
    known = set(kept)
    grew = True
    while grew:
        grew = False
        for scan in scans:
            if scan.alias not in known and all(
                any(e.alias == scan.alias and e.column == pk and e.other in known for e in equalities)
                for pk in (internal_column(scan.table, p) for p in scan.table.primary_key)
            ):
                known.add(scan.alias)
                grew = True
    return known


def _equalities(relation: Relation) -> list[_Equality]:
    """Column equalities between two items that hold for every row `relation` returns, each
    oriented toward the side it may determine."""
    if isinstance(relation, Scan | Derived):
        return []
    if isinstance(relation, Filter):
        return _conjunct_equalities(relation.predicate, None) + _equalities(relation.input)
    return _join_equalities(relation)


def _join_equalities(join: Join) -> list[_Equality]:
    if join.kind in ("semi", "anti"):  # the right side adds no columns and no rows
        return _equalities(join.left)
    inner = _equalities(join.left) + _equalities(join.right)
    if join.condition is None or join.kind == "full":
        return inner
    if join.kind == "inner":
        return inner + _conjunct_equalities(join.condition, None)
    padded = join.right if join.kind == "left" else join.left
    return inner + _conjunct_equalities(join.condition, {i.alias for i in items_of(padded)})


def _conjunct_equalities(condition: exp.Expr, only: set[str] | None) -> list[_Equality]:
    """Both orientations of each `a.x = b.y` conjunct of one type (`only`: determining these aliases)."""
    found = []
    for part in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        if not isinstance(part, exp.EQ):
            continue
        left, right = part.this, part.expression
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)) or left.table == right.table:
            continue
        if left.type is None or left.type.is_type(exp.DataType.Type.UNKNOWN) or left.type != right.type:
            continue
        for this, that in ((left, right), (right, left)):
            if only is None or this.table in only:
                found.append(_Equality(this.table, this.name, that.table))
    return found
