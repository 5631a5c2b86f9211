"""The engine's Catalog over PostgreSQL's system catalogs."""

from __future__ import annotations

from collections.abc import Sequence

from dbt_ivm.catalog import Column, FunctionCall, TableInfo
from dbt_ivm.postgres.db import Db
from dbt_ivm.sqltext import qn

KINDS = {"r": "table", "p": "table", "v": "view", "m": "materialized view", "f": "foreign table"}
# PostgreSQL 18 keeps NOT NULL constraints in pg_constraint (contype 'n'), and one added NOT VALID
# sets attnotnull while old rows may still be NULL. (Before 18 no such row exists.)
NULLABLE = (
    "(NOT a.attnotnull OR EXISTS (SELECT FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'n' "
    "AND k.conkey[1] = a.attnum AND NOT k.convalidated))"
)

# A column's collation where it is not its type's default, quoted and qualified ('' otherwise).
COLLATION = (
    "COALESCE((SELECT quote_ident(n.nspname) || '.' || quote_ident(k.collname) FROM pg_collation k "
    "JOIN pg_namespace n ON n.oid = k.collnamespace WHERE k.oid = a.attcollation AND a.attcollation <> "
    "(SELECT t.typcollation FROM pg_type t WHERE t.oid = a.atttypid)), '')"
)


def _kind(relkind: str, inherits: bool, partition: bool, row_security: bool) -> str:
    """A relation's kind as the planner sees it. A partition or an inheritance child is a kind of its
    own: a write through its parent fires only the parent's statement triggers, so capture on the
    child misses it. So is a table whose row-level security applies to this role: its changes are
    captured for every row, not for those the role may read."""
    if inherits:
        return "partition" if partition else "inheritance child"
    if row_security:
        return "table under row-level security"
    return KINDS.get(relkind, "other")


USER_FUNCTION = "p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)"
# The definitions of functions by oid, hashed: one that is replaced, or dropped, changes it.
FUNCTION_DEFINITIONS_SQL = (
    "(SELECT pg_catalog.md5(COALESCE(pg_catalog.string_agg(p.oid::pg_catalog.regprocedure::text "
    "OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) CASE WHEN p.prokind = 'a' THEN '' "
    "ELSE pg_catalog.pg_get_functiondef(p.oid) END, E'\\n' ORDER BY p.oid), '')) "
    "FROM pg_catalog.pg_proc AS p WHERE p.oid = ANY ({oids}::pg_catalog.oid[]))"
)


class PostgresCatalog:
    def __init__(self, db: Db) -> None:
        self.db = db
        self.seen: list[TableInfo] = []  # every relation looked up (the views among them, for a digest)
        self.function_bodies: list[str] = []  # the user functions a call may reach (for the digest too)
        self.function_oids: list[int] = []  # those functions (`FUNCTION_DEFINITIONS_SQL`)
        self._set_returning: dict[FunctionCall, bool | None] = {}  # by call, as function_volatilities read it
        self._aggregates: dict[FunctionCall, bool | None] = {}  # the same

    def lookup(self, schema: str | None, name: str) -> TableInfo | None:
        target = qn(schema, name) if schema else qn(name)
        row = self.db.one(
            "SELECT c.oid, n.nspname, c.relname, c.relkind, "
            "EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid), c.relispartition, "
            "c.relkind IN ('r', 'p') AND row_security_active(c.oid), "
            "CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END, "
            "(SELECT COALESCE(json_agg(json_build_array(a.attname, format_type(a.atttypid, a.atttypmod), "
            f"{NULLABLE}, {COLLATION}) ORDER BY a.attnum), '[]') FROM pg_attribute a "
            "WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), "
            "(SELECT COALESCE(array_agg(a.attname::text ORDER BY array_position(i.indkey, a.attnum)), '{}') "
            "FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) "
            "WHERE i.indrelid = c.oid AND i.indisprimary) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
            (target,),
        )
        if row is None:
            return None
        oid, nspname, relname, relkind, inherits, partition, row_security, view_sql, columns, primary_key = (
            row
        )
        found = TableInfo(
            schema=nspname,
            name=relname,
            columns=tuple(Column(str(n), str(t), bool(nullable), str(k)) for n, t, nullable, k in columns),
            primary_key=tuple(str(c) for c in primary_key),
            kind=_kind(relkind, inherits, partition, row_security),
            view_sql=view_sql.rstrip().rstrip(";") if view_sql else None,
            identity=str(oid),
        )
        self.seen.append(found)
        return found

    def function_volatilities(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, str | None]:
        # Overload resolution depends on argument types we do not know: take the worst of every
        # function a call with this many arguments could reach (defaults and VARIADIC included).
        # 'i' < 's' < 'v' in text order too, so max() is the worst. One query for all calls.
        if not calls:
            return {}
        rows = self.db.rows(
            "SELECT k.position, max(p.provolatile::text), bool_or(p.proretset), "
            # What a user's function does, as CREATE FUNCTION gives it (an aggregate: its signature).
            "string_agg(p.oid::regprocedure::text || ' ' || CASE WHEN p.prokind = 'a' THEN '' "
            f"ELSE pg_get_functiondef(p.oid) END, E'\\n' ORDER BY p.oid) FILTER (WHERE {USER_FUNCTION}), "
            f"COALESCE(array_agg(p.oid::bigint) FILTER (WHERE {USER_FUNCTION}), '{{}}'), "
            "bool_or(p.prokind = 'a') "
            "FROM unnest(%s::name[], %s::name[], %s::int[]) WITH ORDINALITY AS k(schema, name, nargs, position) "
            "LEFT JOIN pg_proc p ON p.proname = k.name AND p.prokind <> 'p' "
            "AND k.nargs >= p.pronargs - p.pronargdefaults AND (k.nargs <= p.pronargs OR p.provariadic <> 0) "
            "AND p.pronamespace IN (SELECT n.oid FROM pg_namespace n WHERE n.nspname = ANY ("
            "CASE WHEN k.schema IS NULL THEN current_schemas(true) ELSE ARRAY[k.schema] END)) "
            "GROUP BY k.position ORDER BY k.position",
            ([c[0] for c in calls], [c[1] for c in calls], [c[2] for c in calls]),
        )
        self.function_bodies.extend(str(row[3]) for row in rows if row[3] is not None)
        self.function_oids.extend(sorted({int(oid) for row in rows for oid in row[4]}))
        self._set_returning.update({call: row[2] for call, row in zip(calls, rows, strict=True)})
        self._aggregates.update({call: row[5] for call, row in zip(calls, rows, strict=True)})
        return {call: None if row[1] is None else str(row[1]) for call, row in zip(calls, rows, strict=True)}

    def set_returning(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        return self._read_along(calls, self._set_returning)

    def aggregates(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        return self._read_along(calls, self._aggregates)

    def _read_along(
        self, calls: Sequence[FunctionCall], facts: dict[FunctionCall, bool | None]
    ) -> dict[FunctionCall, bool | None]:
        # Read by function_volatilities, asked first for the same calls: no second look-up.
        missing = [c for c in calls if c not in facts]
        if missing:
            self.function_volatilities(missing)
        return {call: facts[call] for call in calls}


def describe(db: Db, sql: str) -> list[tuple[str, str]]:
    """Output column names and types of a query, as PostgreSQL itself resolves them."""
    return describe_many(db, [sql])[0]


def describe_many(db: Db, queries: Sequence[str]) -> list[list[tuple[str, str]]]:
    """`describe` of several queries in three round trips: one temp view each, created in one
    message, read in one catalog query, and all rolled back (the caller's transaction goes on)."""
    views = [f"pg_temp.__ivm_describe_{i}" for i in range(len(queries))]
    db.execute("SAVEPOINT __ivm_describe")
    try:
        db.execute(
            ";\n".join(f"CREATE TEMP VIEW {v} AS {sql}" for v, sql in zip(views, queries, strict=True))
        )
        columns = db.rows(
            "SELECT array_position(%s::regclass[], attrelid::regclass), attname, format_type(atttypid, atttypmod) "
            "FROM pg_attribute WHERE attrelid = ANY (%s::regclass[]) AND attnum > 0 ORDER BY 1, attnum",
            (views, views),
        )
    finally:
        db.execute("ROLLBACK TO SAVEPOINT __ivm_describe")
    described: list[list[tuple[str, str]]] = [[] for _ in queries]
    for position, name, type_ in columns:
        described[int(position) - 1].append((str(name), str(type_)))
    return described


def base_types(db: Db, type_names: Sequence[str]) -> list[str]:
    """Each type with domains resolved to their base type (modifiers dropped): casting even a NULL to
    a domain runs its CHECK, which is user code. An array of a domain stays as it is."""
    rows = db.rows(
        "WITH RECURSIVE t(position, oid, depth) AS ("
        "SELECT position, name::regtype::oid, 0 FROM unnest(%s::text[]) WITH ORDINALITY AS n(name, position) "
        "UNION ALL SELECT t.position, p.typbasetype, t.depth + 1 FROM t JOIN pg_type p ON p.oid = t.oid "
        "WHERE p.typtype = 'd') "
        "SELECT DISTINCT ON (position) format_type(oid, NULL) FROM t ORDER BY position, depth DESC",
        (list(type_names),),
    )
    return [str(r[0]) for r in rows]
