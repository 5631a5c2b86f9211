"""How a Spark refresh reads its sources: each as of a snapshot, under the engine's internal names.

A refresh reads every source as of the batch's end snapshot (`current_bindings`) and each changed
source as of the frontier too (`before_bindings`): the delta rules then telescope one term per
changed source instead of inclusion–exclusion over current rows. Each is a temporary view of the
columns the plan reads, so Catalyst prunes the rest; what a delta reads more than once is pinned.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from sqlglot import exp

from dbt_ivm.delta import stream
from dbt_ivm.delta.terms import Bindings, Context, memoized_pin
from dbt_ivm.layout import Layout
from dbt_ivm.reserved import internal_column, renamed_select, source_relation, table_of
from dbt_ivm.spark import apply as spark_apply
from dbt_ivm.spark.apply import TempViews
from dbt_ivm.spark.catalog import NO_SNAPSHOT, SparkTable
from dbt_ivm.spark.compiled import Compiled
from dbt_ivm.spark.source_versions import SourceVersions
from dbt_ivm.target import SPARK


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


def current_bindings(
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


def before_bindings(
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


def context(compiled: Compiled, bindings: Bindings, views: TempViews | None = None) -> Context:
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


def contents(
    views: TempViews, compiled: Compiled, sql: str, versions: SourceVersions
) -> tuple[Layout, exp.Expr]:
    """The table's layout and its contents from scratch, as of the batch's ends (a query, or a
    relation)."""
    if compiled.plan is not None and compiled.layout is not None:
        current = current_bindings(views, compiled.sources, versions, compiled.reads)
        bindings = Bindings(SPARK, current=current)
        return compiled.layout, stream.contents(compiled.plan, compiled.layout, context(compiled, bindings))
    # Not maintainable: the user's Spark SQL as a view, which sqlglot never parses.
    return spark_apply.plain_layout(compiled.output_names), views.view("query", sql)
