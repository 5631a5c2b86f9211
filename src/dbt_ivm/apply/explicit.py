"""Apply consolidated rows as three plain statements — DELETE, UPDATE, INSERT — instead of one MERGE.

Row triggers on the stream table then fire as on any table: a DELETE trigger sees the removed row as
OLD, an UPDATE trigger sees OLD and NEW of a changed row, an INSERT trigger sees NEW. Statements run in
that order (DELETE → UPDATE → INSERT). The UPDATE is guarded by IS DISTINCT FROM, so a row whose
values stay the same is not touched and fires nothing.

Input is what the MERGE path already materializes: for keyed and aggregate layouts the consolidated
rows (one per affected key: weight < 0 removes the key, weight > 0 writes the row's new values); for
multiset layouts the ordinal operations (one per ordinal: weight −1 deletes it, +1 inserts it). A
multiset row is identified by its values, so it never changes in place: DELETE and INSERT only.

DELETE and UPDATE join the (small) rows table to the stream table (``DELETE ... USING``,
``UPDATE ... FROM``) rather than ``WHERE EXISTS``: the key match uses IS NOT DISTINCT FROM, which
keeps PostgreSQL from turning a semi-join around, so EXISTS would scan the whole stream table where a
join probes its ``__ivm_hash`` index once per row. Each rows/ops row matches at most one stored row,
so the join never touches a row twice. Written in PostgreSQL spelling like all generated SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbt_ivm.keys import match_sql, same_values_sql
from dbt_ivm.layout import DUP, HASH, Layout
from dbt_ivm.sqltext import WEIGHT, q


@dataclass(frozen=True)
class ExplicitDml:
    """The statements to run, in order; `update` is None for multiset layouts."""

    delete: str
    update: str | None
    insert: str


def _key_match(layout: Layout, source_alias: str, use_hash: bool) -> str:
    """Stream-table rows ("t") with the same key as the row in `source_alias`."""
    hashed = use_hash and bool(layout.key)
    others = [f"{q(source_alias)}.{q(k)}" for k in layout.key]
    return match_sql("t", layout.key, others, hashed, f"{q(source_alias)}.{q(HASH)}")


def _ordinal_match(layout: Layout, use_hash: bool) -> str:
    """Stream-table rows ("t") with the values and ordinal of the operation "o"."""
    others = [f"{q('o')}.{q(c)}" for c in layout.columns]
    values = match_sql("t", layout.columns, others, use_hash, f"{q('o')}.{q(HASH)}")
    return f"{values} AND {q('t')}.{q(DUP)} = {q('o')}.{q(DUP)}"


def keyed_dml(layout: Layout, rows: str, stream_table: str, use_hash: bool) -> ExplicitDml:
    """DELETE removed keys, UPDATE rows whose values changed, INSERT new keys (keyed/aggregate)."""
    t, r, w = q("t"), q("r"), q(WEIGHT)
    match = _key_match(layout, "r", use_hash)
    columns = list(layout.columns)
    insert_columns = columns + ([HASH] if use_hash and layout.key else [])
    delete = f"DELETE FROM {stream_table} AS {t} USING {rows} AS {r} WHERE {r}.{w} < 0 AND {match}"
    # Target columns of UPDATE ... SET are never qualified; the hash is the key's, so it stays.
    assignments = ", ".join(f"{q(c)} = {r}.{q(c)}" for c in columns)
    update = (
        f"UPDATE {stream_table} AS {t} SET {assignments} FROM {rows} AS {r} "
        f"WHERE {r}.{w} > 0 AND {match} AND NOT ({same_values_sql('t', 'r', columns)})"
    )
    insert = (
        f"INSERT INTO {stream_table} ({', '.join(q(c) for c in insert_columns)}) "
        f"SELECT {', '.join(f'{r}.{q(c)}' for c in insert_columns)} FROM {rows} AS {r} "
        f"WHERE {r}.{w} > 0 AND NOT EXISTS (SELECT 1 FROM {stream_table} AS {t} WHERE {match})"
    )
    return ExplicitDml(delete, update, insert)


def multiset_dml(layout: Layout, ops: str, stream_table: str, use_hash: bool) -> ExplicitDml:
    """DELETE the ordinals that go, INSERT the ordinals that come (multiset layouts)."""
    t, o, w = q("t"), q("o"), q(WEIGHT)
    insert_columns = [*layout.columns, DUP, *([HASH] if use_hash else [])]
    delete = (
        f"DELETE FROM {stream_table} AS {t} USING {ops} AS {o} "
        f"WHERE {o}.{w} < 0 AND {_ordinal_match(layout, use_hash)}"
    )
    # Ordinals to insert were numbered past the current count (see multiset.ordinal_ops_sql): all new.
    insert = (
        f"INSERT INTO {stream_table} ({', '.join(q(c) for c in insert_columns)}) "
        f"SELECT {', '.join(f'{o}.{q(c)}' for c in insert_columns)} FROM {ops} AS {o} WHERE {o}.{w} > 0"
    )
    return ExplicitDml(delete, None, insert)


def keyed_mismatches_sql(layout: Layout, rows: str, stream_table: str, use_hash: bool) -> str:
    """After the writes: how many keys do not read back as written (a BEFORE trigger changed or skipped them).

    A key with weight > 0 must now hold exactly the row's values; a key with weight < 0 must be gone.
    """
    t, r, w = q("t"), q("r"), q(WEIGHT)
    match = _key_match(layout, "r", use_hash)
    same = same_values_sql("t", "r", layout.columns)
    return (
        f"SELECT count(*) FROM {rows} AS {r} WHERE CASE WHEN {r}.{w} > 0 "
        f"THEN NOT EXISTS (SELECT 1 FROM {stream_table} AS {t} WHERE {match} AND {same}) "
        f"ELSE EXISTS (SELECT 1 FROM {stream_table} AS {t} WHERE {match}) END"
    )


def multiset_mismatches_sql(layout: Layout, ops: str, stream_table: str, use_hash: bool) -> str:
    """After the writes: how many ordinals are missing (inserted ones) or still there (deleted ones)."""
    t, o, w = q("t"), q("o"), q(WEIGHT)
    present = f"EXISTS (SELECT 1 FROM {stream_table} AS {t} WHERE {_ordinal_match(layout, use_hash)})"
    return f"SELECT count(*) FROM {ops} AS {o} WHERE ({o}.{w} > 0) <> {present}"
