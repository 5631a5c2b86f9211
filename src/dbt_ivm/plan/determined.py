"""Which items of a join the others determine, so that their keys need not identify its rows.

A join row is identified by the keys of the rows it came from: a table's primary key, a derived
table's group keys (`layout.item_keys`). When a condition equates an item's whole key with columns of
other items (``o.customer_id = c.id``), each row of the others meets at most one of its rows: its key
adds nothing to the row's identity, and a stream table need not store it. An order joined to its
customer is identified by the order alone; a customer joined to its orders' totals by the customer.

A condition counts only where it holds for every row it lets through: a WHERE conjunct, an inner
join's ON, or an outer join's ON for the side it pads (a padded row holds NULLs there, still one per
row of the other side); never for the side an outer join keeps. Both columns must have one type, so
equality is the key's own. Determination chains (a line item's order, that order's customer) but not
in a circle: the items kept must determine all the others.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer_id", "int")), ("id",))
>>> customers = TableInfo("public", "customers", (Column("id", "int"), Column("name", "text")), ("id",))
>>> catalog = StaticCatalog([orders, customers])
>>> from dbt_ivm.layout import item_keys
>>> from dbt_ivm.target import POSTGRES
>>> def kept(sql):
...     relation = build_plan(POSTGRES, sql, catalog, "st").input
...     return list(identifying_items(relation, item_keys(relation) or {}))
>>> kept("SELECT o.id, c.name FROM orders o JOIN customers c ON o.customer_id = c.id")
['o']
>>> kept("SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON o.customer_id = c.id")
['o']
>>> kept("SELECT o.id, c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id")
['c', 'o']
>>> kept("SELECT o.id, c.name FROM orders o JOIN customers c ON o.customer_id = c.id OR c.id = 0")
['o', 'c']
>>> kept("SELECT c.name, t.n FROM customers c JOIN (SELECT customer_id, COUNT(*) AS n FROM orders "
...      "GROUP BY customer_id) t ON t.customer_id = c.id")
['c']
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dbt_ivm.plan.nodes import Derived, Filter, Join, Relation, Scan, items_of


@dataclass(frozen=True)
class _Equality:
    """`alias.column = other.column` holding for every row the node it belongs to lets through."""

    alias: str
    column: str
    other: str  # the alias of the item whose column decides this one


Types = dict[tuple[str, str], exp.DataType]  # (alias, column) -> type, where a column lacks its own


def identifying_items(
    relation: Relation,
    keys: dict[str, tuple[str, ...]],
    types: Types | None = None,
    shown: frozenset[str] = frozenset(),
) -> tuple[str, ...]:
    """The aliases, in FROM order, of the items whose keys identify `relation`'s rows: every keyed
    item (`keys`: alias -> key columns as conditions name them) but those the kept ones determine.
    `types`: the types of key columns the plan does not annotate. `shown`: aliases whose keys the
    query selects anyway; the others are dropped first, as each dropped key is a hidden column less."""
    equalities = _equalities(relation, types or {})
    everything = set(keys)
    kept = set(keys)
    for alias in sorted(reversed(list(keys)), key=lambda a: a in shown):
        if len(kept) > 1 and _closure(kept - {alias}, keys, equalities) == everything:
            kept.discard(alias)
    return tuple(a for a in keys if a in kept)


def _closure(kept: set[str], keys: dict[str, tuple[str, ...]], equalities: list[_Equality]) -> set[str]:
    """The aliases whose rows `kept` determines, through the equalities, until nothing changes."""
    known = set(kept)
    grew = True
    while grew:
        grew = False
        for alias, key in keys.items():
            if alias not in known and all(
                any(e.alias == alias and e.column == column and e.other in known for e in equalities)
                for column in key
            ):
                known.add(alias)
                grew = True
    return known


def _equalities(relation: Relation, types: Types) -> list[_Equality]:
    """Column equalities between two items that hold for every row `relation` returns, each
    oriented toward the side it may determine."""
    if isinstance(relation, Scan | Derived):
        return []
    if isinstance(relation, Filter):
        return _conjunct_equalities(relation.predicate, None, types) + _equalities(relation.input, types)
    return _join_equalities(relation, types)


def _join_equalities(join: Join, types: Types) -> list[_Equality]:
    if join.kind in ("semi", "anti"):  # the right side adds no columns and no rows
        return _equalities(join.left, types)
    inner = _equalities(join.left, types) + _equalities(join.right, types)
    if join.condition is None or join.kind == "full":
        return inner
    if join.kind == "inner":
        return inner + _conjunct_equalities(join.condition, None, types)
    padded = join.right if join.kind == "left" else join.left
    return inner + _conjunct_equalities(join.condition, {i.alias for i in items_of(padded)}, types)


def _conjunct_equalities(condition: exp.Expr, only: set[str] | None, types: Types) -> list[_Equality]:
    """Both orientations of each `a.x = b.y` conjunct of one type (`only`: determining these aliases)."""
    found = []
    for part in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        if not isinstance(part, exp.EQ):
            continue
        left, right = part.this, part.expression
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)) or left.table == right.table:
            continue
        left_type, right_type = _type(left, types), _type(right, types)
        if left_type is None or left_type != right_type:
            continue
        for this, that in ((left, right), (right, left)):
            if only is None or this.table in only:
                found.append(_Equality(this.table, this.name, that.table))
    return found


def _type(column: exp.Column, types: Types) -> exp.DataType | None:
    known = column.type
    if known is None or known.is_type(exp.DataType.Type.UNKNOWN):
        known = types.get((column.table, column.name))
    return None if known is None or known.is_type(exp.DataType.Type.UNKNOWN) else known
