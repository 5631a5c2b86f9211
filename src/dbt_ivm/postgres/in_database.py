"""The refresh functions a stream table keeps in the database (`postgres.procedure` renders and
installs them), as callers reach them: by name, under the refresh lock. Imports nothing of the
engine, so `dbt-ivm refresh` can finish a pass that finds nothing to do without loading the planner.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from dbt_ivm import cost
from dbt_ivm.postgres.db import Db
from dbt_ivm.quoting import dollar_quoted, lit, qn
from dbt_ivm.spec import RefreshResult

TABLE = "refresh_procedures"  # the catalog's table of installed refresh functions
LOCK_PREFIX = "dbt_ivm refresh "  # + the stream table: the lock every refresh of it holds
CALL_INITIATED_BY = "CALL dbt_ivm.refresh"  # the history's initiated_by for a refresh by CALL
# Bump when the functions' text, or the stream tables' layout they maintain, changes: the engine runs
# only functions this version installed, and installs them anew (planning, so a table whose layout
# changed is rebuilt) when they are another's.
VERSION = 14  # 14: the engine reads the history's contents_seconds (its catalog has it) before calling them
ARGUMENTS = "text, text, bigint"  # refresh_<tag>(initiated_by, invocation_id, apply_up_to)
UNBOUNDED_BATCH = 2**62  # a batch no refresh reaches: "any number of changes"


def tag_of(stream_table: str) -> str:
    """A short stable name for a stream table ("schema.table"), usable in settings and function names.

    >>> tag_of("public.customer_totals")
    '8c2a1683d172fda4'
    """
    return hashlib.sha256(stream_table.encode()).hexdigest()[:16]


def function_name(stream_table: str, suffix: str = "") -> str:
    return f"refresh_{tag_of(stream_table)}{suffix}"


def refresh_lock_key(stream_table: str) -> str:
    """The advisory lock key every refresh of `stream_table` holds (the engine's and CALL refresh)."""
    return LOCK_PREFIX + stream_table


def batch_limit(refresh_mode: str, history: Sequence[cost.PastRefresh]) -> int:
    """The most changes the refresh function may apply for the engine: any batch when the mode is
    differential; under AUTO, the largest batch the stream table's measured `history` keeps
    differential (dbt_ivm.cost: any batch while no differential refresh is measured), so a batch
    AUTO would apply anyway runs the statements planned at the last install, without planning; none
    otherwise (the engine decides, and plans). The function leaves a batch past
    `full_refresh_threshold` to the engine whatever the limit."""
    if refresh_mode == "differential":
        return UNBOUNDED_BATCH
    if refresh_mode == "auto":
        return cost.differential_limit(history, UNBOUNDED_BATCH)
    return 0


def recent_refreshes(db: Db, catalog: str, stream_table: str) -> list[cost.PastRefresh]:
    """The stream table's most recent successful refreshes that did work (SKIP aside), newest first:
    AUTO's measured evidence (dbt_ivm.cost), a CREATE or REBUILD by the seconds its contents took.
    Read backwards along the refresh id, stopping early."""
    rows = db.rows(
        "SELECT action, COALESCE(contents_seconds, duration_seconds), changes_read, "
        "estimated_differential_seconds "
        f"FROM {qn(catalog, 'refresh_history')} "
        "WHERE stream_table = %s AND status = 'OK' AND duration_seconds IS NOT NULL "
        "AND action IN ('DIFFERENTIAL', 'FULL', 'CREATE', 'REBUILD') ORDER BY refresh_id DESC LIMIT %s",
        (stream_table, cost.RECENT),
    )
    return [
        cost.PastRefresh(action, float(seconds), int(changes), None if estimate is None else float(estimate))
        for action, seconds, changes, estimate in rows
    ]


def signature(catalog: str, stream_table: str) -> str:
    """The stream table's refresh function, as to_regprocedure finds it."""
    return f"{qn(catalog, function_name(stream_table))}({ARGUMENTS})"


def installed_version(catalog: str) -> str:
    """A query of the version of a stream table's installed refresh functions, from the parameters
    (stream table, `signature`): none when they are not there."""
    return f"SELECT version FROM {qn(catalog, TABLE)} WHERE stream_table = %s AND to_regprocedure(%s) IS NOT NULL"


def refresh_by_function(
    db: Db,
    catalog: str,
    stream_table: str,
    refresh_mode: str,
    initiated_by: str,
    invocation_id: str | None = None,
    locked: bool = False,
    installed: int | None = None,
    release: bool = False,
) -> RefreshResult | None:
    """The refresh, done by the stream table's refresh function without planning its query, when it
    finds no change, or a batch under `refresh_mode='differential'`. None when it leaves the refresh
    to the engine: not installed (or by another version); a reason for FULL, or a batch AUTO must
    price; planned against a schema, view or capture that has changed since; a capture trigger that is
    not ENABLE ALWAYS (the engine warns); a table-level SELECT to narrow (postgres.privileges); user
    triggers on the stream table (the engine reads back what they changed, or disables them).

    The lock is taken before the snapshot, as the engine takes it, unless the caller holds it
    (`locked`): a refresh under way finishes first. A caller that holds it keeps it, unless it asks
    (`release`) to have it released with the commit of a refresh done here (a result returned).
    `installed`: the functions' version when the caller read it (registry.find); else read here.

    Round trips: the installed version (unless given) and the lock (unless held); BEGIN with the
    function; COMMIT with the buffer trim (and the unlock)."""
    function = qn(catalog, function_name(stream_table))
    if installed is None:
        installed = db.value(installed_version(catalog), (stream_table, signature(catalog, stream_table)))
    if installed != VERSION:
        return None
    history = recent_refreshes(db, catalog, stream_table) if refresh_mode == "auto" else []
    started = time.monotonic()
    lock = refresh_lock_key(stream_table)
    if not locked:
        db.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock,))
    unlock = release or not locked  # with the commit
    released = False
    try:
        try:
            done = db.one(
                f"BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM {function}(%s, %s, %s)",
                (initiated_by, invocation_id, batch_limit(refresh_mode, history)),
            )
        except Exception:  # whatever it was (a serialization failure, say), the engine decides
            done = None
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if done is None or done[0] is None:
            db.execute("ROLLBACK")  # undo what the check touched, or end the failed transaction
            return None
        # Trim the buffers as the engine's refresh does, after the commit (postgres.procedure): what
        # follows COMMIT in the same round trip is a transaction of its own, as CALL refresh trims and
        # unlocks. A failed COMMIT or trim ends its transaction (PostgreSQL rolls it back), skips the
        # rest and leaves the lock held: released below, or by the caller.
        statements = [f"COMMIT; SELECT {qn(catalog, function_name(stream_table, '_cleanup'))}()"]
        params: list[str] = []
        auto_reason = _auto_reason(refresh_mode, history, done)
        if auto_reason is not None:
            # AUTO's numbers on the history row the function just wrote, as the engine's refresh logs them.
            statements.insert(0, _reason_update(catalog))
            params.append(auto_reason)
        # Last, the id of the history row the function wrote (the newest for the table: other
        # refreshes of it wait on the lock, released by the same statement), for dbt's response.
        newest = (
            f"SELECT (SELECT max(refresh_id) FROM {qn(catalog, 'refresh_history')} WHERE stream_table = %s)"
        )
        params.append(stream_table)
        if unlock:
            newest += ", pg_advisory_unlock(hashtext(%s))"
            params.append(lock)
        statements.append(newest)
        refresh_id = db.value("; ".join(statements), tuple(params))
        released = unlock
    finally:
        if not locked and not released:
            db.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock,))
    action, reason, inserted, updated, deleted, changes = done
    return RefreshResult(
        action=action,
        rows_inserted=int(inserted),
        rows_updated=int(updated),
        rows_deleted=int(deleted),
        seconds=time.monotonic() - started,
        reason=auto_reason or reason,
        changes_read=int(changes),
        refresh_id=None if refresh_mode == "immediate" else refresh_id,  # immediate: none written
    )


def _auto_reason(refresh_mode: str, history: Sequence[cost.PastRefresh], done: tuple[Any, ...]) -> str | None:
    """Why AUTO kept a batch the function applied differential: the numbers `cost.choose` weighed."""
    action, changes = done[0], done[5]
    if refresh_mode != "auto" or action != "DIFFERENTIAL":
        return None
    return cost.choose(int(changes), history).reason


def _reason_update(catalog: str) -> str:
    """Set the reason (a parameter) of the history row this session inserted last (the function's)."""
    history = qn(catalog, "refresh_history")
    return (
        f"UPDATE {history} SET reason = %s WHERE refresh_id = "
        f"pg_catalog.currval(pg_catalog.pg_get_serial_sequence({lit(history)}, 'refresh_id'))"
    )


def dispatcher_sql(catalog: str) -> str:
    """``CALL <catalog>.refresh('schema.table')`` (postgres.procedure tells its steps). A procedure with a SET
    clause cannot commit: every name it uses is qualified instead; it runs with the caller's rights."""
    registry, programs = qn(catalog, "stream_tables"), qn(catalog, TABLE)
    body = f"""#variable_conflict use_column
DECLARE
  __ivm_key text; __ivm_tag text; __ivm_mode text; __ivm_lock integer; __ivm_locked boolean := false;
BEGIN
  SELECT s.stream_table, p.tag, s.refresh_mode INTO __ivm_key, __ivm_tag, __ivm_mode
    FROM {registry} AS s LEFT JOIN {programs} AS p ON p.stream_table = s.stream_table
    WHERE s.stream_table = $1 OR pg_catalog.format('%I.%I', s.schema_name, s.table_name) = $1
    ORDER BY s.stream_table = $1 DESC LIMIT 1;
  IF __ivm_key IS NULL THEN
    RAISE EXCEPTION USING MESSAGE = pg_catalog.format('dbt-ivm: no stream table %s is registered in %s', $1, {lit(catalog)}),
      HINT = 'name it schema.table, as dbt-ivm status lists it';
  END IF;
  IF __ivm_mode = 'immediate' THEN
    action := 'SKIP'; reason := 'refresh_mode=''immediate'': maintained by its writers'; changes_read := 0;
    RETURN;
  END IF;
  IF __ivm_tag IS NULL THEN
    RAISE EXCEPTION USING MESSAGE = pg_catalog.format('dbt-ivm: stream table %s has no refresh procedure yet', __ivm_key),
      HINT = pg_catalog.format('dbt run or dbt-ivm refresh %s installs it (a table built by an earlier dbt-ivm)', __ivm_key);
  END IF;
  __ivm_lock := pg_catalog.hashtext({lit(LOCK_PREFIX)} || __ivm_key);
  IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
    IF pg_catalog.now() <> pg_catalog.statement_timestamp() THEN
      RAISE EXCEPTION 'dbt-ivm: CALL refresh(%) inside a READ COMMITTED transaction block', __ivm_key
        USING HINT = 'CALL it on its own (as pg_cron does), or inside BEGIN ISOLATION LEVEL REPEATABLE READ';
    END IF;
    -- Before the refresh's snapshot, as dbt-ivm refresh takes it: a refresh under way finishes first.
    PERFORM pg_catalog.pg_advisory_lock(__ivm_lock);
    __ivm_locked := true;
    COMMIT;
    SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
  END IF;
  BEGIN
    EXECUTE pg_catalog.format('SELECT * FROM %I.%I(%L, NULL, NULL::pg_catalog.int8)', {lit(catalog)}, 'refresh_' || __ivm_tag,
        {lit(CALL_INITIATED_BY)})
      INTO action, reason, rows_inserted, rows_updated, rows_deleted, changes_read;
  EXCEPTION WHEN OTHERS THEN
    IF __ivm_locked THEN PERFORM pg_catalog.pg_advisory_unlock(__ivm_lock); END IF;
    RAISE;
  END;
  IF __ivm_locked THEN
    COMMIT;
    BEGIN
      EXECUTE pg_catalog.format('SELECT %I.%I()', {lit(catalog)}, 'refresh_' || __ivm_tag || '_cleanup');
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'dbt-ivm: the change buffers of % were not trimmed (%): the next refresh trims them', __ivm_key, SQLERRM;
    END;
    PERFORM pg_catalog.pg_advisory_unlock(__ivm_lock);
  END IF;
END
"""
    outputs = ", ".join(
        f"INOUT {name} {kind} DEFAULT NULL"
        for name, kind in (
            ("action", "text"),
            ("reason", "text"),
            ("rows_inserted", "bigint"),
            ("rows_updated", "bigint"),
            ("rows_deleted", "bigint"),
            ("changes_read", "bigint"),
        )
    )
    return (
        f"CREATE OR REPLACE PROCEDURE {qn(catalog, 'refresh')}(stream_table text, {outputs}) "
        f"LANGUAGE plpgsql AS {dollar_quoted(body)}"
    )
