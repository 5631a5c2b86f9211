"""Which values a write's IMMEDIATE maintenance conflicts on, so writers that share none run at once.

Two writers of one stream table interfere only when one's delta reads or writes rows the other's
delta also reads or writes. For three plan shapes that is decided by a few columns of each source:

* an aggregate over one table: the group keys (a group's stored row and its input rows);
* a projection of one table: its primary key (keyed) or the output columns (identical rows);
* a join of distinct tables whose conditions tie one column of every table into one class of
  equal columns (``o.customer_id = c.id``): that column. Every joined or NULL-padded row, and every
  group that includes such a column from a never-padded side, depends only on the rows sharing its
  value, so the classic anomaly of two transactions inserting the two halves of a join meets on it.

Anything else (subqueries, self-joins, chains over several join columns, multisets of joins)
conflicts with every write: the writers of such a stream table take turns.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.layout import layout_of
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer_id", "int"),
...                    Column("amount", "numeric")), ("id",))
>>> customers = TableInfo("public", "customers", (Column("id", "int"), Column("name", "text")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> def keys(sql, *tables):
...     plan = build_plan(POSTGRES, sql, StaticCatalog([orders, customers]), "st")
...     found = conflict_columns(plan, layout_of(plan), list(tables))
...     return None if found is None else [[f"{c.table}.{c.name}" for c in columns] for columns in found]
>>> keys("SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id", orders)
[['orders.customer_id']]
>>> keys("SELECT o.id, c.name FROM orders o JOIN customers c ON o.customer_id = c.id", orders, customers)
[['o.customer_id'], ['c.id']]
>>> keys("SELECT c.name, SUM(o.amount) AS total FROM orders o JOIN customers c ON o.customer_id = c.id "
...      "GROUP BY c.name", orders, customers) is None  # two customers may share a name: their writers meet on no value
True
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.catalog import TableInfo
from dbt_ivm.layout import Layout
from dbt_ivm.plan.nodes import (
    Aggregate,
    Derived,
    Filter,
    Plan,
    Project,
    Relation,
    Scan,
    all_items,
    padded_aliases,
)
from dbt_ivm.reserved import internal_column

ColumnKey = tuple[str, str]  # (item alias, column)


def conflict_columns(plan: Plan, layout: Layout, sources: list[TableInfo]) -> list[list[exp.Column]] | None:
    """Per source (in `sources` order), the columns, qualified by its scan's alias, whose values name
    what a write to it conflicts on; None: every write conflicts with every other."""
    if not isinstance(plan, Project | Aggregate) or not _plain(plan.input):
        return None
    scans = [i for i in all_items(plan.input) if isinstance(i, Scan)]
    if len(scans) != len(sources) or {s.table.qualified for s in scans} != {t.qualified for t in sources}:
        return None  # a self-join, or a table read somewhere else too
    by_table = {s.table.qualified: s for s in scans}
    if len(scans) == 1:
        chosen = _one_table(plan, layout, scans[0])
        return None if chosen is None else [chosen]
    join_columns = _join_columns(plan, layout, scans)
    if join_columns is None:
        return None
    return [[join_columns[by_table[t.qualified].alias]] for t in sources]


def _plain(relation: Relation) -> bool:
    """Only tables, inner or outer joins and filters, with no subquery in a condition."""
    if isinstance(relation, Derived):
        return False
    if isinstance(relation, Scan):
        return True
    if isinstance(relation, Filter):
        return not relation.predicate.find(exp.Subquery) and _plain(relation.input)
    if relation.kind in ("semi", "anti") or (relation.condition and relation.condition.find(exp.Subquery)):
        return False
    return _plain(relation.left) and _plain(relation.right)


def _column(scan: Scan, name: str) -> exp.Column:
    return exp.column(internal_column(scan.table, name), scan.alias, quoted=True)


def _one_table(plan: Project | Aggregate, layout: Layout, scan: Scan) -> list[exp.Column] | None:
    if isinstance(plan, Aggregate):
        keys = list(plan.group_by)
    elif layout.kind == "keyed":
        return [_column(scan, name) for name in scan.table.primary_key]
    else:
        keys = [o.expression for o in plan.outputs]
    if all(isinstance(k, exp.Column) for k in keys):
        return [k.copy() for k in keys if isinstance(k, exp.Column)]
    return None


def _equalities(relation: Relation) -> list[tuple[ColumnKey, ColumnKey]]:
    """`a.x = b.y` conjuncts of every join condition and filter, between two different items."""
    if isinstance(relation, Scan | Derived):
        return []
    found: list[tuple[ColumnKey, ColumnKey]] = []
    condition = relation.predicate if isinstance(relation, Filter) else relation.condition
    if condition is not None:
        for part in condition.flatten() if isinstance(condition, exp.And) else [condition]:
            if isinstance(part, exp.EQ) and isinstance(part.this, exp.Column):
                left, right = part.this, part.expression
                if isinstance(right, exp.Column) and left.table != right.table:
                    found.append(((left.table, left.name), (right.table, right.name)))
    children = [relation.input] if isinstance(relation, Filter) else [relation.left, relation.right]
    return found + [pair for child in children for pair in _equalities(child)]


def _join_columns(
    plan: Project | Aggregate, layout: Layout, scans: list[Scan]
) -> dict[str, exp.Column] | None:
    """Per scan alias, its column in a class of equal columns that holds one of every scan."""
    parent: dict[ColumnKey, ColumnKey] = {}

    def root(key: ColumnKey) -> ColumnKey:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for left, right in _equalities(plan.input):
        parent[root(left)] = root(right)
    aliases = {s.alias for s in scans}
    classes: dict[ColumnKey, dict[str, str]] = {}
    for key in sorted(parent):
        classes.setdefault(root(key), {}).setdefault(key[0], key[1])
    whole = next((members for _, members in sorted(classes.items()) if set(members) == aliases), None)
    if whole is None:
        return None
    if isinstance(plan, Project) and layout.kind != "keyed":
        return None  # identical rows from different join values would meet in one stored row
    if isinstance(plan, Aggregate):
        never_padded = aliases - padded_aliases(plan.input)
        if not any(
            isinstance(k, exp.Column) and k.table in never_padded and whole.get(k.table) == k.name
            for k in plan.group_by
        ):
            return None  # a group may gather rows of different join values
    return {alias: exp.column(name, alias, quoted=True) for alias, name in whole.items()}
