"""The operations `dbt-ivm status|history|drop|gc|refresh` run, one implementation per backend: the CLI
opens one (a PostgreSQL connection, or a Spark session on a warehouse) and prints what it returns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from dbt_ivm.errors import IvmError
from dbt_ivm.scheduling import Outcome
from dbt_ivm.spec import StreamTableSpec
from dbt_ivm.status import HistoryRow, StreamTableStatus
from dbt_ivm.unused import RegisteredTable

if TYPE_CHECKING:
    from dbt_ivm.explain import Explanation  # the planner: loaded only by `explain`


class Operations(Protocol):
    # Errors the backend raises that are the user's to read (no traceback).
    errors: tuple[type[BaseException], ...]
    # How to name a stream table on this backend, for messages.
    example: str

    def status(self, catalog: str) -> list[StreamTableStatus]: ...

    def history(self, catalog: str, stream_table: str | None, limit: int) -> list[HistoryRow]: ...

    def drop(self, catalog: str, stream_table: str, drop_table: bool) -> bool: ...

    def gc(self, catalog: str) -> list[str]: ...

    def relations(self, catalog: str) -> list[RegisteredTable]: ...

    def refresh(self, catalog: str, names: Sequence[str]) -> list[Outcome]: ...

    def explain(self, spec: StreamTableSpec, changes: int | None = None) -> Explanation: ...


class PostgresOperations:
    example = "public.my_model"

    def __init__(self, connection: Any) -> None:
        import psycopg2

        from dbt_ivm.postgres.db import Db

        self.connection = connection
        self.db = Db(connection)
        self.errors: tuple[type[BaseException], ...] = (psycopg2.Error, IvmError)

    def status(self, catalog: str) -> list[StreamTableStatus]:
        from dbt_ivm.postgres import registrations

        return registrations.list_registrations(self.db, catalog)

    def history(self, catalog: str, stream_table: str | None, limit: int) -> list[HistoryRow]:
        from dbt_ivm.postgres import registrations

        return registrations.history(self.db, catalog, stream_table, limit)

    def drop(self, catalog: str, stream_table: str, drop_table: bool) -> bool:
        from dbt_ivm.postgres import registrations

        return registrations.drop_registration(self.db, catalog, stream_table, drop_table)

    def gc(self, catalog: str) -> list[str]:
        from dbt_ivm.postgres import registrations

        return registrations.forget_missing(self.db, catalog)

    def relations(self, catalog: str) -> list[RegisteredTable]:
        from dbt_ivm.postgres import registrations

        return registrations.registered_relations(self.db, catalog)

    def refresh(self, catalog: str, names: Sequence[str]) -> list[Outcome]:
        from dbt_ivm.postgres import scheduled

        return scheduled.refresh_due(self.connection, catalog, names)

    def explain(self, spec: StreamTableSpec, changes: int | None = None) -> Explanation:
        from dbt_ivm.postgres import runner

        return runner.explain(self.connection, spec, changes)


class SparkOperations:
    example = "analytics.my_model"

    def __init__(self, spark: Any) -> None:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        self.spark = spark
        self.errors: tuple[type[BaseException], ...] = (PySparkException, Py4JError, IvmError)

    def status(self, catalog: str) -> list[StreamTableStatus]:
        from dbt_ivm.spark import registrations

        return registrations.list_registrations(self.spark, catalog)

    def history(self, catalog: str, stream_table: str | None, limit: int) -> list[HistoryRow]:
        from dbt_ivm.spark import registrations

        return registrations.history(self.spark, catalog, stream_table, limit)

    def drop(self, catalog: str, stream_table: str, drop_table: bool) -> bool:
        from dbt_ivm.spark import registrations

        return registrations.drop_registration(self.spark, catalog, stream_table, drop_table)

    def gc(self, catalog: str) -> list[str]:
        from dbt_ivm.spark import registrations

        return registrations.forget_missing(self.spark, catalog)

    def relations(self, catalog: str) -> list[RegisteredTable]:
        from dbt_ivm.spark import registrations

        return registrations.registered_relations(self.spark, catalog)

    def refresh(self, catalog: str, names: Sequence[str]) -> list[Outcome]:
        from dbt_ivm.spark import registrations

        return registrations.refresh_due(self.spark, catalog, names)

    def explain(self, spec: StreamTableSpec, changes: int | None = None) -> Explanation:
        from dbt_ivm.spark import runner

        return runner.explain(self.spark, spec, changes)


class CannotConnect(Exception):
    """The backend could not be reached; the message says why."""


@contextmanager
def postgres(dsn: str) -> Iterator[Operations]:
    """Operations on an autocommit connection to `dsn` (libpq's defaults fill what it leaves out)."""
    import psycopg2

    try:
        connection = psycopg2.connect(dsn)
    except psycopg2.Error as exc:
        raise CannotConnect(
            f"cannot connect to PostgreSQL: {(str(exc).strip().splitlines() or ['?'])[0]}"
        ) from exc
    try:
        connection.autocommit = True
        yield PostgresOperations(connection)
    finally:
        connection.close()


@contextmanager
def spark(warehouse: str, metastore_uris: str | None, master: str | None) -> Iterator[Operations]:
    """Operations in an embedded Spark driver on `warehouse` (and the Hive metastore service at
    `metastore_uris`, when the warehouse's tables are registered there), as the ivm_spark profile
    with these settings would start it."""
    from dbt_ivm.spark.session import DEFAULT_MASTER, SessionSettings, existing_session, get_or_create_session

    settings = SessionSettings(
        warehouse=warehouse,
        metastore_uris=metastore_uris,
        master=master or DEFAULT_MASTER,
        app_name="dbt-ivm cli",
    )
    running = existing_session()  # a PySpark program's own: used as it is, and left running
    session = running or get_or_create_session(settings)
    try:
        yield SparkOperations(session)
    finally:
        if running is None:
            session.stop()
