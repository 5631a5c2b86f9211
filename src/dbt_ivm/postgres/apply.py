"""Apply strategies on PostgreSQL: create the table, apply a row delta with MERGE, FULL as a diff."""

from __future__ import annotations

from dbt_ivm.apply import keyed, multiset
from dbt_ivm.keys import hash_sql
from dbt_ivm.layout import DUP, HASH, Layout
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.temp_names import unique
from dbt_ivm.postgres.user_triggers import TriggerChoice, suppressed, write_keyed, write_multiset
from dbt_ivm.spec import RefreshResult
from dbt_ivm.sqltext import WEIGHT, q


def plain_layout(names: list[str]) -> Layout:
    """A query the delta rules cannot maintain: rows identified by value, refreshed FULL only."""
    return Layout("multiset", tuple(names), (), tuple(names))


def create_table(db: Db, relation: str, layout: Layout, contents: str, hashed: bool = True) -> int:
    """CREATE TABLE AS the contents, plus the key hash (and ordinals for repeated rows), indexed.

    `hashed` False: a key column's type has no hash function; rows are matched on the key alone."""
    columns = ", ".join(f"c.{q(col)}" for col in layout.columns)
    extra = ""
    if layout.kind == "multiset":
        values = ", ".join(f"c.{q(col)}" for col in layout.columns)
        extra = f", row_number() OVER (PARTITION BY {values}) AS {q(DUP)}"
    if hashed and layout.key:
        extra += f", {hash_sql([f'c.{q(k)}' for k in layout.key])} AS {q(HASH)}"
    rows = db.execute(f"CREATE TABLE {relation} AS SELECT {columns}{extra} FROM ({contents}) AS c")
    if hashed and layout.key:
        db.execute(f"CREATE INDEX ON {relation} ({q(HASH)})")
    # Statistics now, not when autovacuum gets round to it: the first refresh's MERGE must see that a
    # handful of keys is best found through the hash index.
    db.execute(f"ANALYZE {relation}")
    return rows


def apply_row_delta(
    db: Db,
    relation: str,
    layout: Layout,
    delta: str,
    result: RefreshResult,
    triggers: TriggerChoice | None = None,
    hashed: bool = True,
) -> None:
    """Apply a row delta (layout columns + weight) and count what changed into `result`.

    `triggers` (user triggers found on the table) picks explicit DML or MERGE; None: MERGE.
    `hashed`: the table was created with a key hash (create_table)."""
    result.apply_path = "merge"
    if triggers is not None:
        triggers.record(result)
    rows_table, ops_table = unique("rows"), unique("ops")
    if layout.kind == "multiset":
        db.execute(
            f"CREATE TEMP TABLE {q(rows_table)} ON COMMIT DROP AS {multiset.summed_rows_sql(layout, delta, hashed)}"
        )
        db.execute(f"ANALYZE {q(rows_table)}")
        ops = multiset.ordinal_ops_sql(layout, f"pg_temp.{q(rows_table)}", relation, hashed)
        db.execute(f"CREATE TEMP TABLE {q(ops_table)} ON COMMIT DROP AS {ops}")
        counts = db.one(
            f"SELECT COALESCE(SUM(CASE WHEN {q(WEIGHT)} > 0 THEN 1 ELSE 0 END), 0), "
            f"COALESCE(SUM(CASE WHEN {q(WEIGHT)} < 0 THEN 1 ELSE 0 END), 0) FROM pg_temp.{q(ops_table)}"
        )
        assert counts is not None
        result.rows_inserted += int(counts[0])
        result.rows_deleted += int(counts[1])
        if counts[0] or counts[1]:
            db.execute(f"ANALYZE {q(ops_table)}")
            if triggers is not None and triggers.explicit:
                pair = (int(counts[0]), int(counts[1]))
                write_multiset(
                    db, triggers, layout, f"pg_temp.{q(ops_table)}", relation, pair, result, hashed
                )
                return
            with suppressed(db, triggers):
                db.execute(multiset.merge_sql(layout, f"pg_temp.{q(ops_table)}", relation, hashed))
        return
    use_hash = hashed and bool(layout.key)
    db.execute(
        f"CREATE TEMP TABLE {q(rows_table)} ON COMMIT DROP AS {keyed.consolidated_rows_sql(layout, delta, use_hash)}"
    )
    db.execute(f"ANALYZE {q(rows_table)}")
    counts = db.one(keyed.counts_sql(layout, f"pg_temp.{q(rows_table)}", relation, use_hash))
    assert counts is not None
    inserted, updated, deleted = (int(c) for c in counts)
    result.rows_inserted += inserted
    result.rows_updated += updated
    result.rows_deleted += deleted
    if inserted or updated or deleted:
        if triggers is not None and triggers.explicit:
            triple = (inserted, updated, deleted)
            write_keyed(db, triggers, layout, f"pg_temp.{q(rows_table)}", relation, use_hash, triple, result)
            return
        with suppressed(db, triggers):
            db.execute(keyed.merge_sql(layout, f"pg_temp.{q(rows_table)}", relation, use_hash))


def full_delta_sql(relation: str, layout: Layout, contents: str) -> str:
    """New contents (+1) against stored contents (−1): FULL refresh as a row delta."""
    columns = ", ".join(q(c) for c in layout.columns)
    return (
        f"SELECT {columns}, 1 AS {q(WEIGHT)} FROM ({contents}) AS {q('__ivm_new')} "
        f"UNION ALL SELECT {columns}, -1 AS {q(WEIGHT)} FROM {relation}"
    )


def apply_full_diff(
    db: Db,
    relation: str,
    layout: Layout,
    contents: str,
    result: RefreshResult,
    triggers: TriggerChoice | None = None,
    hashed: bool = True,
) -> None:
    """FULL refresh through the same path as a differential one: the same row triggers fire."""
    delta = full_delta_sql(relation, layout, contents)
    apply_row_delta(db, relation, layout, delta, result, triggers, hashed)
