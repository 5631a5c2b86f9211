"""The engine's Catalog over a SparkSession: columns and types from the table's schema, the row key
from Iceberg metadata.

Primary key, in order of preference:

1. the Iceberg table's identifier fields (``ALTER TABLE t SET IDENTIFIER FIELDS id``; the columns
   must be NOT NULL), shown by Spark as the table property ``identifier-fields``;
2. the table property ``dbt_ivm.primary_key`` — a comma-separated column list
   (``ALTER TABLE t SET TBLPROPERTIES ('dbt_ivm.primary_key'='id')``), for tables whose key
   columns are nullable or that are not Iceberg.

Without either, rows are identified by value (multiset layout: duplicates allowed).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dbt_ivm.catalog import Column, FunctionCall, TableInfo
from dbt_ivm.spark.iceberg import load_table

KEY_PROPERTY = "dbt_ivm.primary_key"
NO_SNAPSHOT = -1


def bt(*parts: str) -> str:
    """A dotted Spark identifier, every part backtick-quoted."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


@dataclass(frozen=True)
class SparkTable:
    info: TableInfo
    provider: str  # "iceberg", "parquet", "view", ...
    properties: dict[str, str]

    @property
    def is_iceberg(self) -> bool:
        return self.provider.lower() == "iceberg"


BUILTIN_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."

# What was described of an Iceberg table, by (Spark application, relation), with what it was read
# from: the table's uuid, schema id (identifier fields included), location and properties. While they
# are the same, so is its description: one metadata lookup instead of three statements, as every
# refresh describes each source it reads (its data may move; a new snapshot changes none of them).
_DESCRIBED: dict[tuple[str, str], tuple[str, SparkTable]] = {}
_DESCRIBED_LOCK = threading.Lock()


class SparkCatalog:
    """Resolves `schema.name` with the session's current catalog; remembers what it looked up."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.tables: dict[str, SparkTable] = {}  # TableInfo.qualified -> what was found

    def lookup(self, schema: str | None, name: str) -> TableInfo | None:
        found = self.describe(schema, name)
        return None if found is None else found.info

    def function_volatilities(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, str | None]:
        return dict.fromkeys(calls)  # Spark's catalog does not record determinism: judged by name

    def set_returning(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        return dict.fromkeys(calls)  # nor generators: judged by name

    def aggregates(self, calls: Sequence[FunctionCall]) -> dict[FunctionCall, bool | None]:
        """By the class Spark's function registry names: its built-in aggregates live in one package
        (`every` is BoolAnd, `bit_or` BitOrAgg). A user's function's class cannot tell: None."""
        return {call: self._builtin_aggregate(call) for call in calls}

    def _builtin_aggregate(self, call: FunctionCall) -> bool | None:
        schema, name, _ = call
        try:
            found = self.spark.catalog.getFunction(bt(schema, name) if schema else bt(name))
        except Exception:  # no such function (the query's own analysis says why)
            return None
        class_name = str(found.className or "")
        if not class_name.startswith(BUILTIN_EXPRESSIONS):
            return None
        return ".aggregate." in class_name

    def describe(self, schema: str | None, name: str) -> SparkTable | None:
        schema = schema or str(self.spark.catalog.currentDatabase())
        relation = bt(schema, name)
        key = (str(self.spark.sparkContext.applicationId), relation)
        # Read before describing: a change in between leaves the older key kept, described again next time.
        described_from = _described_from(self.spark, (schema, name))
        with _DESCRIBED_LOCK:
            kept = _DESCRIBED.get(key)
        if described_from is not None and kept is not None and kept[0] == described_from:
            found: SparkTable | None = kept[1]
        else:
            found = self._described(schema, name, relation)
            if found is not None and found.is_iceberg and described_from is not None:
                with _DESCRIBED_LOCK:
                    _DESCRIBED[key] = (described_from, found)
        if found is not None:
            self.tables[found.info.qualified] = found
        return found

    def _described(self, schema: str, name: str, relation: str) -> SparkTable | None:
        try:
            # Another process may have committed: drop cached Iceberg metadata before reading it.
            self.spark.sql(f"REFRESH TABLE {relation}")
            detail = self.spark.sql(f"DESCRIBE TABLE EXTENDED {relation}").collect()
        except Exception as error:
            if "TABLE_OR_VIEW_NOT_FOUND" in str(error) or "not found" in str(error).lower():
                return None
            raise
        info = {str(r[0]).strip(): str(r[1] or "") for r in detail}
        kind = "view" if info.get("Type", "").upper() == "VIEW" else "table"
        provider = "view" if kind == "view" else info.get("Provider", "")
        properties = {} if kind == "view" else _properties(self.spark, relation)
        fields = self.spark.table(relation).schema.fields
        columns = tuple(Column(f.name, f.dataType.simpleString(), bool(f.nullable)) for f in fields)
        table = TableInfo(
            schema=schema,
            name=name,
            columns=columns,
            primary_key=_primary_key(properties, [c.name for c in columns]),
            kind=kind,
            view_sql=info.get("View Text") or None,
            identity=info.get("Location", ""),
        )
        return SparkTable(table, provider, properties)


def _described_from(spark: Any, table: tuple[str, str]) -> str | None:
    """What an Iceberg table's description follows, freshly loaded (what Spark holds of the table is
    refreshed with it); None for anything else (a view, another format, no such table)."""
    try:
        loaded = load_table(spark, table)
        parts = (loaded.uuid().toString(), loaded.schema().schemaId(), loaded.location(), loaded.properties())
        return "\n".join(str(part) for part in parts)
    except Exception:  # NotAnIcebergTable, no such table: described (and refused) the long way
        return None


def incomparable(spark_type: str) -> bool:
    """Spark cannot compare, group, sort or set-operate on a map, nor on anything holding one."""
    return "map<" in spark_type.lower()


def incomparable_columns(table: TableInfo, only: Sequence[str] | None = None) -> list[str]:
    """The columns of `table` (of `only`, if given) Spark cannot compare, as `name (type)`."""
    return [
        f"{c.name} ({c.type})"
        for c in table.columns
        if (only is None or c.name in only) and incomparable(c.type)
    ]


def _properties(spark: Any, relation: str) -> dict[str, str]:
    return {str(r[0]): str(r[1]) for r in spark.sql(f"SHOW TBLPROPERTIES {relation}").collect()}


def _primary_key(properties: dict[str, str], columns: list[str]) -> tuple[str, ...]:
    identifier = properties.get("identifier-fields", "").strip().strip("[]")
    text = identifier or properties.get(KEY_PROPERTY, "")
    key = tuple(part.strip() for part in text.split(",") if part.strip())
    by_lower = {c.lower(): c for c in columns}
    return tuple(by_lower.get(k.lower(), k) for k in key)
