"""The PostgreSQL side of one refresh (dbt_ivm.refresh), run in one REPEATABLE READ transaction.

Changes come from the capture buffers: exactly the rows committed after the frontier snapshot. They
are counted first (`pending`, one query per source), copied into analyzed temp tables only when the
delta is built (`delta`), so a batch AUTO recomputes never copies them. The row delta is applied
with the key-hash index; a FULL refresh is applied as a diff against the stored rows. Deltas run
without JIT (`apply.without_jit`): their statements are planned for few rows and run once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from sqlglot import exp

from dbt_ivm import cost, lifecycle
from dbt_ivm.apply.statements import full_delta
from dbt_ivm.catalog import TableInfo
from dbt_ivm.delta import budget, stream
from dbt_ivm.delta.compact import needs_netting, text_changes
from dbt_ivm.delta.terms import memoized_pin
from dbt_ivm.layout import Layout
from dbt_ivm.plan.nodes import whole_input_reason
from dbt_ivm.plan.reads import columns_read
from dbt_ivm.postgres import apply as pg_apply
from dbt_ivm.postgres import (
    auto_cost,
    capture,
    immediate,
    in_database,
    outside_writes,
    procedure,
    registry,
    user_triggers,
)
from dbt_ivm.postgres.compiled import Compiled, context, current_bindings, shape_change
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.names import key, relation, table
from dbt_ivm.postgres.privileges import restrict_to_user_columns
from dbt_ivm.refresh import Batch, Steps
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.sqltext import WEIGHT
from dbt_ivm.target import POSTGRES

PostgresDelta = exp.Query | pg_apply.StagedRows


class Rebuild(Exception):
    """Leave the refresh's transaction and build the table anew (the runner catches it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PostgresRefresh(Steps[TableInfo, PostgresDelta]):
    """`refresh.Steps` over the capture buffers, inside the refresh's REPEATABLE READ transaction."""

    def __init__(
        self,
        backend: lifecycle.Backend,
        db: Db,
        compiled: Compiled,
        sql: str,
        registered: registry.Registered,
        functions_version: int | None,
        program: Callable[[], procedure.Program],
        started: float,
    ) -> None:
        self.backend, self.db, self.spec = backend, db, backend.spec
        self.compiled, self.sql, self.registered = compiled, sql, registered
        self.functions_version, self.program, self.started = functions_version, program, started
        self._rebuild = rebuild_reason(compiled, registered)
        self.gaps: list[capture.ReplicaGap] = []
        self.current: registry.Registered | None = None
        self.jit: str | None = None  # the session's JIT setting while deltas run without it
        self.written: str | None = None  # why writes by hand, or unseen ones, call for FULL
        self.weighing: auto_cost.PlannerWeighing | None = None

    def capture_lost(self) -> bool:
        """Whether a source's capture must be installed again first (in its own transaction)."""
        if self._rebuild is not None:
            return False
        inspections = inspect_capture(self.db, self.spec, self.compiled)
        self.gaps = [i.replica_gap for i in inspections if i.replica_gap is not None]
        return any(i.reinstall_reason for i in inspections)

    def rebuild_reason(self) -> str | None:
        return self._rebuild

    def rebuild(self, reason: str) -> RefreshResult:
        raise Rebuild(reason)

    def full_reason(self) -> str | None:
        db, spec, compiled = self.db, self.spec, self.compiled
        self.current = current = registry.lookup(db, spec.catalog_schema, key(spec))
        assert current is not None
        self.written = self._guard()
        # A table-level SELECT granted since the last run (by hand, or by dbt's grants) reads hidden
        # columns.
        restrict_to_user_columns(db, relation(spec), [name for name, _ in compiled.output_types])
        if procedure.stale_reason(db, spec.catalog_schema, key(spec)) is not None:
            # Built by an earlier dbt-ivm, or planned against what has changed since: CALL refresh
            # refuses until its statements are rendered again, here.
            procedure.install(db, spec.catalog_schema, self.program(), immediate.pinned_settings(db))
        if current.needs_full and spec.refresh_mode != "full" and compiled.plan is not None:
            return current.needs_full
        whole_input = whole_input_reason(compiled.plan, POSTGRES) if compiled.plan is not None else None
        reason = lifecycle.full_reason(spec, compiled.unsupported, current.frontier is not None, whole_input)
        if reason is None and db.value(f"SELECT {capture.frontier_ahead_sql(self._frontier())}"):
            return capture.FRONTIER_AHEAD
        return reason

    def pending(self) -> Batch[TableInfo]:
        total = 0
        changed: list[TableInfo] = []
        for source in self.compiled.sources:
            stats = self.db.one(capture.pending_stats_sql(self.spec.catalog_schema, source, self._frontier()))
            assert stats is not None
            count, truncated = int(stats[0]), bool(stats[1])
            if truncated:
                return Batch(changes=count, full_reason=f"{source.qualified} was truncated")
            if count:
                total += count
                changed.append(source)
        subscribed = next((g for g in self.gaps if g.subscribed), None)
        # A subscription's changes may not be in the buffer: recompute.
        reason = self.written or (subscribed.full_reason() if subscribed is not None else None)
        return Batch(changed, total, reason)

    def read(self, batch: Batch[TableInfo]) -> Batch[TableInfo]:
        """The changes stay in the buffers until the delta is built; here the batch is only weighed
        against full_refresh_threshold."""
        if self.spec.refresh_mode == "auto":
            batch.full_reason = self._threshold_reason(batch)
        if batch.full_reason is None:
            self.jit = pg_apply.without_jit(self.db)
        return batch

    def choose(self, batch: Batch[TableInfo]) -> cost.Choice | None:
        """Measured history decides before any delta work; failing that, the planner prices the
        delta as it is built (postgres.auto_cost)."""
        db, spec, compiled = self.db, self.spec, self.compiled
        assert compiled.layout is not None
        history = in_database.recent_refreshes(db, spec.catalog_schema, key(spec))
        if cost.history_decides(history):
            return cost.choose(batch.changes, history)
        layout, contents = contents_of(compiled, self.sql)
        assert isinstance(contents, exp.Query)  # a maintainable query: the engine built its contents
        full = full_delta(table(spec), layout, contents)
        self.weighing = auto_cost.PlannerWeighing(db, batch.changes, history, layout, compiled.target, full)
        return None

    def delta(self, batch: Batch[TableInfo]) -> tuple[PostgresDelta | None, cost.Choice | None]:
        try:
            with budget.bounded():
                delta = self._row_delta(batch.changed)
        except auto_cost.Abandoned as abandoned:
            return None, abandoned.choice
        except budget.TooManyTerms as too_many:
            return None, cost.Choice("FULL", str(too_many))
        if self.weighing is None or delta is None:
            return delta, None
        assert self.compiled.layout is not None
        staged = pg_apply.StagedRows.of(delta, self.compiled.layout, self.compiled.target)
        return staged, self.weighing.choice(staged)

    def apply_differential(self, delta: PostgresDelta | None, result: RefreshResult) -> str | None:
        db, spec, compiled = self.db, self.spec, self.compiled
        assert compiled.layout is not None
        pg_apply.expect_few_rows(db)
        if delta is not None:
            triggers = user_triggers.choose(db, spec, relation(spec))
            pg_apply.apply_row_delta(
                db, table(spec), compiled.layout, delta, result, compiled.target, triggers
            )
        return None

    def apply_full(self, result: RefreshResult) -> str | None:
        """Applied as a diff: only rows that differ are deleted, updated or inserted."""
        if self.jit is not None:
            pg_apply.restore_jit(self.db, self.jit)
        layout, contents = contents_of(self.compiled, self.sql)
        triggers = user_triggers.choose(self.db, self.spec, relation(self.spec))
        pg_apply.apply_full_diff(
            self.db, table(self.spec), layout, contents, result, self.compiled.target, triggers
        )
        return None

    def finish(self, result: RefreshResult, batch: Batch[TableInfo]) -> None:
        spec = self.spec
        result.warnings.extend(f"model {spec.model}: {g.warning()}" for g in self.gaps if not g.subscribed)
        registry.advance(self.db, spec.catalog_schema, key(spec))
        lifecycle.record(self.backend, result, batch.changes, self.started)
        user_triggers.notify(self.db, spec, result)

    def _frontier(self) -> str:
        assert self.current is not None and self.current.frontier is not None
        return capture.snapshot(self.current.frontier)

    def _guard(self) -> str | None:
        """Mark this transaction's writes as dbt-ivm's and make sure the stream table's guard is on
        (postgres.outside_writes); why the refresh must be FULL when it was written by hand, or
        could have been unseen."""
        db, spec = self.db, self.spec
        guarded, written = outside_writes.mark(db, spec.catalog_schema, key(spec), relation(spec))
        if guarded:
            return written
        outside_writes.guard(db, spec.catalog_schema, key(spec), relation(spec), spec.model)
        lost = (self.functions_version or 0) >= outside_writes.GUARDED_SINCE
        return outside_writes.UNGUARDED if lost else written  # else built before guards existed

    def _threshold_reason(self, batch: Batch[TableInfo]) -> str | None:
        """`full_refresh_threshold`'s reason to recompute this batch (None: under it). Captured changes
        overcount what the query sees (an update is two; a change to columns it never reads counts), so
        past the threshold the rows changed in the columns it reads are counted and weighed instead."""
        spec, compiled = self.spec, self.compiled
        rows = rows_read(self.db, compiled.sources)
        names = ", ".join(s.qualified for s in batch.changed)
        too_many = lifecycle.threshold_reason(spec, names, batch.changes, rows)
        if too_many is None or compiled.plan is None:
            return too_many
        read = columns_read(compiled.plan)
        frontier = self._frontier()
        changed_rows = sum(
            int(
                self.db.value(capture.changed_rows_sql(spec.catalog_schema, s, frontier, read[s.qualified]))
                or 0
            )
            for s in batch.changed
        )
        return lifecycle.threshold_reason(spec, names, changed_rows, rows)

    def _row_delta(self, changed: Sequence[TableInfo]) -> exp.Query | None:
        """The batch's row delta (None: no changed source reaches the result), its changes compacted
        into analyzed temp tables first (copied as they are where the plan does not need them netted),
        and what the delta reads more than once pinned (`_pinner`), each pin priced first when AUTO is
        weighing the batch."""
        db, spec, compiled = self.db, self.spec, self.compiled
        assert compiled.plan is not None and compiled.layout is not None
        bindings = current_bindings(compiled.sources)
        netted = needs_netting(compiled.plan)
        for index, source in enumerate(changed):
            virtual = capture.virtual_columns(db, source)
            # Capture's own text (it holds virtual columns' generation expressions), read as written.
            raw = pg_apply.TextRelation(
                "__ivm_raw_changes",
                capture.raw_changes_sql(spec.catalog_schema, source, self._frontier(), virtual),
            )
            net = text_changes(raw.table, source, netted)
            delta_table = pg_apply.temp_table(db, f"delta_{index}", pg_apply.render(net, raw))
            pg_apply.analyze(db, delta_table)
            bindings.delta[source.qualified] = delta_table
            if compiled.layout.recounted and _inserts_only(db, delta_table):
                bindings.inserted_only.add(source.qualified)  # an append: no group's count can drop
        before_pin = None if self.weighing is None else self.weighing.before_pin
        ctx = replace(
            context(compiled, bindings),
            pin=_pinner(db, before_pin),
            pin_counted=_counting_pinner(db, before_pin),
        )
        return stream.row_delta(compiled.plan, compiled.layout, ctx, table(spec), compiled.target)


def rebuild_reason(compiled: Compiled, registered: registry.Registered) -> str | None:
    """Why the stored table no longer fits the query, though its text is the same (None: it fits)."""
    if compiled.views_digest != registered.views_digest:
        return "a view or function the defining query reads was redefined"
    change = shape_change(registered.shape, compiled.shape)
    if change is not None and compiled.unsupported is not None:
        return f"{change}: {compiled.unsupported}"
    return change


def inspect_capture(db: Db, spec: StreamTableSpec, compiled: Compiled) -> list[capture.Inspection]:
    if spec.refresh_mode == "full" or compiled.plan is None:
        return []
    return [capture.inspect(db, spec.catalog_schema, s) for s in compiled.sources]


def rows_read(db: Db, sources: list[TableInfo]) -> float:
    """What a recompute reads: the planner's row estimates of every source, summed (one query)."""
    oids = [s.identity for s in sources if s.identity]
    return float(
        db.value("SELECT sum(GREATEST(reltuples, 0)) FROM pg_class WHERE oid = ANY(%s::oid[])", (oids,)) or 0
    )


def contents_of(compiled: Compiled, sql: str) -> tuple[Layout, pg_apply.Contents]:
    """The table's layout and its contents from scratch (the query as written when not maintainable)."""
    if compiled.plan is not None and compiled.layout is not None:
        ctx = context(compiled, current_bindings(compiled.sources))
        return compiled.layout, stream.contents(compiled.plan, compiled.layout, ctx)
    layout = pg_apply.plain_layout([name for name, _ in compiled.output_types])
    return layout, pg_apply.TextRelation("__ivm_query", sql)


def _inserts_only(db: Db, delta_table: exp.Table) -> bool:
    """Whether a source's netted change set holds insertions only."""
    removal = (
        exp.select("1")
        .from_(delta_table.copy())
        .where(exp.LT(this=exp.column(WEIGHT, quoted=True), expression=exp.Literal.number(0)))
    )
    return not db.value(exp.select(exp.Exists(this=removal)).sql("postgres"))


def _pinner(db: Db, before: Callable[[str], None] | None = None) -> Callable[[exp.Query], exp.Expr]:
    """Computes a subquery that a delta reads more than once into an analyzed temp table, once per
    refresh: inlined, a subquery under a join under a subquery multiplies the statement's size and
    its planning time with every level. `before` sees each subquery's text before it is computed."""

    return memoized_pin("postgres", lambda text: _pinned_table(db, before, text))


def _pinned_table(db: Db, before: Callable[[str], None] | None, text: str) -> exp.Table:
    """A subquery's text computed into an analyzed temp table, shown to `before` first."""
    if before is not None:
        before(text)
    pinned = pg_apply.temp_table(db, "pin", text)
    pg_apply.analyze(db, pinned)
    return pinned


def _counting_pinner(
    db: Db, before: Callable[[str], None] | None = None
) -> Callable[[exp.Query, str], tuple[exp.Expr, int]]:
    """As `_pinner`, also giving how many of a pinned subquery's rows have a boolean column true."""

    def pin(query: exp.Query, flag: str) -> tuple[exp.Expr, int]:
        pinned = _pinned_table(db, before, query.sql("postgres"))
        flagged = (
            exp.select(exp.func("COUNT", exp.Star()))
            .from_(pinned.copy())
            .where(exp.column(flag, quoted=True))
        )
        return pinned, int(db.value(flagged.sql("postgres")) or 0)

    return pin
