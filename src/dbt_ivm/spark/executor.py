"""The engine's view of a Spark connection: run a statement, fetch a query's rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from dbt_ivm.spark import statements

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SqlExecutor(Protocol):
    """What the engine needs of a SQL connection (Spark SQL here)."""

    def execute(self, sql: str) -> None: ...

    def query(self, sql: str) -> list[tuple[Any, ...]]: ...


class SparkExecutor:
    """Runs Spark SQL on a SparkSession.

    Spark has no transactions: every statement commits on its own (an Iceberg write is one atomic
    snapshot). Statements must be single statements without a trailing semicolon. `execute` runs
    them through `statements.run` (views and non-Iceberg tables behave as in plain Spark).
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def execute(self, sql: str) -> None:
        """Run a statement (DDL, INSERT/MERGE/UPDATE/DELETE, CALL) to completion.

        Meant for statements: a SELECT here is computed and its rows thrown away.
        """
        statements.run(self.spark, sql).collect()

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """All rows of a query, as plain tuples (collected to the driver: keep results small)."""
        return [tuple(row) for row in self.spark.sql(sql).collect()]

    def scalar(self, sql: str) -> Any:
        """The first column of the first row; None when there is no row."""
        rows = self.spark.sql(sql).take(1)
        return rows[0][0] if rows else None
