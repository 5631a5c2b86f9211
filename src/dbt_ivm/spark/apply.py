"""Apply strategies on Spark + Iceberg: create the table, prepare a row delta, MERGE INTO.

Queries and statements are the engine's sqlglot trees rendered in Spark SQL; the multiset ordinal
expansion has a Spark form of its own (``explode(sequence)`` where PostgreSQL uses ``generate_series``
over a LATERAL count). Rows to apply are computed once and pinned with an eager ``localCheckpoint`` so
counting them and merging them see the same rows, computed from the stream table's state before the
MERGE.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from dbt_ivm.apply import keyed, multiset
from dbt_ivm.apply.key_span import KeySpan
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import SPARK, same_values
from dbt_ivm.layout import DUP, Layout
from dbt_ivm.spark.commit import Stamp, commit_with
from dbt_ivm.spark.iceberg import load_table, quoted_name, sql_string
from dbt_ivm.sqltext import WEIGHT, columns

DIALECT = SPARK.dialect


def bt(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class TempViews:
    """Session temp views one refresh creates, uniquely named (dbt threads share one session)."""

    spark: Any
    prefix: str = field(default_factory=lambda: f"__ivm_{uuid.uuid4().hex[:12]}")
    names: list[str] = field(default_factory=list)
    frames: list[Any] = field(default_factory=list)  # cached DataFrames, unpersisted by drop()
    releases: list[Callable[[], None]] = field(default_factory=list)  # run by drop(), after the views

    def on_drop(self, release: Callable[[], None]) -> None:
        """Run `release` when the views are dropped (what a view holds outside Spark's catalog)."""
        self.releases.append(release)

    def name(self, purpose: str) -> str:
        view = f"{self.prefix}_{purpose}"
        self.names.append(view)
        return view

    def pinned(self, purpose: str, query: exp.Query | str) -> exp.Table:
        """Compute `query` (or its Spark SQL text) now and keep its rows as a temp view."""
        view = self.name(purpose)
        self.spark.sql(query if isinstance(query, str) else query.sql(DIALECT)).localCheckpoint(
            eager=True
        ).createOrReplaceTempView(view)
        return exp.table_(view, quoted=True)

    def cached(self, purpose: str, query: exp.Query) -> exp.Table:
        """A temp view of `query` whose rows are kept once first computed: no job now, and the query
        that first reads it computes it within its own job (a change set read by one term costs
        nothing extra; one read by several is computed once)."""
        view = self.name(purpose)
        frame = self.spark.sql(query.sql(DIALECT)).persist()
        self.frames.append(frame)
        frame.createOrReplaceTempView(view)
        return exp.table_(view, quoted=True)

    def view(self, purpose: str, spark_select: str) -> exp.Table:
        """A temp view of a SELECT in Spark SQL text (the user's query, when the engine cannot plan it)."""
        view = self.name(purpose)
        self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {bt(view)} AS {spark_select}")
        return exp.table_(view, quoted=True)

    def drop(self) -> None:
        for view in self.names:
            self.spark.catalog.dropTempView(view)
        self.names.clear()
        for frame in self.frames:
            frame.unpersist()
        self.frames.clear()
        for release in self.releases:
            release()
        self.releases.clear()


def plain_layout(names: list[str]) -> Layout:
    """A query the delta rules cannot maintain: rows identified by value, refreshed FULL only."""
    return Layout("multiset", tuple(names), (), tuple(names))


def table_properties(given: dict[str, str]) -> str:
    """The TBLPROPERTIES list of a stream table: format 2 (row-level deletes), then the model's own."""
    merged = {"format-version": "2", **given}
    return ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in merged.items())


def create_table(
    spark: Any,
    table: tuple[str, str],
    layout: Layout,
    contents: exp.Expr,
    stamp: Stamp,
    properties: dict[str, str] | None = None,
) -> int:
    """CREATE TABLE … USING iceberg AS the contents (multiset: plus an ordinal among identical rows),
    its commit stamped with the frontier the contents were read at. `contents`: a query or relation;
    `properties`: the model's table properties."""
    relation = exp.table_(table[1], table[0], quoted=True)
    extra: list[exp.Expr] = []
    if layout.kind == "multiset":
        # Spark's row_number needs an order: any will do among identical rows.
        ordinal = exp.Window(
            this=exp.RowNumber(),
            partition_by=columns(layout.columns, "c"),
            order=exp.Order(expressions=columns(layout.columns, "c")),
        )
        extra.append(exp.alias_(exp.cast(ordinal, exp.DataType.build("int")), DUP, quoted=True))
    select = exp.select(*columns(layout.columns, "c"), *extra).from_(aliased(contents, "c"))
    if layout.kind != "multiset" and layout.key:
        # Written in key order, each file holds a narrow span of keys, which a batch's KeySpan skips.
        select = select.order_by(*columns(layout.key, "c"))
    create = (
        f"CREATE TABLE {relation.sql(DIALECT)} USING iceberg "
        f"TBLPROPERTIES ({table_properties(properties or {})}) AS {select.sql(DIALECT)}"
    )
    commit_with(spark, table, stamp, lambda: spark.sql(create))
    return count_rows(spark, relation)


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


def count_rows(spark: Any, *relations: exp.Expr) -> int:
    """The rows of all `relations`, counted in one job."""
    return int(spark.sql(rows_in(relations).sql(DIALECT)).collect()[0][0] or 0)


def rows_in(relations: tuple[exp.Expr, ...]) -> exp.Select:
    """A one-value query: how many rows `relations` hold together."""
    counts = [exp.select(exp.alias_(exp.func("COUNT", exp.Star()), "n")).from_(r.copy()) for r in relations]
    union: exp.Query = counts[0]
    for count in counts[1:]:
        union = exp.union(union, count, distinct=False)
    return exp.select(exp.func("SUM", exp.column("n"))).from_(union.subquery("counts"))


@dataclass
class Prepared:
    """A row delta ready to MERGE: what it will do, and the statement that does it."""

    inserted: int
    updated: int
    deleted: int
    merge: str  # Spark SQL
    violations: int = 0  # rows showing that a source's declared key is not unique (keyed layouts)
    also_counted: int = 0  # the rows of `prepare`'s `also_count` relations

    @property
    def changes_anything(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted)


def prepare(
    spark: Any,
    views: TempViews,
    table: exp.Table,
    layout: Layout,
    delta: exp.Query,
    also_count: tuple[exp.Expr, ...] = (),
    narrow: bool = False,
) -> Prepared:
    """Pin the rows a row delta (layout columns + weight) will write; count them, and in the same
    query the rows of `also_count` (the batch's change sets, for the history).

    `narrow` (a batch, not a FULL refresh's whole table): read the stored rows through the span of
    the key the batch touches (`KeySpan`), so Iceberg skips the files outside it."""
    if layout.kind == "multiset":
        summed = views.pinned("summed", multiset.summed_rows(layout, delta, SPARK))
        ops = views.pinned("ops", ordinal_ops(layout, summed, table))
        row = _counted(spark, multiset.ops_counts(ops), also_count)
        merge = multiset.merge(layout, ops, table, SPARK).sql(DIALECT)
        return Prepared(int(row[0]), 0, int(row[1]), merge, also_counted=int(row[-1] or 0))
    # Nothing enforces a key on Spark: rows keyed by source keys check that those are unique.
    checked = layout.kind == "keyed"
    consolidated = keyed.consolidated_rows(layout, delta, SPARK, checked)
    to_classify: exp.Expr = consolidated
    span = None
    if narrow and layout.key:
        pinned = views.pinned("consolidated", consolidated)  # read by the span, then classified
        to_classify, span = pinned, key_span(spark, pinned, layout.key[0])
    rows = views.pinned("rows", keyed.classified_rows(layout, to_classify, table, SPARK, checked, span))
    action = exp.column(keyed.ACTION, quoted=True)
    counts = exp.select(
        *[
            exp.CountIf(this=exp.EQ(this=action.copy(), expression=exp.Literal.string(a)))
            for a in ("I", "U", "D", keyed.VIOLATES)
        ]
    ).from_(rows)
    found = _counted(spark, counts, also_count)
    merge = keyed.classified_merge(layout, rows, table, SPARK, span).sql(DIALECT)
    return Prepared(
        int(found[0]), int(found[1]), int(found[2]), merge, int(found[3]), also_counted=int(found[-1] or 0)
    )


# Types whose values survive a round trip through their string form (a timestamp's, through its
# microseconds: a local time can name two instants) and compare as Iceberg orders them. A
# floating-point key (NaN, -0.0) or a nested one gets no span.
SPANNED_TYPES = re.compile(r"(tiny|small|big)?int|decimal\(\d+,\d+\)|string|date|timestamp(_ntz)?")


def key_span(spark: Any, rows: exp.Table, column: str) -> KeySpan | None:
    """The span of `column` among `rows` (a pinned view), in one job; None when its type has no
    span (`SPANNED_TYPES`) or no row has a value."""
    type_name = spark.table(bt(rows.name)).schema[column].dataType.simpleString()
    if not SPANNED_TYPES.fullmatch(type_name):
        return None
    key = exp.column(column, quoted=True)
    instant = type_name == "timestamp"

    def shown(value: exp.Expr) -> exp.Expr:
        carried = exp.Anonymous(this="unix_micros", expressions=[value]) if instant else value
        return exp.cast(carried, exp.DataType.build("string"))

    def read(value: str) -> exp.Expr:
        if instant:
            return exp.Anonymous(this="timestamp_micros", expressions=[exp.Literal.number(value)])
        return exp.cast(exp.Literal.string(value), exp.DataType.build(type_name, dialect=DIALECT))

    query = exp.select(
        shown(exp.Min(this=key.copy())),
        shown(exp.Max(this=key.copy())),
        exp.CountIf(this=exp.Is(this=key.copy(), expression=exp.null())),
    ).from_(rows)
    low, high, nulls = spark.sql(query.sql(DIALECT)).collect()[0]
    if low is None:
        return None
    return KeySpan(column, read(low), read(high), holds_null=bool(nulls))


def _counted(spark: Any, counts: exp.Select, also_count: tuple[exp.Expr, ...]) -> Any:
    """The one row of `counts`, its last value the rows of `also_count` (0 when none): one call, not
    one per count."""
    extra = exp.Subquery(this=rows_in(also_count)) if also_count else exp.Literal.number(0)
    return spark.sql(counts.select(extra).sql(DIALECT)).collect()[0]


def ordinal_ops(layout: Layout, summed: exp.Expr, stream_table: exp.Table) -> exp.Select:
    """One row per ordinal to insert (+1) or delete (−1) for each value whose weight is ±k.

    A value stored n times with weight +k gets ordinals n+1..n+k; with −k, ordinals n−k+1..n go.
    """
    stored, count = "__ivm_stored", "__ivm_n"
    stored_counts = (
        exp.select(*columns(layout.columns), exp.alias_(exp.func("COUNT", exp.Star()), count, quoted=True))
        .from_(stream_table)
        .group_by(*columns(layout.columns))
    )
    integer = exp.DataType.build("int")
    stored_count = exp.func("COALESCE", exp.column(count, stored, quoted=True), exp.Literal.number(0))
    counted = (
        exp.select(
            *columns(layout.columns, "r"),
            exp.alias_(exp.cast(exp.column(WEIGHT, "r", quoted=True), integer), WEIGHT, quoted=True),
            exp.alias_(exp.cast(stored_count, integer), count, quoted=True),
        )
        .from_(aliased(summed, "r"))
        .join(aliased(stored_counts, stored), on=same_values("r", stored, layout.columns), join_type="left")
    )
    weight = exp.column(WEIGHT, "x", quoted=True)
    first, last = multiset.ordinal_range(weight, exp.column(count, "x", quoted=True))
    ordinals = exp.Explode(this=exp.func("sequence", first, last, dialect=DIALECT))
    return exp.select(
        *columns(layout.columns, "x"),
        exp.alias_(ordinals, DUP, quoted=True),
        exp.alias_(multiset.signed(weight), WEIGHT, quoted=True),
    ).from_(aliased(counted, "x"))
