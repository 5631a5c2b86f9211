"""A defining query compiled against a Spark session: its plan and layout, the sources it reads (and
which of their columns), the types its aggregates take there, the views it expands, and whether its
values follow the session's time zone."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dbt_ivm.catalog import views_digest
from dbt_ivm.delta import grouping, stream
from dbt_ivm.delta.aggregates import REGISTRY
from dbt_ivm.delta.aggregates.sum import decimal_digits
from dbt_ivm.delta.terms import Bindings, Context
from dbt_ivm.errors import (
    IncomparableColumn,
    InvalidQuery,
    UnsupportedQuery,
)
from dbt_ivm.layout import Layout, layout_of
from dbt_ivm.plan import build_plan
from dbt_ivm.plan.nodes import Aggregate, Plan, scans_in
from dbt_ivm.plan.reads import columns_read
from dbt_ivm.reserved import (
    source_relation,
)
from dbt_ivm.spark.catalog import SparkCatalog, SparkTable, incomparable
from dbt_ivm.spec import StreamTableSpec
from dbt_ivm.target import SPARK


@dataclass
class Compiled:
    """A defining query resolved against the session: plan, layout, and what refreshing it needs."""

    plan: Plan | None  # None: the query cannot be maintained differentially
    layout: Layout | None
    sources: list[SparkTable]  # every table the plan reads (empty when plan is None)
    unsupported: UnsupportedQuery | None
    call_types: dict[int, dict[int, str]]  # by id() of the Aggregate node, then call index
    output_names: list[str]
    views_digest: str = ""  # the bodies of the views the query reads (see `views_digest`)
    reads: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # see `columns_read`
    # Reads or yields a date or timestamp: its casts and date parts follow the session's time zone.
    zoned: bool = False

    @property
    def not_iceberg(self) -> list[SparkTable]:
        return [s for s in self.sources if not s.is_iceberg]


def compile_query(spark: Any, spec: StreamTableSpec, sql: str) -> Compiled:
    """Plan `sql` (Spark SQL). Invalid SQL raises InvalidQuery naming the model."""
    try:
        fields = spark.sql(sql).schema.fields
    except Exception as error:
        raise InvalidQuery(spec.model, str(error).strip().splitlines()[0]) from error
    output_names = [f.name for f in fields]
    output_types = [f.dataType.simpleString() for f in fields]
    for field in fields:
        if incomparable(field.dataType.simpleString()):
            raise IncomparableColumn(spec.model, field.name, field.dataType.simpleString())
    catalog = SparkCatalog(spark)
    try:
        plan = build_plan(SPARK, sql, catalog, spec.model, output_names)
    except UnsupportedQuery as unsupported:
        if spec.refresh_mode == "differential":
            raise
        return Compiled(None, None, [], unsupported, {}, output_names, _views_digest(catalog))
    layout = layout_of(plan)
    names = {s.table.qualified for s in scans_in(plan)}
    sources = [catalog.tables[n] for n in sorted(names)]
    call_types: dict[int, dict[int, str]] = {}
    current = Bindings(SPARK, current={s.info.qualified: source_relation(s.info) for s in sources})
    try:
        for aggregate, probe in stream.call_probes(plan, Context(current)):
            fields = spark.sql(probe.sql("spark")).schema.fields
            types = call_types.setdefault(id(aggregate), {})
            for field, call in zip(fields, aggregate.calls, strict=True):
                types[call.index] = field.dataType.simpleString()
            _refuse_inexact_running_sums(spark, spec.model, aggregate, probe)
    except UnsupportedQuery as unsupported:
        if spec.refresh_mode == "differential":
            raise
        return Compiled(None, None, [], unsupported, {}, output_names, _views_digest(catalog))
    reads = columns_read(plan)
    compiled = Compiled(plan, layout, sources, None, call_types, output_names, _views_digest(catalog), reads)
    read_types = [
        c.type
        for s in sources
        for c in s.info.columns
        if s.info.qualified not in reads or c.name in reads[s.info.qualified]
    ]
    compiled.zoned = any(_zoned(t) for t in [*read_types, *output_types])
    return compiled


def _zoned(type_: str) -> bool:
    """Whether values of this type read or shown depend on the session time zone (a timestamp
    without time zone, timestamp_ntz, does not; a date cast to a timestamp does)."""
    return type_.startswith(("timestamp", "date")) and not type_.startswith("timestamp_ntz")


def session_zone(spark: Any, compiled: Compiled) -> str:
    """The session time zone the stream table's values follow ("" when they follow none)."""
    return str(spark.conf.get("spark.sql.session.timeZone")) if compiled.zoned else ""


# Spark keeps a decimal sum's scale while its precision fits 38 digits, or its scale is at most 6.
MAX_SUMMED_DIGITS, MIN_KEPT_SCALE = 27, 6


def _refuse_inexact_running_sums(spark: Any, model: str, aggregate: Aggregate, probe: exp.Query) -> None:
    """A running SUM or AVG over floating point drifts (1e16 + 1 − 1e16 is 0): refused, as on
    PostgreSQL; so is one over a decimal of more than 27 digits with more than 6 decimals, whose sums
    Spark rounds. Judged by the argument's type (Spark's AVG of an int is a double too)."""
    summed = [c for c in aggregate.calls if c.func != "recomputed" and REGISTRY[c.func].inexact_types]
    if not summed:
        return
    arguments = exp.select(
        *[exp.column(grouping.arg_column(c), stream.ROWS, quoted=True) for c in summed]
    ).from_(probe.args["from_"].this.copy())
    fields = spark.sql(arguments.sql("spark")).schema.fields
    for field, call in zip(fields, summed, strict=True):
        type_ = field.dataType.simpleString()
        if type_ in REGISTRY[call.func].inexact_types:
            raise UnsupportedQuery(
                model,
                f"aggregate `{call.original.sql('spark')}` over {type_}",
                "cast the argument to decimal, or use refresh_mode='full'",
            )
        digits = decimal_digits(exp.DataType.build(type_, dialect="spark"))
        if digits is not None and digits[0] > MAX_SUMMED_DIGITS and digits[1] > MIN_KEPT_SCALE:
            # Its sum is a decimal(38, s): adding a batch's sum to it needs a 39th digit, and
            # Spark keeps 38 by dropping decimals (down to 6).
            raise UnsupportedQuery(
                model,
                f"aggregate `{call.original.sql('spark')}` over {type_} (a running sum of it would "
                "lose decimals)",
                f"cast the argument to decimal({MAX_SUMMED_DIGITS}, {digits[1]}) or to at most "
                f"{MIN_KEPT_SCALE} decimals, or use refresh_mode='full'",
            )


def _views_digest(catalog: SparkCatalog) -> str:
    return views_digest(t.info for t in catalog.tables.values())
