"""The statements IMMEDIATE maintenance runs inside a writer's transaction, rendered once at `dbt run`.

Each is one MERGE into the stream table whose rows come from the same delta rules a differential
refresh uses; only the change sets differ. A statement's own changes are its transition tables:

    INSERT:  the new rows, weight +1
    DELETE:  the old rows, weight −1
    UPDATE:  old −1 and new +1 (a row the update left as it was sums to nothing in every rule)

every other source is read as it is now, which, in the writer's transaction, includes everything the
stream table already reflects. What a delta reads more than once is a MATERIALIZED CTE of the MERGE
(a differential refresh pins it in a temp table; a writer's statement cannot afford the DDL).

Writers that may maintain the stream table at the same time are told apart by `stripes`: per source
and event, a query of the stripe numbers (0‥STRIPES−1) its rows' conflict values hash to
(`immediate_keys`); a writer first takes turns on those stripes only.

Two more statements cover what one transition table cannot: `full` recomputes the stream table (a
TRUNCATE has no transition table), `combined` applies the changes of several statements at once
(a writable CTE or a trigger writing two sources of one stream table: their changes are kept in
`pending` tables until the last of them, then applied together).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlglot import exp

from dbt_ivm.apply import explicit, grouped, keyed, multiset
from dbt_ivm.apply.statements import full_delta
from dbt_ivm.catalog import TableInfo
from dbt_ivm.delta import stream
from dbt_ivm.delta.compact import text_changes
from dbt_ivm.delta.terms import Bindings, Context, memoized_pin
from dbt_ivm.keys import with_hash
from dbt_ivm.layout import Layout
from dbt_ivm.plan.nodes import Plan
from dbt_ivm.reserved import internal_columns, renamed_select, source_relation
from dbt_ivm.sqltext import WEIGHT, q, with_first
from dbt_ivm.target import POSTGRES, Target

DIALECT = "postgres"
NEW_ROWS, OLD_ROWS = "__ivm_new_rows", "__ivm_old_rows"
RAW_ROWS = "__ivm_raw_rows"  # pending changes before they are netted
EVENTS = ("INSERT", "UPDATE", "DELETE")
STRIPES = 64  # a power of two: a hash's low bits pick the stripe
TRANSITION_TABLES = {"INSERT": (NEW_ROWS,), "DELETE": (OLD_ROWS,), "UPDATE": (OLD_ROWS, NEW_ROWS)}


@dataclass(frozen=True)
class Statements:
    """Everything a stream table's trigger function runs, as PostgreSQL text."""

    # Per source (in `Compiled.sources` order), per event: the MERGE (None: cannot change the table).
    by_source: list[dict[str, str | None]]
    full: str  # recompute from scratch, applied as a diff
    combined: str  # every source's pending changes at once
    # Per source, per event: the stripes its rows conflict on (None: every write takes every stripe).
    stripes: list[dict[str, str]] | None = None
    explicit: ExplicitPath | None = None


@dataclass(frozen=True)
class ExplicitPath:
    """The same maintenance for a stream table with user triggers: each statement above, as an INSERT
    of the rows to apply (`apply/keyed` consolidated rows or `apply/multiset` counted rows) into
    the session's temp table `rows`; then `counts` of what they do, and only the DELETE, UPDATE and
    INSERT (`apply/explicit`) that change something, so user triggers fire as on any table."""

    rows: str  # the temp table, qualified
    columns: list[str]  # the stream table's columns it holds (besides the weight)
    by_source: list[dict[str, str | None]]
    full: str
    combined: str
    counts: str  # keyed: inserted, updated, deleted; multiset: inserted, deleted
    delete: str
    update: str | None  # None: multiset rows never change in place
    insert: str
    mismatches: str  # after the writes: rows that do not read back as written (a BEFORE trigger)


def stripes_of(table: TableInfo, event: str, columns: list[exp.Column], alias: str) -> str:
    """The stripes one statement's rows of `table` conflict on: their `columns` (qualified by
    `alias`), hashed by each type's own hash (values equal as the query compares them, like 1.0 and
    1.00, meet in one stripe). No columns: one stripe for every write (a global aggregate)."""
    if not columns:
        return "SELECT 0"
    values = exp.Anonymous(this="ROW", expressions=[c.copy() for c in columns])
    hashed = exp.func("pg_catalog.hash_record_extended", values, exp.Literal.number(0))
    stripe = exp.cast(exp.BitwiseAnd(this=hashed, expression=exp.Literal.number(STRIPES - 1)), "int")
    queries = [
        exp.select(stripe.copy())
        .from_(
            exp.select(*renamed_select(table))
            .from_(exp.table_(rows, quoted=True))
            .subquery(exp.to_identifier(alias, quoted=True), copy=False)
        )
        .sql(DIALECT)
        for rows in TRANSITION_TABLES[event]
    ]
    return " UNION ".join(queries)


def weighted(table: TableInfo, rows: str, weight: int) -> exp.Select:
    """A transition table's rows under the engine's column names, each with `weight`."""
    one = exp.Literal.number(abs(weight))
    signed = one if weight > 0 else exp.Neg(this=one)
    return exp.select(*renamed_select(table), exp.alias_(signed, WEIGHT, quoted=True)).from_(
        exp.table_(rows, quoted=True)
    )


def transition_changes(table: TableInfo, event: str) -> exp.Expr:
    """The change set of one statement on `table` (see the module docstring)."""
    if event == "INSERT":
        return weighted(table, NEW_ROWS, 1).subquery()
    if event == "DELETE":
        return weighted(table, OLD_ROWS, -1).subquery()
    # Not netted: a row an UPDATE left as it was contributes −1 and +1 of one image, which every rule,
    # being linear, sums to nothing; netting them first cost more than it saved.
    return exp.union(weighted(table, OLD_ROWS, -1), weighted(table, NEW_ROWS, 1), distinct=False).subquery()


def pending_insert(pending: str, table: TableInfo, raw: str, netted: bool = True) -> str:
    """INSERT into the temp table `pending` (quoted) of the net effect of the raw changes the query
    or ``DELETE … RETURNING`` `raw` yields (the weight and `table`'s internal columns), or of the raw
    changes themselves where the plan does not need them `netted` (`compact.needs_netting`).
    `combined` reads pending tables as they are: netted inline, the planner took the window subquery
    for a few rows and re-ran it for every row of an outer loop (TPC-H Q5: 240 times)."""
    rows = text_changes(exp.table_(RAW_ROWS, quoted=True), table, netted)
    listed = ", ".join(q(c) for c in (*internal_columns(table), WEIGHT))
    return f"WITH {q(RAW_ROWS)} AS ({raw}) INSERT INTO {pending} ({listed}) {rows.sql(DIALECT)}"


def apply_statement(layout: Layout, delta: exp.Query, stream_table: exp.Table, target: Target) -> exp.Expr:
    """The one statement that applies a row delta (layout columns + weight) to the stream table: a
    MERGE, or for a multiset the deletion and insertion of copies (`apply/multiset`)."""
    if layout.kind == "multiset":
        return multiset.apply(layout, multiset.summed_rows(layout, delta, target), stream_table, target)
    rows = keyed.consolidated_rows(layout, delta, target).subquery(copy=False)
    return keyed.merge(layout, rows, stream_table, target)


def _with_materialized(ctes: list[tuple[str, str]], statement: str) -> str:
    if not ctes:
        return statement
    named = ", ".join(f'"{name}" AS MATERIALIZED ({text})' for name, text in ctes)
    return with_first(named, statement)


def render(
    plan: Plan,
    layout: Layout,
    ctx: Context,
    stream_table: exp.Table,
    target: Target,
    rows: exp.Table | None = None,
) -> tuple[str | None, str | None]:
    """The MERGE applying the delta of `ctx`'s change sets, and (where `rows` names the explicit
    path's temp table) the INSERT INTO `rows` of what it changes; None where no change set reaches
    the table. The delta is built once for both: each reads what it pins from the same MATERIALIZED
    CTEs, prefixed to each statement."""
    ctes: list[tuple[str, str]] = []

    def compute(text: str) -> exp.Expr:
        name = f"__ivm_pin_{len(ctes)}"
        ctes.append((name, text))
        return exp.table_(name, quoted=True)

    pinned = replace(ctx, pin=memoized_pin(DIALECT, compute), rendered={})
    change = stream.group_change(plan, layout, pinned, stream_table, target)
    wanted = change is None or rows is not None
    delta = stream.row_delta(plan, layout, pinned, stream_table, target) if wanted else None
    merge = None
    if change is not None:  # an aggregate keeping its state: each group's row is found once
        merge = grouped.group_merge(change, stream_table, target).sql(DIALECT)
    elif delta is not None:
        merge = apply_statement(layout, delta.copy(), stream_table, target).sql(DIALECT)
    into = None
    if rows is not None and delta is not None:
        into = _into(rows, rows_to_apply(layout, delta, stream_table, target)).sql(DIALECT)
    # A CTE the statement does not read is never run: each may carry the other's.
    return _with_materialized_or_none(ctes, merge), _with_materialized_or_none(ctes, into)


def _with_materialized_or_none(ctes: list[tuple[str, str]], statement: str | None) -> str | None:
    return None if statement is None else _with_materialized(ctes, statement)


def rows_to_apply(layout: Layout, delta: exp.Query, stream_table: exp.Table, target: Target) -> exp.Select:
    """What the explicit path writes into its rows table: one row per changed key, or per value."""
    if layout.kind == "multiset":
        summed = multiset.summed_rows(layout, delta, target).subquery(copy=False)
        return multiset.counted_rows(layout, summed, stream_table, target)
    return keyed.consolidated_rows(layout, delta, target)


def _explicit_path(
    layout: Layout,
    rows: exp.Table,
    stream_table: exp.Table,
    target: Target,
    inserts: tuple[list[dict[str, str | None]], str, str],
) -> ExplicitPath:
    """The explicit path: `inserts` (per source and event, full, combined) fill `rows`; the rest applies them."""
    if layout.kind == "multiset":
        ops = explicit.multiset_dml(layout, rows, stream_table, target)
        counts: exp.Select = multiset.weight_totals(rows)
        mismatches = multiset.mismatches(layout, rows, stream_table, target)
    else:
        ops = explicit.keyed_dml(layout, rows, stream_table, target)
        counts = keyed.counts(layout, rows, stream_table, target)
        mismatches = explicit.keyed_mismatches(layout, rows, stream_table, target)
    by_source, full, combined = inserts
    carried = [c for c in with_hash(layout.columns, layout.key, target)]
    if layout.kind == "multiset":
        carried.append(multiset.STORED_COUNT)
    return ExplicitPath(
        rows=rows.sql(DIALECT),
        columns=carried,
        by_source=by_source,
        full=full,
        combined=combined,
        counts=counts.sql(DIALECT),
        delete=ops.delete.sql(DIALECT),
        update=ops.update.sql(DIALECT) if ops.update is not None else None,
        insert=ops.insert.sql(DIALECT),
        mismatches=mismatches.sql(DIALECT),
    )


def _into(rows: exp.Table, query: exp.Select) -> exp.Insert:
    names = [exp.to_identifier(s.alias_or_name, quoted=True) for s in query.selects]
    return exp.Insert(this=exp.Schema(this=rows.copy(), expressions=names), expression=query)


def statements(
    plan: Plan,
    layout: Layout,
    sources: list[TableInfo],
    stream_table: exp.Table,
    target: Target,
    new_context: Callable[[Bindings], Context],
    pending: Callable[[int, TableInfo], exp.Table],
    conflicts: list[list[exp.Column]] | None = None,
    rows: exp.Table | None = None,
    per_source: tuple[str, ...] = EVENTS,
) -> Statements:
    """All the statements of one stream table. `new_context` makes a rendering context for bindings;
    `pending(i, source)` names the table holding source i's pending changes; `conflicts`: per source,
    the columns its writes conflict on (`immediate_keys`; None: every write conflicts); `rows`: the
    explicit path's temp table (None: no explicit path); `per_source`: the events a statement per source is
    rendered for (none: only `full` and `combined`, for a batch read from the change buffers)."""
    current = {t.qualified: source_relation(t) for t in sources}
    by_source: list[dict[str, str | None]] = []
    rows_by_source: list[dict[str, str | None]] = []
    for source in sources:
        events: dict[str, str | None] = {}
        rows_events: dict[str, str | None] = {}
        for event in per_source:
            bindings = Bindings(
                POSTGRES,
                current=current,
                delta={source.qualified: transition_changes(source, event)},
                inserted_only={source.qualified} if event == "INSERT" else set(),
            )
            events[event], rows_events[event] = render(
                plan, layout, new_context(bindings), stream_table, target, rows
            )
        by_source.append(events)
        rows_by_source.append(rows_events)
    everything = Bindings(
        POSTGRES,
        current=current,
        delta={t.qualified: pending(i, t) for i, t in enumerate(sources)},  # pending_insert
    )
    combined, rows_combined = render(plan, layout, new_context(everything), stream_table, target, rows)
    assert combined is not None  # every source changed: some term reaches the table
    contents = stream.contents(plan, layout, new_context(Bindings(POSTGRES, current=current)))
    recomputed = full_delta(stream_table, layout, contents)
    full = apply_statement(layout, recomputed, stream_table, target)
    stripes = None
    if conflicts is not None:
        stripes = [
            {event: stripes_of(t, event, columns, columns[0].table if columns else "") for event in EVENTS}
            for t, columns in zip(sources, conflicts, strict=True)
        ]
    explicit_path = None
    if rows is not None:
        assert rows_combined is not None
        rows_full = _into(rows, rows_to_apply(layout, recomputed, stream_table, target)).sql(DIALECT)
        inserts = (rows_by_source, rows_full, rows_combined)
        explicit_path = _explicit_path(layout, rows, stream_table, target, inserts)
    return Statements(by_source, full.sql(DIALECT), combined, stripes, explicit_path)
