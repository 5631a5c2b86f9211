"""Apply a row delta to a stream table whose rows may repeat (a source without a primary key).

Identical rows are told apart by an ordinal ``__ivm_dup`` (1..n). A value whose weight is +k gets
ordinals n+1..n+k inserted; −k removes ordinals n−k+1..n, so ordinals stay 1..n without gaps.
"""

from __future__ import annotations

from dbt_ivm.keys import hash_sql, match_sql
from dbt_ivm.layout import DUP, HASH, Layout
from dbt_ivm.sqltext import WEIGHT, q


def summed_rows_sql(layout: Layout, row_delta: str, use_hash: bool) -> str:
    columns = ", ".join(q(c) for c in layout.columns)
    hashed = f", {hash_sql([q(c) for c in layout.columns])} AS {q(HASH)}" if use_hash else ""
    return (
        f"SELECT {columns}, SUM({q(WEIGHT)}) AS {q(WEIGHT)}{hashed} FROM ({row_delta}) AS {q('__ivm_delta')} "
        f"GROUP BY {columns} HAVING SUM({q(WEIGHT)}) <> 0"
    )


def ordinal_ops_sql(layout: Layout, rows: str, stream_table: str, use_hash: bool) -> str:
    """PostgreSQL: one row per ordinal to insert (weight +1) or delete (weight −1)."""
    match = match_sql("t", layout.columns, [f"r.{q(c)}" for c in layout.columns], use_hash, f"r.{q(HASH)}")
    present = f"(SELECT count(*) FROM {stream_table} AS t WHERE {match})"
    carried = ", ".join(f"r.{q(c)}" for c in (*layout.columns, *([HASH] if use_hash else [])))
    return (
        f"SELECT {carried}, g.{q(DUP)}, SIGN(r.{q(WEIGHT)})::int AS {q(WEIGHT)} FROM {rows} AS r "
        f"CROSS JOIN LATERAL (SELECT {present} AS n) AS cur "
        f"CROSS JOIN LATERAL generate_series("
        f"CASE WHEN r.{q(WEIGHT)} > 0 THEN cur.n + 1 ELSE cur.n + r.{q(WEIGHT)} + 1 END, "
        f"CASE WHEN r.{q(WEIGHT)} > 0 THEN cur.n + r.{q(WEIGHT)} ELSE cur.n END) AS g({q(DUP)})"
    )


def merge_sql(layout: Layout, ops: str, stream_table: str, use_hash: bool) -> str:
    match = match_sql("t", layout.columns, [f"o.{q(c)}" for c in layout.columns], use_hash, f"o.{q(HASH)}")
    match = match.replace(f"{q('t')}.", "t.") + f" AND t.{q(DUP)} = o.{q(DUP)}"
    insert_columns = [*layout.columns, DUP, *([HASH] if use_hash else [])]
    return (
        f"MERGE INTO {stream_table} AS t USING {ops} AS o ON {match}\n"
        f"WHEN MATCHED AND o.{q(WEIGHT)} < 0 THEN DELETE\n"
        f"WHEN NOT MATCHED AND o.{q(WEIGHT)} > 0 THEN INSERT ({', '.join(q(c) for c in insert_columns)}) "
        f"VALUES ({', '.join(f'o.{q(c)}' for c in insert_columns)})"
    )
