"""Create and refresh one stream table on Spark + Apache Iceberg.

    run_stream_table(spark, spec)   # spark: a SparkSession whose catalog holds Iceberg tables

First run: record every source's current snapshot id, build the table from the sources read AS OF
those snapshots, register it with that map source → snapshot id as its frontier. Later runs: read
each changed source's changes between its frontier snapshot and its current snapshot (Iceberg's
changelog, else a diff of the two snapshots), push them through the delta rules rendered to Spark
SQL, and MERGE the row delta into the stream table. The other sources are read AS OF the same end
snapshots, so the batch is exact even while writers keep committing.

Atomicity without transactions across tables: the frontier is stamped on the stream table's own
commits (``commit.Stamp``), so the MERGE that applies a batch also records it as applied, in one
Iceberg commit. A run killed before that commit redoes the batch; one killed after it finds the new
frontier. A rebuild writes the registry first, then the table with its stamp: a crash in between
leaves either no table (CREATE) or a table stamped with another query's fingerprint (REBUILD).

The kill tests crash a refresh at each of ``crash_points.KILL_POINTS`` through a hook they install.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from dbt_ivm import lifecycle, refresh, run_settings
from dbt_ivm.errors import (
    IvmError,
    SparkFailed,
    UnsupportedQuery,
)
from dbt_ivm.explain import Explanation, explained, forecast
from dbt_ivm.explain_terms import terms_by_source
from dbt_ivm.plan.nodes import whole_input_reason
from dbt_ivm.spark import apply as spark_apply
from dbt_ivm.spark import bindings as spark_bindings
from dbt_ivm.spark import (
    failures,
    field_ids,
    key_check,
    registry,
    session_conf,
    source_changes,
    statement_log,
    upkeep,
)
from dbt_ivm.spark.apply import TempViews, bt
from dbt_ivm.spark.bindings import contents
from dbt_ivm.spark.commit import (
    INTERRUPTED_REBUILD,
    Stamp,
    current_stamp,
)
from dbt_ivm.spark.compiled import compile_query, session_zone
from dbt_ivm.spark.iceberg import quoted_name
from dbt_ivm.spark.names import key as _key
from dbt_ivm.spark.names import parts as _parts
from dbt_ivm.spark.names import table as _table
from dbt_ivm.spark.refresh_steps import SparkRefresh, refuse_repeated_key
from dbt_ivm.spark.source_versions import SourceVersions
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.target import SPARK

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextmanager
def _refresh_lock(spec: StreamTableSpec) -> Iterator[None]:
    """Serialize refreshes of one stream table within this process (dbt threads share a session)."""
    with _locks_guard:
        lock = _locks.setdefault(_key(spec), threading.Lock())
    with lock:
        yield


def refuse_immediate(spec: StreamTableSpec) -> None:
    """IMMEDIATE maintenance runs in the writer's transaction, from triggers: Spark has neither."""
    if spec.refresh_mode == "immediate":
        raise UnsupportedQuery(
            spec.model,
            "refresh_mode='immediate' (Spark and Iceberg have no triggers to maintain a table inside "
            "the writer's transaction)",
            "use refresh_mode='auto' or 'differential' and refresh with dbt run",
        )


def run_stream_table(spark: Any, spec: StreamTableSpec) -> RefreshResult:
    """Create the stream table or bring it up to date; returns what was done."""
    refuse_immediate(spec)
    spark = statement_log.reporting(spark, spec.on_statement)
    registry.bootstrap(spark, spec.catalog_schema)
    views = TempViews(spark)
    try:
        with session_conf.overridden(spark, session_conf.CONSTRAINT_PROPAGATION, "false"):
            backend = SparkBackend(spark, spec, views)
            result = lifecycle.run(backend)
        # backend.spec: the registered config when on_configuration_change='continue' kept it.
        _keep_run_settings(spark, backend.spec, backend._registration, result)
        if result.action != "SKIP":  # it committed nothing that upkeep would tidy
            result.warnings.extend(_upkeep(spark, spec))
        return result
    except IvmError:
        raise
    except Exception as error:
        message = failures.readable(error)
        if message is None:
            raise
        raise SparkFailed(spec.model, message) from error
    finally:
        views.drop()


def _upkeep(spark: Any, spec: StreamTableSpec) -> list[str]:
    """Keep the catalog tables and the stream table from growing with every refresh (`upkeep`);
    a failure is a warning, never the run's."""
    failed = registry.compact(spark, spec.catalog_schema)
    try:
        with _refresh_lock(spec):  # expiry commits to the stream table, as a refresh does
            upkeep.expire_stream_table(spark, _parts(spec), lambda: _read_from(spark, spec))
    except Exception as error:
        failed.append(f"its snapshots: {failures.summary(error)}")
    return [f"model {spec.model}: upkeep failed, the next run tries again: {why}" for why in failed]


def _read_from(spark: Any, spec: StreamTableSpec) -> list[int]:
    """The snapshots of this stream table where the stream tables reading it start their next batch."""
    key = _key(spec)
    starts = []
    for reader in registry.readers_of(spark, spec.catalog_schema, key):
        if not spark.catalog.tableExists(quoted_name(reader)):
            continue  # a reader whose table is gone (dbt-ivm gc forgets it) needs nothing
        _, stamp = current_stamp(spark, reader)  # fails the expiry (a warning) if unreadable
        if stamp is not None and key in stamp.frontier:
            starts.append(stamp.frontier[key])
    return starts


def _keep_run_settings(
    spark: Any, spec: StreamTableSpec, known: registry.Registration | None, result: RefreshResult
) -> None:
    """What a refresh without dbt needs of the model's config, when dbt ran it and it changed (a
    build saved them with the registration)."""
    settings = run_settings.to_keep(spec, known.run_settings if known is not None else None)
    if settings is not None and result.action not in ("CREATE", "REBUILD"):
        registry.keep_run_settings(spark, spec.catalog_schema, _key(spec), settings, spec.refresh_mode)


class SparkBackend:
    """The Spark + Iceberg steps of the refresh lifecycle (dbt_ivm.lifecycle)."""

    def __init__(self, spark: Any, spec: StreamTableSpec, views: TempViews) -> None:
        self.spark = spark
        self.spec = spec
        self.views = views
        self._registration: registry.Registration | None = None
        self._stamp: Stamp | None = None

    def serialized(self) -> AbstractContextManager[None]:
        return _refresh_lock(self.spec)

    def registered(self) -> lifecycle.Registered | None:
        self._registration = registry.lookup(self.spark, self.spec.catalog_schema, _key(self.spec))
        found = self._registration
        if found is None:
            return None
        return lifecycle.Registered(
            found.defining_query, found.fingerprint, found.refresh_mode, found.run_settings
        )

    def table_exists(self) -> bool:
        return bool(self.spark.catalog.tableExists(f"{self.spec.schema}.{self.spec.name}"))

    def interrupted_build(self, registered: lifecycle.Registered) -> str | None:
        _, self._stamp = current_stamp(self.spark, _parts(self.spec))
        if self._stamp is not None and self._stamp.fingerprint != registered.fingerprint:
            # A rebuild died between registering the new query and creating its table.
            return INTERRUPTED_REBUILD
        return None

    def build(self, sql: str, action: str, reason: str | None, started: float) -> RefreshResult:
        return _build(self, sql, action, reason, started)

    def refresh(self, sql: str, started: float) -> RefreshResult:
        assert self._registration is not None
        compiled = compile_query(self.spark, self.spec, sql)
        steps = SparkRefresh(
            self,
            self.spark,
            self.views,
            compiled,
            self._registration,
            self._stamp,
            started,
            lambda why: _build(self, sql, "REBUILD", why, started),
        )
        return refresh.refresh(steps)

    def record(self, fields: dict[str, object]) -> int | None:
        # A refresh of a dbt run that found nothing to do: its row rides along with a later append,
        # at the latest when the run ends (registry._DEFERRED).
        skipped = (
            fields.get("action") == "SKIP"
            and fields.get("status") == "OK"
            and self.spec.initiated_by == "dbt"
        )
        return registry.record(self.spark, self.spec.catalog_schema, _key(self.spec), fields, defer=skipped)

    def record_failure(self, fields: dict[str, object]) -> None:
        with contextlib.suppress(Exception):
            self.record(fields)


def _build(backend: SparkBackend, sql: str, action: str, reason: str | None, started: float) -> RefreshResult:
    spark, spec, views, registered = backend.spark, backend.spec, backend.views, backend._registration
    compiled = compile_query(spark, spec, sql)
    versions = SourceVersions(spark, compiled.sources, compiled.reads)
    ends = versions.ends
    layout, built = contents(views, compiled, sql, versions)
    registration = registry.Registration(
        stream_table=_key(spec),
        schema_name=spec.schema,
        table_name=spec.name,
        defining_query=sql,
        fingerprint=lifecycle.fingerprint(sql),
        refresh_mode=spec.refresh_mode,
        layout_kind=layout.kind if compiled.layout else "plain",
        differential_ok=compiled.plan is not None,
        unsupported_reason=str(compiled.unsupported) if compiled.unsupported else None,
        sources=[s.info.qualified for s in compiled.sources],
        run_settings=run_settings.to_keep(spec, None) or (registered.run_settings if registered else None),
    )
    if registered is not None:
        registration.created_at = registered.created_at
    # Registry first: a crash before the table exists again is a CREATE; one before the old table is
    # dropped leaves a table stamped with the old fingerprint, which the next run rebuilds.
    registry.save(spark, spec.catalog_schema, registration, new=registered is None)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {bt(spec.schema)}")
    spark.sql(f"DROP TABLE IF EXISTS {_table(spec).sql('spark')}")
    stamp = Stamp(
        ends,
        registration.fingerprint,
        compiled.views_digest,
        field_ids.dumps(versions.fields),
        session_zone(spark, compiled),
    )
    computing = time.monotonic()
    rows = spark_apply.create_table(spark, _parts(spec), layout, built, stamp, spec.table_properties)
    result = RefreshResult(
        action="CREATE" if action == "CREATE" else "REBUILD",
        rows_inserted=rows,
        contents_seconds=time.monotonic() - computing,
    )
    if layout.kind == "keyed" and key_check.stored_key_repeats(spark, _table(spec), layout.key):
        result.warnings.append(refuse_repeated_key(spark, views, spec, compiled, versions, drop=True))
    result.reason = reason
    if compiled.unsupported is not None:
        result.warnings.append(f"{compiled.unsupported}; every refresh will be FULL")
    for source in compiled.not_iceberg:
        result.warnings.append(
            f"model {spec.model}: {source.info.qualified} is not an Iceberg table "
            f"({source.provider or 'unknown provider'}); every refresh will be FULL"
        )
    lifecycle.record(backend, result, 0, started)
    return result


def drop_stream_table(spark: Any, schema: str, name: str, catalog_schema: str = "dbt_ivm") -> None:
    """Unregister a stream table (its table is dropped by the caller)."""
    if spark.catalog.tableExists(f"{catalog_schema}.stream_tables"):
        registry.unregister(spark, catalog_schema, f"{schema}.{name}")


def check_differential(spark: Any, spec: StreamTableSpec) -> None:
    """Plan `spec`'s query as refresh_mode='differential' does, writing nothing: raises
    UnsupportedQuery naming the construct when it cannot be maintained differentially."""
    compile_query(spark, dataclasses.replace(spec, refresh_mode="differential"), spec.sql)


def explain(spark: Any, spec: StreamTableSpec, changes: int | None = None) -> Explanation:
    """What a refresh of `spec` would do (dbt_ivm.explain), planned as `auto` plans it, and with
    `changes`, what it would do with a batch of that many changed rows; writes nothing."""
    auto = dataclasses.replace(spec, refresh_mode="auto")
    compiled = compile_query(spark, auto, spec.sql)
    whole = whole_input_reason(compiled.plan, SPARK) if compiled.plan is not None else None
    terms = None
    if compiled.plan is not None and compiled.layout is not None:
        new_context = functools.partial(spark_bindings.context, compiled)
        # Spark reads a changed source as of the frontier snapshot.
        terms = terms_by_source(compiled.plan, compiled.layout, SPARK, new_context, reads_before=True)
    explanation = explained(compiled.plan, compiled.layout, compiled.unsupported, whole, SPARK.dialect, terms)
    if changes is None:
        return explanation
    ends = SourceVersions(spark, compiled.sources, compiled.reads).ends
    rows_read = source_changes.rows_read(spark, auto, compiled.sources, ends)
    recorded = spark.catalog.tableExists(f"{bt(spec.catalog_schema)}.{bt('refresh_history')}")
    history = registry.recent_refreshes(spark, spec.catalog_schema, _key(spec)) if recorded else []
    return forecast(explanation, spec, changes, rows_read, history)
