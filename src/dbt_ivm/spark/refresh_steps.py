"""The Spark + Iceberg side of one refresh (dbt_ivm.refresh).

The frontier is the source snapshots the stream table's last commit was stamped with; the batch runs
to each source's current snapshot (`SourceVersions.ends`). A changed source's changes are read from
Iceberg's changelog (else a diff of its two snapshots) when the batch is read, which also counts
them for AUTO. The delta, or FULL's diff against the stored rows, is MERGEd in one commit that also
stamps the new frontier (`commit.Stamp`): a run killed before it redoes the batch, one killed after
it finds the new frontier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from dbt_ivm import cost, lifecycle, run_settings
from dbt_ivm.apply.statements import full_delta
from dbt_ivm.delta import budget, stream
from dbt_ivm.delta.terms import Bindings
from dbt_ivm.errors import KeyNotUnique
from dbt_ivm.layout import HASH, Layout
from dbt_ivm.plan.nodes import whole_input_reason
from dbt_ivm.refresh import Batch, Steps
from dbt_ivm.reserved import BOOKKEEPING_DIFFERS, is_reserved
from dbt_ivm.spark import apply as spark_apply
from dbt_ivm.spark import (
    auto_cost,
    crash_points,
    field_ids,
    key_check,
    registry,
    session_conf,
    source_changes,
)
from dbt_ivm.spark.apply import TempViews, bt
from dbt_ivm.spark.bindings import before_bindings, contents, context, current_bindings
from dbt_ivm.spark.catalog import SparkTable
from dbt_ivm.spark.commit import UNSTAMPED, Stamp, commit_with, stamp_without_data
from dbt_ivm.spark.compiled import Compiled, session_zone
from dbt_ivm.spark.iceberg import current_records
from dbt_ivm.spark.names import key, parts, table
from dbt_ivm.spark.source_versions import SourceVersions
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.target import SPARK

SparkDelta = exp.Query | stream.GroupChange

# Layouts whose rows may repeat (a query planned FULL only holds its rows as they come).
REPEATING = ("multiset", "plain")

# How a FULL refresh that rewrote every row says so (the counts are then the rows written and removed).
REWRITTEN = "every row rewritten in one overwrite (no stream table reads its changes)"
# A FULL refresh rewrites a table of at most this many rows whatever the batch: writing them costs
# less than reading and classifying them for a MERGE (profile_spark_refresh.py --mode full: 1.1-1.7x
# faster at 100 rows, 0.7-0.9x at 400,000 where a 1-row batch's MERGE rewrote one file of several).
OVERWRITE_AT_MOST = 100_000

# Spark's error class for a MERGE whose target row matches several rows to apply.
MERGE_CARDINALITY = "MERGE_CARDINALITY_VIOLATION"


class SparkRefresh(Steps[SparkTable, SparkDelta]):
    """`refresh.Steps` over Iceberg snapshots; `build` rebuilds the table (the runner's)."""

    def __init__(
        self,
        backend: lifecycle.Backend,
        spark: Any,
        views: TempViews,
        compiled: Compiled,
        registered: registry.Registration,
        stamp: Stamp | None,
        started: float,
        build: Callable[[str], RefreshResult],
    ) -> None:
        self.backend, self.spark, self.views, self.spec = backend, spark, views, backend.spec
        self.compiled, self.registered, self.stamp, self.started = compiled, registered, stamp, started
        self.build = build
        self.frontier = None if stamp is None else stamp.frontier
        self.versions: SourceVersions | None = None
        self.zone: str | None = None
        self.bindings: Bindings | None = None
        self.changes = 0  # the batch's changes, once read (a FULL decided before reading has none)

    def rebuild_reason(self) -> str | None:
        if self.stamp is not None and self.stamp.views != self.compiled.views_digest:
            return "a view the defining query reads was redefined"
        return _repeats_changed(self.registered, self.compiled) or _columns_mismatch(
            self.spark, self.spec, self.compiled
        )

    def rebuild(self, reason: str) -> RefreshResult:
        return self.build(reason)

    def full_reason(self) -> str | None:
        spark, spec, compiled, stamp = self.spark, self.spec, self.compiled, self.stamp
        dropped = run_settings.dropped_properties(spec, self.registered.run_settings)
        if spec.table_properties or dropped:
            spark_apply.sync_properties(spark, parts(spec), spec.table_properties, dropped)
        self.versions = versions = SourceVersions(spark, compiled.sources, compiled.reads)
        reason = _full_reason(spec, compiled, self.frontier, versions.ends)
        if reason is None and stamp is not None and compiled.plan is not None:
            reason = versions.moved_since(stamp.columns, stamp.frontier)
        self.zone = zone = session_zone(spark, compiled)
        if reason is None and stamp is not None and stamp.zone is not None and stamp.zone != zone:
            reason = f"the session time zone is {zone!r}, the stream table was computed in {stamp.zone!r}"
        return reason

    def pending(self) -> Batch[SparkTable]:
        ends, frontier = self._versions().ends, self.frontier or {}
        changed = [
            s for s in self.compiled.sources if ends.get(s.info.qualified) != frontier.get(s.info.qualified)
        ]
        return Batch(changed)

    def read(self, batch: Batch[SparkTable]) -> Batch[SparkTable]:
        crash_points.reached("before_changes")
        spark, spec, compiled, versions = self.spark, self.spec, self.compiled, self._versions()
        assert self.frontier is not None
        current = current_bindings(self.views, compiled.sources, versions, compiled.reads)
        self.bindings = Bindings(SPARK, current=current)
        weighed = source_changes.rows_read(spark, spec, compiled.sources, versions.ends)
        changed = list(batch.changed)
        bound = source_changes.bind(
            spark,
            self.views,
            spec,
            self.frontier,
            versions.ends,
            changed,
            self.bindings,
            compiled.reads,
            weighed,
        )
        self.changes = bound.changes_read
        return Batch(changed, bound.changes_read, bound.full_reason, bound.rebuild, list(bound.slow_paths))

    def choose(self, batch: Batch[SparkTable]) -> cost.Choice | None:
        return auto_cost.choose(self.spark, self.spec, key(self.spec), batch.changes)

    def delta(self, batch: Batch[SparkTable]) -> tuple[SparkDelta | None, cost.Choice | None]:
        compiled, bindings, versions = self.compiled, self.bindings, self._versions()
        assert compiled.plan is not None and compiled.layout is not None
        assert bindings is not None and self.frontier is not None
        before = before_bindings(
            self.views, list(batch.changed), self.frontier, bindings.current, compiled.reads, versions
        )
        ctx = context(compiled, dataclasses.replace(bindings, before=before), self.views)
        # A stored aggregate applies its change per group; any other plan, its row delta.
        target = table(self.spec)
        try:
            with budget.bounded():
                delta = stream.group_change(
                    compiled.plan, compiled.layout, ctx, target, SPARK
                ) or stream.row_delta(compiled.plan, compiled.layout, ctx, target, SPARK)
        except budget.TooManyTerms as too_many:
            return None, cost.Choice("FULL", str(too_many))
        return delta, None

    def apply_differential(self, delta: SparkDelta | None, result: RefreshResult) -> str | None:
        assert self.compiled.layout is not None
        return self._apply(self.compiled.layout, delta, result)

    def apply_full(self, result: RefreshResult) -> str | None:
        """FULL as a diff against the stored rows (a reader of this one's changes then reads only
        the rows that really changed; a large table MERGEs into the files the changes touch), or,
        where that costs more (`_overwrites`), every row rewritten in one overwrite, as a table model
        is rebuilt, without reading the stored rows."""
        layout, rows = contents(self.views, self.compiled, self.registered.defining_query, self._versions())
        if not self._overwrites():
            return self._apply(layout, full_delta(table(self.spec), layout, rows), result)
        crash_points.reached("before_merge")
        crash_points.reached("during_merge")
        written, removed = spark_apply.overwrite_table(
            self.spark, parts(self.spec), layout, rows, self._stamp()
        )
        crash_points.reached("after_merge")
        result.rows_inserted, result.rows_deleted = written, removed
        result.reason = f"{result.reason}; {REWRITTEN}" if result.reason else REWRITTEN
        if layout.kind == "keyed" and key_check.stored_key_repeats(self.spark, table(self.spec), layout.key):
            return refuse_repeated_key(
                self.spark, self.views, self.spec, self.compiled, self._versions(), drop=False
            )
        return None

    def finish(self, result: RefreshResult, batch: Batch[SparkTable]) -> None:
        lifecycle.record(self.backend, result, batch.changes, self.started)
        if result.action != "SKIP":
            crash_points.reached("after_history")

    def _versions(self) -> SourceVersions:
        assert self.versions is not None  # read by full_reason, the refresh's first look at its sources
        return self.versions

    def _overwrites(self) -> bool:
        """FULL as one overwrite: no stream table reads this one's changes, and rewriting it costs
        less than diffing it: it is small, or the batch changes as many rows as half of it."""
        if registry.readers_of(self.spark, self.spec.catalog_schema, key(self.spec)):
            return False
        stored = current_records(self.spark, parts(self.spec))
        return stored <= OVERWRITE_AT_MOST or 2 * self.changes >= stored

    def _stamp(self) -> Stamp:
        """What this refresh's commit records: the batch's end snapshots as the new frontier."""
        versions = self._versions()
        return Stamp(
            versions.ends,
            self.registered.fingerprint,
            self.compiled.views_digest,
            field_ids.dumps(versions.fields),
            self.zone,
        )

    def _apply(self, layout: Layout, delta: SparkDelta | None, result: RefreshResult) -> str | None:
        """MERGE `delta` with the new frontier's stamp; why to rebuild instead (the stored rows repeat
        a key), or None."""
        spark, spec, versions = self.spark, self.spec, self._versions()
        stamp = self._stamp()
        if delta is None:  # no changed source reaches the result
            stamp_without_data(spark, parts(spec), stamp)
            return None
        narrow = result.action == "DIFFERENTIAL"
        prepared = spark_apply.prepare(self.views, table(spec), layout, delta, narrow)
        if prepared.violations:
            return refuse_repeated_key(spark, self.views, spec, self.compiled, versions, drop=False)
        result.rows_inserted, result.rows_updated, result.rows_deleted = (
            prepared.inserted,
            prepared.updated,
            prepared.deleted,
        )
        try:
            _commit(spark, spec, prepared, stamp)
        except Exception as error:
            if MERGE_CARDINALITY not in str(error):
                raise
            # Copies written by hand repeat a key the MERGE matches on; nothing was committed.
            return refuse_repeated_key(spark, self.views, spec, self.compiled, versions, drop=False)
        return None


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


def refuse_repeated_key(
    spark: Any,
    views: TempViews,
    spec: StreamTableSpec,
    compiled: Compiled,
    versions: SourceVersions,
    drop: bool,
) -> str:
    """Raise KeyNotUnique naming the source whose declared key repeats (dropping the table just
    built, when `drop`, so the next run builds it again); if no source repeats one, the stream
    table's own rows are at fault: return why, for a rebuild or a warning."""
    current = current_bindings(views, compiled.sources, versions, compiled.reads)
    found = key_check.repeated_key(spark, compiled.sources, current)
    if found is not None:
        if drop:
            spark.sql(f"DROP TABLE IF EXISTS {table(spec).sql('spark')}")
        raise KeyNotUnique(spec.model, found.describe())
    return "the stream table's rows do not fit its key (were they written outside dbt-ivm?)"


def _commit(spark: Any, spec: StreamTableSpec, prepared: spark_apply.Prepared, stamp: Stamp) -> None:
    """MERGE the prepared rows; the same commit records the new frontier (see the module docstring)."""
    if not prepared.changes_anything:
        stamp_without_data(spark, parts(spec), stamp)
        return
    crash_points.reached("before_merge")
    crash_points.reached("during_merge")
    commit_with(spark, parts(spec), stamp, lambda: _merge(spark, prepared.merge))
    crash_points.reached("after_merge")


def _merge(spark: Any, merge: str) -> None:
    # The runtime group filter first joins the batch with the stream table to find the files to
    # rewrite: one more scan of the table, for a batch that touches most of its few files anyway.
    with session_conf.overridden(spark, session_conf.GROUP_FILTER, "false"):
        spark.sql(merge)


def _full_reason(
    spec: StreamTableSpec, compiled: Compiled, frontier: dict[str, int] | None, ends: dict[str, int]
) -> str | None:
    """Why this refresh must be FULL whatever the batch (None: the batch decides)."""
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
