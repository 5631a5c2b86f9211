"""The engine's Catalog over PostgreSQL's system catalogs."""

from __future__ import annotations

from dbt_ivm.catalog import Column, TableInfo
from dbt_ivm.postgres.db import Db
from dbt_ivm.sqltext import qn

KINDS = {"r": "table", "p": "table", "v": "view", "m": "materialized view", "f": "foreign table"}


class PostgresCatalog:
    def __init__(self, db: Db) -> None:
        self.db = db
        self.seen: list[TableInfo] = []  # every relation looked up (the views among them, for a digest)

    def lookup(self, schema: str | None, name: str) -> TableInfo | None:
        target = qn(schema, name) if schema else qn(name)
        row = self.db.one(
            "SELECT c.oid, n.nspname, c.relname, c.relkind, "
            "CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
            (target,),
        )
        if row is None:
            return None
        oid, nspname, relname, relkind, view_sql = row
        columns = self.db.rows(
            "SELECT attname, format_type(atttypid, atttypmod), NOT attnotnull FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (oid,),
        )
        primary_key = self.db.rows(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) "
            "WHERE i.indrelid = %s AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
            (oid,),
        )
        found = TableInfo(
            schema=nspname,
            name=relname,
            columns=tuple(Column(n, t, bool(nullable)) for n, t, nullable in columns),
            primary_key=tuple(r[0] for r in primary_key),
            kind=KINDS.get(relkind, "other"),
            view_sql=view_sql.rstrip().rstrip(";") if view_sql else None,
            identity=str(oid),
        )
        self.seen.append(found)
        return found

    def function_volatility(self, name: str, arg_count: int, schema: str | None = None) -> str | None:
        # Overload resolution depends on argument types we do not know: take the worst of every
        # function a call with this many arguments could reach (defaults and VARIADIC included).
        # 'i' < 's' < 'v' in text order too, so max() is the worst.
        volatility = self.db.value(
            "SELECT max(p.provolatile::text) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname = %s AND p.prokind <> 'p' "
            "AND n.nspname = ANY (CASE WHEN %s::name IS NULL THEN current_schemas(true) ELSE ARRAY[%s::name] END) "
            "AND %s >= p.pronargs - p.pronargdefaults AND (%s <= p.pronargs OR p.provariadic <> 0)",
            (name, schema, schema, arg_count, arg_count),
        )
        return None if volatility is None else str(volatility)


def describe(db: Db, sql: str) -> list[tuple[str, str]]:
    """Output column names and types of a query, as PostgreSQL itself resolves them."""
    db.execute("SAVEPOINT __ivm_describe")
    try:
        db.execute(f"CREATE TEMP VIEW __ivm_describe AS {sql}")
        columns = db.rows(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'pg_temp.__ivm_describe'::regclass AND attnum > 0 ORDER BY attnum"
        )
    finally:
        db.execute("ROLLBACK TO SAVEPOINT __ivm_describe")
    return [(str(n), str(t)) for n, t in columns]
