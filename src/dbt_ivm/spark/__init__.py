"""Spark + Apache Iceberg support: the embedded session, Iceberg change sources, a SQL executor, and
`refresh` of a stream table from a PySpark program.

Importing this package does not import PySpark or start a JVM; `get_or_create_session` does.
"""

from dbt_ivm.spark.changelog import ChangePath, ChangeView, create_change_view
from dbt_ivm.spark.executor import SparkExecutor, SqlExecutor
from dbt_ivm.spark.iceberg import (
    NotAnIcebergTable,
    Snapshot,
    TableVersion,
    create_state_view,
    current_snapshot_id,
    current_version,
    is_iceberg_table,
    snapshots,
)
from dbt_ivm.spark.session import SessionSettings, existing_session, get_or_create_session
from dbt_ivm.spark.standalone import NotAStreamTable, refresh

__all__ = [
    "ChangePath",
    "ChangeView",
    "NotAStreamTable",
    "NotAnIcebergTable",
    "SessionSettings",
    "Snapshot",
    "SparkExecutor",
    "SqlExecutor",
    "TableVersion",
    "create_change_view",
    "create_state_view",
    "current_snapshot_id",
    "current_version",
    "existing_session",
    "get_or_create_session",
    "is_iceberg_table",
    "refresh",
    "snapshots",
]
