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
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlglot import exp

from dbt_ivm import lifecycle, run_settings
from dbt_ivm.apply.statements import full_delta
from dbt_ivm.catalog import qualified_name
from dbt_ivm.delta import stream
from dbt_ivm.delta.terms import Bindings, Context, memoized_pin
from dbt_ivm.errors import (
    IvmError,
    KeyNotUnique,
    SparkFailed,
    UnsupportedQuery,
)
from dbt_ivm.explain import Explanation, explained, forecast
from dbt_ivm.layout import HASH, Layout
from dbt_ivm.plan.nodes import whole_input_reason
from dbt_ivm.reserved import (
    BOOKKEEPING_DIFFERS,
    internal_column,
    is_reserved,
    renamed_select,
    source_relation,
    table_of,
)
from dbt_ivm.spark import apply as spark_apply
from dbt_ivm.spark import (
    auto_cost,
    crash_points,
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
from dbt_ivm.spark.catalog import NO_SNAPSHOT, SparkTable
from dbt_ivm.spark.commit import (
    INTERRUPTED_REBUILD,
    UNSTAMPED,
    Stamp,
    commit_with,
    current_stamp,
    stamp_without_data,
)
from dbt_ivm.spark.compiled import Compiled, compile_query, session_zone
from dbt_ivm.spark.iceberg import quoted_name
from dbt_ivm.spark.source_versions import SourceVersions
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.target import SPARK

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _key(spec: StreamTableSpec) -> str:
    return qualified_name(spec.schema, spec.name)


def _parts(spec: StreamTableSpec) -> tuple[str, str]:
    return (spec.schema, spec.name)


def _table(spec: StreamTableSpec) -> exp.Table:
    return exp.table_(spec.name, spec.schema, quoted=True)


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
        return _refresh(self, self._registration, self._stamp, started)

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


# Layouts whose rows may repeat (a query planned FULL only holds its rows as they come).
REPEATING = ("multiset", "plain")


def _repeats_changed(registered: registry.Registration, compiled: Compiled) -> str | None:
    """Why the table is stored anew when its rows went from identified by a key to repeating or back
    (a source's declared key dropped or added): the same columns, another way of finding rows."""
    kind = compiled.layout.kind if compiled.layout is not None else "plain"
    if (registered.layout_kind in REPEATING) == (kind in REPEATING):
        return None
    now = "repeat (no key identifies them any more)" if kind in REPEATING else "are now identified by a key"
    return f"the stream table's rows {now}: it is stored anew"


def _columns_mismatch(spark: Any, spec: StreamTableSpec, compiled: Compiled) -> str | None:
    """Why the stored table's columns cannot hold this query's rows (a column renamed or added by
    hand, a source column added under `select *`, bookkeeping columns of an earlier dbt-ivm)."""
    layout = compiled.layout
    expected = list(layout.columns if layout is not None else compiled.output_names)
    fields = spark.table(f"{bt(spec.schema)}.{bt(spec.name)}").schema.fields
    stored = [f.name for f in fields if f.name != HASH]
    # Spark resolves names without regard to case.
    if sorted(c.lower() for c in stored) == sorted(c.lower() for c in expected):
        return None
    differing = {c.lower() for c in stored} ^ {c.lower() for c in expected}
    if all(is_reserved(c) for c in differing):
        return f"{BOOKKEEPING_DIFFERS} ({', '.join(sorted(differing))})"
    return f"the stream table's columns {stored} no longer match its query's {expected}"


def _as_of(
    views: TempViews,
    purpose: str,
    source: SparkTable,
    snapshot: int,
    reads: dict[str, tuple[str, ...]],
    versions: SourceVersions,
) -> exp.Expr:
    """A view of `source` as of `snapshot`: the columns the plan reads, under the engine's internal
    names (reserved.py), each the field its name means now (`field_ids`)."""
    table = table_of(source.info)
    table.set("version", exp.Version(this="VERSION", kind="AS OF", expression=exp.Literal.number(snapshot)))
    name = source.info.qualified
    selected = _select_at(source, reads.get(name), versions.names_at(name, snapshot))
    return views.view(purpose, exp.select(*selected).from_(table).sql("spark"))


def _select_at(
    source: SparkTable, read: tuple[str, ...] | None, names_then: dict[str, str | None]
) -> list[exp.Expr]:
    """The select list of a snapshot's columns under their current (internal) names: the column a
    field was called then, or NULL where the snapshot lacks the field."""
    selected = renamed_select(source.info, read)
    if not names_then:
        return selected
    types = {c.name: c.type for c in source.info.columns}
    for position, name in enumerate(n for n in source.info.column_names() if read is None or n in read):
        if name not in names_then:
            continue
        then = names_then[name]
        value = (
            exp.cast(exp.null(), exp.DataType.build(types[name], dialect="spark"))
            if then is None
            else exp.column(then, quoted=True)
        )
        selected[position] = exp.alias_(value, internal_column(source.info, name), quoted=True)
    return selected


def _current_bindings(
    views: TempViews, sources: list[SparkTable], versions: SourceVersions, reads: dict[str, tuple[str, ...]]
) -> dict[str, exp.Expr]:
    """Every source as of the batch's end snapshot (non-Iceberg sources: as they are now)."""
    current: dict[str, exp.Expr] = {}
    for index, source in enumerate(sources):
        end = versions.ends.get(source.info.qualified, NO_SNAPSHOT)
        if end == NO_SNAPSHOT:
            current[source.info.qualified] = source_relation(source.info)
        else:
            current[source.info.qualified] = _as_of(views, f"cur{index}", source, end, reads, versions)
    return current


def _before_bindings(
    views: TempViews,
    changed: list[SparkTable],
    frontier: dict[str, int],
    current: dict[str, exp.Expr],
    reads: dict[str, tuple[str, ...]],
    versions: SourceVersions,
) -> dict[str, exp.Expr]:
    """Each changed source as of the frontier: the state its changes were read from."""
    before: dict[str, exp.Expr] = {}
    for index, source in enumerate(changed):
        name = source.info.qualified
        start = frontier[name]
        if start == NO_SNAPSHOT:  # no snapshot yet: it held no rows
            empty = exp.select(exp.Star()).from_(current[name].copy()).where(exp.false())
            before[name] = exp.Subquery(this=empty)
        else:
            before[name] = _as_of(views, f"before{index}", source, start, reads, versions)
    return before


def _context(compiled: Compiled, bindings: Bindings, views: TempViews | None = None) -> Context:
    """A rendering context (Spark SQL) with the compiled aggregate result types; with `views`, a
    subquery the delta reads more than once is computed once and pinned (Catalyst would plan and run
    it once per reference)."""
    types = {
        node: {index: exp.DataType.build(t, dialect="spark") for index, t in calls.items()}
        for node, calls in compiled.call_types.items()
    }
    if views is None:
        return Context(bindings, call_types=types)
    return Context(bindings, call_types=types, pin=_pinner(views), pin_counted=_counting_pinner(views))


def _pinner(views: TempViews) -> Callable[[exp.Query], exp.Expr]:
    numbers = itertools.count()
    return memoized_pin("spark", lambda query: views.pinned(f"pin{next(numbers)}", query))


def _counting_pinner(views: TempViews) -> Callable[[exp.Query, str], tuple[exp.Expr, int]]:
    """Pins a query and counts its rows flagged true in the same job (observed as they are computed)."""
    numbers = itertools.count()

    def pin(query: exp.Query, flag: str) -> tuple[exp.Expr, int]:
        count = exp.CountIf(this=exp.column(flag, quoted=True))
        view, values = views.observed(f"counted{next(numbers)}", views.frame(query), [count])
        return view, int(values[0] or 0)

    return pin


def _contents(
    views: TempViews, compiled: Compiled, sql: str, versions: SourceVersions
) -> tuple[Layout, exp.Expr]:
    """The table's layout and its contents from scratch, as of the batch's ends (a query, or a
    relation)."""
    if compiled.plan is not None and compiled.layout is not None:
        current = _current_bindings(views, compiled.sources, versions, compiled.reads)
        bindings = Bindings(SPARK, current=current)
        return compiled.layout, stream.contents(compiled.plan, compiled.layout, _context(compiled, bindings))
    # Not maintainable: the user's Spark SQL as a view, which sqlglot never parses.
    return spark_apply.plain_layout(compiled.output_names), views.view("query", sql)


def _build(backend: SparkBackend, sql: str, action: str, reason: str | None, started: float) -> RefreshResult:
    spark, spec, views, registered = backend.spark, backend.spec, backend.views, backend._registration
    compiled = compile_query(spark, spec, sql)
    versions = SourceVersions(spark, compiled.sources, compiled.reads)
    ends = versions.ends
    layout, contents = _contents(views, compiled, sql, versions)
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
    rows = spark_apply.create_table(spark, _parts(spec), layout, contents, stamp, spec.table_properties)
    result = RefreshResult(action="CREATE" if action == "CREATE" else "REBUILD", rows_inserted=rows)
    if layout.kind == "keyed" and key_check.stored_key_repeats(spark, _table(spec), layout.key):
        result.warnings.append(_refuse_repeated_key(backend, compiled, versions, drop=True))
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


def _refresh(
    backend: SparkBackend, registered: registry.Registration, stamp: Stamp | None, started: float
) -> RefreshResult:
    spark, spec, views = backend.spark, backend.spec, backend.views
    sql = registered.defining_query
    compiled = compile_query(spark, spec, sql)
    if stamp is not None and stamp.views != compiled.views_digest:
        why = "a view the defining query reads was redefined"
        return _build(backend, sql, "REBUILD", why, started)
    why_not = _repeats_changed(registered, compiled) or _columns_mismatch(spark, spec, compiled)
    if why_not is not None:
        return _build(backend, sql, "REBUILD", why_not, started)
    dropped = run_settings.dropped_properties(spec, registered.run_settings)
    if spec.table_properties or dropped:
        spark_apply.sync_properties(spark, _parts(spec), spec.table_properties, dropped)
    versions = SourceVersions(spark, compiled.sources, compiled.reads)
    ends = versions.ends
    frontier = None if stamp is None else stamp.frontier
    reason = _full_reason(spec, compiled, frontier, ends)
    if reason is None and stamp is not None and compiled.plan is not None:
        reason = versions.moved_since(stamp.columns, stamp.frontier)
    zone = session_zone(spark, compiled)
    if reason is None and stamp is not None and stamp.zone is not None and stamp.zone != zone:
        reason = f"the session time zone is {zone!r}, the stream table was computed in {stamp.zone!r}"
    changed = [
        s
        for s in compiled.sources
        if frontier and ends.get(s.info.qualified) != frontier.get(s.info.qualified)
    ]
    if reason is None and not changed:
        result = RefreshResult(action="SKIP", reason="no changes")
        lifecycle.record(backend, result, 0, started)
        return result
    crash_points.reached("before_changes")
    changes = 0
    differential_reason: str | None = None  # slow paths taken, AUTO's numbers
    delta: exp.Query | stream.GroupChange | None = None
    batch: source_changes.Batch | None = None
    if reason is None:
        assert compiled.plan is not None and compiled.layout is not None and frontier is not None
        current = _current_bindings(views, compiled.sources, versions, compiled.reads)
        bindings = Bindings(SPARK, current=current)
        weighed = source_changes.rows_read(spark, spec, compiled.sources, ends)
        batch = source_changes.bind(
            spark, views, spec, frontier, ends, changed, bindings, compiled.reads, weighed
        )
        reason, changes = batch.full_reason, batch.changes_read
        if batch.rebuild and reason is not None:
            # A column the query reads changed type: the stored columns may have to change with it.
            return _build(backend, sql, "REBUILD", reason, started)
        differential_reason = "; ".join(batch.slow_paths) or None
        choice = (
            auto_cost.choose(spark, spec, _key(spec), batch)
            if reason is None and spec.refresh_mode == "auto"
            else None
        )
        if choice is not None:
            if choice.action == "FULL":
                reason = choice.reason
            else:
                differential_reason = "; ".join(r for r in (differential_reason, choice.reason) if r) or None
        if reason is None:
            bindings = dataclasses.replace(
                bindings,
                before=_before_bindings(views, changed, frontier, bindings.current, compiled.reads, versions),
            )
            context = _context(compiled, bindings, views)
            # A stored aggregate applies its change per group; any other plan, its row delta.
            delta = stream.group_change(
                compiled.plan, compiled.layout, context, _table(spec), SPARK
            ) or stream.row_delta(compiled.plan, compiled.layout, context, _table(spec), SPARK)
    if reason is None:
        assert compiled.layout is not None
        result = RefreshResult(action="DIFFERENTIAL", reason=differential_reason)
        layout = compiled.layout
    else:
        result = RefreshResult(action="FULL", reason=reason)
        layout, contents = _contents(views, compiled, sql, versions)
        delta = full_delta(_table(spec), layout, contents)
    new_stamp = Stamp(
        ends, registered.fingerprint, compiled.views_digest, field_ids.dumps(versions.fields), zone
    )
    if delta is None:  # no changed source reaches the result
        stamp_without_data(spark, _parts(spec), new_stamp)
    else:
        narrow = result.action == "DIFFERENTIAL"
        prepared = spark_apply.prepare(views, _table(spec), layout, delta, narrow)
        if prepared.violations:
            why = _refuse_repeated_key(backend, compiled, versions, drop=False)
            return _build(backend, sql, "REBUILD", why, started)
        result.rows_inserted, result.rows_updated, result.rows_deleted = (
            prepared.inserted,
            prepared.updated,
            prepared.deleted,
        )
        try:
            _commit(spark, spec, prepared, new_stamp)
        except Exception as error:
            if MERGE_CARDINALITY not in str(error):
                raise
            # Copies written by hand repeat a key the MERGE matches on; nothing was committed.
            why = _refuse_repeated_key(backend, compiled, versions, drop=False)
            return _build(backend, sql, "REBUILD", why, started)
    lifecycle.record(backend, result, changes, started)
    crash_points.reached("after_history")
    return result


# Spark's error class for a MERGE whose target row matches several rows to apply.
MERGE_CARDINALITY = "MERGE_CARDINALITY_VIOLATION"


def _refuse_repeated_key(
    backend: SparkBackend, compiled: Compiled, versions: SourceVersions, drop: bool
) -> str:
    """Raise KeyNotUnique naming the source whose declared key repeats (dropping the table just
    built, when `drop`, so the next run builds it again); if no source repeats one, the stream
    table's own rows are at fault: return why, for a rebuild or a warning."""
    current = _current_bindings(backend.views, compiled.sources, versions, compiled.reads)
    found = key_check.repeated_key(backend.spark, compiled.sources, current)
    if found is not None:
        if drop:
            backend.spark.sql(f"DROP TABLE IF EXISTS {_table(backend.spec).sql('spark')}")
        raise KeyNotUnique(backend.spec.model, found.describe())
    return "the stream table's rows do not fit its key (were they written outside dbt-ivm?)"


def _commit(spark: Any, spec: StreamTableSpec, prepared: spark_apply.Prepared, stamp: Stamp) -> None:
    """MERGE the prepared rows; the same commit records the new frontier (see the module docstring)."""
    if not prepared.changes_anything:
        stamp_without_data(spark, _parts(spec), stamp)
        return
    crash_points.reached("before_merge")
    crash_points.reached("during_merge")
    commit_with(spark, _parts(spec), stamp, lambda: _merge(spark, prepared.merge))
    crash_points.reached("after_merge")


def _merge(spark: Any, merge: str) -> None:
    # The runtime group filter first joins the batch with the stream table to find the files to
    # rewrite: one more scan of the table, for a batch that touches most of its few files anyway.
    with session_conf.overridden(spark, session_conf.GROUP_FILTER, "false"):
        spark.sql(merge)


def _full_reason(
    spec: StreamTableSpec, compiled: Compiled, frontier: dict[str, int] | None, ends: dict[str, int]
) -> str | None:
    """Why this refresh must be FULL (None: differential may proceed)."""
    if spec.refresh_mode != "full" and compiled.plan is not None and compiled.not_iceberg:
        names = ", ".join(f"{s.info.qualified} ({s.provider or 'unknown'})" for s in compiled.not_iceberg)
        return f"not Iceberg tables, no change history: {names}"
    if spec.refresh_mode != "full" and compiled.plan is not None and frontier is None:
        return UNSTAMPED
    whole_input = whole_input_reason(compiled.plan, SPARK) if compiled.plan is not None else None
    reason = lifecycle.full_reason(spec, compiled.unsupported, frontier is not None, whole_input)
    if reason is not None or frontier is None:
        return reason
    missing = [name for name in ends if name not in frontier]
    if missing:
        return f"no frontier recorded for {', '.join(missing)}"
    return None


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
    explanation = explained(compiled.plan, compiled.layout, compiled.unsupported, whole, SPARK.dialect)
    if changes is None:
        return explanation
    ends = SourceVersions(spark, compiled.sources, compiled.reads).ends
    rows_read = source_changes.rows_read(spark, auto, compiled.sources, ends)
    recorded = spark.catalog.tableExists(f"{bt(spec.catalog_schema)}.{bt('refresh_history')}")
    history = registry.recent_refreshes(spark, spec.catalog_schema, _key(spec)) if recorded else []
    return forecast(explanation, spec, changes, rows_read, history, planner_prices=False)
