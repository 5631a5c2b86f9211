"""dbt-postgres's `indexes` config on a stream table: which configured indexes the table lacks and which
of its indexes no config asks for, so the materialization can create and drop them (or, under
on_configuration_change='continue' or 'fail', warn or refuse as dbt does for materialized views).

The engine's own indexes (on hidden `__ivm_` columns) and those backing constraints are never touched.
Columns compare as PostgreSQL folds unquoted names: `Customer_ID` is customer_id, `"Customer_ID"` is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

HIDDEN_PREFIX = "__ivm_"

# Every index of one table, its columns in index order (expressions as NULL), and whether a
# constraint (primary key, unique, exclusion) owns it.
EXISTING_INDEXES_SQL = """
select i.relname::text, m.amname::text, ix.indisunique,
       array(select a.attname::text from unnest(ix.indkey) with ordinality as k(attnum, position)
             left join pg_attribute a on a.attrelid = ix.indrelid and a.attnum = k.attnum
             order by k.position),
       exists (select 1 from pg_constraint c where c.conindid = ix.indexrelid)
from pg_index ix
join pg_class i on i.oid = ix.indexrelid
join pg_am m on m.oid = i.relam
join pg_class t on t.oid = ix.indrelid
join pg_namespace n on n.oid = t.relnamespace
where n.nspname = %s and t.relname = %s
"""


@dataclass(frozen=True)
class Index:
    columns: tuple[str | None, ...]  # None: an expression
    unique: bool
    method: str
    name: str = ""
    constraint: bool = False

    def describe(self) -> str:
        kind = "unique " if self.unique else ""
        columns = ", ".join(c or "(expression)" for c in self.columns)
        return f"{kind}{self.method} index on ({columns})"


def folded(column: str) -> str:
    """A configured column as PostgreSQL names it.

    >>> folded("Customer_ID"), folded('"Customer_ID"'), folded('"a""b"')
    ('customer_id', 'Customer_ID', 'a"b')
    """
    column = column.strip()
    if len(column) > 1 and column.startswith('"') and column.endswith('"'):
        return column[1:-1].replace('""', '"')
    return column.lower()


def configured(columns: Sequence[str], unique: bool, method: str | None) -> Index:
    return Index(tuple(folded(c) for c in columns), bool(unique), (method or "btree").lower())


@dataclass
class IndexChanges:
    create: list[int]  # positions in the configured list
    drop: list[Index]
    created: tuple[str, ...]  # the indexes to create, described

    def describe(self) -> str:
        """What the changes would do, for a warning or an error."""
        return "; ".join([f"create {c}" for c in self.created] + [f"drop {d.describe()}" for d in self.drop])


def changes(wanted: Sequence[Index], existing: Iterable[Index]) -> IndexChanges:
    """The configured indexes to create and the table's own indexes to drop.

    >>> totals = configured(["customer_id"], False, None)
    >>> engine = Index(("__ivm_hash",), False, "btree", "h")
    >>> by_hand = Index(("total",), False, "btree", "t")
    >>> found = changes([totals], [engine, by_hand])
    >>> found.create, [d.name for d in found.drop], found.describe()
    ([0], ['t'], 'create btree index on (customer_id); drop btree index on (total)')
    """
    kept = [
        index
        for index in existing
        if not index.constraint and not any(c is None or c.startswith(HIDDEN_PREFIX) for c in index.columns)
    ]
    signatures = {(i.columns, i.unique, i.method) for i in kept}
    create = [
        n for n, index in enumerate(wanted) if (index.columns, index.unique, index.method) not in signatures
    ]
    asked = {(i.columns, i.unique, i.method) for i in wanted}
    drop = [index for index in kept if (index.columns, index.unique, index.method) not in asked]
    return IndexChanges(create, drop, tuple(wanted[n].describe() for n in create))
