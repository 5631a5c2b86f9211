"""Create and refresh one stream table on PostgreSQL.

    run_stream_table(conn, spec)   # conn: a DB-API connection in autocommit mode

First run: install capture on every source (its own transaction, so no writer slips between the
snapshot and the triggers), then in one REPEATABLE READ transaction build the table from scratch and
store that transaction's snapshot as the frontier. Later runs, in one REPEATABLE READ transaction:
read exactly the buffer rows committed after the frontier, push them through the delta rules, apply
the row delta, store the new frontier, delete buffer rows every consumer has seen. Two refreshes of
one stream table serialize on a session advisory lock taken before the snapshot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from dbt_ivm import lifecycle, refresh, run_settings
from dbt_ivm.catalog import TableInfo
from dbt_ivm.errors import IvmError, MissingPrivilege, TriggerNameTaken, UnsupportedQuery
from dbt_ivm.explain import Explanation, explained, forecast
from dbt_ivm.explain_terms import terms_by_source
from dbt_ivm.plan.nodes import whole_input_reason
from dbt_ivm.postgres import apply as pg_apply
from dbt_ivm.postgres import (
    capture,
    immediate,
    in_database,
    installed,
    outside_writes,
    procedure,
    registrations,
    registry,
    user_triggers,
)
from dbt_ivm.postgres.compiled import Compiled, compile_query
from dbt_ivm.postgres.compiled import context as compiled_context
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.names import key as _key
from dbt_ivm.postgres.names import relation as _relation
from dbt_ivm.postgres.names import table as _table
from dbt_ivm.postgres.privileges import restrict_to_user_columns
from dbt_ivm.postgres.refresh_steps import (
    PostgresRefresh,
    Rebuild,
    contents_of,
    inspect_capture,
    rebuild_reason,
    rows_read,
)
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.sqltext import q, qn
from dbt_ivm.target import POSTGRES


def run_stream_table(connection: object, spec: StreamTableSpec) -> RefreshResult:
    """Create the stream table or bring it up to date; returns what was done."""
    db = Db(connection, spec.on_statement)
    registry.bootstrap(db, spec.catalog_schema)
    # Registrations whose table was dropped by hand (or whose model is gone with it) pin buffers.
    registrations.forget_missing(db, spec.catalog_schema, bootstrapped=True)
    backend = PostgresBackend(db, spec)
    result = lifecycle.run(backend)
    # What a refresh without dbt needs of the model's config (no statement when it is stored already).
    # backend.spec: the registered config when on_configuration_change='continue' kept it.
    known = backend._registered.run_settings if backend._registered is not None else None
    settings = run_settings.to_keep(backend.spec, known)
    if settings is not None:
        registry.keep_run_settings(db, spec.catalog_schema, _key(spec), settings, backend.spec.refresh_mode)
    return result


class PostgresBackend:
    """The PostgreSQL steps of the refresh lifecycle (dbt_ivm.lifecycle)."""

    def __init__(self, db: Db, spec: StreamTableSpec) -> None:
        self.db = db
        self.spec = spec
        self.started = time.monotonic()
        self._registered: registry.Registered | None = None
        # Read with the registration (registry.find): whether the table exists (answered once, to the
        # lifecycle's next question) and the installed refresh functions' version.
        self._exists: bool | None = None
        self._functions_version: int | None = None
        self._locked = False  # the refresh lock: held by `serialized`, unless released with a commit

    def serialized(self) -> AbstractContextManager[None]:
        return self._refresh_lock()

    @contextmanager
    def _refresh_lock(self) -> Iterator[None]:
        """Serialize refreshes of one stream table; taken before the snapshot so the second sees the
        first. A refresh by function releases it with its commit, the run's last statement."""
        key = in_database.refresh_lock_key(_key(self.spec))
        self.db.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
        self._locked = True
        try:
            yield
        finally:
            if self._locked:
                self._locked = False
                self.db.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))

    def registered(self) -> lifecycle.Registered | None:
        found = registry.find(self.db, self.spec.catalog_schema, _key(self.spec), _relation(self.spec))
        current = self._registered = found.registered
        self._exists, self._functions_version = found.table_exists, found.functions_version
        if current is None:
            return None
        return lifecycle.Registered(
            current.defining_query, current.fingerprint, current.refresh_mode, current.run_settings
        )

    def table_exists(self) -> bool:
        exists, self._exists = self._exists, None
        if exists is not None:
            return exists  # read with the registration, just before
        return bool(self.db.value("SELECT to_regclass(%s) IS NOT NULL", (_relation(self.spec),)))

    def interrupted_build(self, registered: lifecycle.Registered) -> str | None:
        return None  # a build is one transaction: it happened or it did not

    def build(self, sql: str, action: str, reason: str | None, started: float) -> RefreshResult:
        self.started = started
        if self.spec.refresh_mode == "immediate":
            return self._build_immediate(sql, action, reason)
        return self._build(sql, action, reason)

    def refresh(self, sql: str, started: float) -> RefreshResult:
        self.started = started
        assert self._registered is not None  # looked up by `registered`, under the refresh lock
        registered, spec = self._registered, self.spec
        if spec.refresh_mode == "immediate" or registered.refresh_mode == "immediate":
            return self._check_immediate(sql, registered)
        if (
            registered.needs_full is None
            and spec.refresh_mode == registered.refresh_mode
            and run_settings.to_keep(spec, registered.run_settings) is None  # the function reads those
            and self._functions_version == in_database.VERSION  # else the engine installs them anew
        ):
            # Most runs find nothing changed or a differential batch: the stream table's function in
            # the database refreshes (and records it) without planning the query, unless something
            # needs the engine.
            done = in_database.refresh_by_function(
                self.db,
                spec.catalog_schema,
                _key(spec),
                spec.refresh_mode,
                spec.initiated_by,
                spec.invocation_id,
                locked=True,  # the lifecycle holds it (serialized)
                installed=self._functions_version,
                release=True,  # with its commit, the run's last statement
            )
            if done is not None:
                self._locked = False
                return done
        return self._refresh(sql, registered)

    def record(self, fields: dict[str, object]) -> int | None:
        return registry.record(self.db, self.spec.catalog_schema, _key(self.spec), fields)

    def record_failure(self, fields: dict[str, object]) -> None:
        with contextlib.suppress(Exception), self.db.transaction():
            self.record(fields)

    def _install_capture(self, sql: str) -> Compiled:
        """(Re)install capture on every source of `sql` that lacks it or whose capture can no longer
        be trusted (capture.reinstall_reason), in a committed transaction."""
        db, spec = self.db, self.spec
        with db.transaction():
            compiled = compile_query(db, spec, sql)
            if spec.refresh_mode != "full" and compiled.plan is not None:
                for source in compiled.sources:
                    if capture.reinstall_reason(db, spec.catalog_schema, source) is not None:
                        # Stream tables over one new source are created in parallel (dbt threads):
                        # install once, re-checking under the lock.
                        capture.lock_installs(db)
                        reason = capture.reinstall_reason(db, spec.catalog_schema, source)
                        if reason is not None:
                            _refuse_what_capture_cannot_install(db, spec, source)
                            capture.repair(db, spec.catalog_schema, source, reason)
        return compiled

    def _build(self, sql: str, action: str, reason: str | None) -> RefreshResult:
        db, spec = self.db, self.spec
        captured = self._install_capture(sql)
        relation = _relation(spec)
        # Until this registration commits, other consumers' cleanup must not delete rows this
        # snapshot lacks.
        with capture.pinned(db, captured.sources), db.transaction("REPEATABLE READ"):
            compiled = compile_query(db, spec, sql)
            db.execute(f"CREATE SCHEMA IF NOT EXISTS {q(spec.schema)}")
            dropped_triggers = user_triggers.find_existing(db, relation)
            immediate.remove(db, spec.catalog_schema, _key(spec))  # it was refresh_mode='immediate'
            db.execute(f"DROP TABLE IF EXISTS {relation}")
            layout, contents = contents_of(compiled, sql)
            computing = time.monotonic()
            rows = pg_apply.create_table(db, _table(spec), layout, contents, compiled.target)
            computed = time.monotonic() - computing
            # Before the table is visible: default privileges must not expose its hidden columns.
            restrict_to_user_columns(db, relation, layout.user)
            outside_writes.guard(db, spec.catalog_schema, _key(spec), relation, spec.model)
            registry.save(db, spec.catalog_schema, _registration(spec, sql, compiled))
            procedure.install(
                db,
                spec.catalog_schema,
                installed.program(db, spec, compiled, sql),
                immediate.pinned_settings(db),
            )
            result = RefreshResult(
                action="CREATE" if action == "CREATE" else "REBUILD",
                rows_inserted=max(rows, 0),
                contents_seconds=computed,
            )
            result.reason = reason
            if compiled.unsupported is not None:
                result.warnings.append(f"{compiled.unsupported}; every refresh will be FULL")
            gaps = (i.replica_gap for i in inspect_capture(db, spec, compiled) if i.replica_gap is not None)
            result.warnings.extend(f"model {spec.model}: {g.warning()}" for g in gaps)
            result.warnings.extend(user_triggers.dropped_warning(relation, dropped_triggers))
            lifecycle.record(self, result, 0, self.started)
            user_triggers.notify(db, spec, result)
        return result

    def _build_immediate(self, sql: str, action: str, reason: str | None) -> RefreshResult:
        """Create the table and its maintenance triggers in one READ COMMITTED transaction: the
        triggers lock the sources against writes first, so the contents (read by a later statement,
        in a newer snapshot) hold every committed write and no write slips in before the triggers."""
        db, spec = self.db, self.spec
        relation = _relation(spec)
        with db.transaction():
            compiled = compile_query(db, spec, sql)
            assert compiled.plan is not None and compiled.layout is not None  # else refused by name
            _refuse_for_immediate(db, spec, compiled)
            db.execute(f"CREATE SCHEMA IF NOT EXISTS {q(spec.schema)}")
            dropped_triggers = user_triggers.find_existing(db, relation)
            db.execute(f"DROP TABLE IF EXISTS {relation}")
            procedure.remove(db, spec.catalog_schema, _key(spec))  # writers keep it: nothing to CALL
            immediate.install(
                db,
                spec.catalog_schema,
                _key(spec),
                compiled.sources,
                *installed.immediate_function_and_digest(db, spec, compiled),
            )
            layout, contents = contents_of(compiled, sql)
            rows = pg_apply.create_table(db, _table(spec), layout, contents, compiled.target)
            restrict_to_user_columns(db, relation, layout.user)
            outside_writes.guard(db, spec.catalog_schema, _key(spec), relation, spec.model)
            registry.save(db, spec.catalog_schema, _registration(spec, sql, compiled))
            result = RefreshResult(
                action="CREATE" if action == "CREATE" else "REBUILD", rows_inserted=max(rows, 0)
            )
            result.reason = reason
            result.warnings.extend(user_triggers.dropped_warning(relation, dropped_triggers))
            lifecycle.record(self, result, 0, self.started)
        registrations.remove_unused(db, spec.catalog_schema)  # capture it had as a differential table
        return result

    def _check_immediate(self, sql: str, registered: registry.Registered) -> RefreshResult:
        """An IMMEDIATE stream table is kept by its triggers: a run only checks that they are the
        ones this query needs and were never off (else it rebuilds, saying why)."""
        db, spec = self.db, self.spec
        with db.transaction():
            compiled = compile_query(db, spec, sql)
            _refuse_for_immediate_config(spec)
            reason = _mode_change(registered, spec) or rebuild_reason(compiled, registered)
            if reason is None and registered.needs_full:
                reason = registered.needs_full
            subscribed = next((t.qualified for t in compiled.sources if immediate.subscribed(db, t)), None)
            if reason is None and subscribed is not None:
                reason = f"a logical replication subscription now writes {subscribed}"
            if reason is None:
                reason = immediate.reinstall_reason(
                    db,
                    spec.catalog_schema,
                    _key(spec),
                    compiled.sources,
                    installed.immediate_digest(
                        db, spec, compiled, installed.immediate_conflicts(db, compiled)
                    ),
                )
            if reason is None:
                reason = outside_writes.reason(db, spec.catalog_schema, _key(spec))
            if reason is None and not outside_writes.guarded(db, _relation(spec)):
                reason = outside_writes.UNGUARDED
            if reason is None:
                result = RefreshResult(
                    action="SKIP", reason="refresh_mode='immediate': maintained by its writers"
                )
                lifecycle.record(self, result, 0, self.started)
                return result
        return self.build(sql, "REBUILD", reason, self.started)

    def _refresh(self, sql: str, registered: registry.Registered) -> RefreshResult:
        db, spec = self.db, self.spec
        # Usually capture is in place: plan and refresh in one snapshot. Otherwise install it (its own
        # committed transaction, which flags this table for a FULL refresh) and start again.
        for _ in range(2):
            try:
                with db.transaction("REPEATABLE READ"):
                    compiled = compile_query(db, spec, sql)
                    steps = PostgresRefresh(
                        self,
                        db,
                        compiled,
                        sql,
                        registered,
                        self._functions_version,
                        functools.partial(installed.program, db, spec, compiled, sql),
                        self.started,
                    )
                    result = None if steps.capture_lost() else refresh.refresh(steps)
            except Rebuild as rebuild:
                return self._build(sql, "REBUILD", rebuild.reason)
            if result is not None:
                break
            self._install_capture(sql)
        else:
            raise IvmError(f"model {spec.model}: change capture on its sources could not be installed")
        _cleanup(db, spec, compiled)
        return result


def _mode_change(registered: registry.Registered, spec: StreamTableSpec) -> str | None:
    """Switching to or from IMMEDIATE changes how the table is kept: it is rebuilt."""
    modes = {registered.refresh_mode, spec.refresh_mode}
    if registered.refresh_mode != spec.refresh_mode and "immediate" in modes:
        return f"refresh_mode changed from '{registered.refresh_mode}' to '{spec.refresh_mode}'"
    return None


def _refuse_what_capture_cannot_install(db: Db, spec: StreamTableSpec, source: TableInfo) -> None:
    """Triggers on `source` the dbt role may not create, or a user's trigger under capture's names:
    refused by name before capture is (re)installed."""
    lacking = capture.lacking_trigger_privilege(db, source)
    if lacking:
        role = str(db.value("SELECT pg_catalog.quote_ident(current_user)"))
        raise MissingPrivilege(spec.model, "TRIGGER", lacking, role, "capturing its changes needs")
    taken = capture.taken_trigger_names(db, spec.catalog_schema, source)
    if taken:
        raise TriggerNameTaken(spec.model, f"source {source.qualified}", taken)


def _refuse_for_immediate_config(spec: StreamTableSpec) -> None:
    if spec.refresh_mode == "immediate" and spec.user_triggers == "off":
        raise IvmError(
            f"model {spec.model}: user_triggers='off' cannot be used with refresh_mode='immediate' (it "
            "disables the stream table's triggers with ALTER TABLE, a lock no writer's transaction may "
            "take); use user_triggers='auto' (explicit DML when the table has user triggers) or 'on'"
        )


def _refuse_for_immediate(db: Db, spec: StreamTableSpec, compiled: Compiled) -> None:
    """What IMMEDIATE maintenance cannot do, refused by name."""
    _refuse_for_immediate_config(spec)
    for source in compiled.sources:
        if immediate.subscribed(db, source):
            raise UnsupportedQuery(
                spec.model,
                f"refresh_mode='immediate' over {source.qualified}, which a logical replication "
                "subscription writes (its apply worker fires row triggers only, never the statement "
                "triggers that maintain the table)",
                "use refresh_mode='differential' or 'auto'",
            )
        virtual = capture.virtual_columns(db, source)
        if virtual:
            raise UnsupportedQuery(
                spec.model,
                f"refresh_mode='immediate' over {source.qualified}, whose virtual generated column "
                f"`{next(iter(virtual))}` its transition tables hold as NULL",
                "make the column STORED, or use refresh_mode='differential'",
            )


def _registration(spec: StreamTableSpec, sql: str, compiled: Compiled) -> dict[str, object]:
    return {
        "stream_table": _key(spec),
        "schema_name": spec.schema,
        "table_name": spec.name,
        "defining_query": sql,
        "fingerprint": lifecycle.fingerprint(sql),
        "refresh_mode": spec.refresh_mode,
        "layout_kind": compiled.layout.kind if compiled.layout else "plain",
        "differential_ok": compiled.plan is not None,
        "unsupported_reason": str(compiled.unsupported) if compiled.unsupported else None,
        "sources": [t.qualified for t in compiled.sources] if compiled.plan is not None else [],
        "views_digest": compiled.views_digest,
        "shape": compiled.shape,
    }


def _cleanup(db: Db, spec: StreamTableSpec, compiled: Compiled) -> None:
    """Delete buffer rows all consumers have seen, after the refresh committed.

    READ COMMITTED, not the refresh's REPEATABLE READ: consumers of one buffer refresh concurrently
    (dbt threads), and two of them deleting the same rows under REPEATABLE READ fail to serialize.
    """
    with db.transaction():
        for source in compiled.sources:
            capture.cleanup(db, spec.catalog_schema, source)


def drop_stream_table(connection: object, schema: str, name: str, catalog_schema: str = "dbt_ivm") -> None:
    """Unregister a stream table (its table is dropped by the caller); its buffers stay for other
    consumers, and capture is removed from sources no other stream table reads."""
    db = Db(connection)
    exists = db.value("SELECT to_regclass(%s) IS NOT NULL", (qn(catalog_schema, "stream_tables"),))
    if exists:
        with db.transaction():
            registry.unregister(db, catalog_schema, f"{schema}.{name}")
            immediate.remove(db, catalog_schema, f"{schema}.{name}")
            procedure.remove(db, catalog_schema, f"{schema}.{name}")
        registrations.remove_unused(db, catalog_schema)


def check_differential(connection: object, spec: StreamTableSpec) -> None:
    """Plan `spec`'s query as refresh_mode='differential' does, writing nothing: raises
    UnsupportedQuery naming the construct when it cannot be maintained differentially."""
    db = Db(connection)
    with db.transaction("REPEATABLE READ"):
        compile_query(db, dataclasses.replace(spec, refresh_mode="differential"), spec.sql)


def explain(connection: object, spec: StreamTableSpec, changes: int | None = None) -> Explanation:
    """What a refresh of `spec` would do (dbt_ivm.explain), planned as `auto` plans it, and with
    `changes`, what it would do with a batch of that many changed rows; writes nothing."""
    db = Db(connection)
    with db.transaction("REPEATABLE READ"):
        compiled = compile_query(db, dataclasses.replace(spec, refresh_mode="auto"), spec.sql)
        whole = whole_input_reason(compiled.plan, POSTGRES) if compiled.plan is not None else None
        terms = None
        if compiled.plan is not None and compiled.layout is not None:
            terms = terms_by_source(
                compiled.plan,
                compiled.layout,
                POSTGRES,
                functools.partial(compiled_context, compiled),
                reads_before=False,  # PostgreSQL derives a source's earlier rows from its change
            )
        explanation = explained(
            compiled.plan, compiled.layout, compiled.unsupported, whole, POSTGRES.dialect, terms
        )
        if changes is None:
            return explanation
        read = rows_read(db, compiled.sources)
        recorded = db.value(
            "SELECT to_regclass(%s) IS NOT NULL", (qn(spec.catalog_schema, "refresh_history"),)
        )
        history = in_database.recent_refreshes(db, spec.catalog_schema, _key(spec)) if recorded else []
    return forecast(explanation, spec, changes, read, history)
