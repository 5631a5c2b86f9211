"""Change capture: statement-level AFTER triggers with transition tables writing typed change buffers.

One buffer per source table, shared by every stream table reading it. Following one row:
``UPDATE orders SET amount = 59.99 WHERE id = 1`` fires the UPDATE trigger once for the statement;
it appends the old image (weight −1) and then the new image (weight +1) to
``dbt_ivm.changes_<oid>``, both stamped with the writer's ``pg_current_xact_id()`` and one statement
number (deletes sort before inserts within a statement) — native column types, no JSON. TRUNCATE
cannot list its rows, so its trigger appends a marker (weight 0) that forces the next refresh of every
consumer to be FULL.

Buffers are UNLOGGED and unindexed, so capture costs little more than writing the rows once more. Crash
recovery (or a failover) empties unlogged tables; each buffer therefore holds a sentinel row
(weight 9) written at install. A buffer without its sentinel was reset: capture is reinstalled and
every consumer's next refresh is FULL, so a lost change can never leave a stream table stale.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from dbt_ivm.catalog import TableInfo
from dbt_ivm.postgres.db import Db
from dbt_ivm.sqltext import SEQ, WEIGHT, lit, q, qn

XID = "__ivm_xid"
SENTINEL = 9  # weight of the row that proves a buffer was not reset by crash recovery
STATEMENTS = "change_statements"  # sequence numbering captured statements, shared by all buffers
TRIGGER_PREFIX = "__ivm_capture_"
NEW_ROWS, OLD_ROWS = "__ivm_new_rows", "__ivm_old_rows"
# The source and, when it is partitioned, every partition below it (relid).
TARGETS_SQL = "SELECT %s::oid AS relid UNION SELECT relid FROM pg_partition_tree(%s::oid::regclass)"
# Errors a capture statement raises when the source's columns no longer match its buffer.
SCHEMA_DRIFT = (
    "undefined_column",
    "datatype_mismatch",
    "cannot_coerce",
    "numeric_value_out_of_range",
    "string_data_right_truncation",
    "invalid_text_representation",
    "invalid_datetime_format",
    "datetime_field_overflow",
)


def buffer_name(table: TableInfo) -> str:
    return f"changes_{table.identity}"


def function_name(table: TableInfo) -> str:
    return f"capture_{table.identity}"


def remove_unused(db: Db, catalog: str) -> None:
    """Remove capture from sources no stream table reads any more, so their writes stop paying for it."""
    unused = db.rows(
        f"SELECT source, source_oid::text, buffer_table FROM {qn(catalog, 'change_buffers')} AS b "
        f"WHERE NOT EXISTS (SELECT 1 FROM {qn(catalog, 'stream_tables')} AS s WHERE b.source = ANY (s.sources))"
    )
    for source, oid, buffer in unused:
        # The triggers depend on the function: CASCADE removes them with it.
        db.execute(f"DROP FUNCTION IF EXISTS {qn(catalog, f'capture_{oid}')}() CASCADE")
        db.execute(f"DROP TABLE IF EXISTS {qn(catalog, buffer)}")
        db.execute(f"DELETE FROM {qn(catalog, 'change_buffers')} WHERE source = %s", (source,))


def installed(db: Db, catalog: str, table: TableInfo) -> bool:
    """Are this table's capture triggers in place, writing a buffer with all of its current columns?"""
    row = db.one(
        f"SELECT source_oid::text, columns FROM {qn(catalog, 'change_buffers')} WHERE source = %s",
        (table.qualified,),
    )
    if row is None or row[0] != table.identity or list(row[1]) != table.column_names():
        return False
    # A column whose type changed (same name) needs a new buffer too.
    buffer_columns = db.rows(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped AND attname <> ALL (%s) "
        "ORDER BY attnum",
        (qn(catalog, buffer_name(table)), [SEQ, XID, WEIGHT]),
    )
    if [(str(n), str(t)) for n, t in buffer_columns] != [(c.name, c.type) for c in table.columns]:
        return False
    if not db.value(
        f"SELECT EXISTS (SELECT 1 FROM {qn(catalog, buffer_name(table))} WHERE {q(WEIGHT)} = {SENTINEL})"
    ):
        return False  # reset by crash recovery or failover: changes may be missing
    # Four triggers on the source and on each of its partitions, and on nothing else (a detached one).
    complete = db.value(
        f"WITH targets AS ({TARGETS_SQL}), fn AS (SELECT to_regprocedure(%s) AS oid) "
        "SELECT (SELECT count(*) FROM pg_trigger t, fn WHERE t.tgfoid = fn.oid) = 4 * (SELECT count(*) FROM targets) "
        "AND (SELECT count(*) FROM pg_trigger t, fn, targets x WHERE t.tgfoid = fn.oid AND t.tgrelid = x.relid) "
        "= 4 * (SELECT count(*) FROM targets)",
        (table.identity, table.identity, qn(catalog, function_name(table)) + "()"),
    )
    return bool(complete)


def lock_installs(db: Db) -> None:
    """Serialize capture installs until the caller's transaction ends."""
    db.execute("SELECT pg_advisory_xact_lock(hashtext('dbt_ivm capture install'))")


def install(db: Db, catalog: str, table: TableInfo) -> None:
    """(Re)create the buffer, capture function and the four triggers. Runs in the caller's transaction."""
    buffer = qn(catalog, buffer_name(table))
    function = qn(catalog, function_name(table))
    column_defs = ", ".join(f"{q(c.name)} {c.type}" for c in table.columns)
    # A source dropped and recreated has a new oid: drop the old table's buffer and function.
    previous = db.value(
        f"SELECT source_oid::text FROM {qn(catalog, 'change_buffers')} WHERE source = %s", (table.qualified,)
    )
    if previous is not None and previous != table.identity:
        db.execute(f"DROP TABLE IF EXISTS {qn(catalog, f'changes_{previous}')}")
        db.execute(f"DROP FUNCTION IF EXISTS {qn(catalog, f'capture_{previous}')}() CASCADE")
    db.execute(f"DROP TABLE IF EXISTS {buffer}")
    # Also removes this function's triggers from tables that are no longer partitions of the source.
    db.execute(f"DROP FUNCTION IF EXISTS {function}() CASCADE")
    statements = qn(catalog, STATEMENTS)
    db.execute(f"CREATE SEQUENCE IF NOT EXISTS {statements}")
    db.execute(
        f"CREATE UNLOGGED TABLE {buffer} ({q(SEQ)} bigint NOT NULL, {q(XID)} xid8 NOT NULL, "
        f"{q(WEIGHT)} smallint NOT NULL{', ' + column_defs if column_defs else ''})"
    )
    db.execute(
        f"INSERT INTO {buffer} ({q(SEQ)}, {q(XID)}, {q(WEIGHT)}) VALUES (0, pg_current_xact_id(), {SENTINEL})"
    )
    # Only the capture function (SECURITY DEFINER) writes the buffer: it gets no privileges of its own.
    db.execute(f"REVOKE ALL ON {buffer} FROM PUBLIC")
    names = ", ".join(q(c.name) for c in table.columns)

    stamp = f"{q(SEQ)}, {q(XID)}, {q(WEIGHT)}"
    marker = f"INSERT INTO {buffer} ({stamp}) VALUES (statement_number, writer, 0);"

    def copy(weight: int, rows: str) -> str:
        values = ", ".join(f"r.{q(c.name)}" for c in table.columns)
        return (
            f"INSERT INTO {buffer} ({stamp}, {names}) "
            f"SELECT statement_number, writer, {weight}, {values} FROM {q(rows)} AS r;"
        )

    db.execute(
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER "
        f"SET search_path = pg_catalog, pg_temp AS $ivm$\n"
        # One number and one xid per statement, not per row: ordering needs no more, and it is cheaper.
        f"DECLARE statement_number bigint := nextval({lit(statements)}); writer xid8 := pg_current_xact_id();\n"
        f"BEGIN\n"
        f"  IF TG_OP = 'INSERT' THEN {copy(1, NEW_ROWS)}\n"
        f"  ELSIF TG_OP = 'UPDATE' THEN {copy(-1, OLD_ROWS)} {copy(1, NEW_ROWS)}\n"
        f"  ELSIF TG_OP = 'DELETE' THEN {copy(-1, OLD_ROWS)}\n"
        f"  ELSE {marker}\n"
        f"  END IF;\n  RETURN NULL;\n"
        # A column dropped, renamed or retyped since install must not fail the user's write: record
        # a marker instead (the next refresh is FULL and reinstalls capture for the new columns).
        f"EXCEPTION WHEN {' OR '.join(SCHEMA_DRIFT)} THEN {marker} RETURN NULL;\n"
        f"END\n$ivm$"
    )
    db.execute(f"REVOKE ALL ON FUNCTION {function}() FROM PUBLIC")
    triggers = {
        "ins": f"AFTER INSERT ON {{}} REFERENCING NEW TABLE AS {q(NEW_ROWS)}",
        "upd": f"AFTER UPDATE ON {{}} REFERENCING OLD TABLE AS {q(OLD_ROWS)} NEW TABLE AS {q(NEW_ROWS)}",
        "del": f"AFTER DELETE ON {{}} REFERENCING OLD TABLE AS {q(OLD_ROWS)}",
        "trunc": "AFTER TRUNCATE ON {}",
    }
    # Statement triggers fire only on the table a statement names: a partitioned source needs them on
    # every partition too, or writes straight into a partition would go unseen.
    targets = [
        str(r[0])
        for r in db.rows(
            f"SELECT relid::regclass::text FROM ({TARGETS_SQL}) AS x", (table.identity, table.identity)
        )
    ]
    for target in targets:
        for suffix, timing in triggers.items():
            db.execute(
                f"CREATE OR REPLACE TRIGGER {q(TRIGGER_PREFIX + suffix)} {timing.format(target)} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
            )
    db.execute(
        f"INSERT INTO {qn(catalog, 'change_buffers')} (source, source_oid, buffer_table, columns, primary_key) "
        f"VALUES (%s, %s::oid, %s, %s, %s) ON CONFLICT (source) DO UPDATE SET source_oid = EXCLUDED.source_oid, "
        f"buffer_table = EXCLUDED.buffer_table, columns = EXCLUDED.columns, primary_key = EXCLUDED.primary_key, "
        f"installed_at = now()",
        (table.qualified, table.identity, buffer_name(table), table.column_names(), list(table.primary_key)),
    )
    # Consumers' frontiers say nothing about a new buffer: their next refresh must be FULL.
    db.execute(
        f"UPDATE {qn(catalog, 'stream_tables')} SET needs_full = %s "
        f"WHERE %s = ANY (sources) AND frontier IS NOT NULL",
        (f"change capture on {table.qualified} was (re)installed", table.qualified),
    )


def pending_filter(frontier_sql: str) -> str:
    """Buffer rows committed after the frontier snapshot (and visible to this transaction's snapshot)."""
    return f"{q(XID)} >= pg_snapshot_xmin({frontier_sql}) AND NOT pg_visible_in_snapshot({q(XID)}, {frontier_sql})"


def raw_changes_sql(catalog: str, table: TableInfo, frontier: str) -> str:
    """The source's raw changes since `frontier` (a pg_snapshot text), as a relation."""
    cols = ", ".join(q(c) for c in table.column_names())
    frontier_sql = f"{lit(frontier)}::pg_snapshot"
    return (
        f"(SELECT {q(SEQ)}, {q(WEIGHT)}, {cols} FROM {qn(catalog, buffer_name(table))} "
        f"WHERE {pending_filter(frontier_sql)} AND {q(WEIGHT)} IN (-1, 1))"
    )


def pending_stats_sql(catalog: str, table: TableInfo, frontier: str) -> str:
    frontier_sql = f"{lit(frontier)}::pg_snapshot"
    return (
        f"SELECT count(*), COALESCE(bool_or({q(WEIGHT)} = 0), false) FROM {qn(catalog, buffer_name(table))} "
        f"WHERE {pending_filter(frontier_sql)} AND {q(WEIGHT)} <> {SENTINEL}"
    )


def _pin_key(table: TableInfo) -> str:
    return f"dbt_ivm buffer {table.qualified}"


@contextmanager
def pinned(db: Db, tables: Sequence[TableInfo]) -> Iterator[None]:
    """Keep cleanup off these sources' buffers while a new consumer takes its snapshot and registers.

    Its frontier is not visible to other consumers' cleanup until it commits; rows committed after
    its snapshot would otherwise be deleted before it can read them.
    """
    keys = sorted(_pin_key(t) for t in tables)
    for key in keys:
        db.execute("SELECT pg_advisory_lock_shared(hashtext(%s))", (key,))
    try:
        yield
    finally:
        for key in keys:
            db.execute("SELECT pg_advisory_unlock_shared(hashtext(%s))", (key,))


def cleanup(db: Db, catalog: str, table: TableInfo) -> int:
    """Delete buffer rows that every consuming stream table's frontier already covers."""
    if not db.value("SELECT pg_try_advisory_xact_lock(hashtext(%s))", (_pin_key(table),)):
        return 0  # a stream table over this source is being created: clean up next time
    return db.execute(
        f"DELETE FROM {qn(catalog, buffer_name(table))} AS b WHERE b.{q(WEIGHT)} <> {SENTINEL} AND NOT EXISTS ("
        f"SELECT 1 FROM {qn(catalog, 'stream_tables')} AS s WHERE %s = ANY (s.sources) AND ("
        f"s.frontier IS NULL OR NOT pg_visible_in_snapshot(b.{q(XID)}, s.frontier)))",
        (table.qualified,),
    )
