"""Change capture: statement-level AFTER triggers with transition tables writing typed change buffers.

One buffer per source table, shared by every stream table reading it. Following one row:
``UPDATE orders SET amount = 59.99 WHERE id = 1`` fires the UPDATE trigger once for the statement;
it appends the old image (weight −1) and the new image (weight +1) to ``dbt_ivm.changes_<oid>``,
both stamped with the writer's ``pg_current_xact_id()`` — native column types, no JSON. Nothing
records the order in which statements fired: a nested statement (a row trigger updating the row
again) fires its capture before the outer statement's, and a batch's net effect is a sum of weights
that does not depend on that order (``delta/compact.py``). TRUNCATE cannot list its rows, so its
trigger records a FULL mark that forces the next refresh of every consumer to be FULL.

What a user could do to a source without firing ordinary triggers is either captured or detected:

* the triggers are ``ENABLE ALWAYS``, so they fire under ``session_replication_role = replica``
  (logical replication apply) too — where the dbt role does not own the source it cannot set that:
  a source that a subscription writes is then refreshed FULL, and every refresh warns (``ReplicaGap``);
* they sit on the source and on every partition and inheritance child below it (a statement fires
  the triggers of the table it names only);
* a fingerprint of the source's state is stored at install: its columns (number, name, type,
  modifier, and an enum type's labels: a value renamed changes what a query shows as text), the
  storage of every table in its tree (relfilenode: a rewriting ALTER TABLE, a column dropped and
  re-added, VACUUM FULL), and our trigger rows (their xmin and enabled state: any
  ``ALTER TABLE … DISABLE/ENABLE TRIGGER`` rewrites them). A refresh that finds a different state
  reinstalls capture, and every consumer's next refresh is FULL with the reason.

Buffers are UNLOGGED and unindexed, and their columns have the source's declared types. A value is
copied from a transition table into a column of its own type, which coerces nothing, so no domain
CHECK (user code) ever runs inside capture, whose function is SECURITY DEFINER — nor in a refresh,
which reads the values in their own types. No buffer row is a placeholder: the marks that need no
row image (a sentinel per buffer, and a FULL mark for TRUNCATE) live in the unlogged
``buffer_marks``. Crash recovery (or a failover) empties unlogged tables; a buffer without its
sentinel was reset, so capture is reinstalled and the next refresh is FULL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dbt_ivm.catalog import TableInfo
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.trigger_names import foreign_triggers
from dbt_ivm.quoting import dollar_quoted
from dbt_ivm.reserved import internal_columns
from dbt_ivm.sqltext import WEIGHT, lit, q, qn

# Bump when the buffer's shape or the capture function changes: older installs are reinstalled.
CAPTURE_VERSION = 5
XID = "__ivm_xid"
# Rows of the unlogged table MARKS, kept apart from the typed buffers so that no row of a buffer is
# ever a placeholder (its NULLs would be checked against a user's domain).
MARKS = "buffer_marks"
SENTINEL = "sentinel"  # proves a buffer was not reset by crash recovery (both are unlogged)
FULL_MARK = "full"  # TRUNCATE, or a write capture could not record: the next refresh is FULL
TRIGGER_PREFIX = "__ivm_capture_"
DEFAULT_CATALOG = "dbt_ivm"
# The statement triggers of refresh_mode='immediate' (postgres/immediate.py), on a stream table that
# is itself a source of an immediate one.
IMMEDIATE_TRIGGER_PREFIX = "__ivm_immediate_"
# A stream table that consumes buffers: an IMMEDIATE one is kept by its own triggers instead.
READS_BUFFERS = "s.refresh_mode <> 'immediate'"
NEW_ROWS, OLD_ROWS = "__ivm_new_rows", "__ivm_old_rows"
# The source and every table below it: partitions and inheritance children, at any depth.
TREE_SQL = (
    "WITH RECURSIVE tree(relid) AS (SELECT %(source)s::oid UNION "
    "SELECT i.inhrelid FROM pg_inherits i JOIN tree ON i.inhparent = tree.relid) "
)
ENUM_MARK = "enum labels"


def enum_labels(columns: str) -> str:
    """``[["enum labels", [...]]]``: the labels of the enums among the types of the pg_attribute rows
    `columns` selects as ``a`` (a column's own type, its domain's base, its array's element); ``[]``
    when there is none."""
    return (
        f"COALESCE((SELECT pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_array({lit(ENUM_MARK)}, "
        "pg_catalog.jsonb_agg(e.enumlabel ORDER BY a.attnum, e.enumtypid, e.enumsortorder))) "
        f"FROM {columns} JOIN pg_catalog.pg_type t ON t.oid = a.atttypid JOIN pg_catalog.pg_enum e "
        "ON e.enumtypid IN (t.oid, t.typbasetype, t.typelem) HAVING pg_catalog.count(*) > 0), '[]')"
    )


ENUM_LABELS = enum_labels("(SELECT a.attnum, a.atttypid) AS a")
# What capture depends on, as three JSON arrays (see the module docstring).
STATE_COLUMNS = (
    "(SELECT COALESCE(jsonb_agg(jsonb_build_array(a.attnum, a.attname, a.atttypid::regtype::text, "
    "a.atttypmod, a.attgenerated, pg_get_expr(d.adbin, d.adrelid)) "
    # A collation other than the type's default (the buffer's column has it too); none: as before.
    "|| CASE WHEN a.attcollation <> (SELECT t.typcollation FROM pg_type t WHERE t.oid = a.atttypid) "
    "THEN jsonb_build_array(a.attcollation::regcollation::text) ELSE '[]' END "
    # An enum's labels (of the column's type, its domain's base or its array's element): a value
    # renamed changes what a query shows as text without writing a row. No enum: as before.
    f"|| {ENUM_LABELS} ORDER BY a.attnum), '[]') "
    "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
    "AND a.attgenerated <> '' WHERE a.attrelid = %(source)s::oid AND a.attnum > 0 AND NOT a.attisdropped), "
    "(SELECT COALESCE(jsonb_agg(jsonb_build_array(c.oid::bigint, c.relfilenode::bigint) ORDER BY c.oid), '[]') "
    "FROM tree JOIN pg_class c ON c.oid = tree.relid), "
    "(SELECT COALESCE(jsonb_agg(jsonb_build_array(t.tgrelid::bigint, t.tgname, t.xmin::text, t.tgenabled) "
    "ORDER BY t.tgrelid, t.tgname), '[]') FROM pg_trigger t JOIN tree ON t.tgrelid = tree.relid "
    "WHERE t.tgfoid = to_regprocedure(%(function)s))"
)
STATE_SQL = TREE_SQL + "SELECT " + STATE_COLUMNS
STATE_PARTS = ("columns", "storage", "triggers")
TRIGGERS_ALTERED = "the change capture triggers on {} were disabled, altered or dropped"
INSUFFICIENT_PRIVILEGE = "42501"
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
    # A source column retyped from a domain to its base type: the buffer's domain refuses the value.
    "check_violation",
    "not_null_violation",
)
EVENTS = {
    "ins": f"AFTER INSERT ON {{}} REFERENCING NEW TABLE AS {q(NEW_ROWS)}",
    "upd": f"AFTER UPDATE ON {{}} REFERENCING OLD TABLE AS {q(OLD_ROWS)} NEW TABLE AS {q(NEW_ROWS)}",
    "del": f"AFTER DELETE ON {{}} REFERENCING OLD TABLE AS {q(OLD_ROWS)}",
    "trunc": "AFTER TRUNCATE ON {}",
}


def trigger_name(catalog: str, event: str) -> str:
    """Capture's trigger for `event` on a source. Each catalog schema (each dbt project) names its
    own, so two can capture one source; the default catalog's keep their first names. A long or
    non-ASCII catalog name is hashed: a trigger name has 63 bytes."""
    if catalog == DEFAULT_CATALOG:
        return TRIGGER_PREFIX + event
    tag = (
        catalog
        if catalog.isascii() and len(catalog) <= 36
        else hashlib.sha256(catalog.encode()).hexdigest()[:12]
    )
    return f"{TRIGGER_PREFIX}{tag}_{event}"


def lacking_trigger_privilege(db: Db, table: TableInfo) -> list[str]:
    """The tables of the source's tree (the source, its partitions and children) on which the
    current role may not create triggers."""
    return [
        str(r[0])
        for r in db.rows(
            TREE_SQL + "SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname) FROM tree "
            "JOIN pg_catalog.pg_class AS c ON c.oid = tree.relid "
            "JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE NOT pg_catalog.has_table_privilege(tree.relid, 'TRIGGER') ORDER BY 1",
            {"source": table.identity},
        )
    ]


def buffer_name(table: TableInfo) -> str:
    return f"changes_{table.identity}"


def function_name(table: TableInfo) -> str:
    return f"capture_{table.identity}"


def _function_signature(catalog: str, table: TableInfo) -> str:
    return qn(catalog, function_name(table)) + "()"


def remove_unused(db: Db, catalog: str) -> None:
    """Remove capture from sources no stream table reads any more, so their writes stop paying for it."""
    unused = db.rows(
        f"SELECT source, source_oid::text, buffer_table FROM {qn(catalog, 'change_buffers')} AS b "
        f"WHERE NOT EXISTS (SELECT 1 FROM {qn(catalog, 'stream_tables')} AS s WHERE b.source = ANY (s.sources) "
        f"AND {READS_BUFFERS})"
    )
    for source, oid, buffer in unused:
        # The triggers depend on the function: CASCADE removes them with it.
        db.execute(f"DROP FUNCTION IF EXISTS {qn(catalog, f'capture_{oid}')}() CASCADE")
        db.execute(f"DROP TABLE IF EXISTS {qn(catalog, buffer)}")
        db.execute(f"DELETE FROM {qn(catalog, MARKS)} WHERE buffer = %s", (buffer,))
        db.execute(f"DELETE FROM {qn(catalog, 'change_buffers')} WHERE source = %s", (source,))


def current_state(db: Db, catalog: str, table: TableInfo) -> dict[str, Any]:
    """The source's columns, storage and capture triggers now (compared with what install stored)."""
    row = db.one(STATE_SQL, {"source": table.identity, "function": _function_signature(catalog, table)})
    assert row is not None
    return dict(zip(STATE_PARTS, row, strict=True))


def reinstall_reason(db: Db, catalog: str, table: TableInfo) -> str | None:
    """Why this source's capture must be (re)installed, or None when it is complete and untouched."""
    return inspect(db, catalog, table).reinstall_reason


@dataclass(frozen=True)
class ReplicaGap:
    """Capture triggers on a source that could not be set ENABLE ALWAYS (only the source's owner may):
    they do not fire for writes under session_replication_role = replica."""

    source: str
    subscribed: bool  # a logical replication subscription writes the source: recompute it
    catalog: str = DEFAULT_CATALOG

    def full_reason(self) -> str:
        return (
            f"{self.source} is written by logical replication and its capture triggers are not "
            "ENABLE ALWAYS (only its owner can set that)"
        )

    def warning(self) -> str:
        triggers = ", ".join(f"{q(trigger_name(self.catalog, e))}" for e in EVENTS)
        return (
            f"capture triggers on {self.source} are not ENABLE ALWAYS (the dbt role does not own it): writes "
            f"made under session_replication_role = replica would go unseen; its owner can run "
            f"ALTER TABLE … ENABLE ALWAYS TRIGGER for each of {triggers}"
        )


@dataclass(frozen=True)
class Inspection:
    """What one refresh needs to know about a source's capture (one query, see inspect)."""

    reinstall_reason: str | None  # None: complete and untouched since install
    replica_gap: ReplicaGap | None


def inspect(db: Db, catalog: str, table: TableInfo) -> Inspection:
    """Check a source's capture against what install stored: its registration, buffer and sentinel,
    the source's fingerprint, and whether its triggers fire in replica mode — in one query."""
    label, buffer = table.qualified, buffer_name(table)
    marks = qn(catalog, MARKS)
    row = db.one(
        TREE_SQL
        + "SELECT b.source_oid::text, b.capture_version, b.state, to_regclass(%(buffer)s) IS NOT NULL, "
        f"EXISTS (SELECT 1 FROM {marks} WHERE buffer = %(buffer_name)s AND kind = '{SENTINEL}'), "
        f"EXISTS (SELECT 1 FROM {marks} WHERE buffer = %(buffer_name)s AND kind = '{FULL_MARK}'), "
        f"{STATE_COLUMNS}, "
        "EXISTS (SELECT 1 FROM pg_trigger t JOIN tree ON t.tgrelid = tree.relid "
        "WHERE t.tgfoid = to_regprocedure(%(function)s) AND t.tgenabled <> 'A'), "
        "EXISTS (SELECT 1 FROM pg_subscription_rel r JOIN tree ON r.srrelid = tree.relid) "
        f"FROM (SELECT 1) AS one LEFT JOIN {qn(catalog, 'change_buffers')} AS b ON b.source = %(label)s",
        {
            "source": table.identity,
            "function": _function_signature(catalog, table),
            "buffer": qn(catalog, buffer),
            "buffer_name": buffer,
            "label": label,
        },
    )
    assert row is not None
    oid, version, stored, buffer_exists, has_sentinel, has_full_mark = row[:6]
    now = dict(zip(STATE_PARTS, row[6:9], strict=True))
    not_always, subscribed = row[9:]
    gap = ReplicaGap(label, bool(subscribed), catalog) if not_always else None
    return Inspection(
        _reinstall_reason(table, oid, version, stored, buffer_exists and has_sentinel, has_full_mark, now),
        gap,
    )


def _reinstall_reason(
    table: TableInfo,
    oid: str | None,
    version: int | None,
    stored: dict[str, Any] | None,
    intact: bool,
    truncated: bool,
    now: dict[str, Any],
) -> str | None:
    label = table.qualified
    if oid is None:
        return f"change capture on {label} was installed"
    if oid != table.identity:
        return f"{label} was dropped and re-created"
    if version != CAPTURE_VERSION or stored is None:
        return f"change capture on {label} was upgraded"
    if not intact:
        return f"the change buffer of {label} was reset (crash recovery or failover) or removed"
    if now["columns"] != stored["columns"]:
        if _without_labels(now["columns"]) == _without_labels(stored["columns"]):
            if _without_labels(stored["columns"]) == stored["columns"]:  # installed before labels were kept
                return f"change capture on {label} was upgraded (it fingerprints enum labels now)"
            return f"an enum type of a column of {label} renamed or added a value (ALTER TYPE)"
        return f"the columns of {label} changed"
    if [oid for oid, _ in now["storage"]] != [oid for oid, _ in stored["storage"]]:
        return f"the partitions or inheritance children of {label} changed"
    if now["storage"] != stored["storage"]:
        if truncated:
            return f"{label} was truncated"
        return f"{label} was rewritten (ALTER TABLE … TYPE, a column dropped and re-added, VACUUM FULL or CLUSTER)"
    if now["triggers"] != stored["triggers"]:
        return TRIGGERS_ALTERED.format(label)
    return None


def _without_labels(columns: list[list[Any]]) -> list[list[Any]]:
    """A columns fingerprint without its enums' labels."""
    return [
        [part for part in column if not (isinstance(part, list) and part[:1] == [ENUM_MARK])]
        for column in columns
    ]


def lock_installs(db: Db) -> None:
    """Serialize capture installs until the caller's transaction ends."""
    db.execute("SELECT pg_advisory_xact_lock(hashtext('dbt_ivm capture install'))")


def repair(db: Db, catalog: str, table: TableInfo, reason: str) -> None:
    """Make capture trustworthy again after `reason` (from reinstall_reason); every consumer's next
    refresh is FULL. Triggers that were only altered — all there, enabled (the owner may have set
    them ENABLE ALWAYS, which a role without ownership could not redo) — are kept and fingerprinted
    anew; anything else is installed from scratch."""
    stored = db.value(
        f"SELECT state FROM {qn(catalog, 'change_buffers')} WHERE source = %s", (table.qualified,)
    )
    altered = reason == TRIGGERS_ALTERED.format(table.qualified)
    if stored is not None and altered and _triggers_complete(db, catalog, table):
        now = current_state(db, catalog, table)
        if all(now[part] == stored[part] for part in STATE_PARTS if part != "triggers"):
            _record(db, catalog, table, now, reason)
            return
    install(db, catalog, table, reason)


def _triggers_complete(db: Db, catalog: str, table: TableInfo) -> bool:
    """All four triggers on every table of the source's tree, each firing in ordinary sessions."""
    return bool(
        db.value(
            TREE_SQL + "SELECT (SELECT count(*) FROM pg_trigger t JOIN tree ON t.tgrelid = tree.relid "
            "WHERE t.tgfoid = to_regprocedure(%(function)s) AND t.tgenabled IN ('O', 'A')) "
            f"= {len(EVENTS)} * (SELECT count(*) FROM tree)",
            {"source": table.identity, "function": _function_signature(catalog, table)},
        )
    )


def taken_trigger_names(db: Db, catalog: str, table: TableInfo) -> list[str]:
    """Triggers in the source's tree that carry a capture trigger's name but are not capture's own:
    install's CREATE OR REPLACE TRIGGER would silently replace them. Capture's own include those of
    a capture function for another oid of the source (a dump restored): install replaces those."""
    return foreign_triggers(
        db,
        TREE_SQL + "SELECT relid FROM tree",
        {"source": table.identity},
        [trigger_name(catalog, suffix) for suffix in EVENTS],
        _function_signature(catalog, table),
        among=(catalog, "^capture_[0-9]+$"),
    )


def install(db: Db, catalog: str, table: TableInfo, reason: str) -> None:
    """(Re)create the buffer, capture function and triggers. Runs in the caller's transaction.

    Every consumer's next refresh is FULL, for `reason` (its frontier says nothing of a new buffer)."""
    buffer = qn(catalog, buffer_name(table))
    function = qn(catalog, function_name(table))
    names = internal_columns(table)
    types = [c.declared_type() for c in table.columns]
    # A source dropped and recreated has a new oid: drop the old table's buffer and function.
    previous = db.value(
        f"SELECT source_oid::text FROM {qn(catalog, 'change_buffers')} WHERE source = %s", (table.qualified,)
    )
    if previous is not None and previous != table.identity:
        db.execute(f"DROP TABLE IF EXISTS {qn(catalog, f'changes_{previous}')}")
        db.execute(f"DROP FUNCTION IF EXISTS {qn(catalog, f'capture_{previous}')}() CASCADE")
    db.execute(f"DROP TABLE IF EXISTS {buffer}")
    # Also removes this function's triggers from tables that are no longer below the source.
    db.execute(f"DROP FUNCTION IF EXISTS {function}() CASCADE")
    column_defs = "".join(f", {q(n)} {t}" for n, t in zip(names, types, strict=True))
    db.execute(
        f"CREATE UNLOGGED TABLE {buffer} ({q(XID)} xid8 NOT NULL, {q(WEIGHT)} smallint NOT NULL{column_defs})"
    )
    marks = qn(catalog, MARKS)
    db.execute(f"DELETE FROM {marks} WHERE buffer = %s", (buffer_name(table),))
    db.execute(f"INSERT INTO {marks} VALUES (%s, pg_current_xact_id(), %s)", (buffer_name(table), SENTINEL))
    # Only the capture function (SECURITY DEFINER) writes the buffer: it gets no privileges of its own.
    db.execute(f"REVOKE ALL ON {buffer} FROM PUBLIC")
    tree = db.rows(
        TREE_SQL + "SELECT relid::text, relid::regclass::text FROM tree", {"source": table.identity}
    )
    db.execute(_function_sql(function, buffer, marks, table, [str(r[0]) for r in tree]))
    db.execute(f"REVOKE ALL ON FUNCTION {function}() FROM PUBLIC")
    for target in (str(r[1]) for r in tree):
        for suffix, timing in EVENTS.items():
            trigger = q(trigger_name(catalog, suffix))
            db.execute(
                f"CREATE OR REPLACE TRIGGER {trigger} {timing.format(target)} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
            )
            _enable_always(db, target, trigger)
    _record(db, catalog, table, current_state(db, catalog, table), reason)


def _record(db: Db, catalog: str, table: TableInfo, state: dict[str, Any], reason: str) -> None:
    """Store the capture's fingerprint; consumers' frontiers no longer vouch for the buffer."""
    db.execute(
        f"INSERT INTO {qn(catalog, 'change_buffers')} "
        "(source, source_oid, buffer_table, columns, primary_key, capture_version, state) "
        "VALUES (%s, %s::oid, %s, %s, %s, %s, %s) ON CONFLICT (source) DO UPDATE SET "
        "source_oid = EXCLUDED.source_oid, buffer_table = EXCLUDED.buffer_table, columns = EXCLUDED.columns, "
        "primary_key = EXCLUDED.primary_key, capture_version = EXCLUDED.capture_version, "
        "state = EXCLUDED.state, installed_at = now()",
        (
            table.qualified,
            table.identity,
            buffer_name(table),
            table.column_names(),
            list(table.primary_key),
            CAPTURE_VERSION,
            json.dumps(state),
        ),
    )
    db.execute(
        f"UPDATE {qn(catalog, 'stream_tables')} SET needs_full = %s "
        f"WHERE %s = ANY (sources) AND frontier IS NOT NULL",
        (reason, table.qualified),
    )


def _function_sql(function: str, buffer: str, marks: str, table: TableInfo, relids: list[str]) -> str:
    """The capture function. It declares no variables (a PL/pgSQL variable named like a column of the
    source makes the column reference ambiguous) and reads transition-table columns by name, so it
    serves partitions and children whose columns sit at other positions.

    It captures only the tables it was installed on (`relids`: the source and the tables below it).
    Fired on any other (attached to a look-alike table by a role that may execute it, or the source
    restored from a dump under new oids), it writes no row to the buffer and marks it: its
    consumers' next refresh is FULL, and the writer's statement still succeeds."""
    stamp = f"{q(XID)}, {q(WEIGHT)}"
    marker = (
        f"INSERT INTO {marks} VALUES ({lit(buffer_name(table))}, pg_current_xact_id(), {lit(FULL_MARK)});"
    )
    names = "".join(f", {q(n)}" for n in internal_columns(table))

    def copy(weight: int, rows: str) -> str:
        values = "".join(f", r.{q(c)}" for c in table.column_names())
        return (
            f"INSERT INTO {buffer} ({stamp}{names}) "
            f"SELECT pg_current_xact_id(), {weight}{values} FROM {q(rows)} AS r;"
        )

    installed_on = lit("{" + ",".join(relids) + "}")
    body = (
        f"BEGIN\n"
        f"  IF TG_RELID <> ALL ({installed_on}::oid[]) THEN {marker} RETURN NULL; END IF;\n"
        f"  IF TG_OP = 'INSERT' THEN {copy(1, NEW_ROWS)}\n"
        f"  ELSIF TG_OP = 'UPDATE' THEN {copy(-1, OLD_ROWS)} {copy(1, NEW_ROWS)}\n"
        f"  ELSIF TG_OP = 'DELETE' THEN {copy(-1, OLD_ROWS)}\n"
        f"  ELSE {marker}\n"
        f"  END IF;\n  RETURN NULL;\n"
        # A column dropped, renamed or retyped since install must not fail the user's write: record
        # a marker instead (the refresh that follows detects the change, reinstalls and is FULL).
        f"EXCEPTION WHEN {' OR '.join(SCHEMA_DRIFT)} THEN {marker} RETURN NULL;\n"
        # The buffer dropped or renamed by hand: the next refresh finds it missing, reinstalls and is FULL.
        f"  WHEN undefined_table THEN RETURN NULL;\n"
        f"END\n"
    )
    # Column names may contain any text, a dollar-quote tag too: pick one the body does not hold.
    return (
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER "
        f"SET search_path = pg_catalog, pg_temp AS {dollar_quoted(body)}"
    )


def _enable_always(db: Db, target: str, trigger: str) -> None:
    """Fire under session_replication_role = replica too. Only the table's owner may set this; a
    role that may only create triggers leaves them ENABLE (see ReplicaGap)."""
    db.attempt(f"ALTER TABLE {target} ENABLE ALWAYS TRIGGER {trigger}", INSUFFICIENT_PRIVILEGE)


def pending_filter(frontier_sql: str) -> str:
    """Buffer rows committed after the frontier snapshot (and visible to this transaction's snapshot)."""
    return f"{q(XID)} >= pg_snapshot_xmin({frontier_sql}) AND NOT pg_visible_in_snapshot({q(XID)}, {frontier_sql})"


# A frontier no transaction of this server has reached: the catalog came from another server (a
# dump restored into a new cluster, whose transaction ids start low again). Every change until the
# counter passes it would look already applied.
FRONTIER_AHEAD = (
    "its frontier is ahead of this server's transactions (the database was restored from a dump "
    "into another server?): changes since could not be told from those already applied"
)


def frontier_ahead_sql(frontier_sql: str) -> str:
    """SQL: the frontier snapshot lies in this server's future (`FRONTIER_AHEAD`)."""
    return (
        f"pg_catalog.pg_snapshot_xmax({frontier_sql}) > "
        "pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())"
    )


def virtual_columns(db: Db, table: TableInfo) -> dict[str, str]:
    """Virtual generated columns (PostgreSQL 18) and their expressions. Transition tables carry them
    as NULL: a batch computes them from the captured row instead (raw_changes_sql)."""
    rows = db.rows(
        "SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a JOIN pg_attrdef d "
        "ON d.adrelid = a.attrelid AND d.adnum = a.attnum WHERE a.attrelid = %s::oid AND a.attgenerated = 'v'",
        (table.identity,),
    )
    return {str(name): str(expression) for name, expression in rows}


def snapshot(frontier: str) -> str:
    """A pg_snapshot's text as an SQL value."""
    return f"{lit(frontier)}::pg_snapshot"


def raw_changes_sql(
    catalog: str, table: TableInfo, frontier_sql: str, virtual: dict[str, str] | None = None
) -> str:
    """The source's raw changes since the frontier (`frontier_sql`, a pg_snapshot value), as a relation
    (internal names)."""
    source = f"{qn(catalog, buffer_name(table))} AS {q('__ivm_b')}"
    where = f"WHERE {pending_filter(frontier_sql)} AND {q(WEIGHT)} IN (-1, 1)"
    if not virtual:
        cols = ", ".join(q(c) for c in internal_columns(table))
        return f"(SELECT {q(WEIGHT)}, {cols} FROM {source} {where})"
    # A generation expression names the table's columns: evaluate it over the captured row alone.
    pairs = list(zip(table.column_names(), internal_columns(table), strict=True))
    row = ", ".join(f"{q('__ivm_b')}.{q(internal)} AS {q(name)}" for name, internal in pairs)
    computed = ", ".join(f"({virtual[name]}) AS {q(internal)}" for name, internal in pairs if name in virtual)
    cols = ", ".join(
        f"{q('__ivm_v')}.{q(internal)}" if name in virtual else f"{q('__ivm_b')}.{q(internal)}"
        for name, internal in pairs
    )
    return (
        f"(SELECT {q('__ivm_b')}.{q(WEIGHT)}, {cols} FROM {source} CROSS JOIN LATERAL "
        f"(SELECT {computed} FROM (SELECT {row}) AS {q('__ivm_row')}) AS {q('__ivm_v')} {where})"
    )


def pending_stats_sql(catalog: str, table: TableInfo, frontier_sql: str) -> str:
    """(changes pending since the frontier `frontier_sql`, whether a FULL mark — TRUNCATE — is pending too)."""
    return (
        f"SELECT (SELECT count(*) FROM {qn(catalog, buffer_name(table))} WHERE {pending_filter(frontier_sql)}), "
        f"{full_mark_pending_sql(catalog, buffer_name(table), frontier_sql)}"
    )


def changed_rows_sql(catalog: str, table: TableInfo, frontier_sql: str, read: Sequence[str]) -> str:
    """SQL: how many rows of `table` the changes pending since the frontier changed in the columns
    `read`. A captured update is two buffer rows and a change to other columns still one or two; here
    the batch is netted over the columns read (and the key), so a change the query cannot see counts
    nothing, and with a key an updated row counts once."""
    names = table.column_names()
    key = set(table.primary_key) if all(k in names for k in table.primary_key) else set()
    grouped = ", ".join(q(c) for c in internal_columns(table, key | set(read)))
    netted = (
        f"SELECT {grouped}, sum({q(WEIGHT)}) AS {q(WEIGHT)} FROM {qn(catalog, buffer_name(table))} "
        f"WHERE {pending_filter(frontier_sql)} GROUP BY {grouped} HAVING sum({q(WEIGHT)}) <> 0"
    )
    if key:
        counted = f"count(DISTINCT ROW({', '.join(q(c) for c in internal_columns(table, key))}))"
    else:  # each copy of a row added or removed
        counted = f"COALESCE(sum(abs({q(WEIGHT)})), 0)"
    return f"SELECT {counted} FROM ({netted}) AS netted"


def full_mark_pending_sql(catalog: str, buffer: str, frontier_sql: str) -> str:
    """SQL: a FULL mark (TRUNCATE) of `buffer` was committed after the frontier `frontier_sql`."""
    return (
        f"EXISTS (SELECT 1 FROM {qn(catalog, MARKS)} WHERE buffer = {lit(buffer)} "
        f"AND kind = {lit(FULL_MARK)} AND {pending_filter(frontier_sql)})"
    )


def pin_key(source: str) -> str:
    """The advisory lock a stream table being created over `source` holds shared (see pinned)."""
    return f"dbt_ivm buffer {source}"


@contextmanager
def pinned(db: Db, tables: Sequence[TableInfo]) -> Iterator[None]:
    """Keep cleanup off these sources' buffers while a new consumer takes its snapshot and registers.

    Its frontier is not visible to other consumers' cleanup until it commits; rows committed after
    its snapshot would otherwise be deleted before it can read them.
    """
    keys = sorted(pin_key(t.qualified) for t in tables)
    for key in keys:
        db.execute("SELECT pg_advisory_lock_shared(hashtext(%s))", (key,))
    try:
        yield
    finally:
        for key in keys:
            db.execute("SELECT pg_advisory_unlock_shared(hashtext(%s))", (key,))


def cleanup_sql(catalog: str, table: TableInfo) -> tuple[str, str]:
    """The two DELETEs of `cleanup` (FULL marks, then buffer rows every consumer has seen)."""
    seen_by_all = (
        f"NOT EXISTS (SELECT 1 FROM {qn(catalog, 'stream_tables')} AS s WHERE {lit(table.qualified)} = "
        f"ANY (s.sources) AND {READS_BUFFERS} AND ("
        f"s.frontier IS NULL OR NOT pg_visible_in_snapshot(b.{q(XID)}, s.frontier)))"
    )
    return (
        f"DELETE FROM {qn(catalog, MARKS)} AS b WHERE b.buffer = {lit(buffer_name(table))} "
        f"AND b.kind = {lit(FULL_MARK)} AND {seen_by_all}",
        f"DELETE FROM {qn(catalog, buffer_name(table))} AS b WHERE {seen_by_all}",
    )


def cleanup_guard_sql(catalog: str, table: TableInfo) -> str:
    """True when `cleanup` may delete now: the buffer exists (capture is not being reinstalled) and no
    stream table over this source is being created (see pinned; else: next time)."""
    return (
        f"pg_catalog.to_regclass({lit(qn(catalog, buffer_name(table)))}) IS NOT NULL "
        f"AND pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext({lit(pin_key(table.qualified))}))"
    )


def cleanup(db: Db, catalog: str, table: TableInfo) -> int:
    """Delete buffer rows that every consuming stream table's frontier already covers."""
    if not db.value(f"SELECT {cleanup_guard_sql(catalog, table)}"):
        return 0
    marks, rows = cleanup_sql(catalog, table)
    db.execute(marks)
    return db.execute(rows)
