"""Apply strategies on Spark + Iceberg: create the table, prepare a row delta, MERGE INTO.

The engine writes SQL in PostgreSQL spelling; everything here is rendered to Spark SQL with sqlglot
except the multiset ordinal expansion, which has no PostgreSQL twin on Spark (``explode(sequence)``
replaces ``generate_series`` over a LATERAL count). Rows to apply are computed once and pinned with
an eager ``localCheckpoint`` so counting them and merging them see the same rows, computed from the
stream table's state before the MERGE.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from dbt_ivm.apply import keyed, multiset
from dbt_ivm.layout import DUP, Layout
from dbt_ivm.spark.commit import Stamp, commit_with
from dbt_ivm.sqltext import WEIGHT, q, qn, render

STREAM_TABLE_PROPERTIES = "'format-version'='2'"


def bt(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class TempViews:
    """Session temp views one refresh creates, uniquely named (dbt threads share one session)."""

    spark: Any
    prefix: str = field(default_factory=lambda: f"__ivm_{uuid.uuid4().hex[:12]}")
    names: list[str] = field(default_factory=list)

    def name(self, purpose: str) -> str:
        view = f"{self.prefix}_{purpose}"
        self.names.append(view)
        return view

    def pinned(self, purpose: str, spark_select: str) -> str:
        """Compute a Spark SELECT now and keep its rows as a temp view; returns the view name."""
        view = self.name(purpose)
        self.spark.sql(spark_select).localCheckpoint(eager=True).createOrReplaceTempView(view)
        return view

    def view(self, purpose: str, spark_select: str) -> str:
        view = self.name(purpose)
        self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {bt(view)} AS {spark_select}")
        return view

    def drop(self) -> None:
        for view in self.names:
            self.spark.catalog.dropTempView(view)
        self.names.clear()


def plain_layout(names: list[str]) -> Layout:
    """A query the delta rules cannot maintain: rows identified by value, refreshed FULL only."""
    return Layout("multiset", tuple(names), (), tuple(names))


def create_table(spark: Any, table: tuple[str, str], layout: Layout, contents: str, stamp: Stamp) -> int:
    """CREATE TABLE … USING iceberg AS the contents (multiset: plus an ordinal among identical rows),
    its commit stamped with the frontier the contents were read at."""
    relation = qn(*table)
    columns = ", ".join(f"c.{q(col)}" for col in layout.columns)
    extra = ""
    if layout.kind == "multiset":
        values = ", ".join(f"c.{q(col)}" for col in layout.columns)
        extra = f", CAST(row_number() OVER (PARTITION BY {values} ORDER BY {values}) AS INT) AS {q(DUP)}"
    select = render(f"SELECT {columns}{extra} FROM ({contents}) AS c", "spark")
    create = (
        f"CREATE TABLE {render(relation, 'spark')} USING iceberg "
        f"TBLPROPERTIES ({STREAM_TABLE_PROPERTIES}) AS {select}"
    )
    commit_with(spark, table, stamp, lambda: spark.sql(create))
    return int(spark.sql(f"SELECT COUNT(*) FROM {render(relation, 'spark')}").collect()[0][0])


@dataclass
class Prepared:
    """A row delta ready to MERGE: what it will do, and the statement that does it."""

    inserted: int
    updated: int
    deleted: int
    merge: str  # Spark SQL

    @property
    def changes_anything(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted)


def prepare(spark: Any, views: TempViews, relation: str, layout: Layout, delta: str) -> Prepared:
    """Pin the rows a row delta (PostgreSQL spelling, layout columns + weight) will write; count them."""
    if layout.kind == "multiset":
        summed = views.pinned("summed", render(multiset.summed_rows_sql(layout, delta, False), "spark"))
        ops = views.pinned("ops", ordinal_ops_sql(layout, summed, render(relation, "spark")))
        row = spark.sql(
            f"SELECT COALESCE(SUM(CASE WHEN {bt(WEIGHT)} > 0 THEN 1 ELSE 0 END), 0), "
            f"COALESCE(SUM(CASE WHEN {bt(WEIGHT)} < 0 THEN 1 ELSE 0 END), 0) FROM {bt(ops)}"
        ).collect()[0]
        merge = render(multiset.merge_sql(layout, q(ops), relation, False), "spark")
        return Prepared(int(row[0]), 0, int(row[1]), merge)
    consolidated = f"({keyed.consolidated_rows_sql(layout, delta, False)})"
    classified = keyed.classified_rows_sql(layout, consolidated, relation, False)
    rows = views.pinned("rows", render(classified, "spark"))
    action = bt(keyed.ACTION)
    counts = spark.sql(
        f"SELECT COUNT_IF({action} = 'I'), COUNT_IF({action} = 'U'), COUNT_IF({action} = 'D') FROM {bt(rows)}"
    ).collect()[0]
    merge = render(keyed.classified_merge_sql(layout, q(rows), relation, False), "spark")
    return Prepared(int(counts[0]), int(counts[1]), int(counts[2]), merge)


def ordinal_ops_sql(layout: Layout, summed: str, stream_table: str) -> str:
    """Spark SQL: one row per ordinal to insert (+1) or delete (−1) for each value whose weight is ±k.

    A value stored n times with weight +k gets ordinals n+1..n+k; with −k, ordinals n−k+1..n go.
    """
    columns = [bt(c) for c in layout.columns]
    listed = ", ".join(columns)
    stored, count, weight = bt("__ivm_stored"), bt("__ivm_n"), bt(WEIGHT)
    match = " AND ".join(f"r.{c} <=> {stored}.{c}" for c in columns) or "TRUE"
    w, n = f"x.{weight}", f"x.{count}"
    first = f"CASE WHEN {w} > 0 THEN {n} + 1 ELSE {n} + {w} + 1 END"
    last = f"CASE WHEN {w} > 0 THEN {n} + {w} ELSE {n} END"
    counted = (
        f"SELECT {', '.join(f'r.{c}' for c in columns)}, CAST(r.{weight} AS INT) AS {weight}, "
        f"CAST(COALESCE({stored}.{count}, 0) AS INT) AS {count} FROM {bt(summed)} AS r "
        f"LEFT JOIN (SELECT {listed}, COUNT(*) AS {count} FROM {stream_table} GROUP BY {listed}) AS {stored} "
        f"ON {match}"
    )
    return (
        f"SELECT {', '.join(f'x.{c}' for c in columns)}, explode(sequence({first}, {last})) AS {bt(DUP)}, "
        f"CAST(SIGN({w}) AS INT) AS {weight} FROM ({counted}) AS x"
    )


def full_delta_sql(relation: str, layout: Layout, contents: str) -> str:
    """New contents (+1) against stored contents (−1): FULL refresh as a row delta (PostgreSQL spelling)."""
    columns = ", ".join(q(c) for c in layout.columns)
    return (
        f"SELECT {columns}, 1 AS {q(WEIGHT)} FROM ({contents}) AS {q('__ivm_new')} "
        f"UNION ALL SELECT {columns}, -1 AS {q(WEIGHT)} FROM {relation}"
    )
