"""What a PostgreSQL stream table installs besides its table, rendered from its plan: the program
`CALL dbt_ivm.refresh` and the engine's quiet runs execute (postgres.procedure), and IMMEDIATE
mode's trigger function (postgres.immediate). Both are bounded by the planning budget
(delta.budget): a program past it recomputes, an IMMEDIATE table past it is refused by name.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable

from sqlglot import exp

from dbt_ivm import lifecycle
from dbt_ivm.apply.statements import full_delta
from dbt_ivm.catalog import TableInfo
from dbt_ivm.code_digest import engine_digest
from dbt_ivm.delta import budget
from dbt_ivm.delta.compact import needs_netting
from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.plan.nodes import whole_input_reason
from dbt_ivm.plan.reads import columns_read, narrowed
from dbt_ivm.postgres import apply as pg_apply
from dbt_ivm.postgres import capture, immediate, immediate_keys, immediate_sql, procedure
from dbt_ivm.postgres.compiled import Compiled, context
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.names import key as _key
from dbt_ivm.postgres.names import relation as _relation
from dbt_ivm.postgres.names import table as _table
from dbt_ivm.postgres.refresh_steps import contents_of
from dbt_ivm.reserved import internal_column
from dbt_ivm.spec import StreamTableSpec
from dbt_ivm.target import POSTGRES


def immediate_conflicts(db: Db, compiled: Compiled) -> list[list[exp.Column]] | None:
    assert compiled.plan is not None and compiled.layout is not None
    conflicts = immediate_keys.conflict_columns(compiled.plan, compiled.layout, compiled.sources)
    if conflicts is not None and not immediate.hashable(db, _column_types(compiled.sources, conflicts)):
        return None
    return conflicts


def immediate_function_and_digest(db: Db, spec: StreamTableSpec, compiled: Compiled) -> tuple[str, str]:
    conflicts = immediate_conflicts(db, compiled)
    return _immediate_function(db, spec, compiled, conflicts), immediate_digest(db, spec, compiled, conflicts)


def immediate_digest(
    db: Db, spec: StreamTableSpec, compiled: Compiled, conflicts: list[list[exp.Column]] | None
) -> str:
    """What `_immediate_function` renders from, digested: the engine's code, the plan, layout and
    sources, the model's settings it reads and the database's. A run compares it with the installed
    function's instead of rendering the function again (seconds, for a query with many subqueries)."""
    parts = (
        engine_digest(),
        compiled.plan,
        compiled.layout,
        compiled.sources,
        list(compiled.call_types.values()),  # keyed by id(): their order is the plan's
        compiled.output_types,
        compiled.hashed,
        compiled.equal_keys,
        compiled.shape,
        compiled.views_digest,
        (spec.schema, spec.name, spec.catalog_schema, spec.user_triggers),
        conflicts,
        immediate.pinned_settings(db),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _immediate_function(
    db: Db, spec: StreamTableSpec, compiled: Compiled, conflicts: list[list[exp.Column]] | None
) -> str:
    """The trigger function that maintains `spec`'s table inside every writer's transaction."""
    assert compiled.plan is not None and compiled.layout is not None
    key = _key(spec)
    try:
        with budget.bounded():
            statements = immediate_sql.statements(
                compiled.plan,
                compiled.layout,
                compiled.sources,
                _table(spec),
                compiled.target,
                lambda bindings: context(compiled, bindings),
                lambda index, source: exp.table_(
                    immediate.pending_table(key, index, source), "pg_temp", quoted=True
                ),
                conflicts,
                exp.table_(immediate.rows_table(key, _shape(compiled)), "pg_temp", quoted=True),
            )
    except budget.TooManyTerms as too_many:
        raise UnsupportedQuery(
            spec.model,
            f"refresh_mode='immediate' for a query whose writes {too_many}",
            "use refresh_mode='auto' (a batch refreshes the sources it changed), or split the query into models",
        ) from None
    return immediate.function_sql(
        spec.catalog_schema,
        key,
        _relation(spec),
        compiled.sources,
        statements,
        immediate.pinned_settings(db),
        always_explicit=spec.user_triggers == "on",
        key=compiled.layout.key if compiled.equal_keys else (),
    )


def program(db: Db, spec: StreamTableSpec, compiled: Compiled, sql: str) -> procedure.Program:
    """What `CALL refresh` runs for `spec` (postgres.procedure): the statements IMMEDIATE mode renders
    for changes kept in pending tables, which it fills from the change buffers."""
    program = functools.partial(
        procedure.Program,
        stream_table=_key(spec),
        model=spec.model,
        relation=_relation(spec),
        fingerprint=lifecycle.fingerprint(sql),
        views=compiled.views,
        functions=compiled.functions,
    )
    if compiled.plan is None or compiled.layout is None:
        return _recomputing(program, spec, compiled, sql, str(compiled.unsupported))
    try:
        with budget.bounded():
            return _program_of_statements(db, spec, compiled, program)
    except budget.TooManyTerms as too_many:
        # CALL refresh recomputes; the engine builds the delta of the sources each batch changed.
        return _recomputing(program, spec, compiled, sql, f"model {spec.model}: {too_many}")


def _recomputing(
    program: Callable[..., procedure.Program],
    spec: StreamTableSpec,
    compiled: Compiled,
    sql: str,
    reason: str,
) -> procedure.Program:
    """A program that recomputes at every refresh, saying `reason`: the engine's contents, or the
    query as written when it is not maintainable."""
    table = _table(spec)
    layout, contents = contents_of(compiled, sql)
    written = contents if isinstance(contents, pg_apply.TextRelation) else None
    relation = written.table if written is not None else contents
    assert isinstance(relation, exp.Expr)
    full = immediate_sql.apply_statement(layout, full_delta(table, layout, relation), table, compiled.target)
    return program(
        sources=[],
        statements=None,
        full=pg_apply.render(full, written),
        static_full_reason=reason,
        whole_input_reason=None,
    )


def _program_of_statements(
    db: Db, spec: StreamTableSpec, compiled: Compiled, program: Callable[..., procedure.Program]
) -> procedure.Program:
    """The program of a maintainable query: its statements for the changes of any of its sources."""
    assert compiled.plan is not None and compiled.layout is not None
    key, table, target = _key(spec), _table(spec), compiled.target
    captured = spec.refresh_mode != "full"  # else the sources keep no change buffers for it
    sources = compiled.sources if captured else []
    virtual = [capture.virtual_columns(db, s) for s in sources]
    # A batch's changes are copied, netted and analyzed with only the columns the query reads (a
    # virtual column's expression may name any column: such a source keeps them all).
    computed = {s.qualified for s, expressions in zip(sources, virtual, strict=True) if expressions}
    reads = columns_read(compiled.plan)
    pending = [s if s.qualified in computed else narrowed(s, reads[s.qualified]) for s in compiled.sources]
    statements = immediate_sql.statements(
        compiled.plan,
        compiled.layout,
        compiled.sources,
        table,
        target,
        lambda bindings: context(compiled, bindings),
        lambda index, _: exp.table_(
            immediate.pending_table(key, index, pending[index]), "pg_temp", quoted=True
        ),
        rows=exp.table_(immediate.rows_table(key, _shape(compiled)), "pg_temp", quoted=True),
        per_source=(),
    )
    return program(
        sources=pending if captured else [],
        statements=statements,
        full=statements.full,
        static_full_reason=None,
        whole_input_reason=whole_input_reason(compiled.plan, POSTGRES),
        virtual=virtual,
        netted=needs_netting(compiled.plan),
    )


def _shape(compiled: Compiled) -> object:
    """What the stream table's column types follow from: its layout, output types and sources' types."""
    assert compiled.layout is not None
    sources = [[(c.name, c.type) for c in t.columns] for t in compiled.sources]
    # How rows are found decides whether the rows table carries the key's hash.
    lookup = compiled.target.hashed(compiled.layout.key)
    return (compiled.layout.columns, [(n, str(t)) for n, t in compiled.output_types], sources, lookup)


def _column_types(sources: list[TableInfo], columns: list[list[exp.Column]]) -> list[str]:
    """The declared types of each source's conflict columns (named by their internal names)."""
    return [
        c.type
        for source, named in zip(sources, columns, strict=True)
        for column in named
        for c in source.columns
        if internal_column(source, c.name) == column.name
    ]
