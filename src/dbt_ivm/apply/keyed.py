"""Apply a row delta to a stream table identified by a row key.

Consolidation sums weights of identical rows (an unchanged group's −1 and +1 rows cancel), then for
each key keeps the row to write (+1, the new values) or, failing that, the row to remove (−1).
"""

from __future__ import annotations

from dbt_ivm.keys import hash_sql, match_sql, same_values_sql
from dbt_ivm.layout import HASH, Layout
from dbt_ivm.sqltext import WEIGHT, q

RANK = "__ivm_rank"


def consolidated_rows_sql(layout: Layout, row_delta: str, use_hash: bool) -> str:
    """One row per affected key: its columns, weight (>0 upsert, <0 delete) and key hash."""
    columns = ", ".join(q(c) for c in layout.columns)
    partition = f"PARTITION BY {', '.join(q(k) for k in layout.key)} " if layout.key else ""
    hashed = f", {hash_sql([q(k) for k in layout.key])} AS {q(HASH)}" if use_hash and layout.key else ""
    return (
        f"SELECT {columns}, {q(WEIGHT)}{hashed} FROM ("
        f"SELECT {columns}, {q(WEIGHT)}, row_number() OVER ({partition}ORDER BY {q(WEIGHT)} DESC) AS {q(RANK)} "
        f"FROM (SELECT {columns}, SUM({q(WEIGHT)}) AS {q(WEIGHT)} FROM ({row_delta}) AS {q('__ivm_delta')} "
        f"GROUP BY {columns}) AS {q('__ivm_summed')} WHERE {q(WEIGHT)} <> 0"
        f") AS {q('__ivm_ranked')} WHERE {q(RANK)} = 1"
    )


def _match(layout: Layout, use_hash: bool) -> str:
    rows = [f"r.{q(k)}" for k in layout.key]
    return match_sql("t", layout.key, rows, use_hash and bool(layout.key), f"r.{q(HASH)}")


def counts_sql(layout: Layout, rows: str, stream_table: str, use_hash: bool) -> str:
    """How many rows the MERGE will insert, update and delete (the unchanged-row guard included)."""
    changed = f"NOT ({same_values_sql('t', 'r', layout.columns)})"
    return (
        f"SELECT "
        f"COALESCE(SUM(CASE WHEN r.{q(WEIGHT)} > 0 AND t.{q('__ivm_present')} IS NULL THEN 1 ELSE 0 END), 0), "
        f"COALESCE(SUM(CASE WHEN r.{q(WEIGHT)} > 0 AND t.{q('__ivm_present')} AND {changed} THEN 1 ELSE 0 END), 0), "
        f"COALESCE(SUM(CASE WHEN r.{q(WEIGHT)} < 0 AND t.{q('__ivm_present')} THEN 1 ELSE 0 END), 0) "
        f"FROM {rows} AS r LEFT JOIN (SELECT *, TRUE AS {q('__ivm_present')} FROM {stream_table}) AS t "
        f"ON {_match(layout, use_hash)}"
    )


def merge_sql(layout: Layout, rows: str, stream_table: str, use_hash: bool) -> str:
    """One MERGE: delete removed keys, update changed rows only, insert new keys."""
    weight = f"r.{q(WEIGHT)}"
    changed = f"NOT ({same_values_sql('t', 'r', layout.columns)})"
    return _merge_statement(
        layout, rows, stream_table, use_hash, f"{weight} < 0", f"{weight} > 0 AND {changed}", f"{weight} > 0"
    )


def _merge_statement(
    layout: Layout,
    rows: str,
    stream_table: str,
    use_hash: bool,
    delete_when: str,
    update_when: str,
    insert_when: str,
) -> str:
    columns = list(layout.columns)
    insert_columns = columns + ([HASH] if use_hash and layout.key else [])
    updates = ", ".join(f"{q(c)} = r.{q(c)}" for c in columns)
    return (
        f"MERGE INTO {stream_table} AS t USING {rows} AS r ON {_match(layout, use_hash)}\n"
        f"WHEN MATCHED AND {delete_when} THEN DELETE\n"
        f"WHEN MATCHED AND {update_when} THEN UPDATE SET {updates}\n"
        f"WHEN NOT MATCHED AND {insert_when} THEN INSERT ({', '.join(q(c) for c in insert_columns)}) "
        f"VALUES ({', '.join(f'r.{q(c)}' for c in insert_columns)})"
    )


ACTION = "__ivm_action"


def classified_rows_sql(layout: Layout, rows: str, stream_table: str, use_hash: bool) -> str:
    """The consolidated rows that change something, each with what the MERGE will do to it:
    'I' insert, 'U' update (values differ), 'D' delete. Decided once against the stream table, so
    counting them and the MERGE (`classified_merge_sql`) need no second look at its rows."""
    columns = ", ".join(f"r.{q(c)}" for c in layout.columns)
    present = f"t.{q('__ivm_present')}"
    action = (
        f"CASE WHEN r.{q(WEIGHT)} < 0 THEN CASE WHEN {present} THEN 'D' END "
        f"WHEN {present} IS NULL THEN 'I' "
        f"WHEN NOT ({same_values_sql('t', 'r', layout.columns)}) THEN 'U' END"
    )
    hashed = f", r.{q(HASH)}" if use_hash and layout.key else ""
    return (
        f"SELECT * FROM (SELECT {columns}{hashed}, {action} AS {q(ACTION)} "
        f"FROM {rows} AS r LEFT JOIN (SELECT *, TRUE AS {q('__ivm_present')} FROM {stream_table}) AS t "
        f"ON {_match(layout, use_hash)}) AS {q('__ivm_classified')} WHERE {q(ACTION)} IS NOT NULL"
    )


def classified_merge_sql(layout: Layout, rows: str, stream_table: str, use_hash: bool) -> str:
    """The MERGE of `classified_rows_sql`'s rows: each does what its action says."""
    action = f"r.{q(ACTION)}"
    return _merge_statement(
        layout, rows, stream_table, use_hash, f"{action} = 'D'", f"{action} = 'U'", f"{action} = 'I'"
    )
