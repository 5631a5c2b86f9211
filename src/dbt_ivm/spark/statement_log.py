"""A SparkSession that reports each SQL text it is given before running it (dbt's debug log and
target/run show what the engine ran). Everything else is the session itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ReportingSession:
    """Forwards to `spark`; `sql(text)` first calls `on_statement(text)`."""

    def __init__(self, spark: Any, on_statement: Callable[[str], None]) -> None:
        self._session = spark
        self._on_statement = on_statement

    def sql(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self._on_statement(text)
        return self._session.sql(text, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def reporting(spark: Any, on_statement: Callable[[str], None] | None) -> Any:
    """`spark`, reporting its SQL to `on_statement` when there is one."""
    return spark if on_statement is None else ReportingSession(spark, on_statement)
