"""Writes into a stream table by anyone but dbt-ivm: noticed, so the next refresh recomputes it.

A refresh applies a batch to the rows the stream table holds; a row deleted, changed or added by hand
(a fix-up ``UPDATE``, a ``TRUNCATE``, a post-hook's ``DELETE``) would stay wrong through every
differential refresh after it. Follow one such write:

1. ``DELETE FROM analytics.totals WHERE customer = 'a'`` fires the stream table's statement trigger
   ``__ivm_guard`` (``ENABLE ALWAYS``: a ``session_replication_role = replica`` session fires it too).
2. Its function, the catalog's ``outside_write`` (SECURITY DEFINER: the writer needs no rights on
   the catalog; it runs no user code), compares the transaction-local setting ``dbt_ivm.writing``
   with the stream table the trigger names. dbt-ivm sets that setting to the stream table it is
   writing — for the whole transaction of a refresh by the engine, around its statements in a
   refresh function or an IMMEDIATE maintenance trigger (restored after, so a stream table
   maintained inside another's refresh does not unmark it). Here it is unset: an outside write.
3. The function appends one row to ``<catalog>.outside_writes`` (one waits per stream table at most;
   insert-only, so it never waits on or fails against a refresh). Nothing it does can fail the
   writer's statement: any error there is swallowed.
4. The next refresh finds that row and refreshes FULL (IMMEDIATE: the next ``dbt run`` rebuilds),
   with the row's reason in the history; the refresh's commit deletes the rows its snapshot saw.

Statement triggers fire for statements that change no row too: a no-op write by hand costs one
FULL refresh, never a wrong table.
"""

from __future__ import annotations

from dbt_ivm.errors import TriggerNameTaken
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.trigger_names import foreign_triggers
from dbt_ivm.quoting import dollar_quoted, lit, q, qn

TABLE = "outside_writes"
FUNCTION = "outside_write"
TRIGGER = "__ivm_guard"
WRITING = "dbt_ivm.writing"  # the setting naming the stream table dbt-ivm is writing now
# Refresh functions of this version (postgres.in_database) and later were installed with the guard: a
# table without it lost it since (dropped or disabled by hand). Earlier ones never had it.
GUARDED_SINCE = 12
UNGUARDED = (
    "its trigger noticing writes by hand (__ivm_guard) was dropped or disabled: writes may have gone "
    "unseen (dbt run or dbt-ivm refresh puts it back)"
)


def table_sql(catalog: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {qn(catalog, TABLE)} (stream_table text NOT NULL, "
        "reason text NOT NULL, written_at timestamptz NOT NULL DEFAULT now(), "
        "written_in xid8 NOT NULL DEFAULT pg_current_xact_id())"
    )


def function_sql(catalog: str) -> str:
    """The guard triggers' function; TG_ARGV[0] is the stream table ("schema.table")."""
    log = qn(catalog, TABLE)
    body = f"""BEGIN
  IF pg_catalog.current_setting({lit(WRITING)}, true) IS DISTINCT FROM TG_ARGV[0] THEN
    BEGIN
      INSERT INTO {log} (stream_table, reason)
        SELECT TG_ARGV[0], pg_catalog.format('the stream table was written outside dbt-ivm (%s by role %s at %s)',
          TG_OP, SESSION_USER, pg_catalog.date_trunc('second', pg_catalog.statement_timestamp()))
        WHERE NOT EXISTS (SELECT FROM {log} AS o WHERE o.stream_table = TG_ARGV[0]);
    EXCEPTION WHEN OTHERS THEN
      NULL;  -- never the writer's failure
    END;
  END IF;
  RETURN NULL;
END
"""
    return (
        f"CREATE OR REPLACE FUNCTION {qn(catalog, FUNCTION)}() RETURNS trigger LANGUAGE plpgsql "
        f"SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {dollar_quoted(body)}"
    )


def create(db: Db, catalog: str) -> None:
    """The log and the function (at the catalog's bootstrap); only the function writes the log."""
    db.execute(table_sql(catalog))
    db.execute(f"REVOKE ALL ON {qn(catalog, TABLE)} FROM PUBLIC")
    db.execute(function_sql(catalog))
    # A trigger's function is checked for EXECUTE when the trigger is created, not when it fires:
    # writers need no grant, and no one else can point a trigger of theirs at the log.
    db.execute(f"REVOKE ALL ON FUNCTION {qn(catalog, FUNCTION)}() FROM PUBLIC")


def guard(db: Db, catalog: str, stream_table: str, relation: str, model: str) -> None:
    """Put the guard trigger on the stream table `relation` (registered as `stream_table`); a trigger
    of the user's own under its name is refused by name, never replaced."""
    taken = foreign_triggers(
        db,
        "SELECT pg_catalog.to_regclass(%(relation)s)",
        {"relation": relation},
        [TRIGGER],
        f"{qn(catalog, FUNCTION)}()",
    )
    if taken:
        raise TriggerNameTaken(model, f"stream table {relation}", taken)
    db.execute(
        f"CREATE OR REPLACE TRIGGER {q(TRIGGER)} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {relation} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {qn(catalog, FUNCTION)}({lit(stream_table)})"
    )
    db.execute(f"ALTER TABLE {relation} ENABLE ALWAYS TRIGGER {q(TRIGGER)}")


def unguard(db: Db, catalog: str, stream_table: str, relation: str) -> None:
    """Take the guard off `relation`, a table no longer registered as `stream_table` (kept as a plain
    table: writes to it are nobody's business), and forget the writes it noted."""
    ours = db.value(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid = pg_catalog.to_regclass(%s) "
        "AND t.tgname = %s AND t.tgfoid = pg_catalog.to_regprocedure(%s))",
        (relation, TRIGGER, f"{qn(catalog, FUNCTION)}()"),
    )
    if ours:
        db.execute(f"DROP TRIGGER {q(TRIGGER)} ON {relation}")
    if db.value("SELECT pg_catalog.to_regclass(%s) IS NOT NULL", (qn(catalog, TABLE),)):
        db.execute(f"DELETE FROM {qn(catalog, TABLE)} WHERE stream_table = %s", (stream_table,))


def guarded_sql(relation: str) -> str:
    """SQL: `relation` has its guard trigger, always enabled (a user may have disabled it)."""
    return (
        "EXISTS (SELECT FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid = pg_catalog.to_regclass("
        f"{lit(relation)}) AND t.tgname = {lit(TRIGGER)} AND t.tgenabled = 'A')"
    )


def guarded(db: Db, relation: str) -> bool:
    return bool(db.value(f"SELECT {guarded_sql(relation)}"))


def reason_sql(catalog: str, stream_table: str) -> str:
    """SQL: why the stream table must be recomputed (NULL: it was not written by hand)."""
    return (
        f"(SELECT o.reason FROM {qn(catalog, TABLE)} AS o WHERE o.stream_table = {lit(stream_table)} "
        "ORDER BY o.written_at LIMIT 1)"
    )


def reason(db: Db, catalog: str, stream_table: str) -> str | None:
    found = db.value(f"SELECT {reason_sql(catalog, stream_table)}")
    return None if found is None else str(found)


def forget_sql(catalog: str, stream_table: str) -> str:
    """SQL: the stream table equals its query again: drop the outside writes this snapshot saw. One
    noted by this very transaction stays: a write of its own it did not mark is a write it did not
    plan for."""
    return (
        f"DELETE FROM {qn(catalog, TABLE)} WHERE stream_table = {lit(stream_table)} "
        "AND written_in <> pg_catalog.pg_current_xact_id()"
    )


def mark(db: Db, catalog: str, stream_table: str, relation: str) -> tuple[bool, str | None]:
    """dbt-ivm writes `stream_table` for the rest of this transaction (an engine's refresh); whether
    its guard is on, and `reason`, in the same round trip."""
    row = db.one(
        f"SELECT pg_catalog.set_config(%s, %s, true), {guarded_sql(relation)}, {reason_sql(catalog, stream_table)}",
        (WRITING, stream_table),
    )
    assert row is not None
    return bool(row[1]), None if row[2] is None else str(row[2])


def marked(stream_table: str, statements: str) -> str:
    """PL/pgSQL: `statements` write `stream_table` as dbt-ivm; the setting is restored after."""
    was = f"COALESCE(pg_catalog.current_setting({lit(WRITING)}, true), '')"
    return (
        f"DECLARE __ivm_was_writing text := {was}; BEGIN "
        f"PERFORM pg_catalog.set_config({lit(WRITING)}, {lit(stream_table)}, true); {statements} "
        f"PERFORM pg_catalog.set_config({lit(WRITING)}, __ivm_was_writing, true); END;"
    )
