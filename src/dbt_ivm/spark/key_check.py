"""A declared source key the data breaks, found and named.

Iceberg's identifier fields and ``dbt_ivm.primary_key`` are promises nothing enforces. A stream table
keyed by them (a projection or join of keyed sources) holds each key once, so two source rows with
one key would silently become one. The refresh notices it cheaply — its batch then contains rows no
unique key allows (``keyed.classified_rows(checked=True)``), and a new table holds a key twice —
and only then reads the sources whole, here, to name the source and a key value that repeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dbt_ivm.reserved import internal_column
from dbt_ivm.spark.apply import DIALECT
from dbt_ivm.spark.catalog import SparkTable
from dbt_ivm.sqltext import columns

REPEATS = "__ivm_repeats"


@dataclass(frozen=True)
class RepeatedKey:
    source: str
    key: tuple[str, ...]
    values: tuple[Any, ...]
    rows: int

    def describe(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in zip(self.key, self.values, strict=True))
        return (
            f"{self.source} declares the key ({', '.join(self.key)}) but {self.rows} of its rows have {shown}"
        )


def repeated_key(spark: Any, sources: Sequence[SparkTable], bound: dict[str, exp.Expr]) -> RepeatedKey | None:
    """The first source (as `bound`: its rows under internal names) holding a key value twice."""
    for source in sources:
        info = source.info
        if not info.primary_key or info.qualified not in bound:
            continue
        key = [internal_column(info, k) for k in info.primary_key]
        found = _first_repeat(spark, bound[info.qualified], key)
        if found:
            row = found[0]
            return RepeatedKey(info.qualified, info.primary_key, tuple(row[:-1]), int(row[-1]))
    return None


def stored_key_repeats(spark: Any, table: exp.Table, key: Sequence[str]) -> bool:
    """Whether the stream table holds one of its keys twice."""
    return bool(_first_repeat(spark, table, key))


def _first_repeat(spark: Any, relation: exp.Expr, key: Sequence[str]) -> list[Any]:
    """At most one row: a value of `key` that `relation` holds more than once, and how often."""
    count = exp.func("COUNT", exp.Star())
    query = (
        exp.select(*columns(key), exp.alias_(count, REPEATS, quoted=True))
        .from_(relation.copy())
        .group_by(*columns(key))
        .having(exp.GT(this=count.copy(), expression=exp.Literal.number(1)))
        .limit(1)
    )
    return list(spark.sql(query.sql(DIALECT)).collect())
