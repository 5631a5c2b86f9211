"""The catalog schema (default ``dbt_ivm``): which stream tables exist, their frontiers and history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dbt_ivm.postgres import outside_writes
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.in_database import dispatcher_sql, installed_version, signature
from dbt_ivm.sqltext import q, qn

BOOTSTRAP_LOCK = "dbt_ivm catalog bootstrap"
# The column added last, and its table: a catalog that has it needs no upgrade.
NEWEST_TABLE, NEWEST_COLUMN = "refresh_history", "contents_seconds"


def bootstrap(db: Db, catalog: str) -> None:
    """Create the catalog schema and its tables if missing (safe to run concurrently)."""
    s = q(catalog)
    newest_column = (
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        f"AND attname = '{NEWEST_COLUMN}' AND NOT attisdropped)"
    )
    if db.value(newest_column, (qn(catalog, NEWEST_TABLE),)):
        return  # created by an earlier run; columns are only ever added, NEWEST_COLUMN last
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (BOOTSTRAP_LOCK,))
        # Checked again under the lock: a concurrent run may have created everything meanwhile, and
        # CREATE SCHEMA IF NOT EXISTS can still collide with a schema committed while we waited.
        if db.value(newest_column, (qn(catalog, NEWEST_TABLE),)):
            return
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.{q('stream_tables')} ("
            "stream_table text PRIMARY KEY, schema_name text NOT NULL, table_name text NOT NULL, "
            "defining_query text NOT NULL, fingerprint text NOT NULL, refresh_mode text NOT NULL, "
            "layout_kind text, differential_ok boolean NOT NULL, unsupported_reason text, "
            "sources text[] NOT NULL DEFAULT '{}', frontier pg_snapshot, needs_full text, "
            "created_at timestamptz NOT NULL DEFAULT now(), refreshed_at timestamptz, "
            "views_digest text NOT NULL DEFAULT '')"
        )
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.{q('change_buffers')} ("
            "source text PRIMARY KEY, source_oid oid NOT NULL, buffer_table text NOT NULL, "
            "columns text[] NOT NULL, primary_key text[] NOT NULL, installed_at timestamptz NOT NULL DEFAULT now())"
        )
        # Unlogged, like the buffers: crash recovery empties both, and a missing sentinel says so.
        db.execute(
            f"CREATE UNLOGGED TABLE IF NOT EXISTS {s}.{q('buffer_marks')} ("
            "buffer text NOT NULL, __ivm_xid xid8 NOT NULL, kind text NOT NULL)"
        )
        db.execute(f"REVOKE ALL ON {s}.{q('buffer_marks')} FROM PUBLIC")
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.{q('refresh_history')} ("
            "refresh_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, stream_table text NOT NULL, "
            "action text NOT NULL, rows_inserted bigint NOT NULL DEFAULT 0, rows_updated bigint NOT NULL DEFAULT 0, "
            "rows_deleted bigint NOT NULL DEFAULT 0, changes_read bigint NOT NULL DEFAULT 0, "
            "duration_seconds double precision, status text NOT NULL, reason text, error_text text, "
            "initiated_by text, started_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz)"
        )
        # Catalogs created by earlier versions gain the newer columns (NEWEST_COLUMN last).
        for table, column in (
            ("stream_tables", "views_digest text NOT NULL DEFAULT ''"),
            ("change_buffers", "capture_version integer NOT NULL DEFAULT 1"),
            ("change_buffers", "state jsonb"),
            ("stream_tables", "shape text NOT NULL DEFAULT ''"),
            # What AUTO's planner estimated a differential refresh would take (dbt_ivm.cost).
            ("refresh_history", "estimated_differential_seconds double precision"),
        ):
            db.execute(f"ALTER TABLE {s}.{q(table)} ADD COLUMN IF NOT EXISTS {column}")
        # IMMEDIATE stream tables (postgres.immediate): what was installed, and the stripes writers take
        # turns on (created last). `writes` of immediate_state is no longer counted.
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.{q('immediate_state')} (stream_table text PRIMARY KEY, "
            "writes bigint NOT NULL DEFAULT 0, storage jsonb NOT NULL, digest text NOT NULL)"
        )
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.{q('immediate_turns')} (stream_table text NOT NULL, "
            "stripe integer NOT NULL, writes bigint NOT NULL DEFAULT 0, PRIMARY KEY (stream_table, stripe))"
        )
        for table in ("immediate_state", "immediate_turns"):
            db.execute(f"REVOKE ALL ON {s}.{q(table)} FROM PUBLIC")
        # The dbt invocation behind each history row.
        db.execute(f"ALTER TABLE {s}.{q('refresh_history')} ADD COLUMN IF NOT EXISTS invocation_id text")
        # The model's settings a refresh without dbt needs (`dbt-ivm refresh`).
        db.execute(f"ALTER TABLE {s}.{q('stream_tables')} ADD COLUMN IF NOT EXISTS run_settings jsonb")
        # CALL <catalog>.refresh('schema.table') (postgres.in_database): created here, once, because
        # CREATE OR REPLACE of one procedure from concurrent dbt threads fails ("tuple concurrently
        # updated"). A new version of it needs a new NEWEST_COLUMN.
        db.execute(dispatcher_sql(catalog))
        # The refresh functions CALL refresh runs (postgres.procedure).
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.{q('refresh_procedures')} (stream_table text PRIMARY KEY, "
            "version integer NOT NULL, tag text NOT NULL)"
        )
        # Writes into stream tables by hand (postgres.outside_writes).
        outside_writes.create(db, catalog)
        # A CREATE's or REBUILD's seconds of computing the contents: AUTO's FULL evidence (dbt_ivm.cost).
        # Added last: NEWEST_COLUMN.
        db.execute(
            f"ALTER TABLE {s}.{q('refresh_history')} ADD COLUMN IF NOT EXISTS contents_seconds double precision"
        )


@dataclass
class Registered:
    stream_table: str
    defining_query: str
    fingerprint: str
    refresh_mode: str
    sources: list[str]
    frontier: str | None
    needs_full: str | None
    views_digest: str
    shape: str  # the stream table's columns and layout when it was built (runner.shape_of); '' before
    run_settings: dict[str, Any] | None = None  # the model's, as its last dbt run kept them


# A registration's columns, in Registered's order.
COLUMNS = (
    "stream_table",
    "defining_query",
    "fingerprint",
    "refresh_mode",
    "sources",
    "frontier::text",
    "needs_full",
    "views_digest",
    "shape",
    "run_settings",
)


def lookup(db: Db, catalog: str, stream_table: str) -> Registered | None:
    row = db.one(
        f"SELECT {', '.join(COLUMNS)} FROM {qn(catalog, 'stream_tables')} WHERE stream_table = %s",
        (stream_table,),
    )
    return None if row is None else _registered(row)


def _registered(row: tuple[Any, ...]) -> Registered:
    return Registered(
        row[0], row[1], row[2], row[3], list(row[4] or []), row[5], row[6], row[7], row[8], row[9]
    )


@dataclass(frozen=True)
class Found:
    """What a run reads first, under the refresh lock: the registration (None: not registered), whether
    the stream table's table exists, and the version of its refresh functions (None: not installed)."""

    registered: Registered | None
    table_exists: bool
    functions_version: int | None


def find(db: Db, catalog: str, stream_table: str, relation: str) -> Found:
    """`lookup`, whether the table `relation` exists and the installed refresh functions' version
    (postgres.in_database), in one round trip."""
    row = db.one(
        f"SELECT to_regclass(%s) IS NOT NULL, ({installed_version(catalog)}), "
        f"{', '.join(f's.{c}' for c in COLUMNS)} "
        f"FROM (SELECT) AS one LEFT JOIN {qn(catalog, 'stream_tables')} AS s ON s.stream_table = %s",
        (relation, stream_table, signature(catalog, stream_table), stream_table),
    )
    assert row is not None  # one row, registered or not
    exists, version, registration = bool(row[0]), row[1], row[2:]
    return Found(None if registration[0] is None else _registered(registration), exists, version)


def save(db: Db, catalog: str, values: dict[str, Any]) -> None:
    """Insert or replace a stream table's registration; the frontier is the current snapshot."""
    columns = list(values)
    placeholders = ", ".join(["%s"] * len(columns))
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c != "stream_table")
    db.execute(
        f"INSERT INTO {qn(catalog, 'stream_tables')} ({', '.join(columns)}, frontier, refreshed_at) "
        f"VALUES ({placeholders}, pg_current_snapshot(), now()) "
        f"ON CONFLICT (stream_table) DO UPDATE SET {updates}, frontier = EXCLUDED.frontier, "
        f"refreshed_at = EXCLUDED.refreshed_at, needs_full = NULL",
        list(values.values()),
    )
    db.execute(outside_writes.forget_sql(catalog, str(values["stream_table"])))


def keep_run_settings(db: Db, catalog: str, stream_table: str, settings: str, refresh_mode: str) -> None:
    """Store the model's run settings (JSON, dbt_ivm.run_settings) and refresh mode with its
    registration; a write only when they changed."""
    db.execute(
        f"UPDATE {qn(catalog, 'stream_tables')} SET run_settings = %s::jsonb, refresh_mode = %s "
        "WHERE stream_table = %s AND (run_settings IS DISTINCT FROM %s::jsonb OR refresh_mode <> %s)",
        (settings, refresh_mode, stream_table, settings, refresh_mode),
    )


def advance(db: Db, catalog: str, stream_table: str) -> None:
    db.execute(
        f"UPDATE {qn(catalog, 'stream_tables')} SET frontier = pg_current_snapshot(), refreshed_at = now(), "
        "needs_full = NULL WHERE stream_table = %s",
        (stream_table,),
    )
    db.execute(outside_writes.forget_sql(catalog, stream_table))


def unregister(db: Db, catalog: str, stream_table: str) -> None:
    db.execute(f"DELETE FROM {qn(catalog, 'stream_tables')} WHERE stream_table = %s", (stream_table,))
    # A catalog of an earlier dbt-ivm has no log of outside writes.
    if db.value("SELECT to_regclass(%s) IS NOT NULL", (qn(catalog, outside_writes.TABLE),)):
        db.execute(outside_writes.forget_sql(catalog, stream_table))


def record(db: Db, catalog: str, stream_table: str, values: dict[str, Any]) -> int:
    columns = ["stream_table", *values]
    placeholders = ", ".join(["%s"] * len(columns))
    return int(
        db.value(
            f"INSERT INTO {qn(catalog, 'refresh_history')} ({', '.join(columns)}, finished_at) "
            f"VALUES ({placeholders}, clock_timestamp()) RETURNING refresh_id",
            [stream_table, *values.values()],
        )
    )
