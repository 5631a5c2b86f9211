"""The test oracle: a stream table must equal its defining query, as a multiset, on its user columns.

Hidden bookkeeping columns (``__ivm_*``) are ignored. Equality is checked with EXCEPT ALL both ways,
so duplicates count: a row stored twice where the query yields it once is a failure.
"""

from __future__ import annotations

from typing import Any

HIDDEN_PREFIX = "__ivm_"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def relation_name(schema: str, name: str) -> str:
    return f"{_quote(schema)}.{_quote(name)}"


def user_columns(conn: Any, schema: str, name: str) -> list[str]:
    """The stream table's columns a user sees, in table order."""
    return [column for column, _ in _user_column_types(conn, schema, name)]


def _user_column_types(conn: Any, schema: str, name: str) -> list[tuple[str, str]]:
    """(name, type) of the columns a user sees, in table order."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT attname, atttypid::regtype::text FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (relation_name(schema, name),),
        )
        return [(r[0], r[1]) for r in cur.fetchall() if not r[0].startswith(HIDDEN_PREFIX)]


# Types without an equality operator: compared by their text form.
TEXT_COMPARED = {"json", "xml", "point", "line", "lseg", "box", "path", "polygon", "circle"}


def _comparable(column: str, type_name: str) -> str:
    if type_name in TEXT_COMPARED or type_name.rstrip("[]") in TEXT_COMPARED:
        return f"{_quote(column)}::text AS {_quote(column)}"
    return _quote(column)


def query_columns(conn: Any, sql: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM ({sql}) AS oracle_q LIMIT 0")
        return [d[0] for d in cur.description]


def differences(
    conn: Any, schema: str, name: str, sql: str
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(rows stored but not produced by the query, rows produced by the query but not stored)."""
    typed = _user_column_types(conn, schema, name)
    columns = [column for column, _ in typed]
    expected = query_columns(conn, sql)
    assert columns == expected, f"{schema}.{name}: columns {columns} != query columns {expected}"
    listed = ", ".join(_comparable(c, t) for c, t in typed)
    stored = f"SELECT {listed} FROM {relation_name(schema, name)}"
    query = f"SELECT {listed} FROM ({sql}) AS oracle_q"
    with conn.cursor() as cur:
        # Without JIT: the answer is the same, and on a server built with it (PostgreSQL 15 here)
        # compiling these large queries over tiny tables took longer than running them.
        cur.execute("SELECT pg_catalog.current_setting('jit'), pg_catalog.set_config('jit', 'off', false)")
        jit = cur.fetchone()[0]
        cur.execute(f"{stored} EXCEPT ALL {query}")
        extra = cur.fetchall()
        cur.execute(f"{query} EXCEPT ALL {stored}")
        missing = cur.fetchall()
        cur.execute("SELECT pg_catalog.set_config('jit', %s, false)", (jit,))
    return extra, missing


def assert_matches_query(conn: Any, schema: str, name: str, sql: str, context: str = "") -> None:
    """Fail, showing the differing rows, unless the stream table equals its defining query."""
    extra, missing = differences(conn, schema, name, sql)
    if extra or missing:
        where = f" ({context})" if context else ""
        raise AssertionError(
            f"stream table {schema}.{name}{where} differs from its query:\n"
            f"  stored but not in the query: {sorted(extra, key=repr)[:20]}\n"
            f"  in the query but not stored: {sorted(missing, key=repr)[:20]}"
        )


def table_rows(conn: Any, schema: str, name: str) -> list[tuple[Any, ...]]:
    """The user columns of every stored row, sorted (for spelling out expected contents)."""
    listed = ", ".join(_quote(c) for c in user_columns(conn, schema, name))
    with conn.cursor() as cur:
        cur.execute(f"SELECT {listed} FROM {relation_name(schema, name)}")
        return sorted(cur.fetchall(), key=_sort_key)


def _sort_key(row: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((value is None, value) for value in row)
