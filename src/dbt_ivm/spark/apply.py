"""Apply strategies on Spark + Iceberg: create the table, prepare a row delta, MERGE INTO.

Queries and statements are the engine's sqlglot trees rendered in Spark SQL; a multiset's copies have
a Spark form of their own (`copy_ops`: a value losing copies is rewritten whole, where PostgreSQL
deletes exactly the copies that go). Rows to apply are computed once and pinned with an eager ``localCheckpoint``,
counted by the same job (``observed``), so the counts and the MERGE see the same rows, computed from
the stream table's state before the MERGE.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from dbt_ivm.apply import grouped, keyed, multiset
from dbt_ivm.apply.key_span import KeySpan
from dbt_ivm.delta.stream import GroupChange
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import same_values
from dbt_ivm.layout import Layout
from dbt_ivm.plan.aggregation import group_placeholder
from dbt_ivm.spark import observed, upkeep
from dbt_ivm.spark.commit import Stamp, commit_with
from dbt_ivm.spark.iceberg import count, load_table, quoted_name, sql_string, total_records
from dbt_ivm.sqltext import WEIGHT, all_of, columns
from dbt_ivm.target import SPARK

DIALECT = SPARK.dialect


def bt(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class TempViews:
    """Session temp views one refresh creates, uniquely named (dbt threads share one session)."""

    spark: Any
    prefix: str = field(default_factory=lambda: f"__ivm_{uuid.uuid4().hex[:12]}")
    names: list[str] = field(default_factory=list)
    releases: list[Callable[[], None]] = field(default_factory=list)  # run by drop(), after the views
    pinned_frames: list[Any] = field(default_factory=list)  # their rows freed by drop()

    def on_drop(self, release: Callable[[], None]) -> None:
        """Run `release` when the views are dropped (what a view holds outside Spark's catalog)."""
        self.releases.append(release)

    def name(self, purpose: str) -> str:
        view = f"{self.prefix}_{purpose}"
        self.names.append(view)
        return view

    def pinned(self, purpose: str, query: exp.Query | str) -> exp.Table:
        """Compute `query` (or its Spark SQL text) now and keep its rows as a temp view."""
        return self.observed(purpose, self.frame(query), ())[0]

    def frame(self, query: exp.Query | str) -> Any:
        """`query` (or its Spark SQL text) as a DataFrame: analyzed, not computed."""
        return self.spark.sql(query if isinstance(query, str) else query.sql(DIALECT))

    def observed(
        self, purpose: str, frame: Any, metrics: Sequence[exp.Expr]
    ) -> tuple[exp.Table, tuple[Any, ...]]:
        """Pin `frame` (see `pinned`) and return, besides its view, `metrics` (aggregates over its
        columns) as the same job computed them over its rows (``observed``)."""
        view = self.name(purpose)
        pinned, values = observed.pin(frame, view, metrics)
        self.pinned_frames.append(pinned)
        return exp.table_(view, quoted=True), values

    def view(self, purpose: str, spark_select: str) -> exp.Table:
        """A temp view of a SELECT in Spark SQL text (the user's query, when the engine cannot plan it)."""
        view = self.name(purpose)
        self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {bt(view)} AS {spark_select}")
        return exp.table_(view, quoted=True)

    def drop(self) -> None:
        for view in self.names:
            self.spark.catalog.dropTempView(view)
        self.names.clear()
        for pinned in self.pinned_frames:
            observed.free(pinned)
        self.pinned_frames.clear()
        for release in self.releases:
            release()
        self.releases.clear()


def plain_layout(names: list[str]) -> Layout:
    """A query the delta rules cannot maintain: rows identified by value, refreshed FULL only."""
    return Layout("multiset", tuple(names), (), tuple(names))


def table_properties(given: dict[str, str]) -> str:
    """The TBLPROPERTIES list of a stream table: format 2 (row-level deletes), old metadata files
    deleted (`upkeep`), then the model's own."""
    merged = {"format-version": "2", **upkeep.METADATA_PROPERTIES, **given}
    return ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in merged.items())


def create_table(
    spark: Any,
    table: tuple[str, str],
    layout: Layout,
    contents: exp.Expr,
    stamp: Stamp,
    properties: dict[str, str] | None = None,
) -> int:
    """CREATE TABLE … USING iceberg AS the contents, its commit stamped with the frontier the contents
    were read at. `contents`: a query or relation; `properties`: the model's table properties."""
    relation = exp.table_(table[1], table[0], quoted=True)
    create = (
        f"CREATE TABLE {relation.sql(DIALECT)} USING iceberg "
        f"TBLPROPERTIES ({table_properties(properties or {})}) AS {stored_rows(layout, contents).sql(DIALECT)}"
    )
    snapshot_id = commit_with(spark, table, stamp, lambda: spark.sql(create))
    return total_records(spark, table, snapshot_id)  # the commit's summary counts them: no job


def stored_rows(layout: Layout, contents: exp.Expr) -> exp.Select:
    """The rows of `contents` as the table stores them: the layout's columns, in key order (each
    file then holds a narrow span of keys, which a batch's KeySpan skips)."""
    select = exp.select(*columns(layout.columns, "c")).from_(aliased(contents, "c"))
    if layout.kind != "multiset" and layout.key:
        select = select.order_by(*columns(layout.key, "c"))
    return select


def overwrite_table(
    spark: Any, table: tuple[str, str], layout: Layout, contents: exp.Expr, stamp: Stamp
) -> tuple[int, int]:
    """Replace every row of the table by the contents in one commit stamped with `stamp` (the table,
    its properties and history stay); the rows it wrote and removed, from the commit's summary."""
    from pyspark.sql import functions as F

    frame = spark.sql(stored_rows(layout, contents).sql(DIALECT))
    # By filter, not INSERT OVERWRITE: a session in dynamic partition-overwrite mode would keep the
    # partitions the new rows leave empty.
    snapshot_id = commit_with(
        spark, table, stamp, lambda: frame.writeTo(quoted_name(table)).overwrite(F.lit(True))
    )
    summary = load_table(spark, table).snapshot(int(snapshot_id)).summary()
    return count(summary.get("added-records")), count(summary.get("deleted-records"))


# Properties Iceberg keeps whatever the config says (unsetting them is refused or meaningless).
KEPT_PROPERTIES = ("format-version",)


def sync_properties(
    spark: Any, table: tuple[str, str], wanted: dict[str, str], dropped: Sequence[str] = ()
) -> None:
    """Set the model's table properties that the table does not hold (a config changed since it was
    built), and unset those `dropped` from the config since its last run."""
    held = load_table(spark, table).properties()
    changed = {k: v for k, v in wanted.items() if held.get(k) != v}
    if changed:
        listed = ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in changed.items())
        spark.sql(f"ALTER TABLE {quoted_name(table)} SET TBLPROPERTIES ({listed})")
    gone = [k for k in dropped if k in held and k not in KEPT_PROPERTIES]
    if gone:
        listed = ", ".join(sql_string(k) for k in gone)
        spark.sql(f"ALTER TABLE {quoted_name(table)} UNSET TBLPROPERTIES IF EXISTS ({listed})")


@dataclass
class Prepared:
    """A row delta ready to MERGE: what it will do, and the statement that does it."""

    inserted: int
    updated: int
    deleted: int
    merge: str  # Spark SQL
    violations: int = 0  # rows showing that a source's declared key is not unique (keyed layouts)

    @property
    def changes_anything(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted)


def prepare(
    views: TempViews,
    table: exp.Table,
    layout: Layout,
    delta: exp.Query | GroupChange,
    narrow: bool = False,
) -> Prepared:
    """Pin the rows a row delta (layout columns + weight) will write, counting them as they are pinned;
    a stored aggregate's batch comes as its change per group instead (`prepare_grouped`).

    `narrow` (a batch, not a FULL refresh's whole table): read the stored rows through the span of
    the key the batch touches (`KeySpan`), so Iceberg skips the files outside it."""
    if isinstance(delta, GroupChange):
        return prepare_grouped(views, table, delta)
    if layout.kind == "multiset":
        summed_frame = views.frame(multiset.summed_rows(layout, delta, SPARK))
        summed, (inserted, deleted) = views.observed("summed", summed_frame, multiset.weight_total_metrics())
        ops = views.pinned("ops", copy_ops(layout, summed, table))
        merge = multiset.replacing_merge(layout, ops, table).sql(DIALECT)
        return Prepared(int(inserted), 0, int(deleted), merge)
    # Nothing enforces a key on Spark: rows keyed by source keys check that those are unique.
    checked = layout.kind == "keyed"
    consolidated = keyed.consolidated_rows(layout, delta, SPARK, checked)
    to_classify: exp.Expr = consolidated
    span = None
    if narrow and layout.key:
        to_classify, span = pinned_with_span(views, "consolidated", views.frame(consolidated), layout.key[0])
    classified = views.frame(keyed.classified_rows(layout, to_classify, table, SPARK, checked, span))
    rows, found = views.observed("rows", classified, _tallies())
    merge = keyed.classified_merge(layout, rows, table, SPARK, span).sql(DIALECT)
    return Prepared(int(found[0]), int(found[1]), int(found[2]), merge, int(found[3]))


def prepare_grouped(views: TempViews, table: exp.Table, change: GroupChange) -> Prepared:
    """A stored aggregate's batch: its change per group pinned (the span of its groups' keys observed
    meanwhile), then each touched group's new row classified against its stored one (counted as it is
    pinned): one look at the stored groups, no row delta to consolidate."""
    layout = change.layout
    frame = views.frame(change.delta)
    if not layout.key:  # one row, no span
        pinned, span = views.observed("change", frame, ())[0], None
    else:
        pinned, span = pinned_with_span(views, "change", frame, group_placeholder(0))
    if span is not None:  # the groups' keys are stored under the layout's key names
        span = replace(span, column=layout.key[0])
    classified = views.frame(grouped.classified_rows(change, pinned, table, SPARK, span))
    rows, found = views.observed("rows", classified, _tallies())
    merge = keyed.classified_merge(layout, rows, table, SPARK, span).sql(DIALECT)
    return Prepared(int(found[0]), int(found[1]), int(found[2]), merge)


def _tallies() -> list[exp.Expr]:
    """How many classified rows insert, update, delete, and show a repeated key (`keyed.ACTION`)."""
    action = exp.column(keyed.ACTION, quoted=True)
    return [
        exp.CountIf(this=exp.EQ(this=action.copy(), expression=exp.Literal.string(a)))
        for a in ("I", "U", "D", keyed.VIOLATES)
    ]


def pinned_with_span(
    views: TempViews, purpose: str, frame: Any, column: str
) -> tuple[exp.Table, KeySpan | None]:
    """Pin `frame`, observing meanwhile the span of its `column` (None: the column's type has no span,
    or no row has a value)."""
    probe = SpanProbe.of(frame, column)
    pinned, values = views.observed(purpose, frame, probe.metrics if probe else ())
    return pinned, probe.span(values) if probe else None


# Types whose values survive a round trip through their string form (a timestamp's, through its
# microseconds: a local time can name two instants) and compare as Iceberg orders them. A
# floating-point key (NaN, -0.0) or a nested one gets no span.
SPANNED_TYPES = re.compile(r"(tiny|small|big)?int|decimal\(\d+,\d+\)|string|date|timestamp(_ntz)?")


@dataclass(frozen=True)
class SpanProbe:
    """How to learn the `KeySpan` of `column` (of Spark type `type_name`) from rows being pinned:
    `metrics` to observe over them, `span` to read the values observed."""

    column: str
    type_name: str

    @classmethod
    def of(cls, frame: Any, column: str) -> SpanProbe | None:
        """The probe of `frame`'s `column`; None when its type has no span (`SPANNED_TYPES`)."""
        type_name = frame.schema[column].dataType.simpleString()
        return cls(column, type_name) if SPANNED_TYPES.fullmatch(type_name) else None

    @property
    def instant(self) -> bool:
        return self.type_name == "timestamp"

    @property
    def metrics(self) -> list[exp.Expr]:
        key = exp.column(self.column, quoted=True)

        def shown(value: exp.Expr) -> exp.Expr:
            carried = exp.Anonymous(this="unix_micros", expressions=[value]) if self.instant else value
            return exp.cast(carried, exp.DataType.build("string"))

        return [
            shown(exp.Min(this=key.copy())),
            shown(exp.Max(this=key.copy())),
            exp.CountIf(this=exp.Is(this=key.copy(), expression=exp.null())),
        ]

    def span(self, values: Sequence[Any]) -> KeySpan | None:
        """The span the observed `values` describe; None when no row has a value."""
        low, high, nulls = values
        if low is None:
            return None
        return KeySpan(self.column, self._read(low), self._read(high), holds_null=bool(nulls))

    def _read(self, value: str) -> exp.Expr:
        if self.instant:
            return exp.Anonymous(this="timestamp_micros", expressions=[exp.Literal.number(value)])
        return exp.cast(exp.Literal.string(value), exp.DataType.build(self.type_name, dialect=DIALECT))


def copy_ops(layout: Layout, summed: exp.Table, stream_table: exp.Table) -> exp.Select:
    """The rows `multiset.replacing_merge` applies: a ``D`` row for each value that loses copies (its
    n stored copies all go), and an ``I`` row per copy to insert: k for a value whose weight is +k,
    n − k for one whose weight is −k. One pass over the summed rows, each exploded into its actions."""
    stored, count = "__ivm_stored", multiset.STORED_COUNT
    weight = exp.column(WEIGHT, "r", quoted=True)
    losing = exp.LT(this=weight.copy(), expression=exp.Literal.number(0))
    # Only the values that lose copies are counted in the stream table.
    lost = (
        exp.select(exp.Literal.number(1))
        .from_(aliased(summed, "r"))
        .where(all_of(losing.copy(), same_values("r", "s", layout.columns)))
    )
    stored_counts = (
        exp.select(
            *columns(layout.columns, "s"), exp.alias_(exp.func("COUNT", exp.Star()), count, quoted=True)
        )
        .from_(aliased(stream_table, "s"))
        .where(exp.Exists(this=lost))
        .group_by(*columns(layout.columns, "s"))
    )
    n = exp.func("COALESCE", exp.column(count, stored, quoted=True), exp.Literal.number(0))
    copies = exp.Case().when(losing.copy(), exp.Add(this=n, expression=weight.copy())).else_(weight.copy())

    def repeated(code: str, times: exp.Expr) -> exp.Expr:
        return exp.Anonymous(
            this="array_repeat",
            expressions=[exp.Literal.string(code), exp.cast(times, exp.DataType.build("int"))],
        )

    removal = exp.If(this=losing.copy(), true=exp.Literal.number(1), false=exp.Literal.number(0))
    actions = exp.func(
        "concat", repeated("D", removal), repeated("I", exp.func("greatest", copies, exp.Literal.number(0)))
    )
    return (
        exp.select(
            *columns(layout.columns, "r"), exp.alias_(exp.Explode(this=actions), multiset.ACTION, quoted=True)
        )
        .from_(aliased(summed, "r"))
        .join(aliased(stored_counts, stored), on=same_values("r", stored, layout.columns), join_type="left")
    )
