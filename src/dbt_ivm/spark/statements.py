"""Run one Spark SQL statement on the embedded session, working around two behaviours of Iceberg's
SparkSessionCatalog over a Hive metastore that break plain SQL (and dbt-spark's materializations):

* ``CREATE OR REPLACE VIEW`` of an existing view: views are Iceberg views, and replacing one updates
  Iceberg's metadata but not the SQL text the metastore keeps, which is what Spark reads. The view is
  dropped first, so the statement creates it.
* ``DROP TABLE`` of a managed non-Iceberg table (``USING parquet``, ...): Iceberg's catalog removes
  it from the metastore without deleting its files, so re-creating it fails ("location already
  exists") or would read the old files. Its directory is deleted after the drop, as Spark's own
  catalog does.

Iceberg tables, temporary views and every other statement run unchanged.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_IDENTIFIER = r"(?:`(?:[^`]|``)+`|\w+)"
_NAME = rf"(?P<name>{_IDENTIFIER}(?:\s*\.\s*{_IDENTIFIER})*)"
_LEADING_COMMENTS = r"^\s*(?:/\*.*?\*/\s*|--[^\n]*\n\s*)*"
_REPLACE_VIEW = re.compile(
    rf"{_LEADING_COMMENTS}create\s+or\s+replace\s+view\s+{_NAME}", re.IGNORECASE | re.DOTALL
)
_DROP_TABLE = re.compile(
    rf"{_LEADING_COMMENTS}drop\s+table\s+(?:if\s+exists\s+)?{_NAME}\s*(?:purge\s*)?;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


def replaced_view(sql: str) -> str | None:
    """The view a ``CREATE OR REPLACE VIEW`` statement replaces (None for any other statement)."""
    match = _REPLACE_VIEW.match(sql)
    return match.group("name") if match else None


def dropped_table(sql: str) -> str | None:
    """The table a ``DROP TABLE`` statement drops (None for any other statement)."""
    match = _DROP_TABLE.match(sql)
    return match.group("name") if match else None


def managed_non_iceberg_location(spark: SparkSession, table: str) -> str | None:
    """Where a managed, non-Iceberg table keeps its files; None for anything else or nothing."""
    from pyspark.errors import AnalysisException

    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    except AnalysisException:
        return None
    detail = {str(r[0]).strip(): str(r[1] or "").strip() for r in rows}
    if detail.get("Type", "").upper() != "MANAGED" or detail.get("Provider", "").lower() == "iceberg":
        return None
    return detail.get("Location") or None


def delete_location(spark: SparkSession, location: str) -> None:
    """Delete a directory through Hadoop's file system API (any scheme Spark can write to)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(location)
    path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(path, True)


def run(spark: SparkSession, sql: str) -> DataFrame:
    """``spark.sql(sql)``, with the two fixes above. Commands run eagerly, as with spark.sql."""
    from pyspark.errors import AnalysisException

    view = replaced_view(sql)
    if view is not None:
        # A table of that name makes DROP VIEW fail; the statement itself then reports it.
        with contextlib.suppress(AnalysisException):
            spark.sql(f"DROP VIEW IF EXISTS {view}")
    table = dropped_table(sql)
    leftover = managed_non_iceberg_location(spark, table) if table is not None else None
    result = spark.sql(sql)
    if leftover is not None:
        delete_location(spark, leftover)
    return result
