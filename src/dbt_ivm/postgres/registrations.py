"""Registrations that outlive their stream table: find them, list them, remove them.

Buffer rows are deleted only once every registered consumer's frontier covers them
(``capture.cleanup``). A consumer whose model was deleted or disabled, or whose table was dropped by
hand, never refreshes again, so its frontier never moves and the shared buffer of each of its sources
grows without end. ``forget_missing`` unregisters every stream table whose table is gone (the runner
calls it before each refresh) and then removes capture from sources nobody reads any more;
``list_registrations``, ``history`` and ``drop_registration`` back ``dbt-ivm status``, ``history`` and
``drop``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbt_ivm import run_settings
from dbt_ivm.postgres import capture, immediate, in_database, outside_writes, procedure
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.in_database import refresh_lock_key
from dbt_ivm.sqltext import lit, qn
from dbt_ivm.status import HistoryRow, StreamTableStatus
from dbt_ivm.unused import RegisteredTable

# Serializes the sessions that unregister stream tables and remove capture here: two of them dropping
# capture from several sources in different orders could deadlock.
GC_LOCK = "dbt_ivm registrations gc"


def catalog_exists(db: Db, catalog: str) -> bool:
    return bool(db.value("SELECT to_regclass(%s) IS NOT NULL", (qn(catalog, "stream_tables"),)))


def forget_missing(db: Db, catalog: str, bootstrapped: bool = False) -> list[str]:
    """Unregister every stream table whose table no longer exists; returns their names.

    Safe to run from several refreshes at once: sessions take turns, a registration another session
    removed first is simply not reported, and a stream table being refreshed right now is left alone
    (its refresh recreates the table and registers it again). Runs its own transactions: call it on an
    autocommit connection, outside any transaction that holds locks on the sources. `bootstrapped`:
    the caller knows the catalog schema exists.
    """
    if not (bootstrapped or catalog_exists(db, catalog)) or not _missing(db, catalog):
        return []  # the common case, one query and no lock: every table is there
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (GC_LOCK,))
        missing = _missing(db, catalog)
        # Held until commit: a refresh of one of these waits for us, then finds it unregistered.
        idle = [key for key in missing if _try_lock(db, refresh_lock_key(key))]
        removed = _unregister_missing(db, catalog, idle)
    remove_unused(db, catalog)
    return sorted(removed)


def _missing(db: Db, catalog: str) -> list[str]:
    """The registered stream tables whose table is gone (one query)."""
    rows = db.rows(
        f"SELECT stream_table FROM {qn(catalog, 'stream_tables')} "
        "WHERE to_regclass(format('%I.%I', schema_name, table_name)) IS NULL"
    )
    return [str(r[0]) for r in rows]


def _unregister_missing(db: Db, catalog: str, keys: list[str]) -> list[str]:
    if not keys:
        return []
    # Checked again: a refresh may have recreated the table since the first look. (`%%`: a statement
    # with parameters.)
    deleted = db.rows(
        f"DELETE FROM {qn(catalog, 'stream_tables')} WHERE stream_table = ANY (%s::text[]) "
        "AND to_regclass(format('%%I.%%I', schema_name, table_name)) IS NULL RETURNING stream_table",
        (keys,),
    )
    for (key,) in deleted:
        immediate.remove(db, catalog, str(key))  # writers stop maintaining a table that is gone
        procedure.remove(db, catalog, str(key))
    return [str(r[0]) for r in deleted]


def remove_unused(db: Db, catalog: str) -> None:
    """``capture.remove_unused``, unless a stream table is being created over one of the unused sources.

    Such a source's buffer has no committed consumer yet; removing it would only cost the new
    stream table a FULL refresh, but there is no reason to. Its capture is removed next time.
    """
    if not catalog_exists(db, catalog):
        return
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (GC_LOCK,))
        unused = db.rows(
            f"SELECT source FROM {qn(catalog, 'change_buffers')} AS b WHERE NOT EXISTS "
            f"(SELECT 1 FROM {qn(catalog, 'stream_tables')} AS s WHERE b.source = ANY (s.sources) "
            f"AND {capture.READS_BUFFERS})"
        )
        if unused and all(_try_lock(db, capture.pin_key(str(r[0]))) for r in unused):
            capture.remove_unused(db, catalog)


def _try_lock(db: Db, key: str) -> bool:
    """Take an exclusive advisory lock until the transaction ends, if nobody holds it."""
    return bool(db.value("SELECT pg_try_advisory_xact_lock(hashtext(%s))", (key,)))


def registered_relations(db: Db, catalog: str) -> list[RegisteredTable]:
    """Every registration: its stream table, schema, table and the dbt project that last kept it."""
    if not catalog_exists(db, catalog):
        return []
    rows = db.rows(
        f"SELECT stream_table, schema_name, table_name, run_settings ->> {lit(run_settings.PROJECT)} "
        f"FROM {qn(catalog, 'stream_tables')}"
    )
    return [
        RegisteredTable(str(key), str(schema), str(table), project) for key, schema, table, project in rows
    ]


def list_registrations(db: Db, catalog: str) -> list[StreamTableStatus]:
    """Every registered stream table, whether its table exists, the changes waiting for it, and why
    its next refresh recomputes it, when the catalog already says so."""
    if not catalog_exists(db, catalog):
        return []
    found: list[StreamTableStatus] = []
    with db.transaction("REPEATABLE READ"):  # one consistent view of the catalog and the buffers
        buffers = {
            str(source): str(buffer)
            for source, buffer in db.rows(f"SELECT source, buffer_table FROM {qn(catalog, 'change_buffers')}")
        }
        registered = db.rows(
            "SELECT s.stream_table, s.schema_name, s.table_name, s.frontier::text, s.needs_full, "
            "s.refresh_mode, s.sources, "
            "s.refreshed_at, extract(epoch FROM now() - s.refreshed_at)::float8, "
            "(s.run_settings ->> 'target_lag_seconds')::float8, h.action, h.status, s.run_settings ->> 'schedule' "
            f"FROM {qn(catalog, 'stream_tables')} AS s LEFT JOIN LATERAL (SELECT action, status "
            f"FROM {qn(catalog, 'refresh_history')} WHERE stream_table = s.stream_table "
            "ORDER BY refresh_id DESC LIMIT 1) AS h ON true ORDER BY s.stream_table"
        )
        readable = {
            t
            for t in (outside_writes.TABLE, capture.MARKS, in_database.TABLE)
            if _readable(db, qn(catalog, t))
        }
        # The columns from `refresh_mode` on are StreamTableStatus's fields from its third on, in its
        # order but for `pending` (refresh_mode, sources, refreshed_at, staleness, target_lag, last
        # action and status, schedule).
        for key, schema, table, frontier, needs_full, mode, sources, *shown in registered:
            exists = bool(db.value("SELECT to_regclass(%s) IS NOT NULL", (qn(schema, table),)))
            names = [str(s) for s in sources or []]
            # An IMMEDIATE table is kept in its writers' transactions: nothing waits for it (the
            # buffer it may share with differential tables is theirs, capture.READS_BUFFERS).
            pending = {
                s: 0 if mode == "immediate" else _pending(db, catalog, buffers.get(s), frontier)
                for s in names
            }
            status = StreamTableStatus(str(key), exists, str(mode), names, pending, *shown)
            if exists and mode != "full":
                # IMMEDIATE tables follow TRUNCATE in the writer's transaction and keep no frontier
                # of their own to fall behind: only the reasons its rebuild check reads apply.
                frontier = None if mode == "immediate" else frontier
                looked = Looked(str(key), qn(schema, table), frontier, needs_full)
                reason = _recompute_reason(db, catalog, looked, {s: buffers.get(s) for s in names}, readable)
                if reason is not None:
                    status.next_action = "REBUILD" if mode == "immediate" else "FULL"
                    status.next_reason = reason
            found.append(status)
    return found


@dataclass(frozen=True)
class Looked:
    """What `list_registrations` read of one registration."""

    stream_table: str
    relation: str
    frontier: str | None
    needs_full: str | None


def _recompute_reason(
    db: Db, catalog: str, looked: Looked, buffers: dict[str, str | None], readable: set[str]
) -> str | None:
    """Why the next refresh recomputes the table, as far as the catalog tells without planning its
    query (the runner finds these same reasons, and those only planning shows: DDL on a source), in
    one query. `buffers`: each source's change buffer (None: it has none); `readable`: the catalog
    tables this role may read."""
    if looked.needs_full:
        return looked.needs_full
    frontier = None if looked.frontier is None else capture.snapshot(looked.frontier)
    # A catalog from before the log of writes by hand existed has none.
    written = (
        outside_writes.reason_sql(catalog, looked.stream_table)
        if outside_writes.TABLE in readable
        else "NULL"
    )
    ahead = "false" if frontier is None else capture.frontier_ahead_sql(frontier)
    truncated = [
        f"WHEN {capture.full_mark_pending_sql(catalog, buffer, frontier)} THEN {lit(source)}"
        for source, buffer in buffers.items()
        if buffer is not None and frontier is not None and capture.MARKS in readable
    ]
    which = f"CASE {' '.join(truncated)} END" if truncated else "NULL"
    row = db.one(f"SELECT {written}, {ahead}, {which}, {outside_writes.guarded_sql(looked.relation)}")
    assert row is not None
    if row[0] is not None:
        return str(row[0])
    if row[1]:
        return capture.FRONTIER_AHEAD
    if row[2] is not None:
        return f"{row[2]} was truncated"
    if row[3] or in_database.TABLE not in readable:
        return None
    version = db.value(
        in_database.installed_version(catalog),
        (looked.stream_table, in_database.signature(catalog, looked.stream_table)),
    )
    # Built before guards existed: the next run puts one on without recomputing.
    return outside_writes.UNGUARDED if (version or 0) >= outside_writes.GUARDED_SINCE else None


def _readable(db: Db, relation: str) -> bool:
    """`relation` exists and this role may read it (a status reader need not be the catalog's owner)."""
    return bool(
        db.value(
            "SELECT to_regclass(%s) IS NOT NULL AND has_table_privilege(to_regclass(%s), 'SELECT')",
            (relation, relation),
        )
    )


def _pending(db: Db, catalog: str, buffer: str | None, frontier: str | None) -> int | None:
    """Rows of `buffer` committed after `frontier`."""
    if buffer is None or frontier is None:
        return None
    relation = qn(catalog, buffer)
    if not _readable(db, relation):
        return None
    frontier_sql = f"{lit(frontier)}::pg_snapshot"
    count = db.value(f"SELECT count(*) FROM {relation} WHERE {capture.pending_filter(frontier_sql)}")
    return int(count)


def drop_registration(db: Db, catalog: str, stream_table: str, drop_table: bool) -> bool:
    """Unregister `stream_table` ("schema.table"), and drop its table when `drop_table`.

    Capture is then removed from sources no other stream table reads. Returns whether it was registered.
    """
    if not catalog_exists(db, catalog):
        return False
    with db.transaction():
        # Its refresh lock first, as a refresh takes it before anything else: waits for one in progress.
        db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (refresh_lock_key(stream_table),))
        db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (GC_LOCK,))
        row = db.one(
            f"SELECT schema_name, table_name FROM {qn(catalog, 'stream_tables')} WHERE stream_table = %s FOR UPDATE",
            (stream_table,),
        )
        if row is not None:
            relation = qn(str(row[0]), str(row[1]))
            if drop_table:
                db.execute(f"DROP TABLE IF EXISTS {relation}")
            else:
                outside_writes.unguard(db, catalog, stream_table, relation)
            db.execute(f"DELETE FROM {qn(catalog, 'stream_tables')} WHERE stream_table = %s", (stream_table,))
            immediate.remove(db, catalog, stream_table)
            procedure.remove(db, catalog, stream_table)
    if row is None:
        return False
    remove_unused(db, catalog)
    return True


def history(db: Db, catalog: str, stream_table: str | None, limit: int) -> list[HistoryRow]:
    """The newest `limit` refreshes (of `stream_table` only, when given), newest first."""
    if not catalog_exists(db, catalog):
        return []
    where = "WHERE stream_table = %s" if stream_table else ""
    rows = db.rows(
        "SELECT refresh_id, stream_table, action, status, rows_inserted, rows_updated, rows_deleted, "
        "changes_read, duration_seconds, finished_at, initiated_by, COALESCE(error_text, reason) "
        f"FROM {qn(catalog, 'refresh_history')} {where} ORDER BY refresh_id DESC LIMIT %s",
        (stream_table, limit) if stream_table else (limit,),
    )
    return [HistoryRow(*row) for row in rows]
