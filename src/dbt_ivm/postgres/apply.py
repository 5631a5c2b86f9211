"""Apply strategies on PostgreSQL: create the table, apply a row delta with MERGE, FULL as a diff.

Queries and statements are sqlglot trees rendered for PostgreSQL. Rows that exist only as SQL text —
the user's query when the engine cannot plan it, capture's change rows with virtual columns'
generation expressions — reach PostgreSQL as written (`TextRelation`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dbt_ivm.apply import keyed, multiset
from dbt_ivm.apply.statements import full_delta
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import key_hash
from dbt_ivm.layout import Layout
from dbt_ivm.postgres import statistics
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.temp_names import unique
from dbt_ivm.postgres.user_triggers import TriggerChoice, suppressed, write_keyed, write_multiset
from dbt_ivm.spec import RefreshResult
from dbt_ivm.sqltext import columns, q, with_first
from dbt_ivm.target import POSTGRES, Target

DIALECT = POSTGRES.dialect


@dataclass(frozen=True)
class TextRelation:
    """Rows given as SQL text that sqlglot must not parse or rewrite: the statement reading them binds
    `name` to the text in a WITH clause."""

    name: str
    sql: str

    @property
    def table(self) -> exp.Table:
        return exp.table_(self.name, quoted=True)


def _identifier(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(DIALECT)


def render(statement: exp.Expr, reading: TextRelation | None = None) -> str:
    """`statement` as PostgreSQL text, after the WITH clause that binds the text relation it reads."""
    if reading is None:
        return statement.sql(DIALECT)
    return with_first(f"{_identifier(reading.name)} AS ({reading.sql})", statement.sql(DIALECT))


Contents = exp.Query | TextRelation  # a query the engine built, or the user's own as written


def _relation(contents: Contents) -> exp.Expr:
    return contents.table if isinstance(contents, TextRelation) else contents


def _text(contents: Contents) -> TextRelation | None:
    return contents if isinstance(contents, TextRelation) else None


def temp_table(db: Db, purpose: str, query: str) -> exp.Table:
    """CREATE TEMP TABLE … ON COMMIT DROP AS `query` (PostgreSQL text), under a name of its own."""
    name = unique(purpose)
    db.execute(f"CREATE TEMP TABLE {_identifier(name)} ON COMMIT DROP AS {query}")
    return exp.table_(name, "pg_temp", quoted=True)


def analyze(db: Db, table: exp.Table) -> None:
    """Statistics for one of the engine's temp tables, from a small sample (`statistics`)."""
    db.execute(statistics.analyze_statement([table.sql(DIALECT)]))


def plain_layout(names: list[str]) -> Layout:
    """A query the delta rules cannot maintain: rows identified by value, refreshed FULL only."""
    return Layout("multiset", tuple(names), (), tuple(names))


GROUP_FILLFACTOR = 60  # percent of a page an aggregate stream table's rows fill when written


def create_table(db: Db, table: exp.Table, layout: Layout, contents: Contents, target: Target) -> int:
    """CREATE TABLE AS the contents, with an index on its key (a key that can be NULL: on its hash; a
    multiset's key is all its columns).

    `target.hashes_keys` False: a key column's type has no hash function; rows are matched on the key alone."""
    select = exp.select(*columns(layout.columns, "c")).from_(aliased(_relation(contents), "c"))
    # A group's row is updated in place by every change to the group: room on its page lets
    # PostgreSQL keep the new version there (a HOT update, no index entry), about 2× cheaper.
    storage = f" WITH (fillfactor = {GROUP_FILLFACTOR})" if layout.kind == "aggregate" else ""
    rows = db.execute(f"CREATE TABLE {table.sql(DIALECT)}{storage} AS {render(select, _text(contents))}")
    if target.equal_keys and layout.key:
        # No key column can be NULL: `keys.match` compares them with `=`, which this index serves.
        db.execute(f"CREATE INDEX ON {table.sql(DIALECT)} ({', '.join(q(k) for k in layout.key)})")
    elif target.hashed(layout.key):
        # An index on the expression `keys.match` probes: rows are found by hash, nothing is stored.
        db.execute(f"CREATE INDEX ON {table.sql(DIALECT)} (({key_hash(columns(layout.key)).sql(DIALECT)}))")
    # Statistics now, not when autovacuum gets round to it: the first refresh's MERGE must see that a
    # handful of keys is best found through the hash index.
    analyze(db, table)
    return rows


MERGE_RETURNING = 170000  # PostgreSQL 17: MERGE … RETURNING merge_action()


def _merge_returns_actions(db: Db) -> bool:
    return int(getattr(db.connection, "server_version", 0)) >= MERGE_RETURNING


def staged_rows(layout: Layout, delta: exp.Expr, target: Target) -> exp.Select:
    """The rows `apply_row_delta` computes first (into a temp table): all the reading of the delta
    (or, for FULL, of the query and the stored rows) happens here, what follows touches only them."""
    if layout.kind == "multiset":
        return multiset.summed_rows(layout, delta, target)
    return keyed.consolidated_rows(layout, delta, target)


@dataclass(frozen=True)
class StagedRows:
    """A row delta's `staged_rows` rendered once, where it is priced before it is applied (a large
    delta's tree takes long to copy and render)."""

    sql: str

    @staticmethod
    def of(delta: exp.Query, layout: Layout, target: Target) -> StagedRows:
        return StagedRows(render(staged_rows(layout, delta, target)))


# Why a delta's statements run without JIT compilation: PostgreSQL compiles a plan with LLVM once its
# estimated cost passes jit_above_cost, and a delta's plans are estimated over relations without
# statistics (change buffers, pinned rows) and over whole sources it only probes. On a server built
# with JIT (PostgreSQL 15 from Debian here) compiling took 0.6–4.6 s per refresh of a nested join whose
# statements ran in milliseconds: 62 s against 2.3 s for six batches of four stream tables.
NO_JIT = "off"


def without_jit(db: Db) -> str:
    """Run the rest of the transaction's statements without JIT compilation (`NO_JIT`); returns the
    setting to give back (`restore_jit`) to a recompute that follows in the same transaction."""
    prior = str(db.value("SELECT pg_catalog.current_setting('jit')"))
    db.execute(f"SET LOCAL jit = {NO_JIT}")
    return prior


def restore_jit(db: Db, prior: str) -> None:
    db.execute("SELECT pg_catalog.set_config('jit', %s, true)", (prior,))


def expect_few_rows(db: Db) -> None:
    """Plan the rest of the transaction for a delta: it touches few rows of the stream table, whose
    pages are mostly cached, and the default random_page_cost makes the planner scan the table whole
    instead of probing the key-hash index."""
    db.execute("SET LOCAL random_page_cost = 1.1")


def planner_cost(db: Db, query: str) -> float:
    """The planner's total cost of `query` (EXPLAIN without ANALYZE: planned, not run)."""
    plan = db.value(f"EXPLAIN (FORMAT JSON) {query}")
    return float(plan[0]["Plan"]["Total Cost"])


def apply_row_delta(
    db: Db,
    table: exp.Table,
    layout: Layout,
    delta: exp.Query | StagedRows,
    result: RefreshResult,
    target: Target,
    triggers: TriggerChoice | None = None,
    reading: TextRelation | None = None,
) -> None:
    """Apply a row delta (layout columns + weight) and count what changed into `result`.

    `triggers` (user triggers found on the table) picks explicit DML or MERGE; None: MERGE.
    `reading`: the text relation the delta reads, if any."""
    result.apply_path = "merge"
    if triggers is not None:
        triggers.record(result)
    staged = (
        delta.sql if isinstance(delta, StagedRows) else render(staged_rows(layout, delta, target), reading)
    )
    if layout.kind == "multiset":
        _apply_copies(db, layout, temp_table(db, "rows", staged), table, target, result, triggers)
        return
    rows = temp_table(db, "rows", staged)
    analyze(db, rows)
    if _merge_returns_actions(db) and (triggers is None or triggers.apply_path == "merge"):
        # One look at the stream table: the MERGE counts what it did (no count first).
        merged = db.one(render(keyed.counted_merge(layout, rows, table, target)))
        assert merged is not None
        result.rows_inserted, result.rows_updated, result.rows_deleted = (
            result.rows_inserted + int(merged[0]),
            result.rows_updated + int(merged[1]),
            result.rows_deleted + int(merged[2]),
        )
        return
    found = db.one(render(keyed.counts(layout, rows, table, target)))
    assert found is not None
    inserted, updated, deleted = (int(c) for c in found)
    result.rows_inserted += inserted
    result.rows_updated += updated
    result.rows_deleted += deleted
    if inserted or updated or deleted:
        if triggers is not None and triggers.explicit:
            write_keyed(db, triggers, layout, rows, table, target, (inserted, updated, deleted), result)
            return
        with suppressed(db, triggers):
            db.execute(render(keyed.merge(layout, rows, table, target)))


def apply_full_diff(
    db: Db,
    table: exp.Table,
    layout: Layout,
    contents: Contents,
    result: RefreshResult,
    target: Target,
    triggers: TriggerChoice | None = None,
) -> None:
    """FULL refresh through the same path as a differential one: the same row triggers fire."""
    delta = full_delta(table, layout, _relation(contents))
    apply_row_delta(db, table, layout, delta, result, target, triggers, _text(contents))


def _apply_copies(
    db: Db,
    layout: Layout,
    summed: exp.Table,
    table: exp.Table,
    target: Target,
    result: RefreshResult,
    triggers: TriggerChoice | None,
) -> None:
    """Apply each value's net weight (`summed`) to a multiset: copies deleted and inserted."""
    analyze(db, summed)
    if triggers is not None and triggers.explicit:
        counted = temp_table(db, "counted", render(multiset.counted_rows(layout, summed, table, target)))
        totals = db.one(render(multiset.weight_totals(counted)))
        assert totals is not None
        inserted, deleted = int(totals[0]), int(totals[1])
        result.rows_inserted += inserted
        result.rows_deleted += deleted
        write_multiset(db, triggers, layout, counted, table, target, (inserted, deleted), result)
        return
    with suppressed(db, triggers):
        done = db.one(render(multiset.counted_apply(layout, summed, table, target)))
    assert done is not None
    result.rows_inserted += int(done[0])
    result.rows_deleted += int(done[1])
